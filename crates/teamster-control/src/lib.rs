//! The control layer: what a UI drives besides turns. This crate holds the parts that are pure
//! functions of a session's event log and the tools that change them, so that every replica,
//! a restarted server and a cloned session agree on them without storage of their own.
//!
//! - `tasks.rs`: the session's task list ([`TaskBoard`], the tools `task_write`,
//!   `task_update`, `task_complete` and `task_check`), folded from the log by [`task_list`].

mod tasks;

pub use tasks::{TASK_TOOLS, TaskBoard, task_list};
