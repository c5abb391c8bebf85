//! How a turn is planned: the data a plan needs, loaded — the session's agent spec (from the
//! catalog) and the saved agents its sub-agents name, the decisions its input carries, the
//! built-in tools and those of its MCP servers — and handed to the engine's
//! [`CompiledAgent`](teamster_engine::CompiledAgent), which knows what a spec means. The turn runtime asks for
//! a plan through [`PlanTurns`] and knows none of this.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use teamster_control::{SUBMIT_PLAN, SessionState, StateSchema, StateSink, SubmitPlan, TaskBoard};
use teamster_engine::{CompiledAgent, Decision, EventSink, ModelResolver, Resolution, ToolBox, pending};
use teamster_protocol::Event;
use teamster_protocol::agent::AgentSpec;
use teamster_protocol::input::TurnInput;
use teamster_sandbox::SandboxOwner;
use teamster_store::{SessionRecord, SessionStore, StoreParts, TurnRecord};
use teamster_tools::ToolSource;

use crate::catalog::Catalog;
use teamster_mcp_host::{McpHost, TurnTools};
use teamster_runtime::{PlanTurns, TurnSink, TurnStart};
use crate::sandboxes::TurnSandbox;
use crate::follow_ups::QueuedSteering;
use crate::{Sandboxes, attachments, downloads};

/// The most authorization pauses in a row a resumed turn looks back through for decisions.
const MAX_RESUMED_PAUSES: usize = 64;

/// Plans turns from the catalog's specs, the built-in tools and the MCP host's tools.
pub(crate) struct Planner {
    /// The parts of the store a plan reads from (agents, sessions, files, events, settings).
    pub stores: StoreParts,
    pub catalog: Arc<Catalog>,
    pub mcp: Arc<McpHost>,
    /// The built-in tools every turn has.
    pub tools: Vec<Arc<dyn ToolSource>>,
    /// The sandboxes of sessions whose agent has one.
    pub sandboxes: Sandboxes,
    /// What each tenant spent, for the tenant budget.
    pub tenant_ledger: Arc<teamster_limits::TenantLedger>,
    /// The operator's caps on a turn's fan-out (an agent may lower them).
    pub fan_out: teamster_engine::FanOut,
    /// Each subject's places for model calls, shared by its turns' threads.
    pub model_calls: Arc<teamster_limits::ModelCallPlaces>,
}

#[async_trait]
impl PlanTurns for Planner {
    async fn plan(
        &self,
        session: &SessionRecord,
        turn: &TurnRecord,
        admitted: Option<AgentSpec>,
        history: &[Event],
        sink: &TurnSink,
    ) -> Result<TurnStart, String> {
        let base = match admitted {
            Some(spec) => spec,
            None => self
                .catalog
                .session_spec(session)
                .await
                .map_err(|error| format!("The session's agent is no longer available: {error}."))?,
        };
        // The agent as the turn's mode (and the session's model) changes it.
        let spec = teamster_control::agent_in_mode(&base, &turn.control);
        let mode = teamster_control::mode_in_force(&base, turn.control.mode.as_deref());
        let models: Arc<dyn ModelResolver> = Arc::new(RegistryModels(self.catalog.models()));
        let mut saved = HashMap::new();
        for name in CompiledAgent::saved_sub_agents(&spec) {
            match self.stores.agents.get_agent_by_name(crate::catalog::tenant_of(&session.created_by.subject_id), name).await {
                Ok(record) => {
                    saved.insert(name.to_owned(), record.spec);
                }
                Err(error) => tracing::warn!(saved = %name, %error, "a declared sub-agent's saved agent cannot be read"),
            }
        }
        let agent = CompiledAgent::from_spec(&spec, models, |name| saved.get(name).cloned()).map_err(|error| error.to_string())?;
        let resolutions = settle_plans(self.resolutions(turn, history).await?, mode.map(|mode| mode.id.as_str()));
        let mut builtins = self.tools.clone();
        let creator = &session.created_by.subject_id;
        let owner = SandboxOwner::new(crate::catalog::tenant_of(creator), creator.as_str());
        let sandbox = self.sandboxes.for_turn(&session.id, &owner, &spec).await?;
        let mut skills = Vec::new();
        if let Some(sandbox) = &sandbox {
            if let Some(created) = &sandbox.created {
                downloads::link(self.stores.settings.as_ref(), &session.id, &session.created_by.subject_id, &sandbox.sandbox_id)
                    .await
                    .map_err(|error| format!("The session's sandbox could not be recorded: {error}."))?;
                sink.emit_content(created);
            }
            attachments::write_into_sandbox(self.stores.sessions.as_ref(), &session.id, sandbox, &turn.input).await?;
            skills = sandbox.mount_skills(self.stores.settings.as_ref(), &spec).await?;
            builtins.push(sandbox.tools.clone());
        }
        if tasks_enabled(&spec) {
            builtins.push(Arc::new(TaskBoard::from_events(history)));
        }
        if let Some(target) = mode.and_then(|mode| mode.transitions_to.as_deref()) {
            builtins.push(Arc::new(SubmitPlan::leading_to(target)));
        }
        if spec.config.as_ref().and_then(|config| config.state_tool.as_ref()).is_some_and(|tool| tool.enabled)
            && let Ok(Some(schema)) = StateSchema::of(&spec)
        {
            let sink = Arc::new(StoredState { sessions: self.stores.sessions.clone(), session_id: session.id.clone() });
            builtins.push(Arc::new(SessionState::new(schema, session.control.state.clone(), sink)));
        }
        let builtins = ToolBox::collect(builtins).await;
        let (initialized, tools) = self.mcp.turn_tools(builtins, turn, &spec, history, sink.running().cancellation()).await;
        if let Some(event) = initialized {
            sink.emit_content(&event);
        }
        let toolbox = match tools {
            TurnTools::Ready(toolbox) => toolbox
                .restricted(|tool| teamster_control::offers(&base, &turn.control, &tool.name))
                .governed(|tool| teamster_control::permission(&turn.control, &tool.name, teamster_control::category(&base, tool))),
            TurnTools::NeedsAuthorization(required) => return Ok(TurnStart::NeedsAuthorization(required)),
        };
        let history = attachments::with_images(self.stores.sessions.as_ref(), &session.id, history).await;
        let mut plan = agent.plan(&history, toolbox, resolutions);
        plan.result_files = sandbox.as_ref().map(TurnSandbox::result_files);
        plan.steering = Some(Arc::new(QueuedSteering { stores: self.stores.clone(), turn: sink.running() }));
        plan.skills = skills;
        let session_budget = spec.config.as_ref().and_then(|config| config.budget.as_ref());
        plan.spend_limit = teamster_limits::for_turn(&self.tenant_ledger, session_budget, &turn.created_by, &history).await;
        plan.fan_out = agent.fan_out_under(self.fan_out);
        plan.model_calls = self.model_calls.of(&turn.created_by.subject_id);
        plan.request_context = turn.request_context.clone();
        let time_limit = spec.config.as_ref().and_then(|config| config.timeout_seconds).map(std::time::Duration::from_secs);
        Ok(TurnStart::Run { plan: Box::new(plan), time_limit })
    }

