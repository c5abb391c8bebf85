//! Follow-ups: messages a client queues while a turn runs, each starting the session's next
//! turn once the one before it has ended, in order. Steering instructions queue the same way
//! for the running turn, which takes them before its next model call (`QueuedSteering`); one it
//! ended before taking starts the next turn, before the follow-ups.
//!
//! They live in the store, so any replica may queue, list or cancel them and any replica may
//! start them: whoever queued one watches the session until its queue is empty (one watcher per
//! session and process; a starting server watches every session with a queue), and a follow-up
//! posted while no turn runs starts one at once. A turn that ends waiting for the user
//! (approvals, answers, authorization) holds the queue until a turn ends without waiting.
//!
//! Stop means stop: once the client cancelled the session's last turn, every instruction and
//! follow-up queued before it ended is dropped, never started (`cancel_session` drops them as
//! it answers; a watcher that finds one first drops it too).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use teamster_protocol::control::QueuedMessage as FollowUp;
use teamster_protocol::{CancelReason, TurnInput, TurnState, UserContent, ids, timestamp};
use teamster_store::{QueueKind, QueuedMessage};

use crate::error::{Result, ServiceError};
use crate::{Caller, CreateTurn, Service};

/// The most follow-ups a session keeps queued.
pub const MAX_FOLLOW_UPS: u32 = 16;
/// How long a watcher waits for a turn running elsewhere before it looks again.
const REMOTE_WAIT: Duration = Duration::from_secs(30);
/// The most sessions whose queued follow-ups a starting server takes up.
const MAX_RESUMED_SESSIONS: u32 = 10_000;
/// The most steps (waits and starts) of one watch; the next follow-up posted starts another.
const MAX_STEPS: usize = 256;

/// How many follow-ups this process started it remembers (which turn each became).
const REMEMBERED_STARTS: usize = 256;

/// The sessions this process watches for follow-ups, and the follow-ups it starts.
#[derive(Default)]
pub(crate) struct Watched {
    sessions: Mutex<HashSet<String>>,
    /// One start at a time per session on this replica, so that a follow-up queued while a
    /// watch starts it learns which turn it became.
    starting: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// The follow-ups started lately, as (message id, turn id), oldest first.
    started: Mutex<VecDeque<(String, String)>>,
}

impl Watched {
    /// Adds a session; `false` if it was watched already.
    fn insert(&self, session_id: &str) -> bool {
        lock(&self.sessions).insert(session_id.to_owned())
    }

    fn remove(&self, session_id: &str) {
        lock(&self.sessions).remove(session_id);
    }

    /// Runs `start` alone among this replica's starts in the session.
    async fn one_at_a_time<T>(&self, session_id: &str, start: impl Future<Output = T>) -> T {
        let gate = lock(&self.starting).entry(session_id.to_owned()).or_default().clone();
        let outcome = {
            let _alone = gate.lock().await;
            start.await
        };
        let mut starting = lock(&self.starting);
        // The map's and this one: nobody else waits.
        if Arc::strong_count(&gate) == 2 {
            starting.remove(session_id);
        }
        outcome
    }

    fn started(&self, message_id: String, turn_id: String) {
        let mut started = lock(&self.started);
        if started.len() == REMEMBERED_STARTS {
            started.pop_front();
        }
        started.push_back((message_id, turn_id));
    }

