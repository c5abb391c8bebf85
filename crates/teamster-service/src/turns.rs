//! Turns: create (validate, record `turn.created`, hand it to the runtime), get, list, cancel,
//! and deleting a session with its running turn.

use std::sync::Arc;
use std::time::Duration;

use teamster_engine::pending;
use teamster_protocol::event::TurnCreated;
use teamster_protocol::agent::AgentSpec;
use teamster_protocol::control::{GrantScope, SessionControl};
use teamster_protocol::input::{Approval, InputKind, TurnInput};
use teamster_protocol::turn::MAX_REQUEST_CONTEXT_BYTES;
use teamster_protocol::{CancelReason, Event, MAIN_THREAD_ID, RequestContext, Turn, TurnState, ids, timestamp};
use teamster_store::{LogWrite, QueueKind, SessionRecord, TurnRecord};

use crate::error::{Result, ServiceError};
use teamster_runtime::{EndingTurn, StartedTurn};
use crate::{Caller, Service, cursor, input_files, sandboxes};

/// The most input items one turn may carry.
const MAX_INPUT_ITEMS: usize = 256;
/// The longest thread or tool call id a decision may name.
const MAX_ID_BYTES: usize = 256;
/// How long a cancel waits for the turn to record its end before answering.
const CANCEL_WAIT: Duration = Duration::from_secs(10);
/// How long deleting a session waits for its running turn to record its end.
const DELETE_WAIT: Duration = Duration::from_secs(5);
/// The most grants a session keeps.
pub(crate) const MAX_GRANTS: usize = 64;
/// How many times a turn creation is decided again when another turn was created meanwhile.
const CREATE_ATTEMPTS: usize = 3;

/// A request to start a turn.
#[derive(Clone, Debug, Default)]
pub struct CreateTurn {
    pub input: Vec<TurnInput>,
    /// `auto` (or absent), `none`, or a turn id.
    pub previous_turn_id: Option<String>,
    /// With a turn id in `previous_turn_id`: only if that turn is still the session's last
    /// (else a 409), so the new turn continues the session and never branches it.
    pub at_tip: bool,
    /// The application's context for the turn (at most [`MAX_REQUEST_CONTEXT_BYTES`] as
    /// JSON, else a 413), handed to its tools and sub-agents and recorded on it.
    pub request_context: Option<RequestContext>,
}

/// Which turns of a session to list.
#[derive(Clone, Debug)]
pub struct TurnListQuery {
    pub limit: u32,
    pub page_token: Option<String>,
}

/// The mode and model of a new turn, and whether they are the session's from now on.
struct TurnControl {
    control: SessionControl,
    switches_session: bool,
}

enum Chain {
    Auto,
    NewRoot,
    After(String),
}

pub(crate) fn turn_view(record: TurnRecord) -> Turn {
    Turn {
        id: record.id,
        session_id: record.session_id,
        previous_turn_id: record.previous_turn_id,
        input: record.input,
        state: record.state,
        created_by_subject: record.created_by,
        created_at: record.created_at,
        control: record.control,
        request_context: record.request_context,
    }
}

/// Refuses a request context over [`MAX_REQUEST_CONTEXT_BYTES`] (413, with its size).
fn check_request_context(context: Option<&RequestContext>) -> Result<()> {
    let Some(context) = context else { return Ok(()) };
    let size = serde_json::to_vec(context).map_or(usize::MAX, |json| json.len());
    if size > MAX_REQUEST_CONTEXT_BYTES {
        return Err(ServiceError::TooLarge(format!(
            "request_context is {size} bytes as JSON; at most {MAX_REQUEST_CONTEXT_BYTES} are accepted"
        )));
    }
    Ok(())
}

