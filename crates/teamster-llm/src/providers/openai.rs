//! The OpenAI-compatible Chat Completions adapter: [`OpenAiClient`].
//!
//! It speaks `POST {base_url}/chat/completions` with `stream: true` to OpenAI and to every
//! provider that copies its wire format (Gemini's OpenAI endpoint, Fireworks, Together, vLLM,
//! ...). The canonical [`ModelRequest`] becomes the provider's JSON here, and the provider's
//! server-sent chunks become [`ModelEvent`]s, decoded incrementally as bytes arrive. The
//! provider's JSON types are private to this file. Errors are classified (rate limit, provider
//! error with status, transport, decode) but never retried here: retries are a separate layer.

use std::borrow::Cow;
use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use teamster_protocol::agent::ResponseFormat;
use teamster_protocol::event::FinishReason;

use super::http::{
    Decoder, Flow, MAX_ERROR_MESSAGE_BYTES, encode, failed, post, stream_answer, tool_parameters, truncate,
    value_message,
};
use crate::{Error, Image, Message, ModelClient, ModelEvent, ModelRequest, ModelStream, TokenUsage};

/// `extra` parameters that would clash with what the adapter sets itself, or that OpenAI does not
/// accept.
const RESERVED_KEYS: &[&str] = &[
    "model",
    "messages",
    "tools",
    "stream",
    "stream_options",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "top_k",
    "parallel_tool_calls",
    "reasoning_effort",
    "response_format",
    "cache_control",
];

/// A client of one OpenAI-compatible endpoint.
#[derive(Clone)]
pub struct OpenAiClient {
    /// The full URL of the chat completions endpoint.
    endpoint: String,
    /// The bearer token, if the endpoint needs one.
    api_key: Option<String>,
    /// Whether `top_k` is sent: OpenAI rejects it, many compatible servers (vLLM, Ollama,
    /// Together, ...) accept it.
    sends_top_k: bool,
    http: reqwest::Client,
}

impl std::fmt::Debug for OpenAiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiClient")
            .field("endpoint", &self.endpoint)
            .field("api_key", &self.api_key.as_ref().map(|_| "********"))
            .field("sends_top_k", &self.sends_top_k)
            .finish()
    }
}

impl OpenAiClient {
    /// A client of the endpoint at `base_url` (for example `https://api.openai.com/v1`), with
    /// `Authorization: Bearer <api_key>` when a key is given. It does not send `top_k`.
    pub fn new(base_url: impl Into<String>, api_key: Option<String>, http: reqwest::Client) -> Self {
        let base_url = base_url.into();
        let endpoint = format!("{}/chat/completions", base_url.trim_end_matches('/'));
        OpenAiClient { endpoint, api_key, sends_top_k: false, http }
    }

    /// The same client, sending the `top_k` parameter when `sends_top_k` (for servers that
    /// accept it; OpenAI itself does not).
    pub fn with_top_k(mut self, sends_top_k: bool) -> Self {
        self.sends_top_k = sends_top_k;
        self
    }

    /// The URL requests are sent to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }
}

impl ModelClient for OpenAiClient {
    fn stream(&self, request: ModelRequest) -> ModelStream {
        let body = match encode(&ChatRequest::new(&request, self.sends_top_k)) {
            Ok(body) => body,
            Err(error) => return failed(error),
        };
        let mut builder = post(&self.http, &self.endpoint, body);
        if let Some(api_key) = &self.api_key {
            builder = builder.bearer_auth(api_key);
        }
        stream_answer(builder, ChatDecoder::default())
    }
}

// ----- The request -----

