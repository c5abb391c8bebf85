//! The control layer's wire types: what clients read of a session besides its turns (its task
//! list, among others).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Where a task stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    #[default]
    Pending,
    InProgress,
    Completed,
}

/// One task of a session's list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Task {
    /// Unique within the list: the agent's own, or `task-<n>` when it gave none.
    pub id: String,
    /// What the task is.
    pub title: String,
    /// `pending`, `in_progress` or `completed`.
    pub status: TaskStatus,
    /// The agent's notes on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
}

/// How many tasks are in each state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TaskSummary {
    /// How many tasks there are.
    pub total: usize,
    /// How many are not started.
    pub pending: usize,
    /// How many are under way.
    pub in_progress: usize,
    /// How many are done.
    pub completed: usize,
}

/// A session's task list as its last change left it (`GET /api/v1/sessions/{id}/tasks`, and
/// every task tool's result). `version` counts the changes: 0 for a session that never had a
/// list.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TaskList {
    /// How many changes the list has had.
    pub version: u64,
    /// The tasks, in order.
    pub tasks: Vec<Task>,
    /// How many tasks are in each state.
    pub summary: TaskSummary,
}

impl TaskList {
    /// The list with `tasks` at `version`, its summary counted.
    pub fn new(version: u64, tasks: Vec<Task>) -> TaskList {
        let count = |status: TaskStatus| tasks.iter().filter(|task| task.status == status).count();
        let summary = TaskSummary {
            total: tasks.len(),
            pending: count(TaskStatus::Pending),
            in_progress: count(TaskStatus::InProgress),
            completed: count(TaskStatus::Completed),
        };
        TaskList { version, tasks, summary }
    }
}

/// What a session runs with besides its agent: the mode and the model a client chose (or an
/// approved plan switched to), its permission policy and the grants its user gave. Sessions
/// keep these for their next turns, and each turn records the ones it ran with. Empty for
/// sessions that changed none of their agent's defaults.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionControl {
    /// The id of one of the agent's modes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// A `provider/model` that replaces the agent's (and the mode's) model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The `provider/model` each named declared sub-agent runs on in this session, replacing
    /// the one its declaration gives.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub subagent_models: std::collections::BTreeMap<String, String>,
    /// What the session's tools may do without asking.
    #[serde(default, skip_serializing_if = "PermissionPolicy::is_empty")]
    pub permissions: PermissionPolicy,
    /// Tools and categories the user allowed for the rest of the session ("always allow").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grants: Vec<Grant>,
    /// The session state, for agents with a `state_schema` (the schema's defaults until it
    /// is first changed). Sessions keep it; turns do not record it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<serde_json::Value>,
}

impl SessionControl {
    /// Whether nothing is chosen.
    pub fn is_empty(&self) -> bool {
        self.mode.is_none()
            && self.model.is_none()
            && self.subagent_models.is_empty()
            && self.permissions.is_empty()
            && self.grants.is_empty()
            && self.state.is_none()
    }
}

/// What a tool does, for permissions: from MCP annotations and what the harness knows of its
/// own tools, or as the agent's spec says (`config.tool_categories`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ToolCategory {
    Read,
    Edit,
    Execute,
    Mcp,
    Other,
}

/// Whether a tool runs at once, waits for the user's approval, or never runs (its call gets an
/// error result).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Permission {
    Allow,
    Ask,
    Deny,
}

/// A session's permissions: by tool name, then by category, over the spec's
/// `require_approval_for_tools` (which decides what neither names).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PermissionPolicy {
    /// Allow, ask or deny, by tool category.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub categories: BTreeMap<ToolCategory, Permission>,
    /// Allow, ask or deny, by tool name; over the categories.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<String, Permission>,
}

impl PermissionPolicy {
    pub fn is_empty(&self) -> bool {
        self.categories.is_empty() && self.tools.is_empty()
    }
}

/// What an "always allow" answer allows from then on: the tool, or every tool of its category.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum GrantScope {
    Tool,
    Category,
}

/// A session grant (`GET /api/v1/sessions/{id}/grants`): one tool, or one category, allowed
/// without asking for the rest of the session, until revoked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Grant {
    pub id: String,
    /// The tool allowed, for a grant of one tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The category allowed, for a grant of a category.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<ToolCategory>,
    pub created_at: String,
}

/// Where a plan stands. A rejected plan goes back to `draft` with the user's feedback; the
/// agent revises it and submits a new one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum PlanStatus {
    Draft,
    PendingApproval,
    Approved,
    Executing,
    Executed,
    Failed,
}

/// A plan the agent submitted with `submit_plan` (`GET /api/v1/sessions/{id}/plans`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Plan {
    /// The id of the `submit_plan` call.
    pub id: String,
    /// The plan's title.
    pub title: String,
    /// The plan, as markdown.
    pub plan: String,
    /// Where the plan stands.
    pub status: PlanStatus,
    /// The mode it was submitted in, and the one its approval switches to.
    pub mode: String,
    /// The mode the plan's approval switches to.
    pub transitions_to: String,
    /// The user's feedback on a rejected plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feedback: Option<String>,
    /// The turn that submitted it.
    pub turn_id: String,
    pub created_at: String,
}

/// A message queued to start a session's next turn once the running one ends
/// (`/api/v1/sessions/{id}/follow-ups`), or to join the running turn (`.../steer`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QueuedMessage {
    pub id: String,
    /// The message: text, or parts.
    pub content: crate::UserContent,
    pub created_at: String,
    /// The turn the follow-up started, when posting it started one at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
}

/// `POST /api/v1/sessions/{id}/follow-ups` and `.../steer`.
#[derive(Clone, Debug, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(example = json!({"content": "Also check the refund policy."})))]
#[serde(deny_unknown_fields)]
pub struct QueueMessageRequest {
    /// The message: text, or parts.
    pub content: crate::UserContent,
}
