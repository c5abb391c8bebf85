//! The task that runs one turn: plan it from the agent spec and stored history, run the
//! engine with a deadline, and record how it ended.

use std::sync::Arc;
use std::time::Duration;

use teamster_engine::{ToolBox, ContextPolicy, EventSink, ModelResolver, NamedSubAgent, Resolution, SubAgentPolicy, TurnOutcome, TurnPlan, history_from_events, render, run_turn};
use teamster_llm::Message;
use teamster_protocol::event::{McpAuthRequired, TurnDone};
use teamster_protocol::agent::{AgentSpec, SubAgentsConfig};
use teamster_protocol::{CancelReason, Event, MAIN_THREAD_ID, RuntimeConfig, TurnMetrics, TurnState, ids, timestamp};
use teamster_store::{ContentQuery, LogWrite, SessionRecord, TurnRecord};

use crate::mcp::TurnTools;
use crate::{Service, pending};
use teamster_protocol::input::TurnInput;
use crate::cluster::EndingTurn;
use crate::engine_metrics::add_metrics;
use crate::leases::Hold;
use crate::live::TurnLog;
use crate::recovery::{self, Resumption};
use crate::sink::TurnSink;

/// How long a new turn waits for the previous turn of its session to record its end.
const PREVIOUS_TURN_WAIT: Duration = Duration::from_secs(10);
/// Content events read per store call when rebuilding history.
const HISTORY_PAGE: u32 = 1000;
/// The most authorization pauses in a row a resumed turn looks back through for decisions.
const MAX_RESUMED_PAUSES: usize = 64;

/// How a runner starts its turn.
enum Start {
    /// A new turn, once the session's previous turn (if it is still ending) has ended.
    New { ending_previous: Option<EndingTurn> },
    /// A turn this replica took over from a stopped server (see `recovery`), with what is left
    /// of its time.
    Resumed { timeout: Duration },
}

/// Starts a new turn's task (holding the turn's new lease), and a supervisor that ends the
/// turn with an error if the task panics, so no turn is ever left running.
pub(crate) fn spawn(
    service: Service,
    log: Arc<TurnLog>,
    session: SessionRecord,
    turn: TurnRecord,
    ending_previous: Option<EndingTurn>,
) {
    let hold = service.inner.leases.hold_new(&log);
    start(service, log, hold, session, turn, Start::New { ending_previous });
}

/// Starts the task of a turn this replica took over and holds, like [`spawn`].
pub(crate) fn spawn_resumed(
    service: Service,
    log: Arc<TurnLog>,
    hold: Arc<Hold>,
    session: SessionRecord,
    turn: TurnRecord,
    timeout: Duration,
) {
    start(service, log, hold, session, turn, Start::Resumed { timeout });
}

fn start(service: Service, log: Arc<TurnLog>, hold: Arc<Hold>, session: SessionRecord, turn: TurnRecord, how: Start) {
    let sink = Arc::new(TurnSink { log: log.clone(), writer: service.inner.writer.clone(), hold: Some(hold) });
    let task = tokio::spawn(run(service.clone(), sink.clone(), session, turn, how));
    tokio::spawn(async move {
        if let Err(error) = task.await {
            tracing::error!(turn_id = %log.turn_id, %error, "turn task failed");
            if log.final_state().is_none() {
                let state = TurnState::Error {
                    message: "The turn failed because of an internal error.".to_owned(),
                    completed_at: timestamp::now(),
                    metrics: None,
                };
                finish(&service, &sink, state, None).await;
            }
        }
    });
}

