//! The control layer: what a UI drives besides turns. This crate holds the parts that are pure
//! functions of a session's spec, its event log and the tools that change them, so that every
//! replica, a restarted server and a cloned session agree on them without storage of their own.
//!
//! - `modes.rs`: an agent's modes ([`mode_in_force`], [`agent_in_mode`], [`offers`]) and their
//!   checks ([`check_modes`]).
//! - `permissions.rs`: tool categories ([`category`]) and what a session's policy and grants
//!   say of a tool ([`permission`]).
//! - `plans.rs`: the `submit_plan` tool ([`SubmitPlan`]), what an answer to it tells the model,
//!   and a session's plans folded from its turns ([`plans`]).
//! - `state.rs`: the session state ([`StateSchema`]: defaults, merge patches checked against
//!   the spec's schema) and the tools that change it ([`SessionState`]).
//! - `tasks.rs`: the session's task list ([`TaskBoard`], the tools `task_write`,
//!   `task_update`, `task_complete` and `task_check`), folded from the log by [`task_list`].

mod modes;
mod permissions;
mod plans;
mod state;
mod tasks;

pub use modes::{MAX_MODES, agent_in_mode, check_default_mode, check_modes, mode, mode_ids, mode_in_force, offers};
pub use permissions::{DecidedBy, category, category_of, check_policy, decision, grant_for, permission};
pub use plans::{SUBMIT_PLAN, SubmitPlan, TurnEvents, approved, approves_plan, plans, rejected};
pub use state::{MAX_STATE_BYTES, STATE_GET, STATE_UPDATE, SessionState, StateError, StateSink, StateSchema, merge_patch};
pub use tasks::{TASK_TOOLS, TaskBoard, task_list};
