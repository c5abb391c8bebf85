//! A session's follower: the snapshot its channels open with, then its turns followed and the
//! session re-read when signalled, each event published to every channel of the session on this
//! replica (`hub.rs`; see the [module](super)).

use std::collections::BTreeMap;
use std::sync::Arc;

use futures_util::StreamExt;
use teamster_live::{Coalescer, LiveEvent, TurnTranslator, UsageTotals};
use teamster_protocol::control::{Plan, QueuedMessage, TaskList};
use teamster_protocol::{Event, TurnState};
use teamster_service::{Caller, EventStream, Service, ServiceError, SessionSignal as Signal, StreamedEvent, TurnListQuery};
use teamster_store::SessionRecord;
use teamster_workspace::Standing;
use tokio::sync::broadcast;

use crate::Channels;
use crate::hub::Hub;

/// The most turns, newest first, whose usage a follower sums as it opens.
const USAGE_TURNS: usize = 1000;

/// Follows the session of `hub`, reading as `caller`, until the session goes or no channel
/// listens.
pub(super) async fn run(channels: Channels, caller: Caller, hub: Arc<Hub>) {
    let signals = channels.service().session_signals();
    let follower = Follower {
        reader: Reader { service: channels.service().clone(), caller, session_id: hub.session_id().to_owned() },
        channels,
        hub,
        coalescer: Coalescer::default(),
        following: None,
    };
    follower.run(signals).await;
}

/// The turn a follower follows.
struct Following {
    turn_id: String,
    events: EventStream,
    translator: TurnTranslator,
}

/// Why a follower stops.
enum Stop {
    /// No channel listens any more.
    Unheard,
    /// The session is gone, or the caller may no longer read it.
    Session,
    /// The store failed as the follower opened.
    Failed,
}

/// What a follower reads with: the service, as the caller, of one session.
struct Reader {
    service: Service,
    caller: Caller,
    session_id: String,
}

/// One session's follower.
struct Follower {
    channels: Channels,
    reader: Reader,
    hub: Arc<Hub>,
    coalescer: Coalescer,
    following: Option<Following>,
}

impl Follower {
    async fn run(mut self, mut signals: broadcast::Receiver<Signal>) {
        let stop = match self.open().await {
            Ok(()) => self.follow(&mut signals).await,
            Err(stop) => stop,
        };
        // Its channels end once they have read what it published.
        self.channels.inner.hubs.leave(&self.hub);
        match stop {
            Stop::Session => tracing::debug!(session = %self.reader.session_id, "a live channel ended with its session"),
            Stop::Failed => tracing::warn!(session = %self.reader.session_id, "a live channel could not open"),
            Stop::Unheard => {}
        }
    }

    /// Publishes the first snapshot: the session's views, and its last turn replayed (followed
    /// on when it runs).
    async fn open(&mut self) -> std::result::Result<(), Stop> {
        let Some(record) = self.reader.session().await? else { return Err(Stop::Failed) };
        let follow_ups = self.reader.follow_ups().await?;
        let (tasks, plans) = self.reader.views().await?;
        let usage = self.reader.usage().await?;
        let workspace = self.reader.workspace(&record).await;
        let mut running_turn = None;
        let mut replayed = Vec::new();
        if let Some(turn_id) = record.last_turn_id {
            let running = matches!(self.reader.turn_state(&turn_id).await?, Some(TurnState::Running));
            if let Some(mut following) = self.reader.subscribe(&turn_id, UsageTotals::default()).await? {
                if running {
                    // Its events follow, from its start, after the snapshot.
                    running_turn = Some(turn_id);
                    following.translator = TurnTranslator::new(usage.clone());
                    self.following = Some(following);
                } else {
                    // A finished turn: its replay fills the snapshot, silently.
                    while let Some(streamed) = following.events.next().await {
                        let translated = stored(&streamed.json).map(|event| following.translator.translate(&event));
                        replayed.extend(translated.into_iter().flatten());
                    }
                }
            }
        }
        let mut published = self.hub.published();
        let display = &mut published.display;
        display.title = record.title;
        display.mode = record.control.mode;
        display.model = record.control.model;
        display.subagent_models = record.control.subagent_models;
        display.state = record.control.state;
        display.follow_ups = follow_ups;
        (display.tasks, display.plans) = (tasks, plans);
        if let Some(workspace) = workspace {
            display.workspace = workspace.status;
        }
        for event in &replayed {
            event.fold_into(display);
        }
        if let Some(turn_id) = running_turn {
            display.running_turn_id = Some(turn_id.clone());
            display.last_turn_id = Some(turn_id);
        }
        // The finished turns' usage, as stored (a replayed turn's is among it).
        display.usage = usage;
        self.coalescer.sent(std::time::Instant::now());
        published.publish_display();
        Ok(())
    }

