//! The Anthropic Messages adapter: [`AnthropicClient`].
//!
//! It speaks `POST {base_url}/messages` with `stream: true`. The canonical [`ModelRequest`]
//! becomes Anthropic's JSON here: system messages become the top-level `system` blocks, the other
//! messages alternate between `user` and `assistant` (adjacent messages of one role are merged,
//! so consecutive tool results travel as one user message of `tool_result` blocks), and the
//! model parameters map to Anthropic's (`max_tokens` is required, `reasoning_effort` becomes a
//! thinking budget, `response_format` becomes structured output or an instruction). Thinking and
//! redacted thinking blocks are collected whole, signatures included, and sent back first in
//! their assistant turn exactly as received, as Anthropic requires with tools. The
//! server-sent events become [`ModelEvent`]s as bytes arrive. The provider's JSON types are
//! private to this file; the exchange itself (statuses, `Retry-After`, the read loop) is shared
//! with the other adapters in `providers/http.rs`.
//!
//! Usage follows the OpenAI convention: [`TokenUsage::input_tokens`] is the whole prompt, that is
//! Anthropic's `input_tokens` plus the tokens read from and written to the prompt cache.

use std::borrow::Cow;
use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use teamster_protocol::agent::{CacheControl, ResponseFormat};
use teamster_protocol::event::FinishReason;

use super::http::{
    Decoder, Flow, MAX_ERROR_MESSAGE_BYTES, encode, failed, post, stream_answer, tool_parameters, truncate,
};
use crate::{
    Error, Message, ModelClient, ModelEvent, ModelRequest, ModelStream, ThinkingBlock, TokenUsage, ToolDefinition,
};

/// The API version every request names.
const ANTHROPIC_VERSION: &str = "2023-06-01";
/// The `max_tokens` of a request whose parameters set none: Anthropic requires one.
const DEFAULT_MAX_TOKENS: u64 = 4096;
/// The system text added for `response_format: json_object`, which Anthropic has no switch for.
const JSON_OBJECT_INSTRUCTION: &str =
    "Answer with a single JSON object and nothing else: no prose before or after it, no code fence.";

/// A client of the Anthropic Messages API, or of a server that copies it.
#[derive(Clone)]
pub struct AnthropicClient {
    /// The full URL of the messages endpoint.
    endpoint: String,
    /// The `x-api-key`, if the endpoint needs one.
    api_key: Option<String>,
    http: reqwest::Client,
}

impl std::fmt::Debug for AnthropicClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicClient")
            .field("endpoint", &self.endpoint)
            .field("api_key", &self.api_key.as_ref().map(|_| "********"))
            .finish()
    }
}

impl AnthropicClient {
    /// A client of the API at `base_url` (for example `https://api.anthropic.com/v1`), sending
    /// `x-api-key: <api_key>` when a key is given.
    pub fn new(base_url: impl Into<String>, api_key: Option<String>, http: reqwest::Client) -> Self {
        let base_url = base_url.into();
        let endpoint = format!("{}/messages", base_url.trim_end_matches('/'));
        AnthropicClient { endpoint, api_key, http }
    }

    /// The URL requests are sent to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }
}

impl ModelClient for AnthropicClient {
    fn stream(&self, request: ModelRequest) -> ModelStream {
        let body = match request_body(&request).and_then(|body| encode(&body)) {
            Ok(body) => body,
            Err(error) => return failed(error),
        };
        let mut builder = post(&self.http, &self.endpoint, body).header("anthropic-version", ANTHROPIC_VERSION);
        if let Some(api_key) = &self.api_key {
            builder = builder.header("x-api-key", api_key);
        }
        stream_answer(builder, MessagesDecoder::default())
    }
}

// ----- The request -----

#[derive(Serialize)]
struct MessagesRequest<'a> {
    model: &'a str,
    max_tokens: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    system: Vec<Block<'a>>,
    messages: Vec<MessageJson<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<ToolJson<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<ToolChoiceJson>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_k: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<ThinkingJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_config: Option<OutputConfigJson<'a>>,
}

#[derive(Serialize)]
struct MessageJson<'a> {
    role: Role,
    content: Vec<Block<'a>>,
}

#[derive(Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Role {
    User,
    Assistant,
}