async fn run(service: Service, sink: Arc<TurnSink>, session: SessionRecord, turn: TurnRecord, how: Start) {
    let (timeout, resumed) = match how {
        Start::New { ending_previous } => {
            if let Some(previous) = ending_previous {
                previous.wait(&service, PREVIOUS_TURN_WAIT).await;
            }
            (service.inner.config.turn_timeout, false)
        }
        Start::Resumed { timeout } => (timeout, true),
    };
    let log = sink.log.clone();
    let mut history = None;
    let (outcome, metrics) = match service.plan_turn(&session, &turn, &sink).await {
        Err(message) if resumed => {
            tracing::warn!(turn_id = %turn.id, "ending a taken-over turn as abandoned: {message}");
            log.request_cancel(CancelReason::Abandoned);
            (TurnOutcome::Interrupted, TurnMetrics::default())
        }
        Err(message) => (TurnOutcome::Failed { message }, TurnMetrics::default()),
        Ok((TurnStart::NeedsAuthorization(required), used_history)) => {
            history = Some(used_history);
            let event = Event::McpAuthRequired(required);
            sink.emit_content(&event);
            (TurnOutcome::Done { output: None, required_actions: vec![event] }, TurnMetrics::default())
        }
        Ok((TurnStart::Run(plan), used_history)) => {
            let (resumption, prior) = if resumed {
                recovery::resume(*plan, &turn, &used_history, &sink, &log.cancel).await
            } else {
                (Resumption::Run(plan), TurnMetrics::default())
            };
            history = Some(used_history);
            let (outcome, metrics) = match resumption {
                Resumption::Run(plan) => {
                    let run = run_turn(*plan, sink.as_ref(), &log.cancel);
                    tokio::pin!(run);
                    tokio::select! {
                        result = &mut run => result,
                        () = tokio::time::sleep(timeout) => {
                            log.request_cancel(CancelReason::ServerExecutionTimeout);
                            run.await
                        }
                    }
                }
                Resumption::Finished(outcome) => (outcome, TurnMetrics::default()),
                Resumption::Abandon(reason) => {
                    tracing::warn!(turn_id = %turn.id, "ending a taken-over turn as abandoned: {reason}");
                    log.request_cancel(CancelReason::Abandoned);
                    (TurnOutcome::Interrupted, TurnMetrics::default())
                }
            };
            (outcome, add_metrics(&prior, &metrics))
        }
    };
    let completed_at = timestamp::now();
    let state = match outcome {
        TurnOutcome::Done { output, required_actions } => TurnState::Done {
            output: output.map(Box::new),
            required_actions,
            completed_at,
            metrics: Some(metrics),
        },
        TurnOutcome::Interrupted => TurnState::Cancelled {
            reason: log.cancel_reason().unwrap_or(CancelReason::ClientCancelled),
            completed_at,
            metrics: Some(metrics),
        },
        TurnOutcome::Failed { message } => TurnState::Error { message, completed_at, metrics: Some(metrics) },
    };
    finish(&service, &sink, state, history.map(|history| (&turn, history))).await;
}

/// Records the turn's end: `turn.done` on the stream and as content, and the turn's state in
/// the same commit, then waits until all of it is durable, caches the history through this
/// turn (so a turn chained to it finds it), and only then lets the turn leave memory.
///
/// A fenced turn (this replica no longer owns it) records nothing: it only leaves memory.
async fn finish(service: &Service, sink: &TurnSink, state: TurnState, history: Option<(&TurnRecord, Vec<Event>)>) {
    let log = &sink.log;
    if log.is_fenced() {
        service.inner.live.remove(&log.turn_id);
        log.mark_finished();
        return;
    }
    log.set_final_state(state.clone());
    let at = timestamp::now();
    let done = Event::TurnDone(TurnDone {
        id: ids::new_id("evt"),
        state: state.clone(),
        created_at: at.clone(),
        thread_id: Some(MAIN_THREAD_ID.to_owned()),
    });
    sink.emit_done(&done, LogWrite::TurnState { turn_id: log.turn_id.clone(), state, at });
    service.inner.writer.flush().await;
    service.inner.leases.release_hold(&log.turn_id);
    if let Some((turn, history)) = history {
        service.cache_history(turn, history).await;
    }
    service.inner.live.remove(&log.turn_id);
    log.mark_finished();
}

/// How a planned turn starts.
enum TurnStart {
    /// The engine runs the plan.
    Run(Box<TurnPlan>),
    /// MCP servers need the user's authorization: the turn ends `done` with this
    /// `mcp.auth_required` in its `required_actions`, before any model call, and a turn with an
    /// empty input runs it again once the user has authorized them.
    NeedsAuthorization(McpAuthRequired),
}

