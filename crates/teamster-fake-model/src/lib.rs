//! A fake OpenAI-compatible chat completions server for tests and benchmarks.
//!
//! It speaks the real wire format (`chat.completion.chunk` SSE with tool-call deltas, usage and
//! `[DONE]`, or a `chat.completion` JSON when not streaming), and its answer is a deterministic
//! function of the request, scripted by directives in the text of the last user message:
//!
//! | Directive | Answer |
//! |---|---|
//! | (last message has role `tool`) | `Tool result: <content of that tool message>`, word by word, finish `stop` |
//! | `[error:STATUS]` | HTTP `STATUS` with `{"error":{"message":"fake error STATUS","type":"fake","code":"fake"}}`, and `Retry-After: 1` on 429 |
//! | `[midstream-error]` | content chunks `Partial ` and `answer`, then `data: {"error":{"message":"fake mid-stream failure"}}` and the end of the body |
//! | `[tool:NAME]`, `[tool:NAME {json args}]` (repeatable) | one tool call per directive, in order, in one message, finish `tool_calls` |
//! | `[tokens:N]` | exactly N content chunks `tok1 `, `tok2 `, ..., `tokN ` (N is capped at 100000) |
//! | `[history]` | `History: ` + the texts of all user messages joined by ` \| `, word by word |
//! | (anything else) | `You said: <text of the last user message>`, word by word |
//!
//! The first matching row wins, top to bottom. Two modifiers combine with any answer: `[delay:MS]`
//! sleeps MS milliseconds before every chunk (before the whole answer when not streaming), and
//! `[reasoning]` sends the `reasoning_content` chunks `Let `, `me `, `think.` before the content.
//! Word by word means the text split after each space (`You `, `said: `, ...), so the chunks
//! concatenate to the exact text. Tool arguments are the JSON written in the directive, verbatim
//! (or everything up to the next `]` when it is not valid JSON; `{}` when absent), streamed as a
//! header chunk (index, id, type, name, empty arguments) followed by up to three argument
//! fragments. Tool call ids are `call_1`, `call_2`, ... from a counter over the server's lifetime,
//! so they are unique per request and across requests.
//!
//! Usage: `prompt_tokens` is the number of characters of all message contents divided by 4 (at
//! least 1); `completion_tokens` is the number of content, reasoning and tool-call chunks. A
//! streamed answer ends with a usage-only chunk (`choices: []`) when the request sets
//! `stream_options.include_usage`.
//!
//! Every well-formed request body is recorded: `GET /requests` returns them as a JSON array, most
//! recent last, at most [`MAX_RECORDED_REQUESTS`]; `DELETE /requests` forgets them. `GET /healthz`
//! answers 200. The server is the floor the benchmarks compare against, so an answer without
//! delay is rendered into one buffer and sent in one piece, and nothing is logged per request.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use bytes::Bytes;
use serde::Deserialize;

/// How many request bodies `GET /requests` keeps.
pub const MAX_RECORDED_REQUESTS: usize = 1000;

/// The reasoning chunks `[reasoning]` adds.
const REASONING_CHUNKS: [&str; 3] = ["Let ", "me ", "think."];
/// The content chunks `[midstream-error]` sends before failing.
const MIDSTREAM_CHUNKS: [&str; 2] = ["Partial ", "answer"];
/// The error event `[midstream-error]` ends with.
const MIDSTREAM_ERROR: &[u8] = b"data: {\"error\":{\"message\":\"fake mid-stream failure\"}}\n\n";
/// The most `[tokens:N]` can ask for, so that a typo cannot exhaust memory.
const MAX_TOKENS_DIRECTIVE: u64 = 100_000;

/// The fake server's shared state.
#[derive(Default)]
struct FakeState {
    /// The recorded request bodies, oldest first; each is valid JSON.
    requests: Mutex<VecDeque<Bytes>>,
    /// Requests answered so far; numbers the completion ids.
    request_counter: AtomicU64,
    /// Tool calls made so far; numbers the tool call ids.
    tool_call_counter: AtomicU64,
}