#[derive(Serialize)]
struct ChatRequest<'a> {
    model: &'a str,
    messages: Vec<ChatMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<ChatTool<'a>>,
    stream: bool,
    stream_options: StreamOptions,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_k: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parallel_tool_calls: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<ChatResponseFormat<'a>>,
    #[serde(flatten)]
    extra: BTreeMap<&'a str, &'a serde_json::Value>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum ChatMessage<'a> {
    System {
        content: &'a str,
    },
    User {
        content: UserContent<'a>,
    },
    Assistant {
        /// `null` when the message only calls tools.
        content: Option<&'a str>,
        /// The reasoning as the provider streamed it, which reasoning models that call tools
        /// (DeepSeek, Kimi, vLLM's reasoning parsers) expect back.
        #[serde(skip_serializing_if = "Option::is_none")]
        reasoning_content: Option<&'a str>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ChatToolCall<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: &'a str,
    },
}

/// A user message's content: its text, or, with images, text and image parts.
#[derive(Serialize)]
#[serde(untagged)]
enum UserContent<'a> {
    Text(&'a str),
    Parts(Vec<UserPart<'a>>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum UserPart<'a> {
    Text { text: &'a str },
    ImageUrl { image_url: ImageUrl },
}

#[derive(Serialize)]
struct ImageUrl {
    url: String,
}

impl<'a> UserContent<'a> {
    fn new(content: &'a str, images: &'a [Image]) -> Self {
        if images.is_empty() {
            return UserContent::Text(content);
        }
        let text = (!content.is_empty()).then_some(UserPart::Text { text: content });
        let images = images.iter().map(|image| UserPart::ImageUrl { image_url: ImageUrl { url: image.data_url() } });
        UserContent::Parts(text.into_iter().chain(images).collect())
    }
}

#[derive(Serialize)]
struct ChatToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: ChatFunctionCall<'a>,
}

#[derive(Serialize)]
struct ChatFunctionCall<'a> {
    name: &'a str,
    arguments: &'a str,
}

#[derive(Serialize)]
struct ChatTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: ChatFunction<'a>,
}

#[derive(Serialize)]
struct ChatFunction<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    description: &'a str,
    parameters: Cow<'a, serde_json::Value>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ChatResponseFormat<'a> {
    Text,
    JsonObject,
    JsonSchema { json_schema: ChatJsonSchema<'a> },
}

#[derive(Serialize)]
struct ChatJsonSchema<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    schema: Option<&'a serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    strict: Option<bool>,
}

impl<'a> ChatRequest<'a> {
    /// The body of `request`; `top_k` is sent only when `sends_top_k`, and `cache_control` never
    /// (OpenAI caches prompt prefixes on its own).
    fn new(request: &'a ModelRequest, sends_top_k: bool) -> Self {
        let params = &request.params;
        let has_tools = !request.tools.is_empty();
        let (max_tokens, max_completion_tokens) = if uses_max_completion_tokens(&request.model) {
            (None, params.max_tokens)
        } else {
            (params.max_tokens, None)
        };
        ChatRequest {
            model: &request.model,
            messages: request.messages.iter().map(ChatMessage::new).collect(),
            tools: request.tools.iter().map(ChatTool::new).collect(),
            stream: true,
            stream_options: StreamOptions { include_usage: true },
            max_tokens,
            max_completion_tokens,
            temperature: params.temperature,
            top_p: params.top_p,
            top_k: params.top_k.filter(|_| sends_top_k),
            parallel_tool_calls: params.parallel_tool_calls.filter(|_| has_tools),
            reasoning_effort: params.reasoning_effort.as_deref(),
            response_format: request.response_format.as_ref().map(ChatResponseFormat::new),
            extra: params
                .extra
                .iter()
                .filter(|(key, _)| !RESERVED_KEYS.contains(&key.as_str()))
                .map(|(key, value)| (key.as_str(), value))
                .collect(),
        }
    }
}

/// Whether the model is one of OpenAI's reasoning models, which reject `max_tokens` and want
/// `max_completion_tokens` instead.
fn uses_max_completion_tokens(model: &str) -> bool {
    let model = model.rsplit('/').next().unwrap_or(model);
    ["o1", "o3", "o4", "gpt-5"].iter().any(|prefix| model.starts_with(prefix))
}

