//! The meaning of an agent spec: its defaults, clamps, rendered instructions and seed
//! messages, resolved model and sub-agent policy, made into a [`CompiledAgent`] that plans turns (the
//! engine's form of an agent; the saved agent is `teamster_protocol::agent::Agent`, the
//! library's is `teamster::Agent`).
//!
//! Every way of running an agent (the server, the embedded runtime, a program's own
//! `AgentSpec`) builds its turns here, so a spec means the same everywhere: the caller only
//! loads data (the spec, saved agents that declared sub-agents name, the history) and supplies
//! the tools.

use std::sync::Arc;

use teamster_llm::Message;
use teamster_llm::registry::ResolvedModel;
use teamster_protocol::agent::{AgentSpec, ModelParams, ResponseFormat, SubAgentSpec, SubAgentsConfig};
use teamster_protocol::{Event, MAIN_THREAD_ID, RuntimeConfig};

use crate::context::ContextPolicy;
use crate::fan_out::FanOut;
use crate::gates::Resolution;
use crate::history::history_from_events;
use crate::run::TurnPlan;
use crate::sub_agents::{ModelResolver, NamedSubAgent, SubAgentPolicy};
use crate::template::render;
use crate::toolbox::ToolBox;

/// Why a spec cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentError {
    /// Its model does not resolve (unknown provider or model); `reason` is the resolver's.
    #[error("{reason}")]
    UnknownModel { model: String, reason: String },
}

/// An agent spec made runnable: what every turn of it shares.
#[derive(Clone)]
pub struct CompiledAgent {
    model: ResolvedModel,
    params: ModelParams,
    response_format: Option<ResponseFormat>,
    /// Rendered with the spec's variables.
    instructions: Option<String>,
    /// Rendered with the spec's variables.
    seed_messages: Vec<Message>,
    iteration_limit: u64,
    context: ContextPolicy,
    ask_user_questions: bool,
    sub_agents: Option<SubAgentPolicy>,
    /// The spec's `config.fan_out`, which may lower the operator's caps.
    fan_out: Option<teamster_protocol::agent::FanOutConfig>,
}

impl CompiledAgent {
    /// Makes a spec runnable: resolves its model through `models` (which also resolves the
    /// models of its sub-agents), renders its instructions and seed messages, applies the
    /// defaults and clamps of its runtime config. `saved` answers the spec of a saved agent a
    /// declared sub-agent names (`None` when it does not exist: the sub-agent keeps what it
    /// declares itself).
    pub fn from_spec(
        spec: &AgentSpec,
        models: Arc<dyn ModelResolver>,
        saved: impl Fn(&str) -> Option<AgentSpec>,
    ) -> Result<CompiledAgent, AgentError> {
        let model = models
            .resolve(&spec.model.name)
            .map_err(|reason| AgentError::UnknownModel { model: spec.model.name.clone(), reason })?;
        let variables = spec.variables.clone().unwrap_or_default();
        let config = spec.config.as_ref();
        Ok(CompiledAgent {
            model,
            params: spec.model.params.clone().unwrap_or_default(),
            response_format: spec.response_format.clone(),
            instructions: spec.instructions.as_deref().map(|text| render(text, &variables)),
            seed_messages: spec
                .messages
                .iter()
                .flatten()
                .map(|seed| Message::user(render(&seed.content, &variables)))
                .collect(),
            iteration_limit: config
                .and_then(|config| config.iteration_limit)
                .unwrap_or(RuntimeConfig::DEFAULT_ITERATION_LIMIT)
                .clamp(1, RuntimeConfig::MAX_ITERATION_LIMIT),
            context: ContextPolicy::from_config(config.and_then(|config| config.context_management.as_ref())),
            ask_user_questions: config
                .and_then(|config| config.ask_user_questions.as_ref())
                .is_none_or(|toggle| toggle.enabled),
            sub_agents: sub_agent_policy(spec, models, saved),
            fan_out: config.and_then(|config| config.fan_out.clone()),
        })
    }

