//! The agent definition: `AgentSpec` (what a session runs) and the `truefoundry-agent` manifest
//! (what `teamster agents apply` reads), with every nested type of both specs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::collaborator::Collaborator;
use crate::input::InitialUserMessage;
use crate::lenient;

/// What a session runs: model, instructions, tools and runtime configuration.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentSpec {
    /// The model the agent runs on, with its sampling parameters.
    pub model: ModelRef,
    /// The system prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// Seed user messages sent before the first turn's input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<InitialUserMessage>>,
    /// The MCP servers whose tools the agent may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_servers: Option<Vec<McpServer>>,
    /// The shape of the agent's final answer: text, any JSON object, or JSON of a schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<ResponseFormat>,
    /// Skills mounted into the agent's sandbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skills: Option<Vec<SkillMount>>,
    /// Runtime limits and features.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<RuntimeConfig>,
    /// Sub-agents declared up front (a Teamster extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_agents: Option<Vec<SubAgentSpec>>,
    /// Values for `{{name}}` placeholders in instructions and seed messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variables: Option<BTreeMap<String, String>>,
    /// What the agent is for, from its manifest (a Teamster extension; the model never sees it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// What each variable means, from its manifest (a Teamster extension, for people and UIs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variable_descriptions: Option<BTreeMap<String, String>>,
    /// The agent's modes (a Teamster extension): each layers its instructions, model and tools
    /// onto this agent, and a session is in one of them at a time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modes: Option<Vec<ModeSpec>>,
    /// The JSON Schema of the session state (a Teamster extension): an object, starting from
    /// the schema's defaults, that clients and (with `config.state_tool`) the agent change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_schema: Option<serde_json::Value>,
    /// Teamster extension: the state a new session starts with, a JSON merge patch over the
    /// `state_schema`'s defaults (checked against the schema).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_state: Option<serde_json::Value>,
    /// Teamster extension: the mode a new session starts in (one of `modes`); the mode marked
    /// `default`, else the first, when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_mode: Option<String>,
    /// Who may see, run or manage the saved agent besides its creator and its tenant's admins
    /// (the manifest's `collaborators`; ignored in sessions with their own spec).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collaborators: Option<Vec<Collaborator>>,
}

/// One mode of an agent (`plan`, `build`, ...): what it changes of the agent it is part of.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ModeSpec {
    /// Unique among the agent's modes: 1-64 characters of a-z, 0-9, `_` and `-`.
    pub id: String,
    /// For mode pickers; the id when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What the mode is for, shown in mode pickers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Added after the agent's own instructions while the mode is in force.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// The model of the mode (`provider/model`); the agent's when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The only tools (by name) the model is offered in this mode; every tool when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// MCP servers whose tools are offered in this mode on top of the agent's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_tools: Option<Vec<McpServer>>,
    /// The mode an approved plan switches to: a mode with it offers `submit_plan`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transitions_to: Option<String>,
    /// The mode a session starts in (the first mode when none is marked).
    #[serde(default, deserialize_with = "lenient::null_as_default")]
    pub default: bool,
    /// Free JSON for the clients that show the mode (an icon, a colour, a shortcut), returned
    /// with it and never read by the harness.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<serde_json::Value>,
}

/// A model named `provider/model`, with optional sampling parameters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ModelRef {
    /// The model as `provider/model` (`openai/gpt-4o-mini`).
    pub name: String,
    /// Sampling parameters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<ModelParams>,
}

impl ModelRef {
    /// Splits `provider/model` at the first `/`; `None` when there is no provider part.
    pub fn provider_and_model(&self) -> Option<(&str, &str)> {
        self.name.split_once('/').filter(|(provider, model)| !provider.is_empty() && !model.is_empty())
    }
}

/// Sampling parameters. Unknown keys are kept and passed through to providers that accept them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ModelParams {
    /// The most tokens the model may write in one call.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient::opt_u64")]
    pub max_tokens: Option<u64>,
    /// Sampling temperature: higher is more varied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Nucleus sampling: the share of probability mass sampled from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// Sample from this many most likely tokens only (providers that support it).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient::opt_u64")]
    pub top_k: Option<u64>,
    /// Whether the model may call several tools in one message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    /// How hard a reasoning model thinks: `low`, `medium` or `high` (the model's own levels).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
    /// Prompt caching: `{"type": "ephemeral"}` marks the stable prefix for the provider's cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_control: Option<CacheControl>,
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CacheControl {
    /// The kind of cache: `ephemeral`.
    #[serde(rename = "type")]
    pub kind: String,
}

