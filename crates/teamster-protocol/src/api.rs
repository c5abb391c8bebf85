//! Request and response bodies of both HTTP dialects.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::agent::AgentSpec;
use crate::input::TurnInput;
use crate::lenient;

/// `{ "data": ... }`, the envelope of every single-resource response.
#[derive(Debug, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Data<T> {
    pub data: T,
}

/// `{ "data": [...], "pagination": ... }`, the envelope of every list response.
#[derive(Debug, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Page<T> {
    pub data: Vec<T>,
    pub pagination: Pagination,
}

/// Token pagination: there is a next page iff `next_page_token` is a non-empty string.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = TokenPagination))]
pub struct Pagination {
    /// The token of the next page; absent or empty on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_page_token: Option<String>,
    /// The token of the page before, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous_page_token: Option<String>,
    /// The most items a page holds.
    pub limit: u32,
}

/// The error body of every 4xx and 5xx response.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = RequestErrorResponse, example = json!({"error": {"message": "session \"ses_0123\" not found", "type": "not_found_error", "code": "not_found", "param": null}})))]
pub struct ErrorResponse {
    /// What failed.
    pub error: ErrorDetail,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorDetail {
    /// What failed, in words.
    pub message: String,
    /// The class of error, such as `invalid_request_error` or `not_found_error`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// Always a string when present: clients fail on any other type.
    pub code: Option<String>,
    /// The request field the error is about, as a path (`manifest.models[0].name`), when it is
    /// about one.
    pub param: Option<String>,
}

/// `POST .../turns` in both dialects.
#[derive(Clone, Debug, Default, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(example = json!({"input": [{"type": "user.message", "content": "What is on my calendar today?"}], "stream": true})))]
pub struct CreateTurnRequest {
    #[serde(default)]
    pub input: Option<Vec<TurnInput>>,
    /// `auto` (the default), `none`, or a turn id to chain to.
    #[serde(default)]
    pub previous_turn_id: Option<String>,
    /// Absent means `true` on the native API; the gateway client always sends it.
    #[serde(default)]
    pub stream: Option<bool>,
    /// Teamster extension: a JSON object of the application's for this turn (a user's
    /// tenant, locale, feature flags...), handed to its tools and sub-agents and recorded on it.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub request_context: Option<crate::RequestContext>,
}

/// `POST .../subscribe` on the gateway dialect.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct SubscribeRequest {
    #[serde(default, deserialize_with = "lenient::opt_u64")]
    pub after_sequence_number: Option<u64>,
}

/// Gateway E1: a session of a saved agent, optionally titled (seed 000's `title`, which the
/// real client does not send).
#[derive(Clone, Debug, Deserialize)]
pub struct CreateGatewaySessionRequest {
    pub agent_name: String,
    #[serde(default)]
    pub title: Option<String>,
}

/// Gateway E12: a draft session with its own spec.
#[derive(Clone, Debug, Deserialize)]
pub struct CreateDraftSessionRequest {
    pub agent_spec: AgentSpec,
    #[serde(default)]
    pub agent_name: Option<String>,
}

/// Gateway E14: replace a draft's spec, or just touch it.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct UpdateDraftSessionRequest {
    #[serde(default)]
    pub agent_spec: Option<AgentSpec>,
}

/// Native `POST /sessions`: `agent` is `{ name }` or `{ spec }`.
#[derive(Clone, Debug, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(example = json!({"agent": {"name": "support"}, "title": "Order 1234"})))]
pub struct CreateSessionRequest {
    /// The agent the session runs: a saved agent by name, or a spec.
    pub agent: SessionAgentInput,
    /// The session's title; made from the first message when absent.
    #[serde(default)]
    pub title: Option<String>,
    /// Teamster extension: the resource the session is about (1 to 256 printable characters);
    /// with `?reuse_latest=true`, the resource's latest session of the same agent is answered
    /// instead of a new one.
    #[serde(default)]
    pub resource_id: Option<String>,
}

/// Teamster extension: a sub-agent thread of a session (`GET /api/v1/sessions/{id}/threads`),
/// from its `thread.created` and `thread.done` events.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionThread {
    pub thread_id: String,
    /// The turn it ran in.
    pub turn_id: String,
    pub title: String,
    /// The agent that runs in it.
    pub agent_info: crate::event::AgentInfo,
    /// The thread that started it.
    pub parent_thread_id: String,
    /// The tool call that started it.
    pub parent_tool_call_id: String,
    /// Whether it started from a copy of its parent's context.
    pub forked: bool,
    /// `running` until its end is recorded (a thread that waits for a human stays so), then
    /// `done` or `error`.
    pub status: SessionThreadStatus,
    /// What went wrong, for `error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum SessionThreadStatus {
    Running,
    Done,
    Error,
}