/// A content block, with the cache breakpoint it may carry.
#[derive(Serialize)]
struct Block<'a> {
    #[serde(flatten)]
    kind: BlockKind<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<&'a CacheControl>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockKind<'a> {
    Text {
        text: &'a str,
    },
    Thinking {
        thinking: &'a str,
        signature: &'a str,
    },
    RedactedThinking {
        data: &'a str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: serde_json::Value,
    },
    Image {
        source: ImageSource<'a>,
    },
    ToolResult {
        tool_use_id: &'a str,
        /// Absent when empty: Anthropic rejects empty text.
        #[serde(skip_serializing_if = "str::is_empty")]
        content: &'a str,
    },
}

/// An image block's source: the image's bytes inline.
#[derive(Serialize)]
struct ImageSource<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    media_type: &'a str,
    data: &'a str,
}

#[derive(Serialize)]
struct ToolJson<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    description: &'a str,
    input_schema: Cow<'a, serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<&'a CacheControl>,
}

#[derive(Serialize)]
struct ToolChoiceJson {
    #[serde(rename = "type")]
    kind: &'static str,
    disable_parallel_tool_use: bool,
}

#[derive(Serialize)]
struct ThinkingJson {
    #[serde(rename = "type")]
    kind: &'static str,
    budget_tokens: u64,
}

#[derive(Serialize)]
struct OutputConfigJson<'a> {
    format: OutputFormatJson<'a>,
}

#[derive(Serialize)]
struct OutputFormatJson<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    schema: &'a serde_json::Value,
}

impl Block<'_> {
    /// A block without a cache breakpoint.
    fn new(kind: BlockKind<'_>) -> Block<'_> {
        Block { kind, cache_control: None }
    }
}

/// The JSON body of `request`: [`MessagesRequest`] with the unknown parameters (`params.extra`)
/// added at the top level, except those naming a key the adapter sets itself.
fn request_body(request: &ModelRequest) -> Result<serde_json::Value, Error> {
    let mut body = serde_json::to_value(MessagesRequest::new(request))
        .map_err(|error| Error::Decode(format!("could not encode the request: {error}")))?;
    if let serde_json::Value::Object(body) = &mut body {
        for (key, value) in &request.params.extra {
            body.entry(key.as_str()).or_insert_with(|| value.clone());
        }
    }
    Ok(body)
}

impl<'a> MessagesRequest<'a> {
    fn new(request: &'a ModelRequest) -> Self {
        let params = &request.params;
        let mut system: Vec<Block<'a>> = request
            .messages
            .iter()
            .filter_map(|message| match message {
                Message::System { content } if !content.is_empty() => {
                    Some(Block::new(BlockKind::Text { text: content }))
                }
                _ => None,
            })
            .collect();
        let (output_config, wants_json_object) = match &request.response_format {
            Some(ResponseFormat::JsonSchema { json_schema }) => match &json_schema.schema {
                Some(schema) => {
                    (Some(OutputConfigJson { format: OutputFormatJson { kind: "json_schema", schema } }), false)
                }
                None => (None, true),
            },
            Some(ResponseFormat::JsonObject) => (None, true),
            Some(ResponseFormat::Text) | None => (None, false),
        };
        if wants_json_object {
            system.push(Block::new(BlockKind::Text { text: JSON_OBJECT_INSTRUCTION }));
        }
        let mut messages = conversation(&request.messages);
        let mut tools: Vec<ToolJson<'a>> = request.tools.iter().map(ToolJson::new).collect();
        if let Some(cache_control) = &params.cache_control {
            // Three breakpoints, within Anthropic's limit of four: the tools, the system prompt and
            // the conversation up to the last user turn each become a cacheable prefix.
            if let Some(tool) = tools.last_mut() {
                tool.cache_control = Some(cache_control);
            }
            if let Some(block) = system.last_mut() {
                block.cache_control = Some(cache_control);
            }
            let last_user = messages.iter_mut().rev().find(|message| message.role == Role::User);
            if let Some(block) = last_user.and_then(|message| message.content.last_mut()) {
                block.cache_control = Some(cache_control);
            }
        }
        let tool_choice = (!tools.is_empty() && params.parallel_tool_calls == Some(false))
            .then_some(ToolChoiceJson { kind: "auto", disable_parallel_tool_use: true });
        let budget = params.reasoning_effort.as_deref().and_then(thinking_budget);
        let mut max_tokens = params.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
        if let Some(budget) = budget
            && max_tokens <= budget
        {
            // The budget counts within `max_tokens`: the answer keeps its own allowance on top.
            max_tokens += budget;
        }
        MessagesRequest {
            model: &request.model,
            max_tokens,
            system,
            messages,
            tools,
            tool_choice,
            stream: true,
            temperature: params.temperature,
            top_p: params.top_p,
            top_k: params.top_k,
            thinking: budget.map(|budget_tokens| ThinkingJson { kind: "enabled", budget_tokens }),
            output_config,
        }
    }
}

