//! The report of `POST /api/v1/agents/check`: what an agent manifest would run with on this
//! server — its model resolved, its MCP servers connected, the final tool list with whether
//! each tool's calls wait for approval and why, each absent tool and why it is absent — and
//! what is wrong with it, without saving anything.

use serde::{Deserialize, Serialize};

/// What checking an agent manifest found.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentCheckReport {
    /// Whether saving the manifest would succeed: no problems.
    pub ok: bool,
    /// What saving it would refuse, each with the path of the key at fault where there is one.
    pub problems: Vec<CheckProblem>,
    /// What would not stop it being saved but may not be what its author meant (a tool
    /// selector naming no tool, a server that cannot be reached now).
    pub warnings: Vec<CheckProblem>,
    /// The mode a new session starts in, whose tools are listed; absent without modes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Every model the manifest names (its own, its modes', its sub-agents'), resolved.
    pub models: Vec<ModelCheck>,
    /// Every MCP server the manifest names, connected.
    pub mcp_servers: Vec<McpServerCheck>,
    /// The tools the model is offered in a new session, as the model calls them.
    pub tools: Vec<ToolCheck>,
    /// Tools the manifest could have given the agent but does not, each with why.
    pub absent_tools: Vec<AbsentTool>,
}

/// One problem of a manifest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CheckProblem {
    /// Where in the manifest (`model.name`, `config.sandbox.enabld`), when one key is at fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub param: Option<String>,
    pub message: String,
}

/// A model the manifest names.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ModelCheck {
    /// Where the manifest names it: `model.name`, `modes[1].model`, `sub_agents[0].model`.
    pub param: String,
    /// `provider/model`.
    pub name: String,
    /// Whether a turn could call it now.
    pub available: bool,
    /// The provider's id of the model, when it resolves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_id: Option<String>,
    /// Why it cannot be used, when it cannot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// An MCP server the manifest names.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct McpServerCheck {
    /// Where the manifest names it: `mcp_servers[0]`, `modes[1].additional_tools[0]`.
    pub param: String,
    pub name: String,
    /// Whether it connected and listed its tools.
    pub connected: bool,
    /// How many tools it listed.
    pub listed_tools: usize,
    /// Why it could not be used, when it could not (a turn goes on without its tools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A tool the model is offered.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ToolCheck {
    /// The name the model calls it by.
    pub name: String,
    /// Where it comes from: `built-in`, `sandbox`, `tasks`, `plan`, `state`, `engine` or
    /// `mcp:<server>`.
    pub source: String,
    /// What it does, for permissions (`config.tool_categories`, else what it declares).
    pub category: crate::control::ToolCategory,
    /// Whether its calls wait for a person's approval.
    pub requires_approval: bool,
    /// Whether its calls run at once (`allow`), wait for approval (`ask`) or are refused
    /// (`deny`): the agent's rules, then the session's policy and grants.
    pub permission: crate::control::Permission,
    /// Why they do, or why they run at once.
    pub approval_reason: String,
    /// Whether its definition is sent from the start; the model finds the others with
    /// `search_tools` and loads them with `load_tools`.
    pub preloaded: bool,
}

/// A tool the agent does not get.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AbsentTool {
    pub name: String,
    /// Where it would have come from (as [`ToolCheck::source`]).
    pub source: String,
    /// Why it is absent, naming the key that decides it.
    pub reason: String,
}
