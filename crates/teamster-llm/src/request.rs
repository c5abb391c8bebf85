//! The canonical request and stream events, independent of any provider.

use teamster_protocol::agent::{ModelParams, ResponseFormat};
pub use teamster_protocol::event::ThinkingBlock;
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
    /// Whether the request is a sub-agent's (a thread below the turn's main one), whose answer
    /// goes to another agent rather than to a person. Providers ignore it; the offline demo
    /// model keeps its "use a real model" hint out of such answers.
    pub sub_agent: bool,
}

/// A message of the conversation sent to a model.
#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    System { content: String },
    /// The user's text and the images attached to it (sent natively to the model).
    User { content: String, images: Vec<Image> },
    /// The model's answer: its text, its reasoning as text, and its reasoning blocks exactly as the
    /// provider sent them (Anthropic's signed `thinking` and `redacted_thinking`), which go
    /// back to the provider unchanged.
    Assistant {
        content: Option<String>,
        reasoning: Option<String>,
        thinking: Vec<ThinkingBlock>,
        tool_calls: Vec<AssistantToolCall>,
    },
    Tool { tool_call_id: String, content: String },
}

impl Message {
    /// A user message of text alone.
    pub fn user(content: impl Into<String>) -> Message {
        Message::User { content: content.into(), images: Vec::new() }
    }
}

/// An image attached to a user message, as base64 of one of [`Image::MEDIA_TYPES`].
#[derive(Clone, Debug, PartialEq)]
pub struct Image {
    pub media_type: String,
    /// The image's bytes, base64-encoded (standard alphabet, padded).
    pub data: String,
}

impl Image {
    /// The image types both OpenAI's and Anthropic's vision models accept.
    pub const MEDIA_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

    /// Whether a file of `media_type` goes to the model as an image.
    pub fn is_native(media_type: &str) -> bool {
        Image::MEDIA_TYPES.iter().any(|native| native.eq_ignore_ascii_case(media_type))
    }

    /// The image as a data URL.
    pub fn data_url(&self) -> String {
        format!("data:{};base64,{}", self.media_type, self.data)
    }
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
    /// A whole reasoning block, sent once it has ended (its text came before as `Reasoning`).
    Thinking(ThinkingBlock),
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