/// The thinking budget of a `reasoning_effort`; other efforts (`minimal`, `none`, ...) think not.
fn thinking_budget(effort: &str) -> Option<u64> {
    match effort {
        "low" => Some(1024),
        "medium" => Some(4096),
        "high" => Some(16384),
        _ => None,
    }
}

/// The non-system messages as alternating turns. Empty texts are left out (Anthropic rejects
/// them), and a message of the same role as the one before joins its turn.
fn conversation<'a>(messages: &'a [Message]) -> Vec<MessageJson<'a>> {
    let mut turns: Vec<MessageJson<'a>> = Vec::new();
    let mut push = |role: Role, kind: BlockKind<'a>| {
        let block = Block::new(kind);
        match turns.last_mut() {
            Some(turn) if turn.role == role => turn.content.push(block),
            _ => turns.push(MessageJson { role, content: vec![block] }),
        }
    };
    for message in messages {
        match message {
            Message::System { .. } => {}
            Message::User { content, images } => {
                if !content.is_empty() {
                    push(Role::User, BlockKind::Text { text: content });
                }
                for image in images {
                    let source = ImageSource { kind: "base64", media_type: &image.media_type, data: &image.data };
                    push(Role::User, BlockKind::Image { source });
                }
            }
            Message::Assistant { content, reasoning: _, thinking, tool_calls } => {
                // Reasoning goes back only as the signed blocks; its text alone would be refused.
                for block in thinking {
                    push(Role::Assistant, match block {
                        ThinkingBlock::Thinking { thinking, signature } => BlockKind::Thinking { thinking, signature },
                        ThinkingBlock::RedactedThinking { data } => BlockKind::RedactedThinking { data },
                    });
                }
                if let Some(text) = content.as_deref().filter(|text| !text.is_empty()) {
                    push(Role::Assistant, BlockKind::Text { text });
                }
                for call in tool_calls {
                    push(
                        Role::Assistant,
                        BlockKind::ToolUse { id: &call.id, name: &call.name, input: tool_input(&call.arguments) },
                    );
                }
            }
            Message::Tool { tool_call_id, content } => {
                push(Role::User, BlockKind::ToolResult { tool_use_id: tool_call_id, content });
            }
        }
    }
    turns
}

/// A tool call's arguments as the `input` object Anthropic wants: `{}` unless they are one.
fn tool_input(arguments: &str) -> serde_json::Value {
    match serde_json::from_str(arguments) {
        Ok(serde_json::Value::Object(object)) => serde_json::Value::Object(object),
        _ => serde_json::Value::Object(serde_json::Map::new()),
    }
}

impl<'a> ToolJson<'a> {
    fn new(tool: &'a ToolDefinition) -> Self {
        ToolJson {
            name: &tool.name,
            description: &tool.description,
            input_schema: tool_parameters(tool),
            cache_control: None,
        }
    }
}

// ----- The answer -----

/// One server-sent event.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum EventJson {
    MessageStart {
        message: MessageStartJson,
    },
    ContentBlockStart {
        index: u64,
        content_block: ContentJson,
    },
    ContentBlockDelta {
        index: u64,
        delta: DeltaJson,
    },
    ContentBlockStop {
        index: u64,
    },
    MessageDelta {
        #[serde(default)]
        delta: Option<MessageDeltaJson>,
        #[serde(default)]
        usage: Option<UsageJson>,
    },
    MessageStop,
    Error {
        error: ErrorJson,
    },
    /// `ping` and whatever Anthropic adds later.
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct MessageStartJson {
    #[serde(default)]
    usage: Option<UsageJson>,
}

