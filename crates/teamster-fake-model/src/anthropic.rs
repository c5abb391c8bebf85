//! The Anthropic Messages endpoint: its requests, the prompt cache it pretends to keep, and the
//! plan rendered as Messages server-sent events or as one `message`.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Deserialize;
use serde::de::IgnoredAny;

use crate::frames::{Frames, push_json_string, push_u64};
use crate::plan::{Chat, MIDSTREAM_CHUNKS, MIDSTREAM_MESSAGE, Outcome, Plan, PlanBody, REASONING_CHUNKS, fragments};
use crate::thoughts::Thought;
use crate::{Content, FakeState};

/// The signature of every thinking block.
const THINKING_SIGNATURE: &str = "fake-signature";

#[derive(Deserialize)]
struct MessagesRequest {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    system: Option<System>,
    #[serde(default)]
    messages: Vec<RequestMessage>,
    #[serde(default)]
    tools: Vec<Tool>,
    #[serde(default)]
    stream: Option<bool>,
    /// Automatic caching, set for the whole request.
    #[serde(default)]
    cache_control: Option<IgnoredAny>,
}

/// The system prompt: a string or text blocks.
#[derive(Deserialize)]
#[serde(untagged)]
enum System {
    Text(String),
    Blocks(Vec<Block>),
}

#[derive(Deserialize)]
struct RequestMessage {
    #[serde(default)]
    role: String,
    #[serde(default)]
    content: Option<MessageContent>,
}

/// A message's content: a string or content blocks.
#[derive(Deserialize)]
#[serde(untagged)]
enum MessageContent {
    Text(String),
    Blocks(Vec<Block>),
}

/// A content block; only the fields the fake reads.
#[derive(Deserialize)]
struct Block {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    text: Option<String>,
    /// A `tool_use`'s id.
    #[serde(default)]
    id: Option<String>,
    /// A `thinking` block's text and signature.
    #[serde(default)]
    thinking: Option<String>,
    #[serde(default)]
    signature: Option<String>,
    /// A `redacted_thinking` block's data.
    #[serde(default)]
    data: Option<String>,
    /// A `tool_result`'s content: a string or text blocks.
    #[serde(default)]
    content: Option<Content>,
    #[serde(default)]
    cache_control: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct Tool {
    #[serde(default)]
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    input_schema: Option<serde_json::Value>,
    #[serde(default)]
    cache_control: Option<IgnoredAny>,
}

impl Block {
    /// The text a block contributes to the prompt: a text block's text or a tool result's content.
    fn prompt_text(&self) -> Option<String> {
        match self.kind.as_str() {
            "text" => self.text.clone(),
            "tool_result" => Some(self.content.as_ref().map(Content::text).unwrap_or_default()),
            _ => None,
        }
    }
}

impl RequestMessage {
    /// The texts of a user message, tool results aside: its string content, or each of its text
    /// blocks (consecutive user messages arrive merged into the blocks of one).
    fn user_texts(&self) -> Vec<String> {
        match &self.content {
            Some(MessageContent::Text(text)) => vec![text.clone()],
            Some(MessageContent::Blocks(blocks)) => blocks
                .iter()
                .filter(|block| block.kind == "text")
                .map(|block| block.text.clone().unwrap_or_default())
                .collect(),
            None => Vec::new(),
        }
    }

    /// The reasoning blocks of an assistant message, in order, and the ids of its tool calls;
    /// `None` for other messages.
    fn thoughts(&self) -> Option<(Vec<Thought>, Vec<String>)> {
        if self.role != "assistant" {
            return None;
        }
        let Some(MessageContent::Blocks(blocks)) = &self.content else {
            return Some((Vec::new(), Vec::new()));
        };
        let text = |field: &Option<String>| field.clone().unwrap_or_default();
        let thoughts = blocks
            .iter()
            .filter_map(|block| match block.kind.as_str() {
                "thinking" => Some(Thought::Signed { thinking: text(&block.thinking), signature: text(&block.signature) }),
                "redacted_thinking" => Some(Thought::Redacted { data: text(&block.data) }),
                _ => None,
            })
            .collect();
        let call_ids = blocks.iter().filter(|block| block.kind == "tool_use").map(|block| text(&block.id)).collect();
        Some((thoughts, call_ids))
    }

    fn char_count(&self) -> usize {
        match &self.content {
            Some(MessageContent::Text(text)) => text.chars().count(),
            Some(MessageContent::Blocks(blocks)) => {
                blocks.iter().filter_map(Block::prompt_text).map(|text| text.chars().count()).sum()
            }
            None => 0,
        }
    }
}

impl Chat for MessagesRequest {
    fn last_user_text(&self) -> String {
        let users = self.messages.iter().rev().filter(|message| message.role == "user");
        users.filter_map(|message| message.user_texts().pop()).next().unwrap_or_default()
    }