/// An MCP server the agent may use, with its tool and approval selectors.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct McpServer {
    #[serde(flatten)]
    pub source: McpServerSource,
    /// The server's tools the agent may use, by name or selector; absent for all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_tools: Option<Vec<String>>,
    /// The server's tools the agent may not use, by name or selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_tools: Option<Vec<String>>,
    /// Tools offered to the model from the first call; the others are found through tool search.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preload_tools: Option<Vec<String>>,
    /// Tools whose calls wait for a person's approval, by name or selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_approval_for_tools: Option<Vec<String>>,
    /// Whether all the server's tools are offered from the first call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preload: Option<bool>,
}

/// Where an MCP server comes from: the settings registry (by name) or inline (by URL).
///
/// The native API names registry servers without a `type` (`{"name": "github"}`), so a missing
/// `type` means the registry; the `type` is always written back.
#[derive(Clone, Debug, PartialEq)]
pub enum McpServerSource {
    /// `truefoundry-mcp-registry`: a server configured through the settings API.
    Registry { name: String },
    /// `inline`: a remote server given by URL in the spec itself.
    Inline {
        /// The agent's label for the server.
        name: String,
        url: String,
        /// Teamster extension: `streamable-http` or `sse`. Absent, a URL whose path ends in
        /// `/sse` is the legacy SSE transport and any other streamable HTTP.
        transport: Option<String>,
    },
    /// A source an agent spec may not use: an unknown `type`, or a `command` to run (stdio
    /// servers are an operator's choice, made through the settings API). Kept, rather than
    /// failing to decode, so that validation can say why it is refused.
    Unsupported {
        kind: String,
        name: String,
        /// Whether the entry asked for a command to be run.
        has_command: bool,
    },
}

impl McpServerSource {
    pub const REGISTRY: &'static str = "truefoundry-mcp-registry";
    pub const INLINE: &'static str = "inline";

    /// The agent's name for the server.
    pub fn name(&self) -> &str {
        match self {
            McpServerSource::Registry { name }
            | McpServerSource::Inline { name, .. }
            | McpServerSource::Unsupported { name, .. } => name,
        }
    }
}

/// The fields of every source, as sent.
#[derive(Deserialize)]
struct SourceFields {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    name: String,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    transport: Option<String>,
    #[serde(default)]
    command: Option<serde_json::Value>,
}

#[derive(Serialize)]
struct SourceOut<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    url: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    transport: Option<&'a str>,
}

impl<'de> Deserialize<'de> for McpServerSource {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let fields = SourceFields::deserialize(deserializer)?;
        let kind = fields.kind.unwrap_or_else(|| McpServerSource::REGISTRY.to_owned());
        let has_command = fields.command.is_some_and(|command| !command.is_null());
        Ok(match kind.as_str() {
            _ if has_command => McpServerSource::Unsupported { kind, name: fields.name, has_command },
            McpServerSource::REGISTRY => McpServerSource::Registry { name: fields.name },
            McpServerSource::INLINE => {
                let Some(url) = fields.url else {
                    return Err(serde::de::Error::custom("an inline MCP server needs a `url`"));
                };
                McpServerSource::Inline { name: fields.name, url, transport: fields.transport }
            }
            _ => McpServerSource::Unsupported { kind, name: fields.name, has_command },
        })
    }
}

impl Serialize for McpServerSource {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let out = match self {
            McpServerSource::Registry { name } => {
                SourceOut { kind: McpServerSource::REGISTRY, name, url: None, transport: None }
            }
            McpServerSource::Inline { name, url, transport } => SourceOut {
                kind: McpServerSource::INLINE,
                name,
                url: Some(url),
                transport: transport.as_deref(),
            },
            McpServerSource::Unsupported { kind, name, .. } => SourceOut { kind, name, url: None, transport: None },
        };
        out.serialize(serializer)
    }
}