    /// The names of the saved agents the spec's declared sub-agents point at, for a caller that
    /// loads them before [`CompiledAgent::from_spec`].
    pub fn saved_sub_agents(spec: &AgentSpec) -> impl Iterator<Item = &str> {
        spec.sub_agents.iter().flatten().filter_map(|declared| declared.agent.as_deref())
    }

    /// The plan of a turn on the main thread: `history` is the session's content events through
    /// this turn's `turn.created`, `toolbox` the turn's tools, `resolutions` the decisions its
    /// input carries for calls an earlier turn left waiting.
    pub fn plan(&self, history: &[Event], toolbox: ToolBox, resolutions: Vec<Resolution>) -> TurnPlan {
        // Resuming a sub-agent thread rebuilds it from the history.
        let events = if resolutions.iter().any(|resolution| resolution.thread_id != MAIN_THREAD_ID) {
            history.to_vec()
        } else {
            Vec::new()
        };
        TurnPlan { resolutions, events, ..self.plan_messages(history_from_events(history, MAIN_THREAD_ID), toolbox) }
    }

    /// The plan of a turn on the main thread over a conversation its caller keeps itself:
    /// `messages` end with the turn's input, and nothing waits for a decision.
    pub fn plan_messages(&self, messages: Vec<Message>, toolbox: ToolBox) -> TurnPlan {
        TurnPlan {
            thread_id: MAIN_THREAD_ID.to_owned(),
            model: self.model.client.clone(),
            model_id: self.model.model_id.clone(),
            params: self.params.clone(),
            response_format: self.response_format.clone(),
            instructions: self.instructions.clone(),
            skills: Vec::new(),
            seed_messages: self.seed_messages.clone(),
            messages,
            toolbox,
            iteration_limit: self.iteration_limit,
            iterations_done: 0,
            context: self.context,
            pricing: self.model.pricing,
            ask_user_questions: self.ask_user_questions,
            sub_agents: self.sub_agents.clone(),
            events: Vec::new(),
            resolutions: Vec::new(),
            result_files: None,
            steering: None,
            spend_limit: None,
            fan_out: self.fan_out_under(FanOut::default()),
            ends_waiting: None,
            model_calls: None,
            request_context: None,
        }
    }

    /// The caps a turn of this agent runs under: the operator's, lowered where the spec asks.
    pub fn fan_out_under(&self, operator: FanOut) -> FanOut {
        operator.lowered_by(self.fan_out.as_ref())
    }
}

/// The sub-agents an agent may start: dynamic ones unless disabled, and the declared ones (a
/// declared sub-agent naming a saved agent takes that agent's instructions and model where it
/// declares none).
fn sub_agent_policy(
    spec: &AgentSpec,
    models: Arc<dyn ModelResolver>,
    saved: impl Fn(&str) -> Option<AgentSpec>,
) -> Option<SubAgentPolicy> {
    let config = spec.config.as_ref().and_then(|config| config.dynamic_sub_agents.as_ref());
    let dynamic = config.is_none_or(|config| config.enabled);
    let max_depth = config
        .and_then(|config| config.max_depth)
        .unwrap_or(SubAgentsConfig::DEFAULT_MAX_DEPTH)
        .clamp(1, SubAgentsConfig::MAX_DEPTH) as u32;
    let named: Vec<NamedSubAgent> =
        spec.sub_agents.iter().flatten().map(|declared| named_sub_agent(declared, &saved)).collect();
    (dynamic || !named.is_empty()).then_some(SubAgentPolicy { dynamic, named, max_depth, models })
}

