//! How a turn is planned: the session's agent spec (from the catalog), the turn's history, the
//! decisions its input carries and the tools of its MCP servers, made into the engine's
//! [`TurnPlan`]. The turn runtime asks for a plan through [`PlanTurns`] and knows none of this.

use std::sync::Arc;

use async_trait::async_trait;
use teamster_engine::{
    ContextPolicy, EventSink, ModelResolver, NamedSubAgent, Resolution, SubAgentPolicy, ToolBox, TurnPlan, history_from_events, render,
};
use teamster_llm::Message;
use teamster_protocol::agent::{AgentSpec, SubAgentsConfig};
use teamster_protocol::input::TurnInput;
use teamster_protocol::{Event, MAIN_THREAD_ID, RuntimeConfig};
use teamster_store::{SessionRecord, Store, TurnRecord};
use teamster_tools::ToolSource;

use crate::catalog::Catalog;
use crate::mcp::{McpHost, TurnTools};
use crate::pending;
use crate::runtime::{PlanTurns, TurnSink, TurnStart};

/// The most authorization pauses in a row a resumed turn looks back through for decisions.
const MAX_RESUMED_PAUSES: usize = 64;

/// Plans turns from the catalog's specs, the built-in tools and the MCP host's tools.
pub(crate) struct Planner {
    pub store: Arc<dyn Store>,
    pub catalog: Arc<Catalog>,
    pub mcp: Arc<McpHost>,
    /// The built-in tools every turn has.
    pub tools: Vec<Arc<dyn ToolSource>>,
}

#[async_trait]
impl PlanTurns for Planner {
    async fn plan(&self, session: &SessionRecord, turn: &TurnRecord, history: &[Event], sink: &TurnSink) -> Result<TurnStart, String> {
        let spec = self
            .catalog
            .session_spec(session)
            .await
            .map_err(|error| format!("The session's agent is no longer available: {error}."))?;
        let resolved = self
            .catalog
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
        let resolutions = self.resolutions(turn, history).await?;
        let builtins = ToolBox::collect(self.tools.clone()).await;
        let (initialized, tools) = self.mcp.turn_tools(builtins, turn, &spec, history, &sink.log.cancel).await;
        if let Some(event) = initialized {
            sink.emit_content(&event);
        }
        let toolbox = match tools {
            TurnTools::Ready(toolbox) => toolbox,
            TurnTools::NeedsAuthorization(required) => return Ok(TurnStart::NeedsAuthorization(required)),
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
            messages: history_from_events(history, MAIN_THREAD_ID),
            toolbox,
            iteration_limit,
            iterations_done: 0,
            context: ContextPolicy::from_config(config.and_then(|config| config.context_management.as_ref())),
            pricing: resolved.pricing,
            ask_user_questions: config.and_then(|config| config.ask_user_questions.as_ref()).is_none_or(|toggle| toggle.enabled),
            sub_agents: self.sub_agent_policy(&spec).await,
            // Resuming a sub-agent thread rebuilds it from the history.
            events: if resolutions.iter().any(|resolution| resolution.thread_id != MAIN_THREAD_ID) {
                history.to_vec()
            } else {
                Vec::new()
            },
            resolutions,
        };
        Ok(TurnStart::Run(Box::new(plan)))
    }
}

impl Planner {
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
                match self.store.get_agent_by_name(saved).await {
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
            models: Arc::new(RegistryModels(self.catalog.models())),
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
                self.store
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

/// Sub-agents resolve their model names through the provider registry.
struct RegistryModels(Arc<teamster_llm::registry::ModelRegistry>);

impl ModelResolver for RegistryModels {
    fn resolve(&self, name: &str) -> Result<teamster_llm::registry::ResolvedModel, String> {
        self.0.resolve(name).map_err(|error| format!("The model {name:?} is not available: {error}."))
    }
}