/// The schema of what [`McpServerSource`]'s own `Serialize` writes (and its `Deserialize` reads).
#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for McpServerSource {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        let string = || ObjectBuilder::new().schema_type(Type::String);
        ObjectBuilder::new()
            .property(
                "type",
                string()
                    .enum_values(Some([McpServerSource::REGISTRY, McpServerSource::INLINE]))
                    .description(Some("Where the server comes from; the settings registry when absent.")),
            )
            .property("name", string().description(Some("The registry's name of the server, or the agent's label for an inline one.")))
            .required("name")
            .property("url", string().description(Some("An inline server's URL (required for `inline`).")))
            .property(
                "transport",
                string()
                    .enum_values(Some(["streamable-http", "sse"]))
                    .description(Some("Teamster extension: an inline server's transport; by the URL when absent.")),
            )
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for McpServerSource {}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type")]
pub enum ResponseFormat {
    #[serde(rename = "text")]
    Text,
    #[serde(rename = "json_object")]
    JsonObject,
    #[serde(rename = "json_schema")]
    JsonSchema { json_schema: JsonSchemaFormat },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JsonSchemaFormat {
    /// The schema's name.
    pub name: String,
    /// What the answer is, for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The JSON Schema the answer follows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<serde_json::Value>,
    /// Whether the provider must hold the answer to the schema exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// A skill mounted into the agent's sandbox (or, by name, from the settings registry).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum SkillMount {
    Tagged(TaggedSkill),
    /// The native API's `{ "name": ... }` reference to a configured skill.
    Named { name: String },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type")]
pub enum TaggedSkill {
    #[serde(rename = "git")]
    Git {
        url: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<String>,
        name: String,
        #[serde(rename = "ref")]
        reference: String,
    },
    #[serde(rename = "truefoundry-skills-registry")]
    Registry {
        fqn: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        preload: Option<bool>,
    },
}

/// Runtime limits and features of an agent. Absent sub-objects take the spec's defaults.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RuntimeConfig {
    /// The most model calls one turn makes.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient::opt_u64")]
    pub iteration_limit: Option<u64>,
    /// The longest one turn of this agent may run, in seconds, from its creation: then it is
    /// cancelled (`server-execution-timeout`), keeping what it produced. At most the server's
    /// turn timeout, which applies without it.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient::opt_u64")]
    pub timeout_seconds: Option<u64>,
    /// The session's sandbox: a workspace and the `exec` tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxConfig>,
    /// Whether the model may start sub-agents it describes itself, and how deep they nest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dynamic_sub_agents: Option<SubAgentsConfig>,
    /// How a long conversation is kept within the model's context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_management: Option<ContextManagementConfig>,
    /// Whether the agent may answer with UI components.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generative_ui: Option<Toggle>,
    /// Whether the agent may ask the user questions (the turn waits for the answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ask_user_questions: Option<Toggle>,
    /// Teamster extension: the session's task list and its tools (`task_write`, `task_update`,
    /// `task_complete`, `task_check`); off unless enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<Toggle>,
    /// Teamster extension: the agent reads and changes the session state with the tools
    /// `state_get` and `state_update`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_tool: Option<Toggle>,
    /// Teamster extension: the permission category of tools by name, where the harness's
    /// own (MCP annotations, built-in knowledge) is not what the agent's author wants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_categories: Option<BTreeMap<String, crate::control::ToolCategory>>,
    /// Teamster extension: what one session of this agent may spend on model calls, over all
    /// its turns; a turn that reaches it ends, before its next model call, in error naming the
    /// budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// Teamster extension: how far one turn may fan out; each value may only lower the
    /// operator's (a larger one is ignored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fan_out: Option<FanOutConfig>,
}

/// Bounds on a turn's fan-out: how many tool calls of one model message run at once (the rest
/// wait their turn), and how many sub-agent threads the whole turn may start, at every depth.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FanOutConfig {
    /// How many tool calls of one model message run at once.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient::opt_u64")]
    pub max_parallel_tool_calls: Option<u64>,
    /// How many sub-agent threads one turn may start, at every depth.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient::opt_u64")]
    pub max_threads_per_turn: Option<u64>,
}

/// A spending limit: model tokens (input plus output, as `total_tokens` counts them) and cost
/// in US dollars (counted only for models with known prices). Either may be absent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Budget {
    /// The most tokens (input and output) the session's model calls may use.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient::opt_u64")]
    pub max_tokens: Option<u64>,
    /// The most the session's model calls may cost, in US dollars.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
}

impl RuntimeConfig {
    /// The default and the largest allowed `iteration_limit`.
    pub const DEFAULT_ITERATION_LIMIT: u64 = 100;
    pub const MAX_ITERATION_LIMIT: u64 = 1024;
}