impl Service {
    /// Builds the engine's plan for a turn, and returns the history events it used. Errors are
    /// messages for the turn's error state.
    async fn plan_turn(&self, session: &SessionRecord, turn: &TurnRecord, sink: &TurnSink) -> Result<(TurnStart, Vec<Event>), String> {
        let spec = self
            .catalog()
            .session_spec(session)
            .await
            .map_err(|error| format!("The session's agent is no longer available: {error}."))?;
        let resolved = self
            .models()
            .resolve(&spec.model.name)
            .map_err(|error| format!("The agent's model {:?} is not available: {error}.", spec.model.name))?;
        let variables = spec.variables.clone().unwrap_or_default();
        let seed_messages: Vec<Message> = spec
            .messages
            .iter()
            .flatten()
            .map(|seed| Message::User { content: render(&seed.content, &variables) })
            .collect();
        let history = self.history_events(turn).await.map_err(|error| format!("The session's history could not be read: {error}."))?;
        let resolutions = self.resolutions(turn, &history).await?;
        let builtins = ToolBox::collect(self.inner.tools.clone()).await;
        let (initialized, tools) = self.inner.mcp.turn_tools(builtins, turn, &spec, &history, &sink.log.cancel).await;
        if let Some(event) = initialized {
            sink.emit_content(&event);
        }
        let toolbox = match tools {
            TurnTools::Ready(toolbox) => toolbox,
            TurnTools::NeedsAuthorization(required) => return Ok((TurnStart::NeedsAuthorization(required), history)),
        };
        let config = spec.config.as_ref();
        let iteration_limit = config
            .and_then(|config| config.iteration_limit)
            .unwrap_or(RuntimeConfig::DEFAULT_ITERATION_LIMIT)
            .clamp(1, RuntimeConfig::MAX_ITERATION_LIMIT);
        let plan = TurnPlan {
            thread_id: MAIN_THREAD_ID.to_owned(),
            model: resolved.client,
            model_id: resolved.model_id,
            params: spec.model.params.clone().unwrap_or_default(),
            response_format: spec.response_format.clone(),
            instructions: spec.instructions.as_deref().map(|text| render(text, &variables)),
            seed_messages,
            messages: history_from_events(&history, MAIN_THREAD_ID),
            toolbox,
            iteration_limit,
            iterations_done: 0,
            context: ContextPolicy::from_config(config.and_then(|config| config.context_management.as_ref())),
            pricing: resolved.pricing,
            ask_user_questions: config.and_then(|config| config.ask_user_questions.as_ref()).is_none_or(|toggle| toggle.enabled),
            sub_agents: self.sub_agent_policy(&spec).await,
            // Resuming a sub-agent thread rebuilds it from the history.
            events: if resolutions.iter().any(|resolution| resolution.thread_id != MAIN_THREAD_ID) {
                history.clone()
            } else {
                Vec::new()
            },
            resolutions,
        };
        Ok((TurnStart::Run(Box::new(plan)), history))
    }

    /// The sub-agents an agent may start: dynamic ones unless disabled, and the declared ones
    /// (a declared sub-agent naming a saved agent takes that agent's instructions and model).
    async fn sub_agent_policy(&self, spec: &AgentSpec) -> Option<SubAgentPolicy> {
        let config = spec.config.as_ref().and_then(|config| config.dynamic_sub_agents.as_ref());
        let dynamic = config.is_none_or(|config| config.enabled);
        let max_depth = config
            .and_then(|config| config.max_depth)
            .unwrap_or(SubAgentsConfig::DEFAULT_MAX_DEPTH)
            .clamp(1, SubAgentsConfig::MAX_DEPTH) as u32;
        let mut named = Vec::new();
        for declared in spec.sub_agents.iter().flatten() {
            let mut agent = NamedSubAgent {
                name: declared.name.clone(),
                description: declared.description.clone(),
                instructions: declared.instructions.clone(),
                tools: declared.tools.clone(),
                model: declared.model.clone(),
            };
            if let Some(saved) = &declared.agent {
                match self.store().get_agent_by_name(saved).await {
                    Ok(record) => {
                        agent.instructions = agent.instructions.or(record.spec.instructions.clone());
                        agent.model = agent.model.or(Some(record.spec.model.name.clone()));
                    }
                    Err(error) => {
                        tracing::warn!(sub_agent = %declared.name, %saved, %error, "declared sub-agent's saved agent not found");
                    }
                }
            }
            named.push(agent);
        }
        (dynamic || !named.is_empty()).then(|| SubAgentPolicy {
            dynamic,
            named,
            max_depth,
            models: Arc::new(RegistryModels(self.models())),
        })
    }

