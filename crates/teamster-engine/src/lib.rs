//! The agent loop: one state machine over a model ([`teamster_llm::ModelClient`]) and tools
//! ([`teamster_tools::ToolSource`]) that emits protocol events to an [`EventSink`].
//!
//! A turn runs model steps until the model answers without tool calls (`Final`), a human is
//! needed (`NeedsHuman`), the iteration limit is hit, or the turn is cancelled. Each step
//! streams a placeholder `model.message` and its deltas, then records the folded message;
//! tool calls run concurrently (at most [`FanOut`]'s cap at once) and each records a
//! `tool.response`.
//!
//! Invariant: the engine knows no HTTP, no SQL and no environment variables. It never blocks
//! on a human: a paused turn ends, and the next turn resumes from stored events.

mod compiled_agent;
mod attachments;
mod compaction;
mod context;
mod deferred;
mod fan_out;
mod gates;
mod history;
mod large_results;
pub mod pending;
mod progress;
mod resume;
mod run;
mod sink;
mod skills;
mod spend_limit;
mod step;
mod steering;
mod structured;
mod sub_agents;
mod template;
mod toolbox;
mod usage;

pub use compiled_agent::{AgentError, CompiledAgent};
pub use attachments::{ATTACHMENTS_DIR, attachment_path, declared_media_type, split_data_url};
pub use compaction::COMPACTION_TITLE;
pub use context::{ContextPolicy, DEFAULT_COMPACTION_THRESHOLD};
pub use deferred::{LOAD_TOOLS, SEARCH_TOOLS};
pub use fan_out::FanOut;
pub use gates::{ASK_USER_QUESTION, Decision, Resolution};
pub use sub_agents::{ModelResolver, NamedSubAgent, RUN_SUB_AGENT, SubAgentPolicy};
pub use history::history_from_events;
pub use large_results::{MAX_READ_CHARS, PREVIEW_CHARS, READ_TOOL_RESULT, ResultFiles};
pub use resume::{INTERRUPTED_CALL, Resumed, resume_turn};
pub use run::{EndsWaiting, TurnOutcome, TurnPlan, run_turn};
pub use sink::EventSink;
pub use skills::SkillNote;
pub use spend_limit::{Reservations, SpendLimit};
pub use steering::Steering;
pub use template::render;
pub use toolbox::ToolBox;
pub use usage::MetricsAccumulator;