    /// The last message's final block, when that is a tool result: the counterpart of an OpenAI
    /// `tool` message.
    fn final_tool_result(&self) -> Option<String> {
        let message = self.messages.last().filter(|message| message.role == "user")?;
        let Some(MessageContent::Blocks(blocks)) = &message.content else {
            return None;
        };
        blocks.last().filter(|block| block.kind == "tool_result")?;
        let results: Vec<String> =
            blocks.iter().filter(|block| block.kind == "tool_result").filter_map(|block| block.prompt_text()).collect();
        Some(results.join(" | "))
    }

    fn user_texts(&self) -> Vec<String> {
        self.messages.iter().filter(|message| message.role == "user").flat_map(RequestMessage::user_texts).collect()
    }

    fn system_text(&self) -> String {
        match &self.system {
            Some(System::Text(text)) => text.clone(),
            Some(System::Blocks(blocks)) => blocks.iter().filter_map(|block| block.text.as_deref()).collect(),
            None => String::new(),
        }
    }

    fn offers_tools(&self) -> bool {
        !self.tools.is_empty()
    }
}

impl MessagesRequest {

    /// Whether any part of the request asks for caching.
    fn asks_for_caching(&self) -> bool {
        let marked = |blocks: &[Block]| blocks.iter().any(|block| block.cache_control.is_some());
        self.cache_control.is_some()
            || matches!(&self.system, Some(System::Blocks(blocks)) if marked(blocks))
            || self.tools.iter().any(|tool| tool.cache_control.is_some())
            || self
                .messages
                .iter()
                .any(|message| matches!(&message.content, Some(MessageContent::Blocks(blocks)) if marked(blocks)))
    }

    /// A hash of the cacheable prefix: the system prompt and the tool definitions.
    fn prefix_hash(&self, system: &str) -> u64 {
        let mut hasher = DefaultHasher::new();
        system.hash(&mut hasher);
        for tool in &self.tools {
            tool.name.hash(&mut hasher);
            tool.description.hash(&mut hasher);
            tool.input_schema.as_ref().map(ToString::to_string).hash(&mut hasher);
        }
        hasher.finish()
    }
}

/// Input token counts as Anthropic reports them: `input_tokens` excludes the cached prefix.
struct InputUsage {
    input_tokens: u64,
    cache_creation_input_tokens: u64,
    cache_read_input_tokens: u64,
}

pub(crate) async fn messages(State(state): State<Arc<FakeState>>, body: Bytes) -> Response {
    let request: MessagesRequest = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(error) => {
            return error_response(StatusCode::BAD_REQUEST, &format!("invalid request body: {error}"));
        }
    };
    state.record(Bytes::copy_from_slice(&body));
    let request_number = state.next_request_number();
    if let Err(message) = state.check_thoughts(&request.messages, RequestMessage::thoughts) {
        return error_response(StatusCode::BAD_REQUEST, &message);
    }

    let last_user_text = request.last_user_text();
    let plan = match crate::plan::decide(&state, &request, &last_user_text) {
        Outcome::Answer(plan) => plan,
        Outcome::Fail(status) => return error_response(status, &format!("fake error {}", status.as_u16())),
    };

    let system = request.system_text();
    let system_chars = system.chars().count();
    let message_chars: usize = request.messages.iter().map(RequestMessage::char_count).sum();
    let total = crate::prompt_tokens(system_chars + message_chars);
    let prefix = (system_chars / 4) as u64;
    let usage = if request.asks_for_caching() && prefix > 0 {
        let input_tokens = total.saturating_sub(prefix);
        if state.remember_prefix(request.prefix_hash(&system)) {
            InputUsage { input_tokens, cache_creation_input_tokens: 0, cache_read_input_tokens: prefix }
        } else {
            InputUsage { input_tokens, cache_creation_input_tokens: prefix, cache_read_input_tokens: 0 }
        }
    } else {
        InputUsage { input_tokens: total, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 }
    };
    let model = request.model.as_deref().unwrap_or("fake-model");
    let id = format!("msg_fake_{request_number}");
    let thoughts = answer_thoughts(&plan, request_number);
    let call_ids = if plan.thinking { plan.call_ids("toolu_") } else { Vec::new() };
    state.issue_thoughts(&thoughts, &call_ids);

    if request.stream.unwrap_or(false) {
        stream_response(&plan, &thoughts, &id, model, &usage)
    } else {
        plan.wait_whole().await;
        json_response(&plan, &thoughts, &id, model, &usage)
    }
}