    async fn follow(&mut self, signals: &mut broadcast::Receiver<Signal>) -> Stop {
        let fallback = self.channels.fallback_read();
        let heard = self.hub.sender();
        loop {
            let due = self.coalescer.due();
            let result = tokio::select! {
                next = next_event(&mut self.following) => match next {
                    Some(streamed) => self.turn_event(&streamed).await,
                    None => {
                        self.following = None;
                        self.refresh(true).await
                    }
                },
                signal = signals.recv() => match signal {
                    Ok(Signal::One { session_id, .. }) if *session_id != *self.reader.session_id => Ok(()),
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => self.refresh(false).await,
                    Err(broadcast::error::RecvError::Closed) => Err(Stop::Unheard),
                },
                () = tokio::time::sleep(fallback) => self.refresh(false).await,
                () = sleep_until(due) => {
                    self.publish_display();
                    Ok(())
                }
                () = heard.closed() => match self.channels.inner.hubs.leave_if_unheard(&self.hub) {
                    true => Err(Stop::Unheard),
                    false => Ok(()),
                },
            };
            if let Err(stop) = result {
                return stop;
            }
        }
    }

    /// One event of the followed turn, translated, published and folded in. A tool that
    /// changed the task list, the plans or the state has the session read again at once.
    async fn turn_event(&mut self, streamed: &StreamedEvent) -> std::result::Result<(), Stop> {
        let Some(following) = &mut self.following else { return Ok(()) };
        let Some(event) = stored(&streamed.json) else { return Ok(()) };
        let mut events = following.translator.translate(&event);
        if self.hub.turn_events() {
            let raw = LiveEvent::TurnEvent { turn_id: following.turn_id.clone(), sequence: streamed.sequence, event: Box::new(event) };
            events.insert(0, raw);
        }
        let changed_views = events.iter().any(|event| match event {
            LiveEvent::ToolEnd { tool_name, .. } => {
                teamster_control::TASK_TOOLS.contains(&tool_name.as_str())
                    || [teamster_control::SUBMIT_PLAN, teamster_control::STATE_UPDATE].contains(&tool_name.as_str())
            }
            _ => false,
        });
        self.publish_all(events);
        match changed_views {
            true => self.refresh(true).await,
            false => Ok(()),
        }
    }