impl<'a> ChatMessage<'a> {
    fn new(message: &'a Message) -> Self {
        match message {
            Message::System { content } => ChatMessage::System { content },
            Message::User { content, images } => ChatMessage::User { content: UserContent::new(content, images) },
            Message::Assistant { content, reasoning, thinking, tool_calls } => {
                let content = content.as_deref().filter(|content| !content.is_empty());
                // An assistant message needs content or tool calls; an empty one gets "".
                let content = if content.is_none() && tool_calls.is_empty() { Some("") } else { content };
                // Reasoning that came as Anthropic's signed blocks is for Anthropic alone.
                let reasoning_content =
                    reasoning.as_deref().filter(|reasoning| !reasoning.is_empty() && thinking.is_empty());
                ChatMessage::Assistant {
                    content,
                    reasoning_content,
                    tool_calls: tool_calls
                        .iter()
                        .map(|call| ChatToolCall {
                            id: &call.id,
                            kind: "function",
                            function: ChatFunctionCall {
                                name: &call.name,
                                arguments: if call.arguments.trim().is_empty() { "{}" } else { &call.arguments },
                            },
                        })
                        .collect(),
                }
            }
            Message::Tool { tool_call_id, content } => ChatMessage::Tool { tool_call_id, content },
        }
    }
}

impl<'a> ChatTool<'a> {
    fn new(tool: &'a crate::ToolDefinition) -> Self {
        ChatTool {
            kind: "function",
            function: ChatFunction {
                name: &tool.name,
                description: &tool.description,
                parameters: tool_parameters(tool),
            },
        }
    }
}

impl<'a> ChatResponseFormat<'a> {
    fn new(format: &'a ResponseFormat) -> Self {
        match format {
            ResponseFormat::Text => ChatResponseFormat::Text,
            ResponseFormat::JsonObject => ChatResponseFormat::JsonObject,
            ResponseFormat::JsonSchema { json_schema } => ChatResponseFormat::JsonSchema {
                json_schema: ChatJsonSchema {
                    name: &json_schema.name,
                    description: json_schema.description.as_deref(),
                    schema: json_schema.schema.as_ref(),
                    strict: json_schema.strict,
                },
            },
        }
    }
}

// ----- The answer -----