/// `{ "enabled": bool }` for dynamic sub-agents, plus Teamster's `max_depth` (how deep
/// sub-agents may nest; 1, the default, means a sub-agent cannot start sub-agents).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SubAgentsConfig {
    /// Whether the model may start sub-agents it describes itself.
    #[serde(default = "default_true", deserialize_with = "lenient::null_as_true")]
    pub enabled: bool,
    /// How deep sub-agents may nest (1 to 4; 1 means a sub-agent cannot start its own).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient::opt_u64")]
    pub max_depth: Option<u64>,
}

impl SubAgentsConfig {
    pub const DEFAULT_MAX_DEPTH: u64 = 1;
    pub const MAX_DEPTH: u64 = 4;
}

/// A sub-agent declared in an agent spec (a Teamster extension): the model picks among these
/// by name. It either describes itself or points at another saved agent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SubAgentSpec {
    /// The name the model starts it by.
    pub name: String,
    /// What it is good for, shown to the model.
    #[serde(default)]
    pub description: String,
    /// Its system prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// The parent's tools it may use, by name; all of them when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// `provider/model`; the parent's model when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// A saved agent whose instructions and model it uses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The most model calls one run of it may make (1 to 1024); the parent's
    /// `config.iteration_limit` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient::opt_u64")]
    pub max_iterations: Option<u64>,
    /// When a run of it ends early, with the results of the calls that ended it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_when: Option<StopWhen>,
    /// Whether calls to it fork by default: it then runs on a copy of the parent's context with
    /// the parent's instructions, tools and model (its own `instructions`, `tools`, `model`,
    /// `max_iterations` and `stop_when` are not used). A call's own `fork` wins.
    #[serde(default, skip_serializing_if = "std::ops::Not::not", deserialize_with = "lenient::null_as_default")]
    pub fork: bool,
}

/// When a declared sub-agent stops, before it answers: once it has called the named tool, or
/// once it has made a number of tool calls, whichever comes first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct StopWhen {
    /// Stop after the model step that called this tool (its result is the sub-agent's answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_called: Option<String>,
    /// Stop once this many tool calls were made (1 to 1024).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient::opt_u64")]
    pub tool_calls: Option<u64>,
}

impl StopWhen {
    /// The most tool calls `tool_calls` may name.
    pub const MAX_TOOL_CALLS: u64 = 1024;
}

/// `{ "enabled": bool }`, enabled when absent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Toggle {
    /// Whether it is on.
    #[serde(default = "default_true", deserialize_with = "lenient::null_as_true")]
    pub enabled: bool,
}