    /// The turn a follow-up became, if this replica started it lately.
    fn turn_of(&self, message_id: &str) -> Option<String> {
        lock(&self.started).iter().find(|(id, _)| id == message_id).map(|(_, turn_id)| turn_id.clone())
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn view(message: QueuedMessage) -> FollowUp {
    FollowUp { id: message.id, content: message.content, created_at: message.created_at, turn_id: None }
}

/// What the session's last turn allows.
enum Tip {
    /// This turn runs; follow-ups wait for it.
    Running(String),
    /// The last turn waits for the user: follow-ups wait for the turn that answers it.
    WaitingForUser,
    /// Nothing runs: the next follow-up may start, after `last` (none for a new session).
    /// When the client cancelled `last`, `stopped_at` is when it ended: what was queued until
    /// then is dropped, not started.
    Idle { last: Option<String>, stopped_at: Option<String> },
}

/// A session's queued follow-ups and steering instructions ([`Service::follow_ups`]).
pub struct FollowUps<'a> {
    pub(crate) service: &'a Service,
}

impl FollowUps<'_> {
    /// Queues a follow-up; with no turn running it starts one at once (its id in `turn_id`).
    /// 429 when the queue is full.
    pub async fn queue(&self, caller: &Caller, session_id: &str, content: UserContent) -> Result<FollowUp> {
        crate::turns::validate_input(&[TurnInput::Message { content: content.clone() }])?;
        self.service.catalog().runnable_session(caller, session_id).await?;
        let message = QueuedMessage {
            session_id: session_id.to_owned(),
            id: ids::new_id("fup"),
            kind: QueueKind::FollowUp,
            content,
            created_by: caller.subject.clone(),
            created_at: timestamp::now(),
            credential: caller.key_id.clone(),
        };
        if !self.service.stores().sessions.queue_message(&message, MAX_FOLLOW_UPS).await? {
            return Err(ServiceError::TooMany(format!(
                "this session has {MAX_FOLLOW_UPS} follow-ups queued already; wait for them or cancel one"
            )));
        }
        let mut queued = view(message);
        let started = match self.tip(session_id).await? {
            Tip::Idle { last, stopped_at } => self.start_next_follow_up(session_id, last, stopped_at.as_deref()).await,
            Tip::Running(_) | Tip::WaitingForUser => Ok(None),
        };
        match started {
            Ok(Some((id, turn_id))) if id == queued.id => queued.turn_id = Some(turn_id),
            // A watch of this session may have started it meanwhile.
            Ok(_) | Err(ServiceError::Conflict { .. }) => queued.turn_id = self.service.follow_up_watchers().turn_of(&queued.id),
            Err(error) => return Err(error),
        }
        self.watch(session_id);
        self.service.signals().notify(session_id);
        Ok(queued)
    }

    /// The session's queued follow-ups, in the order they will run.
    pub async fn list(&self, caller: &Caller, session_id: &str) -> Result<Vec<FollowUp>> {
        self.service.catalog().owned_session(caller, session_id).await?;
        Ok(self.service.stores().sessions.queued_messages(session_id, QueueKind::FollowUp).await?.into_iter().map(view).collect())
    }

    /// Cancels a queued follow-up (404 once it started or was cancelled).
    pub async fn cancel(&self, caller: &Caller, session_id: &str, id: &str) -> Result<()> {
        self.service.catalog().owned_session(caller, session_id).await?;
        match self.service.stores().sessions.remove_queued(session_id, id).await? {
            true => {
                self.service.signals().notify(session_id);
                Ok(())
            }
            false => Err(ServiceError::NotFound(format!(
                "follow-up {:?} is not queued in this session",
                id.chars().take(64).collect::<String>()
            ))),
        }
    }

    /// Watches the sessions whose follow-ups (or instructions a turn ended before taking) were
    /// left queued when a server stopped; failing to list them only delays them to the next
    /// message queued in their session.
    pub(crate) async fn resume(&self) {
        match self.service.stores().sessions.queued_sessions(MAX_RESUMED_SESSIONS).await {
            Ok(sessions) => {
                for session_id in sessions {
                    self.watch(&session_id);
                }
            }
            Err(error) => tracing::warn!(%error, "queued follow-ups could not be listed"),
        }
    }

    /// Makes sure this process watches the session until its follow-ups are used up.
    pub(crate) fn watch(&self, session_id: &str) {
        if !self.service.follow_up_watchers().insert(session_id) {
            return;
        }
        let service = self.service.clone();
        let session_id = session_id.to_owned();
        tokio::spawn(async move {
            for _ in 0..MAX_STEPS {
                match service.follow_ups().follow_up_step(&session_id).await {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(error) => {
                        tracing::warn!(session = %session_id, %error, "a follow-up could not start");
                        break;
                    }
                }
            }
            service.follow_up_watchers().remove(&session_id);
        });
    }

    /// One step of a watch: waits while a turn runs, else starts the next follow-up. `Ok(true)`
    /// when the watch goes on, `Ok(false)` when it is over.
    async fn follow_up_step(&self, session_id: &str) -> Result<bool> {
        match self.tip(session_id).await? {
            Tip::Running(turn_id) => {
                match self.service.runtime().running_in_session(session_id) {
                    Some(running) if running.turn_id() == turn_id => running.wait_finished().await,
                    _ => {
                        self.service.runtime().wait_stored_end(session_id, &turn_id, REMOTE_WAIT).await?;
                    }
                }
                Ok(true)
            }
            Tip::WaitingForUser => Ok(false),
            Tip::Idle { last, stopped_at } => match self.start_next_follow_up(session_id, last, stopped_at.as_deref()).await {
                Ok(started) => Ok(started.is_some()),
                // Another turn started meanwhile: wait for it instead.
                Err(ServiceError::Conflict { .. }) => Ok(true),
                Err(error) => Err(error),
            },
        }
    }

