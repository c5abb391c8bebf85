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
