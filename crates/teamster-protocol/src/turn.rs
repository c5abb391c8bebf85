//! Turns, their states and metrics, and the subject who made them.

use serde::{Deserialize, Serialize};

use crate::control::SessionControl;
use crate::event::{Event, ModelMessage};
use crate::input::TurnInput;

/// Who made a request. Kept on sessions and turns; filled by authentication.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Subject {
    /// The subject's id: the user's, or the service account's (`local` without authentication).
    pub subject_id: String,
    /// `user` or `serviceaccount`.
    pub subject_type: String,
    /// A readable name of the subject, such as the user's login.
    pub subject_slug: String,
}

impl Subject {
    /// The one subject of a server without authentication.
    pub fn local() -> Subject {
        Subject {
            subject_id: "local".to_owned(),
            subject_type: "user".to_owned(),
            subject_slug: "local".to_owned(),
        }
    }
}

/// A turn as both dialects show it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Turn {
    pub id: String,
    pub session_id: String,
    pub previous_turn_id: Option<String>,
    /// What the turn was given: the user's message, approvals, answers.
    #[serde(default)]
    pub input: Vec<TurnInput>,
    /// Where the turn is: `running`, or how it ended.
    pub state: TurnState,
    pub created_by_subject: Subject,
    pub created_at: String,
    /// Teamster extension: the mode and model the turn ran with, for agents with modes and
    /// sessions that switched their model.
    #[serde(default, skip_serializing_if = "SessionControl::is_empty", flatten)]
    pub control: SessionControl,
    /// Teamster extension: the application's context the turn was created with, handed to its
    /// tools (MCP servers get it in `_meta`) and sub-agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub request_context: Option<RequestContext>,
}

/// A turn's request context: a JSON object of the application's, at most
/// [`MAX_REQUEST_CONTEXT_BYTES`] as JSON.
pub type RequestContext = serde_json::Map<String, serde_json::Value>;

/// The largest request context a turn accepts, as compact JSON.
pub const MAX_REQUEST_CONTEXT_BYTES: usize = 16 * 1024;

/// The state of a turn, by `status`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "status")]
pub enum TurnState {
    #[serde(rename = "running")]
    Running,
    #[serde(rename = "done")]
    Done {
        /// The final main-thread message.
        #[serde(serialize_with = "crate::event::tagged::optional_message")]
        output: Option<Box<ModelMessage>>,
        /// Pending human actions (`tool.approval_required`, `tool.response_required`,
        /// `mcp.auth_required`); the next turn's input resumes them.
        // The events hold turn states again: the schema walk stops here.
        #[cfg_attr(feature = "openapi", schema(no_recursion))]
        required_actions: Vec<Event>,
        /// When the turn ended (RFC 3339, UTC, milliseconds).
        completed_at: String,
        /// The tokens and cost of the turn's model calls.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        metrics: Option<TurnMetrics>,
    },
    #[serde(rename = "cancelled")]
    Cancelled {
        /// Why the turn was cancelled.
        reason: CancelReason,
        /// When the turn ended (RFC 3339, UTC, milliseconds).
        completed_at: String,
        /// The tokens and cost of the turn's model calls.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        metrics: Option<TurnMetrics>,
    },
    #[serde(rename = "error")]
    Error {
        /// What went wrong.
        message: String,
        /// When the turn ended (RFC 3339, UTC, milliseconds).
        completed_at: String,
        /// The tokens and cost of the turn's model calls.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        metrics: Option<TurnMetrics>,
    },
}

impl TurnState {
    pub fn is_terminal(&self) -> bool {
        !matches!(self, TurnState::Running)
    }

    /// The status string: `running`, `done`, `cancelled` or `error`.
    pub fn status(&self) -> &'static str {
        match self {
            TurnState::Running => "running",
            TurnState::Done { .. } => "done",
            TurnState::Cancelled { .. } => "cancelled",
            TurnState::Error { .. } => "error",
        }
    }

    /// The turn's token and cost totals, once it ended with them.
    pub fn metrics(&self) -> Option<&TurnMetrics> {
        match self {
            TurnState::Running => None,
            TurnState::Done { metrics, .. } | TurnState::Cancelled { metrics, .. } | TurnState::Error { metrics, .. } => metrics.as_ref(),
        }
    }
}

/// Why a turn was cancelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum CancelReason {
    #[serde(rename = "server-execution-timeout")]
    ServerExecutionTimeout,
    #[serde(rename = "client-cancelled")]
    ClientCancelled,
    #[serde(rename = "cancelled-for-next-turn")]
    CancelledForNextTurn,
    #[serde(rename = "abandoned")]
    Abandoned,
}

/// Token and cost totals of every model call of every thread of a turn.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TurnMetrics {
    /// Input tokens of every model call, cached parts included.
    pub total_input_tokens: u64,
    /// Output tokens of every model call, reasoning included.
    pub total_output_tokens: u64,
    /// Input and output tokens together.
    pub total_tokens: u64,
    /// Input tokens read from the provider's prompt cache, when it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_cache_read_tokens: Option<u64>,
    /// Input tokens written to the provider's prompt cache, when it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_cache_write_tokens: Option<u64>,
    /// Output tokens spent on reasoning, when the provider says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_reasoning_tokens: Option<u64>,
    /// The cost in US dollars, when the models have prices configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_cost_in_usd: Option<f64>,
}