fn default_true() -> bool {
    true
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SandboxConfig {
    /// Whether the session has a sandbox (a workspace and the `exec` tool).
    #[serde(default, deserialize_with = "lenient::null_as_default")]
    pub enabled: bool,
    /// Whether the user may download the workspace's files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_downloads: Option<bool>,
    /// Credentials the sandbox's network requests to some hosts carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_policy: Option<NetworkPolicy>,
    /// Teamster extension: whether sandboxed commands may reach the network (off by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<bool>,
    /// Teamster extension: the sandbox's tools the model sees (`exec`, `read_file`,
    /// `write_file`, `edit_file`, `list_files`, `glob`, `grep`), each `true` (by its own name),
    /// a name it is shown by instead (`{"read_file": "Read"}`), or `false`; all of them by
    /// their own names when absent, only those given `true` or a name when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<BTreeMap<String, SandboxToolChoice>>,
}

/// One tool's entry in `config.sandbox.tools`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum SandboxToolChoice {
    /// Offered by its own name (`true`), or not offered (`false`).
    Offered(bool),
    /// Offered by this name instead.
    Renamed(String),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NetworkPolicy {
    /// Credentials added to requests to matching hosts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_inject: Option<Vec<AuthInject>>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuthInject {
    /// How they are added: `basic`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The hosts whose requests carry them.
    #[serde(rename = "match")]
    pub matches: HostMatch,
    /// The credentials.
    pub auth_data: BasicAuth,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HostMatch {
    /// Host names.
    pub hosts: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BasicAuth {
    /// Always `basic`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The user name.
    pub username: String,
    /// The password.
    pub password: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ContextManagementConfig {
    /// Summarizing early history when the conversation grows past a threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compaction: Option<CompactionConfig>,
    /// Keeping large tool results out of the context, with a preview and a way to read them in
    /// parts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub large_tool_response: Option<Toggle>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CompactionConfig {
    /// Whether history is compacted.
    #[serde(default = "default_true", deserialize_with = "lenient::null_as_true")]
    pub enabled: bool,
    /// The input size, in tokens, past which history is compacted.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient::opt_u64")]
    pub compaction_threshold_tokens: Option<u64>,
}

/// The `truefoundry-agent` manifest that `teamster agents apply -f agent.yaml` reads.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentManifest {
    #[serde(rename = "type", default = "manifest_type")]
    pub kind: String,
    pub name: String,
    #[serde(default, deserialize_with = "lenient::null_as_default")]
    pub description: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<serde_json::Value>,
    pub model: ModelRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skills: Option<Vec<SkillMount>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_servers: Option<Vec<McpServer>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<InitialUserMessage>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variables: Option<BTreeMap<String, ManifestVariable>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_inputs: Option<Vec<SampleInput>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<ResponseFormat>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<RuntimeConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_agents: Option<Vec<SubAgentSpec>>,
    /// Teamster extension: the agent's modes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modes: Option<Vec<ModeSpec>>,
    /// Teamster extension: the JSON Schema of the session state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_schema: Option<serde_json::Value>,
    /// Teamster extension: the state a new session starts with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_state: Option<serde_json::Value>,
    /// Teamster extension: the mode a new session starts in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collaborators: Option<Vec<Collaborator>>,
    #[serde(default, rename = "ownedBy", skip_serializing_if = "Option::is_none")]
    pub owned_by: Option<serde_json::Value>,
}

fn manifest_type() -> String {
    AgentManifest::TYPE.to_owned()
}

impl AgentManifest {
    pub const TYPE: &'static str = "truefoundry-agent";

    /// The spec a session runs: variables take their `default_value`s; the description and the
    /// variables' descriptions are kept beside them.
    pub fn to_spec(&self) -> AgentSpec {
        let variables = self.variables.as_ref().map(|variables| {
            variables
                .iter()
                .filter_map(|(name, variable)| {
                    variable.default_value.clone().map(|value| (name.clone(), value))
                })
                .collect()
        });
        AgentSpec {
            model: self.model.clone(),
            instructions: self.instructions.clone(),
            messages: self.messages.clone(),
            mcp_servers: self.mcp_servers.clone(),
            response_format: self.response_format.clone(),
            skills: self.skills.clone(),
            config: self.config.clone(),
            sub_agents: self.sub_agents.clone(),
            variables,
            description: Some(self.description.clone()).filter(|description| !description.is_empty()),
            variable_descriptions: self.variables.as_ref().map(|variables| {
                variables
                    .iter()
                    .filter_map(|(name, variable)| variable.description.clone().map(|description| (name.clone(), description)))
                    .collect::<BTreeMap<_, _>>()
            }).filter(|descriptions| !descriptions.is_empty()),
            modes: self.modes.clone(),
            state_schema: self.state_schema.clone(),
            initial_state: self.initial_state.clone(),
            default_mode: self.default_mode.clone(),
            collaborators: self.collaborators.clone(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ManifestVariable {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SampleInput {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variables: Option<BTreeMap<String, String>>,
}

/// A saved agent as the native API shows it: the latest version's spec under `manifest`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Agent {
    pub id: String,
    pub name: String,
    pub manifest: AgentSpec,
    /// The immutable version number the manifest belongs to (1, 2, ...).
    pub version: u64,
    pub created_at: String,
    pub updated_at: String,
    /// The tenant the agent belongs to (absent without authentication).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// Who created the agent (absent for agents stored before agents had owners).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by_subject: Option<crate::Subject>,
}

/// Whether a name is a valid resource name: `^[a-z](?:[a-z0-9._-]{0,62}[a-z0-9])$`.
pub fn is_valid_resource_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    (2..=64).contains(&bytes.len())
        && bytes[0].is_ascii_lowercase()
        && bytes[bytes.len() - 1].is_ascii_lowercase() | bytes[bytes.len() - 1].is_ascii_digit()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_the_gateway_clients_full_spec() {
        let body = r#"{"model":{"name":"openai-main/gpt-4o","params":{"max_tokens":512.0,"cache_control":{"type":"ephemeral"},"seed":7}},
 "instructions":"Be nice to {{user}}","messages":[{"type":"user.message","content":"hello"}],
 "mcp_servers":[{"name":"github","enable_tools":["@read-only","search"],"require_approval_for_tools":["@write"],"preload":false,"type":"truefoundry-mcp-registry"},
                {"name":"x","preload":false,"type":"inline","url":"https://mcp.example.com/mcp"}],
 "response_format":{"type":"json_schema","json_schema":{"name":"out","schema":{"type":"object"},"strict":true}},
 "skills":[{"type":"git","url":"https://github.com/a/b","name":"b","ref":"main"},{"type":"truefoundry-skills-registry","fqn":"skill:t/x:1","preload":false}],
 "config":{"iteration_limit":100,"sandbox":{"enabled":true,"file_downloads":true,"network_policy":{"auth_inject":[{"type":"git","match":{"hosts":["github.com"]},"auth_data":{"type":"basic","username":"u","password":"p"}}]}},
           "dynamic_sub_agents":{"enabled":true},"context_management":{"compaction":{"enabled":true,"compaction_threshold_tokens":50000},"large_tool_response":{"enabled":true}},
           "generative_ui":{"enabled":true},"ask_user_questions":{"enabled":true}},
 "variables":{"user":"bob"}, "future_field": 1}"#;
        let spec: AgentSpec = serde_json::from_str(body).unwrap();
        let params = spec.model.params.as_ref().unwrap();
        assert_eq!(params.max_tokens, Some(512));
        assert_eq!(params.extra["seed"], 7);
        assert_eq!(spec.model.provider_and_model(), Some(("openai-main", "gpt-4o")));
        assert_eq!(spec.mcp_servers.as_ref().unwrap().len(), 2);
        assert_eq!(spec.config.as_ref().unwrap().iteration_limit, Some(100));
        let again: AgentSpec = serde_json::from_value(serde_json::to_value(&spec).unwrap()).unwrap();
        assert_eq!(again, spec);
    }

    #[test]
    fn null_means_absent_everywhere() {
        let spec: AgentSpec = serde_json::from_str(
            r#"{"model":{"name":"p/m","params":null},"instructions":null,"messages":null,"mcp_servers":null,
                "config":{"iteration_limit":null,"sandbox":{"enabled":null,"file_downloads":null},
                          "dynamic_sub_agents":{"enabled":null},"context_management":{"compaction":{"enabled":null,"compaction_threshold_tokens":null}}},
                "variables":null}"#,
        )
        .unwrap();
        let config = spec.config.unwrap();
        assert!(!config.sandbox.unwrap().enabled);
        assert!(config.dynamic_sub_agents.unwrap().enabled);
        assert!(config.context_management.unwrap().compaction.unwrap().enabled);
        assert!(spec.model.params.is_none() && spec.instructions.is_none());
    }

    #[test]
    fn mcp_server_sources() {
        let servers: Vec<McpServer> = serde_json::from_str(
            r#"[{"name":"github","enable_tools":["@read-only"]},
                {"type":"truefoundry-mcp-registry","name":"gh","preload":false},
                {"type":"inline","name":"x","url":"https://mcp.example.com/sse","transport":null},
                {"type":"inline","name":"y","url":"https://h/mcp","command":"rm"},
                {"type":"stdio","name":"z"}]"#,
        )
        .unwrap();
        let sources: Vec<_> = servers.iter().map(|server| server.source.clone()).collect();
        assert_eq!(
            sources,
            vec![
                McpServerSource::Registry { name: "github".into() },
                McpServerSource::Registry { name: "gh".into() },
                McpServerSource::Inline { name: "x".into(), url: "https://mcp.example.com/sse".into(), transport: None },
                McpServerSource::Unsupported { kind: "inline".into(), name: "y".into(), has_command: true },
                McpServerSource::Unsupported { kind: "stdio".into(), name: "z".into(), has_command: false },
            ]
        );
        assert_eq!(servers[0].enable_tools.as_deref(), Some(&["@read-only".to_owned()][..]));
        assert_eq!(
            serde_json::to_value(&servers[0]).unwrap(),
            serde_json::json!({"type": "truefoundry-mcp-registry", "name": "github", "enable_tools": ["@read-only"]})
        );
        let again: McpServer = serde_json::from_value(serde_json::to_value(&servers[2]).unwrap()).unwrap();
        assert_eq!(again, servers[2]);
        assert!(serde_json::from_str::<McpServer>(r#"{"type":"inline","name":"x"}"#).is_err());
    }

    #[test]
    fn resource_names() {
        assert!(is_valid_resource_name("demo"));
        assert!(is_valid_resource_name("my-agent.v2"));
        assert!(!is_valid_resource_name("Demo"));
        assert!(!is_valid_resource_name("d"));
        assert!(!is_valid_resource_name("demo-"));
    }
}
