//! The control layer's wire types: what clients read of a session besides its turns (its task
//! list, among others).

use serde::{Deserialize, Serialize};

/// Where a task stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    #[default]
    Pending,
    InProgress,
    Completed,
}

/// One task of a session's list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    /// Unique within the list: the agent's own, or `task-<n>` when it gave none.
    pub id: String,
    pub title: String,
    pub status: TaskStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
}

/// How many tasks are in each state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskSummary {
    pub total: usize,
    pub pending: usize,
    pub in_progress: usize,
    pub completed: usize,
}

/// A session's task list as its last change left it (`GET /api/v1/sessions/{id}/tasks`, and
/// every task tool's result). `version` counts the changes: 0 for a session that never had a
/// list.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskList {
    pub version: u64,
    pub tasks: Vec<Task>,
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
/// approved plan switched to). Sessions keep the choice for their next turns, and each turn
/// records the one it ran with. Empty for agents without modes and sessions on their agent's
/// model.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionControl {
    /// The id of one of the agent's modes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// A `provider/model` that replaces the agent's (and the mode's) model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

impl SessionControl {
    /// Whether nothing is chosen.
    pub fn is_empty(&self) -> bool {
        self.mode.is_none() && self.model.is_none()
    }
}

/// Where a plan stands. A rejected plan goes back to `draft` with the user's feedback; the
/// agent revises it and submits a new one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
pub struct Plan {
    /// The id of the `submit_plan` call.
    pub id: String,
    pub title: String,
    /// The plan, as markdown.
    pub plan: String,
    pub status: PlanStatus,
    /// The mode it was submitted in, and the one its approval switches to.
    pub mode: String,
    pub transitions_to: String,
    /// The user's feedback on a rejected plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feedback: Option<String>,
    /// The turn that submitted it.
    pub turn_id: String,
    pub created_at: String,
}
