//! The canonical request and stream events, independent of any provider.

use teamster_protocol::agent::{ModelParams, ResponseFormat};
use teamster_protocol::event::FinishReason;

/// One chat request to a model.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelRequest {
    /// The provider's own model id (not `provider/model`).
    pub model: String,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolDefinition>,
    pub params: ModelParams,
    pub response_format: Option<ResponseFormat>,
}

/// A message of the conversation sent to a model.
#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    System { content: String },
    User { content: String },
    Assistant { content: Option<String>, reasoning: Option<String>, tool_calls: Vec<AssistantToolCall> },
    Tool { tool_call_id: String, content: String },
}

#[derive(Clone, Debug, PartialEq)]
pub struct AssistantToolCall {
    pub id: String,
    pub name: String,
    /// JSON text.
    pub arguments: String,
}

/// A tool the model may call.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolDefinition {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: serde_json::Value,
}

/// One piece of a streamed answer.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelEvent {
    Text(String),
    Reasoning(String),
    Refusal(String),
    /// A fragment of the tool call at `index`: `id` and `name` arrive at least once,
    /// `arguments` fragments concatenate.
    ToolCall { index: u32, id: Option<String>, name: Option<String>, arguments: String },
    Finish(FinishReason),
    Usage(TokenUsage),
}

/// Tokens one model call used, as the provider reported them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TokenUsage {
    /// The whole prompt, cached parts included (OpenAI's `prompt_tokens`; Anthropic's
    /// `input_tokens + cache_read_input_tokens + cache_creation_input_tokens`), so
    /// `cache_read_tokens` and `cache_write_tokens` are parts of it.
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub reasoning_tokens: u64,
}