    /// What the session's last turn allows now.
    async fn tip(&self, session_id: &str) -> Result<Tip> {
        if let Some(running) = self.service.runtime().running_in_session(session_id) {
            return Ok(Tip::Running(running.turn_id().to_owned()));
        }
        let session = self.service.stores().sessions.get_session(session_id).await?;
        let Some(last) = session.last_turn_id else { return Ok(Tip::Idle { last: None, stopped_at: None }) };
        Ok(match self.service.turn_record(session_id, &last).await?.state {
            TurnState::Running => Tip::Running(last),
            TurnState::Done { required_actions, .. } if !required_actions.is_empty() => Tip::WaitingForUser,
            TurnState::Cancelled { reason: CancelReason::ClientCancelled, completed_at, .. } => {
                Tip::Idle { last: Some(last), stopped_at: Some(completed_at) }
            }
            _ => Tip::Idle { last: Some(last), stopped_at: None },
        })
    }

    /// Drops the instructions and follow-ups queued before the client's cancel of the session's
    /// last turn took effect (none if the last turn was not cancelled by the client); returns
    /// how many were dropped.
    pub(crate) async fn drop_stopped_queue(&self, session_id: &str) -> Result<usize> {
        let Tip::Idle { stopped_at: Some(stopped_at), .. } = self.tip(session_id).await? else { return Ok(0) };
        let mut dropped = 0;
        for kind in [QueueKind::Steer, QueueKind::FollowUp] {
            for message in self.service.stores().sessions.queued_messages(session_id, kind).await? {
                if queued_before(&message, &stopped_at) && self.service.stores().sessions.remove_queued(session_id, &message.id).await? {
                    dropped += 1;
                }
            }
        }
        Ok(dropped)
    }

    /// Starts the oldest follow-up after `last` (the tip the caller found idle); returns its
    /// id and its turn's. An instruction the last turn ended before taking goes first: it
    /// starts a turn of its own. The message is removed before its turn is created (so two
    /// replicas never both start it) and queued again, in its place, if the turn is refused.
    /// A message whose API key was revoked since it was queued is dropped, and the next one
    /// considered; so is one queued before `stopped_at` (the client's cancel of `last`).
    async fn start_next_follow_up(
        &self,
        session_id: &str,
        last: Option<String>,
        stopped_at: Option<&str>,
    ) -> Result<Option<(String, String)>> {
        let watchers = self.service.follow_up_watchers();
        let started = watchers.one_at_a_time(session_id, self.start_next(session_id, last, stopped_at)).await;
        if let Ok(Some((message_id, turn_id))) = &started {
            watchers.started(message_id.clone(), turn_id.clone());
        }
        started
    }

    async fn start_next(&self, session_id: &str, last: Option<String>, stopped_at: Option<&str>) -> Result<Option<(String, String)>> {
        loop {
            let mut queue = self.service.stores().sessions.queued_messages(session_id, QueueKind::Steer).await?;
            if queue.is_empty() {
                queue = self.service.stores().sessions.queued_messages(session_id, QueueKind::FollowUp).await?;
            }
            let Some(next) = queue.into_iter().next() else { return Ok(None) };
            if !self.service.stores().sessions.remove_queued(session_id, &next.id).await? {
                return Err(ServiceError::turn_running("the follow-up was started elsewhere"));
            }
            if stopped_at.is_some_and(|at| queued_before(&next, at)) {
                tracing::info!(session = %session_id, message = %next.id, "a message queued before the turn was cancelled was dropped");
                continue;
            }
            if !credential_in_force(self.service.stores().settings.as_ref(), &next).await? {
                tracing::warn!(session = %session_id, message = %next.id, "a queued message's API key was revoked; it was dropped");
                continue;
            }
            let request = CreateTurn {
                input: vec![TurnInput::Message { content: next.content.clone() }],
                previous_turn_id: Some(last.unwrap_or_else(|| "none".to_owned())),
                at_tip: true,
                request_context: None,
            };
            let caller = Caller::owner(next.created_by.clone());
            return match self.service.create_turn(&caller, session_id, request).await {
                Ok(started) => Ok(Some((next.id, started.turn.id))),
                Err(error) => {
                    if let Err(requeue) = self.service.stores().sessions.queue_message(&next, u32::MAX).await {
                        tracing::warn!(session = %session_id, error = %requeue, "a refused follow-up could not be queued again");
                    }
                    Err(error)
                }
            };
        }
    }
}