    /// The decisions of a turn whose input resumes waiting calls, with each call as its
    /// message recorded it. The input was checked against the waiting calls when the turn was
    /// created. A turn with an empty input resumes the turn that paused for MCP authorization,
    /// so that turn's decisions, if it carried any, are the ones that apply.
    async fn resolutions(&self, turn: &TurnRecord, history: &[Event]) -> Result<Vec<Resolution>, String> {
        let read = |id: &str| {
            let id = id.to_owned();
            async move {
                self.store()
                    .get_turn(&turn.session_id, &id)
                    .await
                    .map_err(|error| format!("The turn this one resumes could not be read: {error}."))
            }
        };
        let mut input = turn.input.clone();
        let mut previous_id = turn.previous_turn_id.clone();
        let mut hops = 0;
        while input.is_empty() {
            let Some(id) = previous_id else { return Ok(Vec::new()) };
            let paused = read(&id).await?;
            hops += 1;
            if !pending::awaits_authorization(&paused.state) || hops > MAX_RESUMED_PAUSES {
                return Ok(Vec::new());
            }
            (input, previous_id) = (paused.input, paused.previous_turn_id);
        }
        let (Some(previous), Some(TurnInput::ToolApproval { .. } | TurnInput::ToolResponse { .. })) =
            (&previous_id, input.first())
        else {
            return Ok(Vec::new());
        };
        let previous = read(previous).await?;
        pending::resolutions(&pending::waiting_calls(&previous.state), &input, history)
    }

    /// Caches the history through a finished turn: what it was planned with, plus what it
    /// recorded (everything after its `turn.created`).
    async fn cache_history(&self, turn: &TurnRecord, mut history: Vec<Event>) {
        match self.content_events(&turn.id, Some(1)).await {
            Ok(recorded) => {
                history.extend(recorded);
                self.inner.history.insert(&turn.id, turn.previous_turn_id.as_deref(), history);
            }
            Err(error) => tracing::warn!(turn_id = %turn.id, %error, "history not cached"),
        }
    }

    /// The content events of the turn's ancestors, oldest first, then the turn's own
    /// `turn.created`. A cached predecessor saves reading the chain.
    async fn history_events(&self, turn: &TurnRecord) -> Result<Vec<Event>, teamster_store::Error> {
        let cached = turn.previous_turn_id.as_deref().and_then(|previous| self.inner.history.get(previous));
        let mut events = match cached {
            Some(cached) => cached.as_ref().clone(),
            None => {
                let mut chain = Vec::new();
                let mut next = turn.previous_turn_id.clone();
                while let Some(id) = next {
                    let ancestor = self.store().get_turn(&turn.session_id, &id).await?;
                    next = ancestor.previous_turn_id.clone();
                    chain.push(ancestor.id);
                }
                let mut events = Vec::new();
                for turn_id in chain.iter().rev() {
                    events.extend(self.content_events(turn_id, None).await?);
                }
                events
            }
        };
        events.extend(self.content_events(&turn.id, None).await?);
        Ok(events)
    }

    /// A turn's content events after sequence number `after`, parsed.
    async fn content_events(&self, turn_id: &str, mut after: Option<u64>) -> Result<Vec<Event>, teamster_store::Error> {
        let mut events = Vec::new();
        loop {
            let query = ContentQuery { only_turn_content: false, descending: false, after, limit: HISTORY_PAGE };
            let page = self.store().read_content(turn_id, &query).await?;
            for stored in &page {
                match serde_json::from_str::<Event>(&stored.data) {
                    Ok(event) => events.push(event),
                    Err(error) => tracing::warn!(%turn_id, sequence = stored.sequence, %error, "unreadable stored event skipped"),
                }
            }
            match page.last() {
                Some(last) if page.len() == HISTORY_PAGE as usize => after = Some(last.sequence),
                _ => return Ok(events),
            }
        }
    }
}

/// Sub-agents resolve their model names through the provider registry.
struct RegistryModels(Arc<teamster_llm::registry::ModelRegistry>);

impl ModelResolver for RegistryModels {
    fn resolve(&self, name: &str) -> Result<teamster_llm::registry::ResolvedModel, String> {
        self.0.resolve(name).map_err(|error| format!("The model {name:?} is not available: {error}."))
    }
}