    /// Re-reads the session and publishes what changed; `views` also re-reads the folded views
    /// (tasks, plans), which change only with turns.
    async fn refresh(&mut self, views: bool) -> std::result::Result<(), Stop> {
        let Some(record) = self.reader.session().await? else { return Ok(()) };
        let follow_ups = self.reader.follow_ups().await?;
        let workspace = self.reader.workspace(&record).await;
        let mut events = Vec::new();
        let last_turn_id = {
            let display = &self.hub.published().display;
            if record.title != display.title {
                events.push(LiveEvent::ThreadChanged { session_id: self.reader.session_id.clone(), title: record.title.clone() });
            }
            if record.control.mode != display.mode {
                events.push(LiveEvent::ModeChanged { mode: record.control.mode.clone() });
            }
            if record.control.model != display.model {
                events.push(LiveEvent::ModelChanged { model: record.control.model.clone() });
            }
            events.extend(subagent_model_changes(&display.subagent_models, &record.control.subagent_models));
            if let Some(state) = record.control.state.as_ref().filter(|state| display.state.as_ref() != Some(*state)) {
                events.push(LiveEvent::StateChanged { state: state.clone() });
            }
            if follow_ups != display.follow_ups {
                let follow_up = follow_ups.iter().find(|queued| !display.follow_ups.iter().any(|known| known.id == queued.id)).cloned();
                events.push(LiveEvent::FollowUpQueued { follow_up, follow_ups });
            }
            if let Some(workspace) = workspace.filter(|workspace| workspace.status != display.workspace) {
                events.extend(LiveEvent::workspace(workspace.status, workspace.sandbox_id.as_deref(), workspace.error.as_deref()));
            }
            display.last_turn_id.clone()
        };
        let new_turn = record.last_turn_id.filter(|turn_id| {
            last_turn_id.as_ref() != Some(turn_id) && self.following.as_ref().is_none_or(|following| following.turn_id != *turn_id)
        });
        self.publish_all(events);
        // A new turn's effects on the views show after its events, as it is followed: with a
        // new turn to follow, the views are read once its events say they changed (or it ends),
        // never before them (the turn may have changed them already).
        if views && new_turn.is_none() {
            self.publish_views().await?;
        }
        if let Some(turn_id) = new_turn {
            let usage = self.hub.published().display.usage.clone();
            self.following = self.reader.subscribe(&turn_id, usage).await?;
            if self.following.is_none() {
                self.publish_views().await?;
            }
        }
        Ok(())
    }

    /// Reads the folded views (tasks, plans) and publishes what changed.
    async fn publish_views(&mut self) -> std::result::Result<(), Stop> {
        let (tasks, plans) = self.reader.views().await?;
        let mut changed = Vec::new();
        {
            let display = &self.hub.published().display;
            if tasks != display.tasks {
                changed.push(LiveEvent::TaskUpdated { tasks });
            }
            if plans != display.plans {
                changed.push(LiveEvent::PlansChanged { plans });
            }
        }
        self.publish_all(changed);
        Ok(())
    }

    /// Publishes events in order, then the display state (or owes it).
    fn publish_all(&mut self, events: Vec<LiveEvent>) {
        if events.is_empty() {
            return;
        }
        let high_frequency = events.iter().all(LiveEvent::is_high_frequency);
        let now = std::time::Instant::now();
        let display_now = self.coalescer.after_event(high_frequency, now);
        let mut published = self.hub.published();
        for event in events {
            published.publish(event);
        }
        if display_now {
            self.coalescer.sent(now);
            published.publish_display();
        }
    }

    fn publish_display(&mut self) {
        self.coalescer.sent(std::time::Instant::now());
        self.hub.published().publish_display();
    }
}

impl Reader {
    /// The session's record; `None` when the store failed (the next read tries again: a
    /// store that fails is not a session that ended).
    async fn session(&self) -> std::result::Result<Option<SessionRecord>, Stop> {
        match self.service.catalog().owned_session(&self.caller, &self.session_id).await {
            Ok(record) => Ok(Some(record)),
            Err(ServiceError::NotFound(_) | ServiceError::Forbidden(_)) => Err(Stop::Session),
            Err(error) => {
                tracing::warn!(session = %self.session_id, %error, "a live channel could not read its session");
                Ok(None)
            }
        }
    }

    /// Where the session's workspace stands; `None` when that cannot be told now (the next
    /// read tries again).
    async fn workspace(&self, session: &SessionRecord) -> Option<Standing> {
        match self.service.workspaces().status(session).await {
            Ok(standing) => Some(standing),
            Err(error) => {
                tracing::debug!(session = %self.session_id, %error, "a live channel could not read its workspace");
                None
            }
        }
    }