/// A content block: as it starts in a stream, or whole in a non-streamed answer.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ContentJson {
    Text {
        #[serde(default)]
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        /// Empty in a stream, where the input arrives as JSON fragments.
        #[serde(default)]
        input: Option<serde_json::Value>,
    },
    Thinking {
        #[serde(default)]
        thinking: String,
        /// Empty in a stream, where it arrives as a `signature_delta`.
        #[serde(default)]
        signature: String,
    },
    RedactedThinking {
        data: String,
    },
    /// Server tools and their results: nothing the caller can use.
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum DeltaJson {
    TextDelta {
        text: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    ThinkingDelta {
        thinking: String,
    },
    SignatureDelta {
        signature: String,
    },
    /// `citations_delta` and whatever Anthropic adds later.
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct MessageDeltaJson {
    #[serde(default)]
    stop_reason: Option<String>,
}

/// Token counts; a later report replaces the figures it carries.
#[derive(Default, Deserialize)]
struct UsageJson {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct ErrorJson {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    message: String,
}

/// A non-streamed answer: a `message`, or an `error`.
#[derive(Deserialize)]
struct AnswerJson {
    #[serde(default)]
    content: Vec<ContentJson>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<UsageJson>,
    #[serde(default)]
    error: Option<ErrorJson>,
}

impl UsageJson {
    fn update(&mut self, later: UsageJson) {
        self.input_tokens = later.input_tokens.or(self.input_tokens);
        self.output_tokens = later.output_tokens.or(self.output_tokens);
        self.cache_read_input_tokens = later.cache_read_input_tokens.or(self.cache_read_input_tokens);
        self.cache_creation_input_tokens = later.cache_creation_input_tokens.or(self.cache_creation_input_tokens);
    }
}

impl From<&UsageJson> for TokenUsage {
    /// Anthropic counts cached tokens apart from `input_tokens`; the canonical `input_tokens` is
    /// the whole prompt, as OpenAI reports it.
    fn from(usage: &UsageJson) -> Self {
        let cache_read_tokens = usage.cache_read_input_tokens.unwrap_or(0);
        let cache_write_tokens = usage.cache_creation_input_tokens.unwrap_or(0);
        TokenUsage {
            input_tokens: usage.input_tokens.unwrap_or(0).saturating_add(cache_read_tokens).saturating_add(cache_write_tokens),
            output_tokens: usage.output_tokens.unwrap_or(0),
            cache_read_tokens,
            cache_write_tokens,
            reasoning_tokens: 0,
        }
    }
}

impl From<ErrorJson> for Error {
    /// An error named by its type, with the HTTP status Anthropic gives that type.
    fn from(error: ErrorJson) -> Self {
        let status = match error.kind.as_str() {
            "invalid_request_error" => 400,
            "authentication_error" => 401,
            "billing_error" => 402,
            "permission_error" => 403,
            "not_found_error" => 404,
            "request_too_large" => 413,
            "rate_limit_error" => 429,
            "timeout_error" => 504,
            "overloaded_error" => 529,
            _ => 500,
        };
        let message = if error.message.is_empty() { error.kind } else { error.message };
        Error::Provider { status, message: truncate(&message, MAX_ERROR_MESSAGE_BYTES).to_owned() }
    }
}

/// The state of one answer.
#[derive(Default)]
pub(super) struct MessagesDecoder {
    /// The tool calls so far, in order: their position is their `index`.
    tool_calls: Vec<ToolCallState>,
    /// The thinking blocks not yet ended, with their content block index.
    thinking: Vec<(u64, ThinkingBlock)>,
    usage: Option<UsageJson>,
}

/// A `tool_use` block of the answer.
struct ToolCallState {
    /// Its content block index.
    block: u64,
    /// Whether any argument text arrived.
    has_arguments: bool,
}

impl Decoder for MessagesDecoder {
    fn take_payload(&mut self, payload: &str, out: &mut VecDeque<ModelEvent>) -> Result<Flow, Error> {
        let event: EventJson = serde_json::from_str(payload).map_err(|error| {
            Error::Decode(format!("bad event from the provider ({error}): {}", truncate(payload.trim(), 200)))
        })?;
        match event {
            EventJson::MessageStart { message } => self.take_usage(message.usage),
            EventJson::ContentBlockStart { index, content_block } => self.take_content(index, content_block, out),
            EventJson::ContentBlockDelta { index, delta } => match delta {
                DeltaJson::TextDelta { text } => push_text(out, ModelEvent::Text, text),
                DeltaJson::ThinkingDelta { thinking } => {
                    if let Some(ThinkingBlock::Thinking { thinking: text, .. }) = self.thinking_block(index) {
                        text.push_str(&thinking);
                    }
                    push_text(out, ModelEvent::Reasoning, thinking);
                }
                DeltaJson::SignatureDelta { signature } => {
                    if let Some(ThinkingBlock::Thinking { signature: whole, .. }) = self.thinking_block(index) {
                        whole.push_str(&signature);
                    }
                }
                DeltaJson::InputJsonDelta { partial_json } => {
                    // Deltas of blocks that are not tool calls (server tools) are not ours.
                    if let Some((position, call)) = self.tool_call(index)
                        && !partial_json.is_empty()
                    {
                        call.has_arguments = true;
                        out.push_back(ModelEvent::ToolCall {
                            index: position,
                            id: None,
                            name: None,
                            arguments: partial_json,
                        });
                    }
                }
                DeltaJson::Other => {}
            },
            EventJson::ContentBlockStop { index } => {
                self.end_thinking(index, out);
                // A call without arguments still gets a JSON object.
                if let Some((position, call)) = self.tool_call(index)
                    && !call.has_arguments
                {
                    call.has_arguments = true;
                    out.push_back(ModelEvent::ToolCall {
                        index: position,
                        id: None,
                        name: None,
                        arguments: "{}".into(),
                    });
                }
            }
            EventJson::MessageDelta { delta, usage } => {
                if let Some(reason) = delta.and_then(|delta| delta.stop_reason) {
                    out.push_back(ModelEvent::Finish(self.finish_reason(&reason)));
                }
                self.take_usage(usage);
            }
            EventJson::MessageStop => return Ok(Flow::Done),
            EventJson::Error { error } => return Err(error.into()),
            EventJson::Other => {}
        }
        Ok(Flow::Continue)
    }

    fn take_json(&mut self, body: &[u8], out: &mut VecDeque<ModelEvent>) -> Result<(), Error> {
        let answer: AnswerJson = serde_json::from_slice(body)
            .map_err(|error| Error::Decode(format!("bad answer from the provider: {error}")))?;
        if let Some(error) = answer.error {
            return Err(error.into());
        }
        for (block, content) in (0..).zip(answer.content) {
            let arguments = match &content {
                ContentJson::ToolUse { input, .. } => {
                    Some(input.as_ref().map_or_else(|| "{}".to_owned(), |input| input.to_string()))
                }
                _ => None,
            };
            self.take_content(block, content, out);
            self.end_thinking(block, out);
            if let Some(arguments) = arguments
                && let Some((position, call)) = self.tool_call(block)
            {
                call.has_arguments = true;
                out.push_back(ModelEvent::ToolCall { index: position, id: None, name: None, arguments });
            }
        }
        if let Some(reason) = answer.stop_reason {
            out.push_back(ModelEvent::Finish(self.finish_reason(&reason)));
        }
        self.take_usage(answer.usage);
        Ok(())
    }

    /// Only `message_stop` completes an answer.
    fn is_complete(&self) -> bool {
        false
    }

    fn finish(&mut self, out: &mut VecDeque<ModelEvent>) {
        if let Some(usage) = self.usage.take() {
            out.push_back(ModelEvent::Usage((&usage).into()));
        }
    }
}

impl MessagesDecoder {
    fn take_usage(&mut self, usage: Option<UsageJson>) {
        if let Some(usage) = usage {
            self.usage.get_or_insert_with(UsageJson::default).update(usage);
        }
    }

    /// The start of a content block (or a whole one, whose tool input the caller sends).
    fn take_content(&mut self, block: u64, content: ContentJson, out: &mut VecDeque<ModelEvent>) {
        match content {
            ContentJson::Text { text } => push_text(out, ModelEvent::Text, text),
            ContentJson::Thinking { thinking, signature } => {
                self.thinking.push((block, ThinkingBlock::Thinking { thinking: thinking.clone(), signature }));
                push_text(out, ModelEvent::Reasoning, thinking);
            }
            ContentJson::RedactedThinking { data } => {
                out.push_back(ModelEvent::Thinking(ThinkingBlock::RedactedThinking { data }));
            }
            ContentJson::ToolUse { id, name, input: _ } => {
                let index = self.tool_calls.len() as u32;
                self.tool_calls.push(ToolCallState { block, has_arguments: false });
                out.push_back(ModelEvent::ToolCall { index, id: Some(id), name: Some(name), arguments: String::new() });
            }
            ContentJson::Other => {}
        }
    }

    /// The thinking block that content block `block` holds while it streams.
    fn thinking_block(&mut self, block: u64) -> Option<&mut ThinkingBlock> {
        self.thinking.iter_mut().find(|(index, _)| *index == block).map(|(_, thinking)| thinking)
    }

    /// Sends the thinking block `block` whole once it has ended.
    fn end_thinking(&mut self, block: u64, out: &mut VecDeque<ModelEvent>) {
        if let Some(position) = self.thinking.iter().position(|(index, _)| *index == block) {
            out.push_back(ModelEvent::Thinking(self.thinking.remove(position).1));
        }
    }

    /// The tool call that content block `block` holds, with its index.
    fn tool_call(&mut self, block: u64) -> Option<(u32, &mut ToolCallState)> {
        let position = self.tool_calls.iter().position(|call| call.block == block)?;
        Some((position as u32, &mut self.tool_calls[position]))
    }

    fn finish_reason(&self, reason: &str) -> FinishReason {
        match reason {
            "tool_use" => FinishReason::ToolCalls,
            "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
            "refusal" => FinishReason::ContentFilter,
            // `end_turn`, `stop_sequence`, `pause_turn` and reasons added later.
            _ if !self.tool_calls.is_empty() => FinishReason::ToolCalls,
            _ => FinishReason::Stop,
        }
    }
}

/// Appends a text event unless the text is empty.
fn push_text(out: &mut VecDeque<ModelEvent>, event: fn(String) -> ModelEvent, text: String) {
    if !text.is_empty() {
        out.push_back(event(text));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AssistantToolCall;
    use teamster_protocol::agent::{JsonSchemaFormat, ModelParams};

    fn body_of(request: &ModelRequest) -> serde_json::Value {
        request_body(request).unwrap()
    }

    #[test]
    fn messages_alternate_and_tool_results_share_one_user_turn() {
        let request = ModelRequest {
            model: "claude-sonnet-4-5".into(),
            messages: vec![
                Message::System { content: "be brief".into() },
                Message::user("weather and time?"),
                Message::Assistant {
                    content: Some("Looking.".into()),
                    reasoning: Some("not sent as text".into()),
                    thinking: vec![
                        ThinkingBlock::Thinking { thinking: "Paris first.".into(), signature: "EqQB+/9=".into() },
                        ThinkingBlock::RedactedThinking { data: "c2VjcmV0".into() },
                    ],
                    tool_calls: vec![
                        AssistantToolCall {
                            id: "t1".into(),
                            name: "weather".into(),
                            arguments: r#"{"city":"Paris"}"#.into(),
                        },
                        AssistantToolCall { id: "t2".into(), name: "time".into(), arguments: "not json".into() },
                    ],
                },
                Message::Tool { tool_call_id: "t1".into(), content: "18°C".into() },
                Message::Tool { tool_call_id: "t2".into(), content: "".into() },
                Message::user("and tomorrow?"),
                Message::Assistant { content: Some(String::new()), reasoning: None, thinking: vec![], tool_calls: vec![] },
                Message::user(""),
                Message::System { content: "late system".into() },
            ],
            ..ModelRequest::default()
        };
        assert_eq!(
            body_of(&request),
            serde_json::json!({
                "model": "claude-sonnet-4-5",
                "max_tokens": 4096,
                "system": [{"type": "text", "text": "be brief"}, {"type": "text", "text": "late system"}],
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "weather and time?"}]},
                    {"role": "assistant", "content": [
                        {"type": "thinking", "thinking": "Paris first.", "signature": "EqQB+/9="},
                        {"type": "redacted_thinking", "data": "c2VjcmV0"},
                        {"type": "text", "text": "Looking."},
                        {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Paris"}},
                        {"type": "tool_use", "id": "t2", "name": "time", "input": {}},
                    ]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "t1", "content": "18°C"},
                        {"type": "tool_result", "tool_use_id": "t2"},
                        {"type": "text", "text": "and tomorrow?"},
                    ]},
                ],
                "stream": true,
            })
        );
    }

    #[test]
    fn params_map_to_anthropic_and_extra_keys_do_not_override() {
        let mut extra = serde_json::Map::new();
        extra.insert("metadata".into(), serde_json::json!({"user_id": "u-1"}));
        extra.insert("max_tokens".into(), 1.into());
        extra.insert("stop_sequences".into(), serde_json::json!(["END"]));
        let request = ModelRequest {
            model: "claude-opus-4-1".into(),
            messages: vec![Message::user("hi")],
            tools: vec![ToolDefinition {
                name: "f".into(),
                description: "".into(),
                parameters: serde_json::Value::Null,
            }],
            params: ModelParams {
                max_tokens: Some(2000),
                temperature: Some(0.3),
                top_p: Some(0.9),
                top_k: Some(5),
                parallel_tool_calls: Some(false),
                reasoning_effort: Some("medium".into()),
                cache_control: None,
                extra,
            },
            response_format: Some(ResponseFormat::Text),
            sub_agent: false,
        };
        assert_eq!(
            body_of(&request),
            serde_json::json!({
                "model": "claude-opus-4-1",
                "max_tokens": 2000 + 4096,
                "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                "tools": [{"name": "f", "input_schema": {"type": "object", "properties": {}}}],
                "tool_choice": {"type": "auto", "disable_parallel_tool_use": true},
                "stream": true,
                "temperature": 0.3,
                "top_p": 0.9,
                "top_k": 5,
                "thinking": {"type": "enabled", "budget_tokens": 4096},
                "metadata": {"user_id": "u-1"},
                "stop_sequences": ["END"],
            })
        );
    }

    #[test]
    fn thinking_budgets_fit_inside_max_tokens() {
        for (effort, max_tokens, expected_budget, expected_max) in [
            ("low", None, Some(1024), 4096),
            ("high", None, Some(16384), 4096 + 16384),
            ("high", Some(32000), Some(16384), 32000),
            ("minimal", Some(100), None, 100),
        ] {
            let request = ModelRequest {
                params: ModelParams { max_tokens, reasoning_effort: Some(effort.into()), ..ModelParams::default() },
                ..ModelRequest::default()
            };
            let body = body_of(&request);
            assert_eq!(body["max_tokens"], expected_max, "{effort}");
            assert_eq!(body["thinking"]["budget_tokens"].as_u64(), expected_budget, "{effort}");
        }
    }

    #[test]
    fn parallel_tool_calls_need_tools_to_matter() {
        let request = ModelRequest {
            params: ModelParams { parallel_tool_calls: Some(false), ..ModelParams::default() },
            ..ModelRequest::default()
        };
        assert!(body_of(&request).get("tool_choice").is_none());
        let request = ModelRequest {
            tools: vec![ToolDefinition {
                name: "f".into(),
                description: "d".into(),
                parameters: serde_json::json!({"type": "object"}),
            }],
            params: ModelParams { parallel_tool_calls: Some(true), ..ModelParams::default() },
            ..ModelRequest::default()
        };
        assert!(body_of(&request).get("tool_choice").is_none());
    }

    #[test]
    fn response_formats_become_structured_output_or_an_instruction() {
        let schema = serde_json::json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        let with_format = |format: ResponseFormat| ModelRequest {
            messages: vec![Message::user("hi")],
            response_format: Some(format),
            ..ModelRequest::default()
        };
        let body = body_of(&with_format(ResponseFormat::JsonSchema {
            json_schema: JsonSchemaFormat {
                name: "a".into(),
                description: None,
                schema: Some(schema.clone()),
                strict: Some(true),
            },
        }));
        assert_eq!(body["output_config"], serde_json::json!({"format": {"type": "json_schema", "schema": schema}}));
        assert!(body.get("system").is_none());

        let instruction = serde_json::json!([{"type": "text", "text": JSON_OBJECT_INSTRUCTION}]);
        let body = body_of(&with_format(ResponseFormat::JsonObject));
        assert_eq!(body["system"], instruction);
        assert!(body.get("output_config").is_none());
        let body = body_of(&with_format(ResponseFormat::JsonSchema {
            json_schema: JsonSchemaFormat { name: "a".into(), description: None, schema: None, strict: None },
        }));
        assert_eq!(body["system"], instruction);
        let body = body_of(&with_format(ResponseFormat::Text));
        assert!(body.get("system").is_none() && body.get("output_config").is_none());
    }

    #[test]
    fn cache_control_marks_the_last_tool_system_block_and_user_block() {
        let request = ModelRequest {
            messages: vec![
                Message::System { content: "one".into() },
                Message::System { content: "two".into() },
                Message::user("first"),
                Message::Assistant {
                    content: None,
                    reasoning: None,
                    thinking: vec![],
                    tool_calls: vec![AssistantToolCall { id: "t1".into(), name: "f".into(), arguments: "{}".into() }],
                },
                Message::Tool { tool_call_id: "t1".into(), content: "done".into() },
                Message::Assistant { content: Some("ok".into()), reasoning: None, thinking: vec![], tool_calls: vec![] },
            ],
            tools: vec![
                ToolDefinition { name: "f".into(), description: "".into(), parameters: serde_json::Value::Null },
                ToolDefinition { name: "g".into(), description: "".into(), parameters: serde_json::Value::Null },
            ],
            params: ModelParams {
                cache_control: Some(CacheControl { kind: "ephemeral".into() }),
                ..ModelParams::default()
            },
            ..ModelRequest::default()
        };
        let body = body_of(&request);
        let ephemeral = serde_json::json!({"type": "ephemeral"});
        assert_eq!(body["tools"][0].get("cache_control"), None);
        assert_eq!(body["tools"][1]["cache_control"], ephemeral);
        assert_eq!(body["system"][0].get("cache_control"), None);
        assert_eq!(body["system"][1]["cache_control"], ephemeral);
        // The last user turn is the tool result; the later assistant text is not marked.
        assert_eq!(body["messages"][0]["content"][0].get("cache_control"), None);
        assert_eq!(
            body["messages"][2]["content"][0],
            serde_json::json!({"type": "tool_result", "tool_use_id": "t1", "content": "done", "cache_control": ephemeral})
        );
        assert_eq!(body["messages"][3]["content"][0].get("cache_control"), None);
        let marks = body.to_string().matches("cache_control").count();
        assert_eq!(marks, 3);
    }

    #[test]
    fn error_types_get_anthropic_statuses() {
        for (kind, status) in [
            ("overloaded_error", 529),
            ("rate_limit_error", 429),
            ("api_error", 500),
            ("authentication_error", 401),
            ("permission_error", 403),
            ("not_found_error", 404),
            ("request_too_large", 413),
            ("invalid_request_error", 400),
            ("something_new", 500),
        ] {
            let error: Error = ErrorJson { kind: kind.into(), message: "m".into() }.into();
            assert!(
                matches!(error, Error::Provider { status: s, ref message } if s == status && message == "m"),
                "{kind}"
            );
        }
        let error: Error = ErrorJson { kind: "overloaded_error".into(), message: String::new() }.into();
        assert!(matches!(error, Error::Provider { ref message, .. } if message == "overloaded_error"));
    }

    #[test]
    fn a_non_streamed_message_is_replayed_as_events() {
        let body = br#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[
            {"type":"thinking","thinking":"hmm","signature":"sig"},
            {"type":"redacted_thinking","data":"opaque"},
            {"type":"text","text":"Calling."},
            {"type":"tool_use","id":"toolu_1","name":"f","input":{"a":1}}
        ],"stop_reason":"tool_use","stop_sequence":null,
        "usage":{"input_tokens":10,"cache_read_input_tokens":5,"cache_creation_input_tokens":0,"output_tokens":7}}"#;
        let mut decoder = MessagesDecoder::default();
        let mut out = VecDeque::new();
        decoder.take_json(body, &mut out).unwrap();
        decoder.finish(&mut out);
        assert_eq!(
            Vec::from(out),
            [
                ModelEvent::Reasoning("hmm".into()),
                ModelEvent::Thinking(ThinkingBlock::Thinking { thinking: "hmm".into(), signature: "sig".into() }),
                ModelEvent::Thinking(ThinkingBlock::RedactedThinking { data: "opaque".into() }),
                ModelEvent::Text("Calling.".into()),
                ModelEvent::ToolCall {
                    index: 0,
                    id: Some("toolu_1".into()),
                    name: Some("f".into()),
                    arguments: String::new()
                },
                ModelEvent::ToolCall { index: 0, id: None, name: None, arguments: r#"{"a":1}"#.into() },
                ModelEvent::Finish(FinishReason::ToolCalls),
                ModelEvent::Usage(TokenUsage {
                    input_tokens: 15,
                    output_tokens: 7,
                    cache_read_tokens: 5,
                    ..TokenUsage::default()
                }),
            ]
        );
        let mut out = VecDeque::new();
        let error = MessagesDecoder::default()
            .take_json(br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#, &mut out)
            .unwrap_err();
        assert!(matches!(error, Error::Provider { status: 529, .. }));
    }
}