    async fn ended(&self, turn: &TurnRecord) {
        self.tenant_ledger.flush_tenant(teamster_limits::tenant_of(&turn.created_by)).await;
    }
}

impl Planner {
    /// The decisions of a turn whose input resumes waiting calls, with each call as its
    /// message recorded it. The input was checked against the waiting calls when the turn was
    /// created. A turn with an empty input resumes the turn that paused for MCP authorization,
    /// so that turn's decisions, if it carried any, are the ones that apply.
    async fn resolutions(&self, turn: &TurnRecord, history: &[Event]) -> Result<Vec<Resolution>, String> {
        let read = |id: &str| {
            let id = id.to_owned();
            async move {
                self.stores
                    .events
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
}

/// Answers to `submit_plan` are the tool's result, not a run of it: an approval tells the model
/// the session is now in `mode` (the turn's, which the approval chose), a rejection gives it
/// the user's feedback.
fn settle_plans(mut resolutions: Vec<Resolution>, mode: Option<&str>) -> Vec<Resolution> {
    for resolution in resolutions.iter_mut().filter(|resolution| resolution.call.function.name == SUBMIT_PLAN) {
        let content = match &resolution.decision {
            Decision::Allow => teamster_control::approved(mode.unwrap_or("next")),
            Decision::Deny { reason } => teamster_control::rejected(reason.as_deref()),
            Decision::Respond { .. } => continue,
        };
        resolution.decision = Decision::Respond { content };
    }
    resolutions
}

/// Whether the spec gives the agent a task list (`config.tasks.enabled`).
fn tasks_enabled(spec: &teamster_protocol::AgentSpec) -> bool {
    spec.config.as_ref().and_then(|config| config.tasks.as_ref()).is_some_and(|tasks| tasks.enabled)
}

/// The state tools save the session state into the session's record.
struct StoredState {
    sessions: Arc<dyn SessionStore>,
    session_id: String,
}

#[async_trait]
impl StateSink for StoredState {
    async fn save(&self, state: &serde_json::Value) -> Result<(), String> {
        let mut control = self.sessions.get_session(&self.session_id).await.map_err(|error| error.to_string())?.control;
        control.state = Some(state.clone());
        let at = teamster_protocol::timestamp::now();
        self.sessions.update_session_control(&self.session_id, &control, &at).await.map_err(|error| error.to_string())
    }
}

/// Sub-agents resolve their model names through the provider registry.
struct RegistryModels(Arc<teamster_llm::registry::ModelRegistry>);

impl ModelResolver for RegistryModels {
    fn resolve(&self, name: &str) -> Result<teamster_llm::registry::ResolvedModel, String> {
        self.0.resolve(name).map_err(|error| format!("The model {name:?} is not available: {error}."))
    }
}
