//! The wire contract of Teamster: every type that crosses a process boundary.
//!
//! Both HTTP dialects (`/api/v1` and the gateway `/v1/agents/...`) speak these types, and the
//! event log stores them verbatim. The crate is serde only: no async runtime, no I/O. Field names
//! follow the specs and never change once shipped. Decoding is tolerant in the ways the specs
//! demand: unknown fields are ignored, `null` means absent, and integers may arrive as `512.0`.

pub mod agent;
pub mod agent_check;
pub mod api;
pub mod collaborator;
pub mod control;
pub mod event;
pub mod ids;
pub mod input;
pub mod lenient;
pub mod session;
pub mod settings;
pub mod sse;
pub mod timestamp;
pub mod turn;
pub mod workspace;

pub use agent::{AgentManifest, AgentSpec, ModelParams, ModelRef, RuntimeConfig};
pub use event::{Event, ModelMessage, ModelMessageDelta, ToolCall, ToolInfo, Usage};
pub use input::{TurnInput, UserContent};
pub use session::Session;
pub use turn::{CancelReason, RequestContext, Subject, Turn, TurnMetrics, TurnState};

/// The id of the root thread of every session.
pub const MAIN_THREAD_ID: &str = "main";