pub(crate) fn validate_input(input: &[TurnInput]) -> Result<()> {
    if input.len() > MAX_INPUT_ITEMS {
        return Err(ServiceError::invalid_param("input", format!("input has more than {MAX_INPUT_ITEMS} items")));
    }
    let mut kinds = input.iter().map(TurnInput::kind);
    if let Some(first) = kinds.next()
        && kinds.any(|kind| kind != first) {
            return Err(ServiceError::invalid_param(
                "input",
                "input mixes user messages with tool approvals or tool responses; send one kind per turn",
            ));
        }
    for (index, item) in input.iter().enumerate() {
        match item {
            TurnInput::Message { content } => {
                if content.is_empty() {
                    return Err(ServiceError::invalid_param("input", format!("input[{index}] is a user message with no content")));
                }
            }
            TurnInput::ToolApproval { thread_id, tool_call_id, .. } | TurnInput::ToolResponse { thread_id, tool_call_id, .. } => {
                if thread_id.len() > MAX_ID_BYTES || tool_call_id.len() > MAX_ID_BYTES {
                    return Err(ServiceError::invalid_param("input", format!("input[{index}]: ids are at most {MAX_ID_BYTES} bytes")));
                }
            }
        }
    }
    // Whether decisions match what is waiting is checked against the previous turn.
    Ok(())
}

fn parse_chain(previous_turn_id: Option<&str>) -> Result<Chain> {
    match previous_turn_id {
        None | Some("auto") => Ok(Chain::Auto),
        Some("none") => Ok(Chain::NewRoot),
        Some(id) if ids::is_valid_id(id) => Ok(Chain::After(id.to_owned())),
        Some(_) => Err(ServiceError::invalid_param(
            "previous_turn_id",
            "previous_turn_id must be \"auto\", \"none\" or a turn id",
        )),
    }
}

impl Service {
    /// Validates and starts a turn. Returns the running turn, whose events its
    /// [`StartedTurn::events`] follows; the turn runs on its own task whatever happens to the
    /// caller.
    ///
    /// A turn created in the session meanwhile (by this replica or another) makes the store's
    /// compare-and-set fail; the request is then decided again against the new last turn (an
    /// `auto` turn chains onto it and cancels it), a few times at most.
    pub async fn create_turn(&self, caller: &Caller, session_id: &str, request: CreateTurn) -> Result<StartedTurn> {
        check_request_context(request.request_context.as_ref())?;
        for _ in 0..CREATE_ATTEMPTS {
            if let Some(started) = self.try_create_turn(caller, session_id, &request).await? {
                self.signals().notify(session_id);
                // Answering a turn that waited for the user lets held follow-ups go on after it.
                if request.input.first().is_none_or(|item| item.kind() == InputKind::ToolDecisions)
                    && !self.stores().sessions.queued_messages(session_id, QueueKind::FollowUp).await?.is_empty()
                {
                    self.follow_ups().watch(session_id);
                }
                return Ok(started);
            }
        }
        Err(ServiceError::turn_running("another turn was started in this session at the same time; retry"))
    }