/// One `chat.completion.chunk` (or an error object in its place).
#[derive(Deserialize)]
struct ChunkJson {
    #[serde(default)]
    choices: Option<Vec<ChunkChoiceJson>>,
    #[serde(default)]
    usage: Option<UsageJson>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct ChunkChoiceJson {
    #[serde(default)]
    delta: Option<DeltaJson>,
    #[serde(default)]
    finish_reason: Option<String>,
}

/// A streamed delta, or (in a non-streamed answer) the whole message: the fields are the same.
#[derive(Deserialize)]
struct DeltaJson {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    /// The name some providers (OpenRouter, vLLM) use for `reasoning_content`.
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolCallDeltaJson>>,
}

#[derive(Deserialize)]
struct ToolCallDeltaJson {
    #[serde(default)]
    index: Option<u32>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDeltaJson>,
}

#[derive(Deserialize)]
struct FunctionDeltaJson {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct UsageJson {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptTokensDetailsJson>,
    #[serde(default)]
    completion_tokens_details: Option<CompletionTokensDetailsJson>,
}

#[derive(Deserialize)]
struct PromptTokensDetailsJson {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct CompletionTokensDetailsJson {
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

/// A non-streamed `chat.completion`, which some servers send even when asked to stream.
#[derive(Deserialize)]
struct CompletionJson {
    #[serde(default)]
    choices: Option<Vec<CompletionChoiceJson>>,
    #[serde(default)]
    usage: Option<UsageJson>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct CompletionChoiceJson {
    #[serde(default)]
    message: Option<DeltaJson>,
    #[serde(default)]
    finish_reason: Option<String>,
}

impl From<UsageJson> for TokenUsage {
    /// OpenAI counts cached tokens inside `prompt_tokens`; `input_tokens` keeps that total.
    fn from(usage: UsageJson) -> Self {
        TokenUsage {
            input_tokens: usage.prompt_tokens.unwrap_or(0),
            output_tokens: usage.completion_tokens.unwrap_or(0),
            cache_read_tokens: usage.prompt_tokens_details.and_then(|details| details.cached_tokens).unwrap_or(0),
            cache_write_tokens: 0,
            reasoning_tokens: usage.completion_tokens_details.and_then(|details| details.reasoning_tokens).unwrap_or(0),
        }
    }
}

/// The state of one answer: what the chunks said so far.
#[derive(Default)]
pub(super) struct ChatDecoder {
    /// Whether any tool call fragment arrived, to report `tool_calls` even when a provider says
    /// `stop` after calling tools.
    saw_tool_call: bool,
    saw_finish: bool,
    /// The last usage reported; emitted once, when the answer ends.
    usage: Option<TokenUsage>,
}

impl Decoder for ChatDecoder {
    fn take_payload(&mut self, payload: &str, out: &mut VecDeque<ModelEvent>) -> Result<Flow, Error> {
        let trimmed = payload.trim();
        if trimmed == "[DONE]" {
            return Ok(Flow::Done);
        }
        // A payload normally holds one chunk; servers that forget the blank line between events
        // produce several, one per line, which a streaming deserializer reads just as well.
        for chunk in serde_json::Deserializer::from_str(trimmed).into_iter::<ChunkJson>() {
            let chunk = chunk.map_err(|error| {
                Error::Decode(format!("bad chunk from the provider ({error}): {}", truncate(trimmed, 200)))
            })?;
            self.take_chunk(chunk, out)?;
        }
        Ok(Flow::Continue)
    }

    fn take_json(&mut self, body: &[u8], out: &mut VecDeque<ModelEvent>) -> Result<(), Error> {
        let completion: CompletionJson = serde_json::from_slice(body)
            .map_err(|error| Error::Decode(format!("bad answer from the provider: {error}")))?;
        if let Some(error) = completion.error {
            return Err(error_from_value(&error, 500));
        }
        if let Some(choice) = completion.choices.and_then(|choices| choices.into_iter().next()) {
            if let Some(message) = choice.message {
                self.take_delta(message, out);
            }
            self.take_finish_reason(choice.finish_reason.as_deref(), out);
        }
        if let Some(usage) = completion.usage {
            self.usage = Some(usage.into());
        }
        Ok(())
    }

    /// Some compatible servers omit `[DONE]`: once the model has finished, the answer is whole.
    fn is_complete(&self) -> bool {
        self.saw_finish
    }

    fn finish(&mut self, out: &mut VecDeque<ModelEvent>) {
        if let Some(usage) = self.usage.take() {
            out.push_back(ModelEvent::Usage(usage));
        }
    }
}

impl ChatDecoder {
    fn take_chunk(&mut self, chunk: ChunkJson, out: &mut VecDeque<ModelEvent>) -> Result<(), Error> {
        if let Some(error) = chunk.error {
            return Err(error_from_value(&error, 500));
        }
        if let Some(choice) = chunk.choices.and_then(|choices| choices.into_iter().next()) {
            if let Some(delta) = choice.delta {
                self.take_delta(delta, out);
            }
            self.take_finish_reason(choice.finish_reason.as_deref(), out);
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some(usage.into());
        }
        Ok(())
    }

