//! The live channel's vocabulary, apart from any transport: the control layer's events
//! ([`LiveEvent`], the names Mastra's harness gives them: `agent_start`, `message_update`,
//! `tool_approval_required`, `subagent_start`, `display_state_changed`, ...), the translation
//! of a turn's native events into them ([`TurnTranslator`]), the [`DisplayState`] a UI renders,
//! folded from them, when a snapshot of it goes out ([`Coalescer`]), and an event as the
//! channels that send it share it ([`SharedEvent`]).
//!
//! The server's `GET /api/v1/sessions/{id}/live` and the library's `Harness` both speak it.
//!
//! Invariant: no I/O, no async, no HTTP; the wire types of `teamster-protocol` in, these out.

mod coalesce;
mod display;
mod event;
mod shared;
mod translate;

pub use coalesce::{Coalescer, DISPLAY_INTERVAL};
pub use display::{AgentEndStatus, DisplayState, SubagentStatus, SubagentView, ToolCallView, UsageTotals};
pub use event::LiveEvent;
pub use shared::SharedEvent;
pub use translate::TurnTranslator;