    /// One attempt of [`Service::create_turn`]; `None` if another turn became the session's
    /// last turn meanwhile.
    async fn try_create_turn(
        &self,
        caller: &Caller,
        session_id: &str,
        request: &CreateTurn,
    ) -> Result<Option<StartedTurn>> {
        validate_input(&request.input)?;
        let chain = parse_chain(request.previous_turn_id.as_deref())?;
        let session = self.catalog().owned_session(caller, session_id).await?;
        let spec = self.catalog().runnable_spec(caller, &session).await?;
        // Files other than images go into the agent's sandbox, if it has one.
        let sandboxed = self.sandboxes().enabled() && sandboxes::wanted(&spec).is_some();
        let previous = match &chain {
            Chain::Auto => session.last_turn_id.clone(),
            Chain::NewRoot if request.at_tip && session.last_turn_id.is_some() => {
                return Err(ServiceError::turn_running("the session has a turn now"));
            }
            Chain::NewRoot => None,
            Chain::After(id) if request.at_tip && session.last_turn_id.as_ref() != Some(id) => {
                return Err(ServiceError::turn_running(format!("turn {id} is no longer the session's last turn")));
            }
            Chain::After(id) => {
                self.stores().events.get_turn(session_id, id).await.map_err(|error| match error {
                    teamster_store::Error::NotFound(_) => {
                        ServiceError::NotFound(format!("previous turn {id:?} not found in this session"))
                    }
                    other => other.into(),
                })?;
                Some(id.clone())
            }
        };
        // Decisions (and an empty input) resume what the previous turn left waiting; user
        // messages need no look at it.
        let mut named = request.input.clone();
        if named.first().is_none_or(|item| item.kind() == InputKind::ToolDecisions) {
            let (waiting, awaits_authorization) = match &previous {
                Some(id) => {
                    let record = self.turn_record(session_id, id).await?;
                    if record.state == TurnState::Running {
                        return Err(ServiceError::turn_running(format!(
                            "turn {id} is still running; decisions apply once it has ended"
                        )));
                    }
                    (pending::waiting_calls(&record.state), pending::awaits_authorization(&record.state))
                }
                None => (Vec::new(), false),
            };
            pending::name_omitted_calls(&waiting, &mut named)
                .and_then(|()| pending::check_input(&waiting, awaits_authorization, &named))
                .map_err(|error| ServiceError::invalid_param("input", error.0))?;
        }
        let (input, files) = input_files::prepare(self.stores().sessions.as_ref(), session_id, sandboxed, named.clone()).await?;
        let running = self.runtime().running_in_session(session_id);
        // Held until the turn is stored and running (or this attempt fails), so turns created
        // at the same time cannot all pass the quota.
        let subject = caller.subject.subject_id.as_str();
        let reservation = match self.inner.turn_quota.reserve(subject, session_id).await {
            // A turn this replica already reported ended may not have its end committed yet (the
            // writer commits in batches), and the store counts it until then: once the writes
            // queued here are committed, the place is asked for once more.
            Err(teamster_limits::LimitError::Quota(_)) => {
                self.runtime().flush().await;
                self.inner.turn_quota.reserve(subject, session_id).await?
            }
            reserved => reserved?,
        };
        // With several replicas, the session's turn may run on another one.
        let remote = match running {
            None if self.runtime().is_clustered() => self.runtime().remote_running_turn(&session).await?,
            _ => None,
        };
        // A turn that has decided its end (its `turn.done` may already be with the client) is
        // only finishing its writes: the new turn waits for it instead of conflicting.
        if let Some(running) = running.as_ref().filter(|log| log.final_state().is_none()) {
            let chains_onto_running = previous.as_deref() == Some(running.turn_id());
            if !(matches!(chain, Chain::Auto) || chains_onto_running) {
                return Err(ServiceError::turn_running(format!(
                    "turn {} is still running in this session; cancel it first, or chain to it with previous_turn_id \"auto\"",
                    running.turn_id()
                )));
            }
            running.request_cancel(CancelReason::CancelledForNextTurn);
        }
        if let Some(turn_id) = &remote {
            if !(matches!(chain, Chain::Auto) || previous.as_deref() == Some(turn_id.as_str())) {
                return Err(ServiceError::turn_running(format!(
                    "turn {turn_id} is still running in this session; cancel it first, or chain to it with previous_turn_id \"auto\""
                )));
            }
            self.stores().coordination.request_cancel(turn_id, CancelReason::CancelledForNextTurn).await?;
        }
        let ending = match (running, remote) {
            (Some(running), _) => Some(EndingTurn::Local(running)),
            (None, Some(turn_id)) => Some(EndingTurn::Remote { session_id: session.id.clone(), turn_id }),
            (None, None) => None,
        };
        input_files::store_files(self.stores().sessions.as_ref(), session_id, files).await?;
        let control = self.turn_control(&session, &spec, previous.as_deref(), &named).await?;
        let model = teamster_control::agent_in_mode(&spec, &control.control).model.name;
        let context = request.request_context.clone();
        let started = self.start_turn(caller, session, spec, previous, input, control, context, ending).await?;
        if let Some(started) = &started {
            reservation.started(&started.turn.id).await;
            self.catalog().providers().count_use(&caller.tenant, &model);
        }
        Ok(started)
    }