/// The fake server's routes, with fresh state.
pub fn router() -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/chat/completions", post(chat_completions))
        .route("/requests", get(list_requests).delete(clear_requests))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(Arc::new(FakeState::default()))
}

/// Serves the fake model on `listener` until `shutdown` completes; open connections, even those
/// in the middle of a delayed stream, are dropped then rather than waited for.
pub async fn serve(listener: tokio::net::TcpListener, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
    let listener = listener.tap_io(|stream| {
        // Small SSE frames must not wait for Nagle's algorithm; failure only costs latency.
        let _ = stream.set_nodelay(true);
    });
    let server = std::future::IntoFuture::into_future(axum::serve(listener, router()));
    tokio::select! {
        result = server => result,
        () = shutdown => Ok(()),
    }
}

/// A fake model running inside the current Tokio runtime, for Rust tests. It stops when dropped.
#[derive(Debug)]
pub struct FakeModelServer {
    address: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl FakeModelServer {
    /// Starts a fake model on `127.0.0.1` with a free port.
    pub async fn start() -> std::io::Result<FakeModelServer> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let task = tokio::spawn(async move {
            let _ = serve(listener, std::future::pending()).await;
        });
        Ok(FakeModelServer { address, task })
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The base URL to give an OpenAI client: `http://ADDR/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.address)
    }
}

impl Drop for FakeModelServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// ----- Requests -----

#[derive(Deserialize)]
struct ChatRequest {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    messages: Vec<RequestMessage>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
}

#[derive(Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

#[derive(Deserialize)]
struct RequestMessage {
    #[serde(default)]
    role: String,
    #[serde(default)]
    content: Option<Content>,
}

/// Message content: a string, or an array of parts whose `text`s count.
#[derive(Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Deserialize)]
struct ContentPart {
    #[serde(default)]
    text: Option<String>,
}

impl RequestMessage {
    fn text(&self) -> String {
        match &self.content {
            Some(Content::Text(text)) => text.clone(),
            Some(Content::Parts(parts)) => parts.iter().filter_map(|part| part.text.as_deref()).collect(),
            None => String::new(),
        }
    }

    fn char_count(&self) -> usize {
        match &self.content {
            Some(Content::Text(text)) => text.chars().count(),
            Some(Content::Parts(parts)) => {
                parts.iter().filter_map(|part| part.text.as_deref()).map(|text| text.chars().count()).sum()
            }
            None => 0,
        }
    }
}

// ----- Directives -----

/// The directives found in the last user message.
#[derive(Debug, Default, PartialEq)]
struct Directives<'a> {
    /// `(name, arguments)` per `[tool:...]`, in order.
    tools: Vec<(&'a str, &'a str)>,
    tokens: Option<u64>,
    delay: Option<Duration>,
    reasoning: bool,
    history: bool,
    error: Option<u16>,
    midstream_error: bool,
}

impl<'a> Directives<'a> {
    fn parse(text: &'a str) -> Self {
        let mut directives = Directives::default();
        let mut rest = text;
        while let Some(start) = rest.find('[') {
            let inner = &rest[start + 1..];
            match directives.take(inner) {
                Some(consumed) => rest = &inner[consumed..],
                None => rest = inner,
            }
        }
        directives
    }

    /// Reads one directive at the start of `inner` (just after `[`); returns how many bytes it
    /// used, including the closing `]`.
    fn take(&mut self, inner: &'a str) -> Option<usize> {
        if let Some(after) = inner.strip_prefix("tool:") {
            let (name, arguments, used) = parse_tool(after)?;
            self.tools.push((name, arguments));
            return Some("tool:".len() + used);
        }
        for flag in ["reasoning]", "history]", "midstream-error]"] {
            if inner.starts_with(flag) {
                match flag {
                    "reasoning]" => self.reasoning = true,
                    "history]" => self.history = true,
                    _ => self.midstream_error = true,
                }
                return Some(flag.len());
            }
        }
        for key in ["tokens:", "delay:", "error:"] {
            if let Some(after) = inner.strip_prefix(key) {
                let end = after.find(']')?;
                let number: u64 = after[..end].trim().parse().ok()?;
                match key {
                    "tokens:" => self.tokens = Some(number.min(MAX_TOKENS_DIRECTIVE)),
                    "delay:" => self.delay = Some(Duration::from_millis(number)),
                    _ => self.error = Some(u16::try_from(number).ok()?),
                }
                return Some(key.len() + end + 1);
            }
        }
        None
    }
}

/// Parses `NAME]` or `NAME ARGS]`: the name, the arguments and the bytes used.
fn parse_tool(after: &str) -> Option<(&str, &str, usize)> {
    let name_end = after.find(|c: char| c.is_whitespace() || c == ']')?;
    let name = &after[..name_end];
    if name.is_empty() {
        return None;
    }
    let rest = &after[name_end..];
    let arguments_start = name_end + (rest.len() - rest.trim_start().len());
    let rest = rest.trim_start();
    if rest.starts_with(']') {
        return Some((name, "{}", arguments_start + 1));
    }
    // A JSON value followed by `]`, taken verbatim.
    let mut values = serde_json::Deserializer::from_str(rest).into_iter::<serde::de::IgnoredAny>();
    if let Some(Ok(_)) = values.next() {
        let json_end = values.byte_offset();
        let after_json = &rest[json_end..];
        if after_json.trim_start().starts_with(']') {
            let close = json_end + (after_json.len() - after_json.trim_start().len());
            return Some((name, &rest[..json_end], arguments_start + close + 1));
        }
    }
    // Not JSON: everything up to the next `]`.
    let close = rest.find(']')?;
    Some((name, rest[..close].trim(), arguments_start + close + 1))
}

// ----- Answers -----

/// What the model answers, before it is rendered as a stream or as one JSON.
struct Plan<'a> {
    reasoning: bool,
    body: PlanBody<'a>,
    delay: Option<Duration>,
}

enum PlanBody<'a> {
    /// A text sent word by word, finish `stop`.
    Words(String),
    /// `tok1 ` ... `tokN `, finish `stop`.
    Tokens(u64),
    /// `(id number, name, arguments)` per call, finish `tool_calls`.
    ToolCalls(Vec<(u64, &'a str, &'a str)>),
    /// Two chunks, then an error event.
    MidstreamError,
}

/// Up to three argument fragments of roughly equal size, cut at character boundaries.
fn fragments(arguments: &str) -> impl Iterator<Item = &str> {
    let size = arguments.len().div_ceil(3).max(1);
    let mut rest = arguments;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut end = size.min(rest.len());
        while !rest.is_char_boundary(end) {
            end += 1;
        }
        let (piece, tail) = rest.split_at(end);
        rest = tail;
        Some(piece)
    })
}

impl Plan<'_> {
    /// The content, reasoning and tool-call chunks the answer streams.
    fn chunk_count(&self) -> u64 {
        let reasoning = if self.reasoning { REASONING_CHUNKS.len() as u64 } else { 0 };
        let body = match &self.body {
            PlanBody::Words(text) => text.split_inclusive(' ').count() as u64,
            PlanBody::Tokens(count) => *count,
            PlanBody::ToolCalls(calls) => {
                calls.iter().map(|(_, _, arguments)| 1 + fragments(arguments).count() as u64).sum()
            }
            PlanBody::MidstreamError => MIDSTREAM_CHUNKS.len() as u64,
        };
        reasoning + body
    }

    fn finish_reason(&self) -> &'static str {
        match self.body {
            PlanBody::ToolCalls(_) => "tool_calls",
            _ => "stop",
        }
    }
}

async fn chat_completions(State(state): State<Arc<FakeState>>, body: Bytes) -> Response {
    let request: ChatRequest = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(error) => {
            return error_response(
                StatusCode::BAD_REQUEST,
                &format!("invalid request body: {error}"),
                "invalid_request_error",
            );
        }
    };
    state.record(Bytes::copy_from_slice(&body));
    let request_number = state.request_counter.fetch_add(1, Ordering::Relaxed) + 1;

    let last_user_text = request.messages.iter().rev().find(|message| message.role == "user").map(RequestMessage::text);
    let last_user_text = last_user_text.unwrap_or_default();
    let directives = Directives::parse(&last_user_text);
    let last_is_tool = request.messages.last().is_some_and(|message| message.role == "tool");

    if !last_is_tool && let Some(status) = directives.error {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = error_response(status, &format!("fake error {}", status.as_u16()), "fake");
        if status == StatusCode::TOO_MANY_REQUESTS {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        return response;
    }

    let body = if let Some(tool_message) = request.messages.last().filter(|_| last_is_tool) {
        PlanBody::Words(format!("Tool result: {}", tool_message.text()))
    } else if directives.midstream_error {
        PlanBody::MidstreamError
    } else if !directives.tools.is_empty() {
        let first = state.tool_call_counter.fetch_add(directives.tools.len() as u64, Ordering::Relaxed) + 1;
        PlanBody::ToolCalls(
            directives
                .tools
                .iter()
                .enumerate()
                .map(|(i, (name, arguments))| (first + i as u64, *name, *arguments))
                .collect(),
        )
    } else if let Some(count) = directives.tokens {
        PlanBody::Tokens(count)
    } else if directives.history {
        let texts: Vec<String> =
            request.messages.iter().filter(|m| m.role == "user").map(RequestMessage::text).collect();
        PlanBody::Words(format!("History: {}", texts.join(" | ")))
    } else {
        PlanBody::Words(format!("You said: {last_user_text}"))
    };
    let plan = Plan { reasoning: directives.reasoning, body, delay: directives.delay };

    let prompt_tokens = (request.messages.iter().map(RequestMessage::char_count).sum::<usize>() as u64 / 4).max(1);
    let model = request.model.as_deref().unwrap_or("fake-model");
    let created = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let id = format!("chatcmpl-fake-{request_number}");

    if request.stream.unwrap_or(false) {
        let include_usage = request.stream_options.and_then(|options| options.include_usage).unwrap_or(false);
        stream_response(&plan, &id, created, model, prompt_tokens, include_usage)
    } else {
        if let Some(delay) = plan.delay {
            tokio::time::sleep(delay.saturating_mul(u32::try_from(plan.chunk_count()).unwrap_or(u32::MAX))).await;
        }
        json_response(&plan, &id, created, model, prompt_tokens)
    }
}

impl FakeState {
    fn record(&self, body: Bytes) {
        let mut requests = self.requests.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if requests.len() == MAX_RECORDED_REQUESTS {
            requests.pop_front();
        }
        requests.push_back(body);
    }
}

async fn list_requests(State(state): State<Arc<FakeState>>) -> Response {
    let requests = state.requests.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut json = Vec::with_capacity(2 + requests.iter().map(|body| body.len() + 1).sum::<usize>());
    json.push(b'[');
    for (i, body) in requests.iter().enumerate() {
        if i > 0 {
            json.push(b',');
        }
        json.extend_from_slice(body);
    }
    json.push(b']');
    ([(header::CONTENT_TYPE, "application/json")], json).into_response()
}

async fn clear_requests(State(state): State<Arc<FakeState>>) -> StatusCode {
    state.requests.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clear();
    StatusCode::NO_CONTENT
}

fn error_response(status: StatusCode, message: &str, kind: &str) -> Response {
    let body = serde_json::json!({"error": {"message": message, "type": kind, "code": kind}});
    (status, axum::Json(body)).into_response()
}

/// Renders the plan as a `chat.completion` JSON.
fn json_response(plan: &Plan<'_>, id: &str, created: u64, model: &str, prompt_tokens: u64) -> Response {
    let mut message = serde_json::Map::new();
    message.insert("role".into(), "assistant".into());
    let content = match &plan.body {
        PlanBody::Words(text) => Some(text.clone()),
        PlanBody::Tokens(count) => {
            let mut text = String::new();
            for n in 1..=*count {
                let _ = write!(text, "tok{n} ");
            }
            Some(text)
        }
        PlanBody::ToolCalls(_) => None,
        PlanBody::MidstreamError => {
            return error_response(StatusCode::INTERNAL_SERVER_ERROR, "fake mid-stream failure", "fake");
        }
    };
    message.insert("content".into(), content.into());
    if plan.reasoning {
        message.insert("reasoning_content".into(), REASONING_CHUNKS.concat().into());
    }
    if let PlanBody::ToolCalls(calls) = &plan.body {
        let calls: Vec<serde_json::Value> = calls
            .iter()
            .map(|(number, name, arguments)| {
                serde_json::json!({
                    "id": format!("call_{number}"),
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                })
            })
            .collect();
        message.insert("tool_calls".into(), calls.into());
    }
    message.insert("refusal".into(), serde_json::Value::Null);
    let completion_tokens = plan.chunk_count();
    let body = serde_json::json!({
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "system_fingerprint": "fp_fake",
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": plan.finish_reason()}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    });
    axum::Json(body).into_response()
}

/// Renders the plan as an SSE body: in one piece without delay, frame by frame with one.
fn stream_response(
    plan: &Plan<'_>,
    id: &str,
    created: u64,
    model: &str,
    prompt_tokens: u64,
    include_usage: bool,
) -> Response {
    let mut sse = SseWriter::new(id, created, model, include_usage);
    sse.delta(|buf| buf.extend_from_slice(br#"{"role":"assistant","content":""}"#), None);
    if plan.reasoning {
        for piece in REASONING_CHUNKS {
            sse.delta_field("reasoning_content", piece);
        }
    }
    match &plan.body {
        PlanBody::Words(text) => {
            for word in text.split_inclusive(' ') {
                sse.delta_field("content", word);
            }
        }
        PlanBody::Tokens(count) => {
            for n in 1..=*count {
                sse.delta(
                    |buf| {
                        buf.extend_from_slice(br#"{"content":"tok"#);
                        push_u64(buf, n);
                        buf.extend_from_slice(br#" "}"#);
                    },
                    None,
                );
            }
        }
        PlanBody::ToolCalls(calls) => {
            for (index, (number, name, arguments)) in calls.iter().enumerate() {
                sse.delta(
                    |buf| {
                        buf.extend_from_slice(br#"{"tool_calls":[{"index":"#);
                        push_u64(buf, index as u64);
                        buf.extend_from_slice(br#","id":"call_"#);
                        push_u64(buf, *number);
                        buf.extend_from_slice(br#"","type":"function","function":{"name":"#);
                        push_json_string(buf, name);
                        buf.extend_from_slice(br#","arguments":""}}]}"#);
                    },
                    None,
                );
                for fragment in fragments(arguments) {
                    sse.delta(
                        |buf| {
                            buf.extend_from_slice(br#"{"tool_calls":[{"index":"#);
                            push_u64(buf, index as u64);
                            buf.extend_from_slice(br#","function":{"arguments":"#);
                            push_json_string(buf, fragment);
                            buf.extend_from_slice(b"}}]}");
                        },
                        None,
                    );
                }
            }
        }
        PlanBody::MidstreamError => {
            for piece in MIDSTREAM_CHUNKS {
                sse.delta_field("content", piece);
            }
            sse.raw_frame(MIDSTREAM_ERROR);
            return sse.into_response(plan.delay, false);
        }
    }
    sse.delta(|buf| buf.extend_from_slice(b"{}"), Some(plan.finish_reason()));
    if include_usage {
        sse.usage(prompt_tokens, plan.chunk_count());
    }
    sse.raw_frame(b"data: [DONE]\n\n");
    sse.into_response(plan.delay, true)
}

/// Writes `chat.completion.chunk` frames into one buffer.
struct SseWriter {
    buf: Vec<u8>,
    /// Everything of a chunk before the value of `choices`.
    prefix: Vec<u8>,
    /// Where each frame ends in `buf`.
    frame_ends: Vec<usize>,
    include_usage: bool,
}

impl SseWriter {
    fn new(id: &str, created: u64, model: &str, include_usage: bool) -> Self {
        let mut prefix = Vec::with_capacity(160);
        prefix.extend_from_slice(br#"{"id":"#);
        push_json_string(&mut prefix, id);
        prefix.extend_from_slice(br#","object":"chat.completion.chunk","created":"#);
        push_u64(&mut prefix, created);
        prefix.extend_from_slice(br#","model":"#);
        push_json_string(&mut prefix, model);
        prefix.extend_from_slice(br#","system_fingerprint":"fp_fake","choices":"#);
        SseWriter { buf: Vec::with_capacity(4096), prefix, frame_ends: Vec::new(), include_usage }
    }

    /// One chunk whose delta `write_delta` writes.
    fn delta(&mut self, write_delta: impl FnOnce(&mut Vec<u8>), finish_reason: Option<&str>) {
        self.buf.extend_from_slice(b"data: ");
        self.buf.extend_from_slice(&self.prefix);
        self.buf.extend_from_slice(br#"[{"index":0,"delta":"#);
        write_delta(&mut self.buf);
        self.buf.extend_from_slice(br#","logprobs":null,"finish_reason":"#);
        match finish_reason {
            Some(reason) => push_json_string(&mut self.buf, reason),
            None => self.buf.extend_from_slice(b"null"),
        }
        self.buf.push(b'}');
        self.buf.push(b']');
        if self.include_usage {
            self.buf.extend_from_slice(br#","usage":null"#);
        }
        self.buf.extend_from_slice(b"}\n\n");
        self.frame_ends.push(self.buf.len());
    }

    /// One chunk whose delta is `{"FIELD":"TEXT"}`.
    fn delta_field(&mut self, field: &str, text: &str) {
        self.delta(
            |buf| {
                buf.push(b'{');
                push_json_string(buf, field);
                buf.push(b':');
                push_json_string(buf, text);
                buf.push(b'}');
            },
            None,
        );
    }

    /// The usage-only chunk: `choices: []`.
    fn usage(&mut self, prompt_tokens: u64, completion_tokens: u64) {
        self.buf.extend_from_slice(b"data: ");
        self.buf.extend_from_slice(&self.prefix);
        self.buf.extend_from_slice(br#"[],"usage":{"prompt_tokens":"#);
        push_u64(&mut self.buf, prompt_tokens);
        self.buf.extend_from_slice(br#","completion_tokens":"#);
        push_u64(&mut self.buf, completion_tokens);
        self.buf.extend_from_slice(br#","total_tokens":"#);
        push_u64(&mut self.buf, prompt_tokens + completion_tokens);
        self.buf.extend_from_slice(b"}}\n\n");
        self.frame_ends.push(self.buf.len());
    }

    fn raw_frame(&mut self, frame: &[u8]) {
        self.buf.extend_from_slice(frame);
        self.frame_ends.push(self.buf.len());
    }

    /// The response: one piece without delay; otherwise each frame after a sleep (the final
    /// `[DONE]`, when `ends_with_done`, follows the last chunk without one).
    fn into_response(self, delay: Option<Duration>, ends_with_done: bool) -> Response {
        let headers = [
            (header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream")),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ];
        let bytes = Bytes::from(self.buf);
        let Some(delay) = delay.filter(|delay| !delay.is_zero()) else {
            return (headers, bytes).into_response();
        };
        let frame_count = self.frame_ends.len();
        let frames = self.frame_ends.into_iter().enumerate().scan(0, move |start, (index, end)| {
            let frame = bytes.slice(*start..end);
            *start = end;
            let sleep_first = !(ends_with_done && index + 1 == frame_count);
            Some((frame, sleep_first))
        });
        let stream = futures_util::stream::unfold(frames, move |mut frames| async move {
            let (frame, sleep_first) = frames.next()?;
            if sleep_first {
                tokio::time::sleep(delay).await;
            }
            Some((Ok::<Bytes, Infallible>(frame), frames))
        });
        (headers, Body::from_stream(stream)).into_response()
    }
}

/// Appends `value` in decimal.
fn push_u64(buf: &mut Vec<u8>, value: u64) {
    let mut digits = [0u8; 20];
    let mut position = digits.len();
    let mut rest = value;
    loop {
        position -= 1;
        digits[position] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    buf.extend_from_slice(&digits[position..]);
}

/// Appends `text` as a JSON string literal.
fn push_json_string(buf: &mut Vec<u8>, text: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    buf.push(b'"');
    let bytes = text.as_bytes();
    let mut start = 0;
    for (i, &byte) in bytes.iter().enumerate() {
        let escape: &[u8] = match byte {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1f => b"",
            _ => continue,
        };
        buf.extend_from_slice(&bytes[start..i]);
        if escape.is_empty() {
            buf.extend_from_slice(b"\\u00");
            buf.push(HEX[(byte >> 4) as usize]);
            buf.push(HEX[(byte & 0xf) as usize]);
        } else {
            buf.extend_from_slice(escape);
        }
        start = i + 1;
    }
    buf.extend_from_slice(&bytes[start..]);
    buf.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives_parse_with_json_arguments_and_ignore_strangers() {
        let text = r#"please [tool:get_weather {"city": "Pa]ris", "n": [1, 2]}] and [tool:now] [tool:bad not json]
            [tokens:50] [delay:20] [reasoning] [history] [error:429] [midstream-error] [unknown] [tokens:x]"#;
        let directives = Directives::parse(text);
        assert_eq!(
            directives,
            Directives {
                tools: vec![("get_weather", r#"{"city": "Pa]ris", "n": [1, 2]}"#), ("now", "{}"), ("bad", "not json"),],
                tokens: Some(50),
                delay: Some(Duration::from_millis(20)),
                reasoning: true,
                history: true,
                error: Some(429),
                midstream_error: true,
            }
        );
        assert_eq!(Directives::parse("no directives [here"), Directives::default());
    }

    #[test]
    fn recording_keeps_the_most_recent_requests() {
        let state = FakeState::default();
        for n in 0..MAX_RECORDED_REQUESTS + 5 {
            state.record(Bytes::from(n.to_string()));
        }
        let requests = state.requests.lock().unwrap();
        assert_eq!(requests.len(), MAX_RECORDED_REQUESTS);
        assert_eq!(requests.front().unwrap(), &Bytes::from("5"));
        assert_eq!(requests.back().unwrap(), &Bytes::from((MAX_RECORDED_REQUESTS + 4).to_string()));
    }

    #[test]
    fn fragments_cover_the_arguments_at_character_boundaries() {
        for arguments in ["{}", r#"{"city": "Zürich"}"#, "ü", "x"] {
            let pieces: Vec<&str> = fragments(arguments).collect();
            assert!(!pieces.is_empty() && pieces.len() <= 3, "{pieces:?}");
            assert_eq!(pieces.concat(), arguments);
        }
        assert_eq!(fragments("").count(), 0);
    }

    #[test]
    fn json_strings_and_numbers_are_written_like_serde_json() {
        for text in ["plain", "quote \" back \\ slash", "line\nfeed\ttab\r", "\u{1}\u{1f}", "é😀"] {
            let mut buf = Vec::new();
            push_json_string(&mut buf, text);
            assert_eq!(String::from_utf8(buf).unwrap(), serde_json::to_string(text).unwrap());
        }
        for value in [0, 7, 10, 1234567890, u64::MAX] {
            let mut buf = Vec::new();
            push_u64(&mut buf, value);
            assert_eq!(String::from_utf8(buf).unwrap(), value.to_string());
        }
    }
}