fn named_sub_agent(declared: &SubAgentSpec, saved: &impl Fn(&str) -> Option<AgentSpec>) -> NamedSubAgent {
    let mut agent = NamedSubAgent {
        name: declared.name.clone(),
        description: declared.description.clone(),
        instructions: declared.instructions.clone(),
        tools: declared.tools.clone(),
        model: declared.model.clone(),
        max_iterations: declared.max_iterations.map(|limit| limit.clamp(1, RuntimeConfig::MAX_ITERATION_LIMIT)),
        stop_when: declared.stop_when.clone(),
        fork: declared.fork,
    };
    if let Some(name) = &declared.agent {
        match saved(name) {
            Some(spec) => {
                agent.instructions = agent.instructions.or(spec.instructions);
                agent.model = agent.model.or(Some(spec.model.name));
            }
            None => tracing::warn!(sub_agent = %declared.name, saved = %name, "declared sub-agent's saved agent not found"),
        }
    }
    agent
}

#[cfg(test)]
mod tests {
    use teamster_llm::providers::offline::OfflineModel;

    use super::*;

    /// Resolves `offline/echo` only.
    struct Offline;

    impl ModelResolver for Offline {
        fn resolve(&self, name: &str) -> Result<ResolvedModel, String> {
            match name {
                "offline/echo" => Ok(ResolvedModel {
                    client: Arc::new(OfflineModel),
                    model_id: "echo".to_owned(),
                    provider: "offline".to_owned(),
                    pricing: None,
                    context_length: None,
                }),
                other => Err(format!("The model {other:?} is not available.")),
            }
        }
    }

    fn spec(json: serde_json::Value) -> AgentSpec {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn a_spec_is_rendered_clamped_and_resolved_once_for_every_turn() {
        let spec = spec(serde_json::json!({
            "model": {"name": "offline/echo"},
            "instructions": "You help {{team}}.",
            "messages": [{"content": "Context: {{team}}"}],
            "variables": {"team": "ops"},
            "config": {"iteration_limit": 100000, "dynamic_sub_agents": {"enabled": false}},
            "sub_agents": [
                {"name": "reviewer", "description": "reviews", "agent": "saved-reviewer"},
                {"name": "gone", "description": "its saved agent is missing", "agent": "missing"}
            ]
        }));
        let saved = spec_of_saved();
        let agent = CompiledAgent::from_spec(&spec, Arc::new(Offline), |name| (name == "saved-reviewer").then(|| saved.clone())).unwrap();
        assert_eq!(CompiledAgent::saved_sub_agents(&spec).collect::<Vec<_>>(), ["saved-reviewer", "missing"]);

        let plan = agent.plan(&[], ToolBox::default(), Vec::new());
        assert_eq!(plan.instructions.as_deref(), Some("You help ops."));
        assert!(matches!(&plan.seed_messages[..], [Message::User { content, .. }] if content == "Context: ops"));
        assert_eq!(plan.iteration_limit, RuntimeConfig::MAX_ITERATION_LIMIT);
        assert_eq!(plan.model_id, "echo");
        let policy = plan.sub_agents.expect("declared sub-agents are offered");
        assert!(!policy.dynamic);
        assert_eq!(policy.named[0].instructions.as_deref(), Some("Review carefully."));
        assert_eq!(policy.named[0].model.as_deref(), Some("offline/echo"));
        assert_eq!(policy.named[1].instructions, None, "a missing saved agent leaves what is declared");
        assert!(plan.events.is_empty(), "no sub-agent thread to resume");
    }

    #[test]
    fn an_unknown_model_is_an_error_saying_so() {
        let spec = spec(serde_json::json!({"model": {"name": "nowhere/none"}}));
        let error = CompiledAgent::from_spec(&spec, Arc::new(Offline), |_| None).err().expect("an unknown model");
        assert_eq!(error.to_string(), "The model \"nowhere/none\" is not available.");
    }

    fn spec_of_saved() -> AgentSpec {
        spec(serde_json::json!({"model": {"name": "offline/echo"}, "instructions": "Review carefully."}))
    }
}