    /// What a new turn runs with: the session's mode, model, permissions and grants, with
    /// what its input's approvals change (then the session takes them too, once the turn is
    /// stored): an approved plan switches to the mode it leads to, and an "always allow" adds
    /// a grant of the call's tool or of its category.
    async fn turn_control(
        &self,
        session: &SessionRecord,
        spec: &AgentSpec,
        previous: Option<&str>,
        input: &[TurnInput],
    ) -> Result<TurnControl> {
        let mut control = session.control.clone();
        let in_force = |control: &SessionControl| teamster_control::mode_in_force(spec, control.mode.as_deref());
        let mut switches_session = false;
        let allowed: Vec<(&str, Option<GrantScope>)> = input
            .iter()
            .filter_map(|item| match item {
                TurnInput::ToolApproval { tool_call_id, approval: Approval::Allow { always }, .. } => Some((tool_call_id.as_str(), *always)),
                _ => None,
            })
            .collect();
        if let Some(previous) = previous.filter(|_| !allowed.is_empty()) {
            let content = self.events().turn_content(previous).await?;
            if let Some(target) = in_force(&control).and_then(|mode| mode.transitions_to.clone())
                && teamster_control::approves_plan(&content, input)
            {
                control.mode = Some(target);
                switches_session = true;
            }
            let calls = content.iter().filter_map(|event| match event {
                Event::ModelMessage(message) => message.tool_calls.as_ref(),
                _ => None,
            });
            for call in calls.flatten() {
                let Some(scope) = allowed.iter().find(|(id, _)| *id == call.id).and_then(|(_, always)| *always) else { continue };
                let name = &call.function.name;
                let category = (scope == GrantScope::Category).then(|| teamster_control::category_of(spec, name, &call.tool_info, false));
                if control.grants.len() < MAX_GRANTS
                    && let Some(grant) = teamster_control::grant_for(&control.grants, name, category, ids::new_id("grant"), timestamp::now())
                {
                    control.grants.push(grant);
                    switches_session = true;
                }
            }
        }
        control.mode = in_force(&control).map(|mode| mode.id.clone());
        // The state belongs to the session; a turn reads it when it is planned.
        control.state = None;
        Ok(TurnControl { control, switches_session })
    }

    #[allow(clippy::too_many_arguments)]
    async fn start_turn(
        &self,
        caller: &Caller,
        session: SessionRecord,
        spec: AgentSpec,
        previous_turn_id: Option<String>,
        input: Vec<TurnInput>,
        control: TurnControl,
        request_context: Option<RequestContext>,
        ending_previous: Option<EndingTurn>,
    ) -> Result<Option<StartedTurn>> {
        let now = timestamp::now();
        let record = TurnRecord {
            id: ids::new_id("turn"),
            session_id: session.id.clone(),
            previous_turn_id: previous_turn_id.clone(),
            input: input.clone(),
            state: TurnState::Running,
            created_by: caller.subject.clone(),
            created_at: now.clone(),
            control: control.control,
            request_context,
        };
        let created = Event::TurnCreated(TurnCreated {
            id: ids::new_id("evt"),
            turn_id: record.id.clone(),
            previous_turn_id,
            input,
            state: TurnState::Running,
            created_by: caller.subject.clone(),
            created_at: now,
            thread_id: Some(MAIN_THREAD_ID.to_owned()),
        });
        let data: Arc<str> = serde_json::to_string(&created).unwrap_or_default().into();
        let turn_id: Arc<str> = record.id.as_str().into();
        let writes = [
            LogWrite::Stream { turn_id: turn_id.clone(), sequence: 1, data: data.clone() },
            LogWrite::Content { turn_id: turn_id.clone(), sequence: 1, kind: created.kind(), data: data.clone() },
        ];
        match self.stores().events.create_turn(&record, session.last_turn_id.as_deref(), &writes).await {
            Ok(()) => {}
            Err(teamster_store::Error::Conflict(_)) => return Ok(None),
            Err(other) => return Err(other.into()),
        }
        let mut session = session;
        if control.switches_session {
            session.control.mode = record.control.mode.clone();
            session.control.grants = record.control.grants.clone();
            // The turn runs with its control whatever happens here; only the next turns would
            // miss the change.
            if let Err(error) = self.stores().sessions.update_session_control(&session.id, &session.control, &record.created_at).await {
                tracing::warn!(session = %session.id, %error, "the session could not take the approvals' mode or grants");
            }
        }
        let running = self.runtime().begin(session, record.clone(), data, spec, ending_previous);
        Ok(Some(StartedTurn::new(turn_view(record), running, self.runtime().clone())))
    }

    /// A turn, with its final state as soon as it is decided.
    pub async fn get_turn(&self, caller: &Caller, session_id: &str, turn_id: &str) -> Result<Turn> {
        self.catalog().owned_session(caller, session_id).await?;
        Ok(turn_view(self.turn_record(session_id, turn_id).await?))
    }

