//! The chunks of the AI SDK UI message stream (`UIMessageChunk` of the `ai` package), as JSON
//! with the package's field names.

use serde::Serialize;
use serde_json::Value;

/// One chunk: a `data:` line of the stream.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "kebab-case", rename_all_fields = "camelCase")]
pub enum Chunk {
    Start {
        #[serde(skip_serializing_if = "Option::is_none")]
        message_id: Option<String>,
    },
    StartStep,
    FinishStep,
    TextStart { id: String },
    TextDelta { id: String, delta: String },
    TextEnd { id: String },
    ReasoningStart { id: String },
    ReasoningDelta { id: String, delta: String },
    ReasoningEnd { id: String },
    ToolInputStart { tool_call_id: String, tool_name: String },
    ToolInputAvailable { tool_call_id: String, tool_name: String, input: Value },
    ToolApprovalRequest { approval_id: String, tool_call_id: String },
    ToolApprovalResponse {
        approval_id: String,
        approved: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    ToolOutputAvailable { tool_call_id: String, output: Value },
    ToolOutputError { tool_call_id: String, error_text: String },
    ToolOutputDenied { tool_call_id: String },
    MessageMetadata { message_metadata: Metadata },
    Finish { finish_reason: &'static str },
    Error { error_text: String },
    Abort {
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// A data part (`data-<name>`); parts with the same name and id replace each other. A
    /// transient one is handed to the client's `onData` only, never kept in the message.
    #[serde(untagged)]
    Data {
        #[serde(rename = "type")]
        kind: String,
        id: String,
        data: Value,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        transient: bool,
    },
}

/// What `message-metadata` carries at the end of a turn: its usage and cost.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    pub usage: Usage,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

/// Token usage with the AI SDK's names (`LanguageModelUsage`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub total_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cached_input_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
}

impl Usage {
    pub fn of(metrics: Option<&teamster_protocol::TurnMetrics>) -> Usage {
        let Some(metrics) = metrics else { return Usage::default() };
        Usage {
            input_tokens: metrics.total_input_tokens,
            output_tokens: metrics.total_output_tokens,
            total_tokens: metrics.total_tokens,
            cached_input_tokens: metrics.total_cache_read_tokens,
            reasoning_tokens: metrics.total_reasoning_tokens,
        }
    }
}

impl Chunk {
    /// A data part of `name` with `id`.
    pub fn data(name: &str, id: &str, data: Value) -> Chunk {
        Chunk::Data { kind: format!("data-{name}"), id: id.to_owned(), data, transient: false }
    }

    /// A transient data part of `name` with `id`: news for the client, not a part of the message.
    pub fn transient_data(name: &str, id: &str, data: Value) -> Chunk {
        Chunk::Data { kind: format!("data-{name}"), id: id.to_owned(), data, transient: true }
    }
}
