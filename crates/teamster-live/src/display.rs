//! [`DisplayState`]: what a UI shows of a session, folded from the live events. A channel
//! opens with it whole, built from the session (its title, mode, model, state, tasks, plans,
//! follow-ups and usage) and the replay of its last turn; every event after that is folded in
//! with [`LiveEvent::fold_into`](crate::LiveEvent::fold_into), so the snapshot a UI holds stays
//! the server's.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use teamster_protocol::control::{Plan, QueuedMessage, TaskList};

/// Token usage and cost, summed over the model calls seen.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UsageTotals {
    /// Input tokens, cached ones included.
    pub input_tokens: u64,
    /// Output tokens, reasoning included.
    pub output_tokens: u64,
    /// Input tokens read from the provider's prompt cache.
    pub cache_read_tokens: u64,
    /// Input tokens written to the provider's prompt cache.
    pub cache_write_tokens: u64,
    /// The cost in US dollars of the turns that ended, when their models have prices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

impl UsageTotals {
    /// Adds one model call's usage.
    pub fn add(&mut self, usage: &teamster_protocol::event::Usage) {
        self.input_tokens += usage.input_tokens;
        self.output_tokens += usage.output_tokens;
        self.cache_read_tokens += usage.cache_read_tokens.unwrap_or(0);
        self.cache_write_tokens += usage.cache_write_tokens.unwrap_or(0);
    }

    /// Adds a finished turn's totals (its tokens, and its cost when its models have prices).
    pub fn add_turn(&mut self, metrics: &teamster_protocol::turn::TurnMetrics) {
        self.input_tokens += metrics.total_input_tokens;
        self.output_tokens += metrics.total_output_tokens;
        self.cache_read_tokens += metrics.total_cache_read_tokens.unwrap_or(0);
        self.cache_write_tokens += metrics.total_cache_write_tokens.unwrap_or(0);
        if let Some(cost) = metrics.total_cost_in_usd {
            self.add_cost(cost);
        }
    }

    /// Adds a cost in US dollars.
    pub fn add_cost(&mut self, cost_usd: f64) {
        *self.cost_usd.get_or_insert(0.0) += cost_usd;
    }
}

/// How a turn ended, for `agent_end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum AgentEndStatus {
    /// The agent answered.
    Done,
    /// The agent waits for the user: approvals, answers or authorizations.
    Waiting,
    /// The turn was cancelled.
    Cancelled,
    /// The turn failed.
    Error,
}

/// How a sub-agent ended, for `subagent_end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum SubagentStatus {
    /// It answered.
    Done,
    /// It failed.
    Error,
}


/// A tool call a UI shows: running, done, or waiting for the user.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ToolCallView {
    /// The call's id.
    pub tool_call_id: String,
    /// The tool's name.
    pub tool_name: String,
    /// Its input (JSON text), as far as it has streamed.
    pub arguments: String,
    /// `input`, `running`, `done`, `awaiting_approval` or `awaiting_answer`.
    pub status: String,
    /// Its last progress report: how far, of how much.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<(f64, Option<f64>)>,
    /// Its answer, once it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
}

/// A sub-agent a UI shows.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SubagentView {
    /// The sub-agent's name.
    pub agent_name: String,
    /// The task it was given.
    pub task: String,
    /// The model it runs on (`provider/model`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// `running`, `done` or `error`.
    pub status: String,
    /// Its text so far (its answer once done).
    pub text: String,
    /// Its tool calls, in order, by name.
    pub tools: Vec<String>,
}

/// What a UI shows of a session. Every field is always present (`null` when unset), so a
/// snapshot has one shape.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DisplayState {
    /// The session's id.
    pub session_id: String,
    /// The session's title.
    #[serde(default)]
    pub title: Option<String>,
    /// The mode the next turn runs in (`None`: the agent's default, or no modes).
    #[serde(default)]
    pub mode: Option<String>,
    /// The model chosen for the next turns (`None`: the agent's or the mode's).
    #[serde(default)]
    pub model: Option<String>,
    /// The models chosen for declared sub-agents, by name (those not named run on their
    /// declaration's).
    #[serde(default)]
    pub subagent_models: std::collections::BTreeMap<String, String>,
    /// The turn running now.
    #[serde(default)]
    pub running_turn_id: Option<String>,
    /// The last turn, running or not.
    #[serde(default)]
    pub last_turn_id: Option<String>,
    /// How the last turn ended, once it has.
    #[serde(default)]
    pub last_turn_status: Option<AgentEndStatus>,
    /// The main thread's message being streamed: its id and text so far.
    #[serde(default)]
    pub streaming_message_id: Option<String>,
    /// The text of that message so far (empty when none streams).
    pub streaming_text: String,
    /// The last turn's answer: its main thread's last message with text.
    #[serde(default)]
    pub last_answer: Option<String>,
    /// The last turn's tool calls, by id, in the order they came.
    pub tool_calls: Vec<ToolCallView>,
    /// The last turn's sub-agents, by thread id.
    pub subagents: BTreeMap<String, SubagentView>,
    /// The last error, until the next turn starts.
    #[serde(default)]
    pub error: Option<String>,
    /// The task list.
    pub tasks: TaskList,
    /// The plans and where each stands.
    pub plans: Vec<Plan>,
    /// The queued follow-ups, in the order they will run.
    pub follow_ups: Vec<QueuedMessage>,
    /// The session state, for agents with a `state_schema`.
    #[serde(default)]
    pub state: Option<serde_json::Value>,
    /// The session's token usage and cost.
    pub usage: UsageTotals,
    /// Where the session's workspace is in its lifecycle (`none` for agents without a sandbox).
    #[serde(default)]
    pub workspace: teamster_protocol::workspace::WorkspaceStatus,
}

impl DisplayState {
    /// Whether the last turn waits for the user.
    pub fn is_waiting(&self) -> bool {
        self.last_turn_status == Some(AgentEndStatus::Waiting)
    }

    /// The view of a tool call, added at the end when new.
    pub(crate) fn call(&mut self, tool_call_id: &str) -> &mut ToolCallView {
        let index = match self.tool_calls.iter().position(|call| call.tool_call_id == tool_call_id) {
            Some(index) => index,
            None => {
                self.tool_calls.push(ToolCallView { tool_call_id: tool_call_id.to_owned(), ..ToolCallView::default() });
                self.tool_calls.len() - 1
            }
        };
        &mut self.tool_calls[index]
    }
}