/// Teamster extension: a resource the caller's sessions are about (`GET /api/v1/resources`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Resource {
    pub resource_id: String,
    /// How many of the caller's sessions are about it.
    pub session_count: u64,
    /// When the latest of them was last updated.
    pub updated_at: String,
}

#[derive(Clone, Debug, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionAgentInput {
    /// The name of a saved agent.
    #[serde(default)]
    pub name: Option<String>,
    /// An agent spec, for a session whose agent is not saved.
    #[serde(default)]
    pub spec: Option<AgentSpec>,
}

/// Native `PATCH /sessions/{id}`.
#[derive(Clone, Debug, Default, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UpdateSessionRequest {
    /// Another agent for the following turns.
    #[serde(default)]
    pub agent: Option<SessionAgentInput>,
    /// The session's new title.
    #[serde(default)]
    pub title: Option<String>,
    /// Teamster extension: switches the session to one of its agent's modes.
    #[serde(default)]
    pub mode: Option<String>,
    /// Teamster extension: the `provider/model` of the following turns; an empty string goes
    /// back to the agent's (or the mode's) model.
    #[serde(default)]
    pub model: Option<String>,
    /// Teamster extension: the `provider/model` a declared sub-agent (by name) runs on in the
    /// following turns; an empty string goes back to the one its declaration gives. Sub-agents
    /// not named keep theirs.
    #[serde(default)]
    pub subagent_models: Option<std::collections::BTreeMap<String, String>>,
    /// Teamster extension: the session's permission policy (replaces the one it had).
    #[serde(default)]
    pub permissions: Option<crate::control::PermissionPolicy>,
    /// Teamster extension: a JSON merge patch of the session state.
    #[serde(default)]
    pub state: Option<serde_json::Value>,
    /// Teamster extension: the resource the session is about; an empty string removes it.
    #[serde(default)]
    pub resource_id: Option<String>,
}

/// Teamster extension: `POST /api/v1/sessions/{id}/clone`.
#[derive(Clone, Debug, Default, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CloneSessionRequest {
    /// The clone's title; the source's when absent.
    #[serde(default)]
    pub title: Option<String>,
    /// The last turn the clone copies; the source's last turn when absent.
    #[serde(default)]
    pub turn_id: Option<String>,
}

/// Native `POST /agents`.
#[derive(Clone, Debug, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(example = json!({"name": "support", "manifest": {"model": {"name": "openai/gpt-4o"}, "instructions": "You help customers with their orders."}})))]
pub struct CreateAgentRequest {
    /// The agent's name: 2-64 characters of a-z, 0-9, '.', '_' or '-'.
    pub name: String,
    /// What the agent runs.
    pub manifest: AgentSpec,
}

/// Native `PUT /agents/{id}`: a new immutable version.
#[derive(Clone, Debug, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UpdateAgentRequest {
    /// What the new version runs.
    pub manifest: AgentSpec,
}

/// `POST|PUT /settings/model-providers`.
#[derive(Clone, Debug, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ModelProviderRequest {
    /// The provider.
    pub manifest: crate::settings::ModelProviderManifest,
}

/// `POST|PUT /settings/mcp-servers`.
#[derive(Clone, Debug, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct McpServerRequest {
    /// The MCP server.
    pub manifest: crate::settings::McpServerManifest,
}

/// `PATCH /settings/model-providers/{name}` and `PATCH /settings/mcp-servers/{name}`: a new
/// name for a configured provider or server.
#[derive(Clone, Debug, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RenameSettingRequest {
    /// The new name: 2-64 characters of a-z, 0-9, '.', '_' or '-', starting with a letter and
    /// ending with a letter or digit. Agents that name the old name must be changed to it.
    pub name: String,
}

/// The body of `POST`/`PUT /settings/skills` (`CreateSkillRequest`, `UpdateSkillRequest`).
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SkillRequest {
    /// The skill.
    pub manifest: crate::settings::SkillManifest,
}

/// One item of a session's event list.
#[derive(Debug, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionEventItem {
    pub turn_id: String,
    /// The event.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::event::Event))]
    pub event: Box<RawValue>,
}

/// `GET /capabilities`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Capabilities {
    /// Whether sessions can have sandboxes.
    pub sandbox: Enabled,
    /// Whether agents can mount skills, and why not.
    pub skill: SkillCapability,
    /// Whether settings can be changed through the API.
    pub settings: Enabled,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Enabled {
    /// Whether it is available.
    pub enabled: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SkillCapability {
    /// Whether agents can mount skills.
    pub enabled: bool,
    /// Why not, when they cannot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// An empty JSON object, the body of cancel and delete responses.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Empty {}