    fn take_delta(&mut self, delta: DeltaJson, out: &mut VecDeque<ModelEvent>) {
        let reasoning = delta.reasoning_content.or(delta.reasoning);
        if let Some(text) = reasoning.filter(|text| !text.is_empty()) {
            out.push_back(ModelEvent::Reasoning(text));
        }
        if let Some(text) = delta.content.filter(|text| !text.is_empty()) {
            out.push_back(ModelEvent::Text(text));
        }
        if let Some(text) = delta.refusal.filter(|text| !text.is_empty()) {
            out.push_back(ModelEvent::Refusal(text));
        }
        for (position, call) in delta.tool_calls.unwrap_or_default().into_iter().enumerate() {
            let (name, arguments) = match call.function {
                Some(function) => (function.name, function.arguments.unwrap_or_default()),
                None => (None, String::new()),
            };
            let id = call.id.filter(|id| !id.is_empty());
            let name = name.filter(|name| !name.is_empty());
            if id.is_none() && name.is_none() && arguments.is_empty() {
                continue;
            }
            self.saw_tool_call = true;
            // Servers that omit `index` send each call whole, in order.
            let index = call.index.unwrap_or(position as u32);
            out.push_back(ModelEvent::ToolCall { index, id, name, arguments });
        }
    }

    fn take_finish_reason(&mut self, reason: Option<&str>, out: &mut VecDeque<ModelEvent>) {
        let Some(reason) = reason.filter(|reason| !reason.is_empty()) else {
            return;
        };
        let reason = match reason {
            "length" | "max_tokens" => FinishReason::Length,
            "tool_calls" | "tool_use" => FinishReason::ToolCalls,
            "content_filter" => FinishReason::ContentFilter,
            "function_call" => FinishReason::FunctionCall,
            // `stop` and the unknown reasons of other servers (`eos`, `end_turn`, ...).
            _ if self.saw_tool_call => FinishReason::ToolCalls,
            _ => FinishReason::Stop,
        };
        self.saw_finish = true;
        out.push_back(ModelEvent::Finish(reason));
    }
}

/// An error object met inside a successful response. Its status is the one it names (`code` or
/// `status`) when that is an HTTP error status, and `default_status` otherwise.
fn error_from_value(error: &serde_json::Value, default_status: u16) -> Error {
    let status = ["code", "status"]
        .iter()
        .filter_map(|key| error.get(key))
        .find_map(|value| match value {
            serde_json::Value::Number(number) => number.as_u64(),
            serde_json::Value::String(text) => text.parse().ok(),
            _ => None,
        })
        .and_then(|status| u16::try_from(status).ok())
        .filter(|status| (400..=599).contains(status))
        .unwrap_or(default_status);
    let message = value_message(error);
    Error::Provider { status, message: truncate(&message, MAX_ERROR_MESSAGE_BYTES).to_owned() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AssistantToolCall, ToolDefinition};
    use teamster_protocol::agent::{CacheControl, JsonSchemaFormat, ModelParams};

    #[test]
    fn request_body_maps_messages_tools_and_params() {
        let mut extra = serde_json::Map::new();
        extra.insert("seed".into(), 7.into());
        extra.insert("stream".into(), false.into());
        let request = ModelRequest {
            model: "gpt-4o".into(),
            messages: vec![
                Message::System { content: "be brief".into() },
                Message::user("hi"),
                Message::Assistant {
                    content: Some(String::new()),
                    reasoning: Some("thinking".into()),
                    thinking: vec![],
                    tool_calls: vec![AssistantToolCall { id: "c1".into(), name: "f".into(), arguments: "".into() }],
                },
                Message::Tool { tool_call_id: "c1".into(), content: "42".into() },
                Message::Assistant {
                    content: None,
                    reasoning: Some("signed".into()),
                    thinking: vec![crate::ThinkingBlock::RedactedThinking { data: "d".into() }],
                    tool_calls: vec![],
                },
            ],
            tools: vec![ToolDefinition {
                name: "f".into(),
                description: "".into(),
                parameters: serde_json::Value::Null,
            }],
            params: ModelParams {
                max_tokens: Some(10),
                top_k: Some(3),
                parallel_tool_calls: Some(false),
                extra,
                ..ModelParams::default()
            },
            response_format: Some(ResponseFormat::JsonSchema {
                json_schema: JsonSchemaFormat {
                    name: "answer".into(),
                    description: None,
                    schema: Some(serde_json::json!({"type": "object"})),
                    strict: Some(true),
                },
            }),
            sub_agent: false,
        };
        let body = serde_json::to_value(ChatRequest::new(&request, false)).unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "model": "gpt-4o",
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": null, "reasoning_content": "thinking", "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "c1", "content": "42"},
                    {"role": "assistant", "content": ""},
                ],
                "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}],
                "stream": true,
                "stream_options": {"include_usage": true},
                "max_tokens": 10,
                "parallel_tool_calls": false,
                "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": {"type": "object"}, "strict": true}},
                "seed": 7,
            })
        );
    }

    #[test]
    fn reasoning_models_get_max_completion_tokens_and_no_parallel_flag_without_tools() {
        let request = ModelRequest {
            model: "o4-mini".into(),
            params: ModelParams { max_tokens: Some(5), parallel_tool_calls: Some(true), ..ModelParams::default() },
            ..ModelRequest::default()
        };
        let body = serde_json::to_value(ChatRequest::new(&request, false)).unwrap();
        assert_eq!(body["max_completion_tokens"], 5);
        assert!(body.get("max_tokens").is_none());
        assert!(body.get("parallel_tool_calls").is_none());
        assert!(body.get("tools").is_none());
    }

    #[test]
    fn error_values_give_status_and_message() {
        let error = error_from_value(&serde_json::json!({"message": "slow down", "code": 503}), 500);
        assert!(matches!(error, Error::Provider { status: 503, ref message } if message == "slow down"));
        let error = error_from_value(&serde_json::json!("boom"), 500);
        assert!(matches!(error, Error::Provider { status: 500, ref message } if message == "boom"));
        let error = error_from_value(&serde_json::json!({"message": "odd", "code": "invalid_api_key"}), 500);
        assert!(matches!(error, Error::Provider { status: 500, .. }));
    }

    #[test]
    fn every_param_is_mapped_and_top_k_only_where_accepted() {
        let mut extra = serde_json::Map::new();
        extra.insert("seed".into(), 7.into());
        extra.insert("logit_bias".into(), serde_json::json!({"50256": -100}));
        let params = ModelParams {
            max_tokens: Some(64),
            temperature: Some(0.5),
            top_p: Some(0.8),
            top_k: Some(20),
            parallel_tool_calls: Some(false),
            reasoning_effort: Some("high".into()),
            cache_control: Some(CacheControl { kind: "ephemeral".into() }),
            extra,
        };
        let request = ModelRequest {
            model: "qwen2.5".into(),
            messages: vec![Message::user("hi")],
            tools: vec![ToolDefinition {
                name: "f".into(),
                description: "does f".into(),
                parameters: serde_json::Value::Null,
            }],
            params,
            response_format: Some(ResponseFormat::JsonObject),
            sub_agent: false,
        };
        let expected = serde_json::json!({
            "model": "qwen2.5",
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {
                "name": "f", "description": "does f", "parameters": {"type": "object", "properties": {}},
            }}],
            "stream": true,
            "stream_options": {"include_usage": true},
            "max_tokens": 64,
            "temperature": 0.5,
            "top_p": 0.8,
            "top_k": 20,
            "parallel_tool_calls": false,
            "reasoning_effort": "high",
            "response_format": {"type": "json_object"},
            "seed": 7,
            "logit_bias": {"50256": -100},
        });
        assert_eq!(serde_json::to_value(ChatRequest::new(&request, true)).unwrap(), expected);
        let mut without_top_k = expected;
        without_top_k.as_object_mut().unwrap().remove("top_k");
        assert_eq!(serde_json::to_value(ChatRequest::new(&request, false)).unwrap(), without_top_k);
    }
}