    /// A turn as readers should see it: its stored record, with its final state as soon as the
    /// turn has decided it (the store catches up a moment later).
    pub(crate) async fn turn_record(&self, session_id: &str, turn_id: &str) -> Result<TurnRecord> {
        let mut record = self.stores().events.get_turn(session_id, turn_id).await.map_err(|error| match error {
            teamster_store::Error::NotFound(_) => ServiceError::NotFound(format!("turn {turn_id:?} not found in this session")),
            other => other.into(),
        })?;
        if let Some(state) = self.runtime().decided_state(turn_id) {
            record.state = state;
        }
        Ok(record)
    }

    /// Turns newest first, walking `previous_turn_id` from the session's last turn (or from
    /// the page token's turn).
    pub async fn list_turns(&self, caller: &Caller, session_id: &str, query: TurnListQuery) -> Result<(Vec<Turn>, Option<String>)> {
        let session = self.catalog().owned_session(caller, session_id).await?;
        let mut next_id = match &query.page_token {
            Some(token) => {
                let id = cursor::decode(token, 1)?.pop().unwrap_or_default();
                self.stores().events.get_turn(session_id, &id).await.map_err(|_| {
                    ServiceError::invalid_param("page_token", "page_token is not a valid page token for this session")
                })?;
                Some(id)
            }
            None => session.last_turn_id,
        };
        let mut turns = Vec::new();
        while let Some(id) = next_id.take() {
            if turns.len() == query.limit as usize {
                return Ok((turns, Some(cursor::encode(&[&id]))));
            }
            let record = self.turn_record(session_id, &id).await?;
            next_id = record.previous_turn_id.clone();
            turns.push(turn_view(record));
        }
        Ok((turns, None))
    }

    /// Cancels the session's running turn, if any, and waits (boundedly) until it has
    /// recorded its end; the steering and follow-ups queued until then are dropped with it, so
    /// nothing starts after a stop. Idempotent.
    pub async fn cancel_session(&self, caller: &Caller, session_id: &str) -> Result<()> {
        let session = self.catalog().owned_session(caller, session_id).await?;
        if !self.stop_running_turn(&session, CANCEL_WAIT).await? {
            return Err(ServiceError::PreconditionFailed(
                "the running turn did not stop in time; it will stop shortly".to_owned(),
            ));
        }
        let dropped = self.follow_ups().drop_stopped_queue(session_id).await?;
        if dropped > 0 {
            tracing::info!(session = %session_id, dropped, "the messages queued for the cancelled turn were dropped");
        }
        Ok(())
    }

    /// Deletes a session and everything in it, cancelling its running turn; idempotent.
    pub async fn delete_session(&self, caller: &Caller, session_id: &str) -> Result<()> {
        let session = match self.catalog().owned_session(caller, session_id).await {
            Ok(session) => session,
            Err(ServiceError::NotFound(_)) => return Ok(()),
            Err(other) => return Err(other),
        };
        self.stop_running_turn(&session, DELETE_WAIT).await?;
        self.stores().sessions.delete_session(session_id).await?;
        self.inner.mcp.close_session(session_id);
        self.inner.sandboxes.destroy(session_id).await;
        self.signals().notify_listed(session_id, &session.created_by.subject_id);
        Ok(())
    }

    /// Cancels the session's running turn, if any, and waits at most `wait` until it has
    /// recorded its end; `Ok(false)` if it has not. A turn running on another replica is asked
    /// to stop through the store.
    async fn stop_running_turn(&self, session: &SessionRecord, wait: Duration) -> Result<bool> {
        let reason = CancelReason::ClientCancelled;
        if let Some(log) = self.runtime().running_in_session(&session.id) {
            log.request_cancel(reason);
            Ok(tokio::time::timeout(wait, log.wait_finished()).await.is_ok())
        } else if self.runtime().is_clustered()
            && let Some(turn_id) = self.runtime().remote_running_turn(session).await?
        {
            Ok(self.runtime().cancel_remote(&session.id, &turn_id, reason, wait).await?)
        } else {
            Ok(true)
        }
    }
}