    async fn follow_ups(&self) -> std::result::Result<Vec<QueuedMessage>, Stop> {
        self.service.follow_ups().list(&self.caller, &self.session_id).await.map_err(|_| Stop::Session)
    }

    /// The usage of the session's finished turns (at most [`USAGE_TURNS`] of the newest).
    async fn usage(&self) -> std::result::Result<UsageTotals, Stop> {
        let mut usage = UsageTotals::default();
        let mut page_token = None;
        for _ in 0..USAGE_TURNS / 100 {
            let query = TurnListQuery { limit: 100, page_token };
            let (turns, next) = self.service.list_turns(&self.caller, &self.session_id, query).await.map_err(|_| Stop::Session)?;
            for turn in &turns {
                if let Some(metrics) = turn.state.metrics() {
                    usage.add_turn(metrics);
                }
            }
            match next {
                Some(token) => page_token = Some(token),
                None => break,
            }
        }
        Ok(usage)
    }

    /// The task list and the plans.
    async fn views(&self) -> std::result::Result<(TaskList, Vec<Plan>), Stop> {
        let events = self.service.events();
        let tasks = events.tasks(&self.caller, &self.session_id).await.map_err(|_| Stop::Session)?;
        let plans = events.plans(&self.caller, &self.session_id).await.map_err(|_| Stop::Session)?;
        Ok((tasks, plans))
    }

    async fn turn_state(&self, turn_id: &str) -> std::result::Result<Option<TurnState>, Stop> {
        match self.service.get_turn(&self.caller, &self.session_id, turn_id).await {
            Ok(turn) => Ok(Some(turn.state)),
            Err(ServiceError::NotFound(_)) => Ok(None),
            Err(_) => Err(Stop::Session),
        }
    }

    /// The turn's stream from its start, with a translator that adds to the usage so far;
    /// `None` when its stream is gone (past its retention).
    async fn subscribe(&self, turn_id: &str, usage: UsageTotals) -> std::result::Result<Option<Following>, Stop> {
        match self.service.events().subscribe(&self.caller, &self.session_id, turn_id, 0).await {
            Ok(events) => Ok(Some(Following {
                turn_id: turn_id.to_owned(),
                events,
                translator: TurnTranslator::new(usage),
            })),
            Err(ServiceError::PreconditionFailed(_) | ServiceError::NotFound(_)) => Ok(None),
            Err(_) => Err(Stop::Session),
        }
    }
}

/// The sub-agent models chosen in `now` but not in `shown`, changed, or no longer chosen.
fn subagent_model_changes(shown: &BTreeMap<String, String>, now: &BTreeMap<String, String>) -> Vec<LiveEvent> {
    let chosen = now
        .iter()
        .filter(|(name, model)| shown.get(*name) != Some(*model))
        .map(|(name, model)| LiveEvent::SubagentModelChanged { agent_name: name.clone(), model: Some(model.clone()) });
    let given_back = shown
        .keys()
        .filter(|name| !now.contains_key(*name))
        .map(|name| LiveEvent::SubagentModelChanged { agent_name: name.clone(), model: None });
    chosen.chain(given_back).collect()
}

/// A stored event, read; `None` for one this version cannot read (it is skipped).
fn stored(json: &str) -> Option<Event> {
    serde_json::from_str(json).ok()
}

/// The next event of the followed turn; never, when none is followed.
async fn next_event(following: &mut Option<Following>) -> Option<StreamedEvent> {
    match following {
        Some(following) => following.events.next().await,
        None => std::future::pending().await,
    }
}

/// Sleeps until `due`; never, when nothing is due.
async fn sleep_until(due: Option<std::time::Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due.into()).await,
        None => std::future::pending().await,
    }
}