/// Whether a message was queued at or before `at` (both are UTC timestamps of one format, so
/// they compare as text).
fn queued_before(message: &QueuedMessage, at: &str) -> bool {
    message.created_at.as_str() <= at
}

/// Whether the API key a message was queued with is still in force (a message queued without
/// one always is). Read from the store, not a replica's cache of keys.
async fn credential_in_force(store: &dyn teamster_store::SettingsStore, message: &QueuedMessage) -> Result<bool> {
    match &message.credential {
        None => Ok(true),
        Some(key_id) => Ok(teamster_identity::ApiKeys::new(store).in_force(key_id).await?),
    }
}

/// The most steering instructions a session keeps queued for its running turn.
pub const MAX_STEERS: u32 = 16;

impl FollowUps<'_> {
    /// Queues an instruction for the session's running turn, which takes it before its next
    /// model call (409 when no turn runs; 429 when too many wait).
    pub async fn steer(&self, caller: &Caller, session_id: &str, content: UserContent) -> Result<FollowUp> {
        crate::turns::validate_input(&[TurnInput::Message { content: content.clone() }])?;
        self.service.catalog().runnable_session(caller, session_id).await?;
        let Tip::Running(turn_id) = self.tip(session_id).await? else {
            return Err(ServiceError::Conflict {
                code: "no_running_turn",
                message: "no turn is running in this session; send a message or a follow-up instead".to_owned(),
            });
        };
        let message = QueuedMessage {
            session_id: session_id.to_owned(),
            id: ids::new_id("stz"),
            kind: QueueKind::Steer,
            content,
            created_by: caller.subject.clone(),
            created_at: timestamp::now(),
            credential: caller.key_id.clone(),
        };
        if !self.service.stores().sessions.queue_message(&message, MAX_STEERS).await? {
            return Err(ServiceError::TooMany(format!("{MAX_STEERS} instructions wait for this turn already")));
        }
        if let Some(running) = self.service.runtime().running_in_session(session_id).filter(|running| running.turn_id() == turn_id) {
            running.mark_steered();
        }
        // Should the turn end before another model call, the instruction starts the next one.
        self.watch(session_id);
        Ok(view(message))
    }
}

/// A running turn's steering: the instructions queued for its session, taken (each once)
/// when the turn's log was told some arrived.
pub(crate) struct QueuedSteering {
    pub stores: teamster_store::StoreParts,
    pub turn: teamster_runtime::RunningTurn,
}

#[async_trait::async_trait]
impl teamster_engine::Steering for QueuedSteering {
    async fn take(&self) -> Vec<teamster_protocol::event::Steer> {
        if !self.turn.take_steered() {
            return Vec::new();
        }
        let queued = match self.stores.sessions.queued_messages(self.turn.session_id(), QueueKind::Steer).await {
            Ok(queued) => queued,
            Err(error) => {
                tracing::warn!(turn = %self.turn.turn_id(), %error, "steering instructions could not be read");
                self.turn.mark_steered();
                return Vec::new();
            }
        };
        let mut taken = Vec::new();
        for message in queued {
            // Removing decides who has it: a message another turn took is not taken twice.
            if !matches!(self.stores.sessions.remove_queued(&message.session_id, &message.id).await, Ok(true)) {
                continue;
            }
            // An instruction whose API key was revoked since is dropped (and one whose key
            // cannot be checked now too: it is never joined unchecked).
            if !matches!(credential_in_force(self.stores.settings.as_ref(), &message).await, Ok(true)) {
                tracing::warn!(turn = %self.turn.turn_id(), message = %message.id, "a steering instruction's API key was revoked; it was dropped");
                continue;
            }
            taken.push(teamster_protocol::event::Steer { id: message.id, content: message.content, created_at: message.created_at });
        }
        taken
    }
}