/// The reasoning blocks of the answer to request `request_number`: a thinking block under
/// `[reasoning]`; under `[thinking]` one signed for this answer alone, then a redacted block.
fn answer_thoughts(plan: &Plan<'_>, request_number: u64) -> Vec<Thought> {
    let thinking = REASONING_CHUNKS.concat();
    if plan.thinking {
        vec![
            Thought::Signed { thinking, signature: format!("EqQB{request_number}/fake+signature==") },
            Thought::Redacted { data: format!("EmwK{request_number}/fake+redacted==") },
        ]
    } else if plan.reasoning {
        vec![Thought::Signed { thinking, signature: THINKING_SIGNATURE.to_owned() }]
    } else {
        Vec::new()
    }
}

/// Anthropic's name for an error status.
fn error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        504 => "timeout_error",
        529 => "overloaded_error",
        500..=599 => "api_error",
        _ => "invalid_request_error",
    }
}

/// `{"type":"error","error":{"type":...,"message":...}}`, with `Retry-After: 1` on 429.
fn error_response(status: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({"type": "error", "error": {"type": error_type(status), "message": message}});
    let mut response = (status, axum::Json(body)).into_response();
    if status == StatusCode::TOO_MANY_REQUESTS {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    response
}

fn stop_reason(plan: &Plan<'_>) -> &'static str {
    if plan.calls_tools() { "tool_use" } else { "end_turn" }
}

/// Renders the plan as one `message`.
fn json_response(plan: &Plan<'_>, thoughts: &[Thought], id: &str, model: &str, usage: &InputUsage) -> Response {
    if let PlanBody::MidstreamError = plan.body {
        let status = StatusCode::from_u16(529).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
        return error_response(status, MIDSTREAM_MESSAGE);
    }
    let mut content: Vec<serde_json::Value> = thoughts
        .iter()
        .filter_map(|thought| match thought {
            Thought::Signed { thinking, signature } => {
                Some(serde_json::json!({"type": "thinking", "thinking": thinking, "signature": signature}))
            }
            Thought::Redacted { data } => Some(serde_json::json!({"type": "redacted_thinking", "data": data})),
            Thought::Text(_) => None,
        })
        .collect();
    if let Some(text) = plan.text() {
        content.push(serde_json::json!({"type": "text", "text": text}));
    }
    if let PlanBody::ToolCalls(calls) = &plan.body {
        for (number, name, arguments) in calls {
            // The input must be an object: arguments that are not one become `{}`.
            let input = serde_json::from_str::<serde_json::Value>(arguments)
                .ok()
                .filter(serde_json::Value::is_object)
                .unwrap_or_else(|| serde_json::json!({}));
            content.push(
                serde_json::json!({"type": "tool_use", "id": format!("toolu_{number}"), "name": name, "input": input}),
            );
        }
    }
    let body = serde_json::json!({
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason(plan),
        "stop_sequence": null,
        "usage": {
            "input_tokens": usage.input_tokens,
            "cache_creation_input_tokens": usage.cache_creation_input_tokens,
            "cache_read_input_tokens": usage.cache_read_input_tokens,
            "output_tokens": plan.chunk_count(),
        },
    });
    axum::Json(body).into_response()
}

/// Renders the plan as Messages events: in one piece without delay, frame by frame with one.
fn stream_response(plan: &Plan<'_>, thoughts: &[Thought], id: &str, model: &str, usage: &InputUsage) -> Response {
    let mut sse = EventWriter { frames: Frames::new(), next_block: 0 };
    sse.event("message_start", |buf| {
        buf.extend_from_slice(br#"{"type":"message_start","message":{"id":"#);
        push_json_string(buf, id);
        buf.extend_from_slice(br#","type":"message","role":"assistant","model":"#);
        push_json_string(buf, model);
        buf.extend_from_slice(br#","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":"#);
        push_u64(buf, usage.input_tokens);
        buf.extend_from_slice(br#","cache_creation_input_tokens":"#);
        push_u64(buf, usage.cache_creation_input_tokens);
        buf.extend_from_slice(br#","cache_read_input_tokens":"#);
        push_u64(buf, usage.cache_read_input_tokens);
        buf.extend_from_slice(br#","output_tokens":1}}}"#);
    });
    sse.event("ping", |buf| buf.extend_from_slice(br#"{"type":"ping"}"#));
    for thought in thoughts {
        match thought {
            Thought::Signed { thinking, signature } => {
                let block = sse.start_block(br#"{"type":"thinking","thinking":"","signature":""}"#);
                for piece in thinking.split_inclusive(' ') {
                    sse.delta(block, "thinking_delta", "thinking", piece);
                }
                sse.delta(block, "signature_delta", "signature", signature);
                sse.stop_block(block);
            }
            Thought::Redacted { data } => {
                let mut start = Vec::with_capacity(64);
                start.extend_from_slice(br#"{"type":"redacted_thinking","data":"#);
                push_json_string(&mut start, data);
                start.push(b'}');
                let block = sse.start_block(&start);
                sse.stop_block(block);
            }
            Thought::Text(_) => {}
        }
    }
    match &plan.body {
        PlanBody::Words(text) => {
            let block = sse.start_block(br#"{"type":"text","text":""}"#);
            for word in text.split_inclusive(' ') {
                sse.delta(block, "text_delta", "text", word);
            }
            sse.stop_block(block);
        }
        PlanBody::Tokens(count) => {
            let block = sse.start_block(br#"{"type":"text","text":""}"#);
            for n in 1..=*count {
                sse.delta(block, "text_delta", "text", &format!("tok{n} "));
            }
            sse.stop_block(block);
        }
        PlanBody::ToolCalls(calls) => {
            for (number, name, arguments) in calls {
                let mut start = Vec::with_capacity(64);
                start.extend_from_slice(br#"{"type":"tool_use","id":"toolu_"#);
                push_u64(&mut start, *number);
                start.extend_from_slice(br#"","name":"#);
                push_json_string(&mut start, name);
                start.extend_from_slice(br#","input":{}}"#);
                let block = sse.start_block(&start);
                for fragment in fragments(arguments) {
                    sse.delta(block, "input_json_delta", "partial_json", fragment);
                }
                sse.stop_block(block);
            }
        }
        PlanBody::MidstreamError => {
            let block = sse.start_block(br#"{"type":"text","text":""}"#);
            for piece in MIDSTREAM_CHUNKS {
                sse.delta(block, "text_delta", "text", piece);
            }
            sse.event("error", |buf| {
                buf.extend_from_slice(br#"{"type":"error","error":{"type":"overloaded_error","message":"#);
                push_json_string(buf, MIDSTREAM_MESSAGE);
                buf.extend_from_slice(b"}}");
            });
            return sse.frames.into_response(plan.delay, false);
        }
    }
    sse.event("message_delta", |buf| {
        buf.extend_from_slice(br#"{"type":"message_delta","delta":{"stop_reason":"#);
        push_json_string(buf, stop_reason(plan));
        buf.extend_from_slice(br#","stop_sequence":null},"usage":{"output_tokens":"#);
        push_u64(buf, plan.chunk_count());
        buf.extend_from_slice(b"}}");
    });
    sse.event("message_stop", |buf| buf.extend_from_slice(br#"{"type":"message_stop"}"#));
    sse.frames.into_response(plan.delay, true)
}

/// Writes Messages events, numbering content blocks.
struct EventWriter {
    frames: Frames,
    next_block: u64,
}

impl EventWriter {
    /// One `event: NAME` frame whose data `write_data` writes.
    fn event(&mut self, name: &str, write_data: impl FnOnce(&mut Vec<u8>)) {
        let buf = &mut self.frames.buf;
        buf.extend_from_slice(b"event: ");
        buf.extend_from_slice(name.as_bytes());
        buf.extend_from_slice(b"\ndata: ");
        write_data(buf);
        buf.extend_from_slice(b"\n\n");
        self.frames.end_frame();
    }

    /// Starts the next content block, `content_block` being its JSON; returns its index.
    fn start_block(&mut self, content_block: &[u8]) -> u64 {
        let index = self.next_block;
        self.next_block += 1;
        self.event("content_block_start", |buf| {
            buf.extend_from_slice(br#"{"type":"content_block_start","index":"#);
            push_u64(buf, index);
            buf.extend_from_slice(br#","content_block":"#);
            buf.extend_from_slice(content_block);
            buf.push(b'}');
        });
        index
    }

    /// A `content_block_delta` of type `kind` carrying `FIELD: TEXT`.
    fn delta(&mut self, block: u64, kind: &str, field: &str, text: &str) {
        self.event("content_block_delta", |buf| {
            buf.extend_from_slice(br#"{"type":"content_block_delta","index":"#);
            push_u64(buf, block);
            buf.extend_from_slice(br#","delta":{"type":"#);
            push_json_string(buf, kind);
            buf.push(b',');
            push_json_string(buf, field);
            buf.push(b':');
            push_json_string(buf, text);
            buf.extend_from_slice(b"}}");
        });
    }

    fn stop_block(&mut self, block: u64) {
        self.event("content_block_stop", |buf| {
            buf.extend_from_slice(br#"{"type":"content_block_stop","index":"#);
            push_u64(buf, block);
            buf.push(b'}');
        });
    }
}
