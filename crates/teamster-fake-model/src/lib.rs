//! A fake model server for tests and benchmarks, speaking both OpenAI chat completions and
//! Anthropic Messages.
//!
//! It speaks the real wire formats: `POST /v1/chat/completions` answers with
//! `chat.completion.chunk` SSE (tool-call deltas, usage, `[DONE]`) or a `chat.completion` JSON
//! when not streaming; `POST /v1/messages` answers with Messages SSE (`message_start`, a `ping`,
//! `content_block_start`/`_delta`/`_stop`, `message_delta` with the stop reason and usage,
//! `message_stop`) or a `message` JSON when not streaming. The answer is a deterministic function
//! of the request, scripted by directives in the text of the last user message, and means the
//! same on both endpoints: one plan, rendered twice.
//!
//! | Directive | Answer |
//! |---|---|
//! | (the conversation ends with tool results) | `Tool result: <their contents joined by " \| ">`, word by word, finish `stop` / `end_turn` |
//! | `[flaky:N:STATUS]` | for the first N requests with this exact last user message, the failure of `[error:STATUS]`; normal answers afterwards, as the rest of the message says |
//! | `[error:STATUS]` | HTTP `STATUS` with `{"error":{"message":"fake error STATUS","type":"fake","code":"fake"}}` (OpenAI) or `{"type":"error","error":{"type":TYPE,"message":"fake error STATUS"}}` (Anthropic, 529 being `overloaded_error`), and `Retry-After: 1` on 429 |
//! | `[midstream-error]` | text chunks `Partial ` and `answer`, then `data: {"error":{"message":"fake mid-stream failure"}}` (OpenAI) or an `event: error` of type `overloaded_error` (Anthropic), and the end of the body |
//! | `[tool:NAME]`, `[tool:NAME {json args}]` (repeatable) | one tool call per directive, in order, in one message, finish `tool_calls` / `tool_use` |
//! | `[tokens:N]` | exactly N text chunks `tok1 `, `tok2 `, ..., `tokN ` (N is capped at 100000) |
//! | (the request offers no tools and its system prompt says `summarize`) | `Summary: ` + every sentence of the user messages that contains `remember` (from that word on, each once), or `Summary: nothing to remember.` |
//! | `[json:VALUE]` | the JSON value exactly as written, word by word |
//! | `[history]` | `History: ` + the texts of all user messages joined by ` \| `, word by word |
//! | (anything else) | `You said: <text of the last user message>`, word by word |
//!
//! The first matching row wins, top to bottom. A tool result is an OpenAI `tool` message, or an
//! Anthropic user message whose last block is a `tool_result`; user texts leave tool results
//! aside, and on the Anthropic endpoint each text block of a user message counts as a user
//! message of its own (adapters merge consecutive user messages into one). Two modifiers combine with any answer: `[delay:MS]` sleeps MS milliseconds before every
//! frame (before the whole answer when not streaming), and `[reasoning]` sends the reasoning
//! chunks `Let `, `me `, `think.` before the text (`reasoning_content` deltas, or a thinking
//! block with the signature `fake-signature`). `[thinking]` does the same, but on the Anthropic
//! endpoint the thinking block's signature is new for each answer and a `redacted_thinking`
//! block (new data each time) follows it. Word by word means the text split after each space (`You `,
//! `said: `, ...), so the chunks concatenate to the exact text. Tool arguments are the JSON
//! written in the directive, verbatim (or everything up to the next `]` when it is not valid
//! JSON; `{}` when absent), streamed as a header (id and name, empty arguments) followed by up
//! to three argument fragments; a non-streamed Anthropic `tool_use` carries them as its `input`
//! object (`{}` when they are not one). Tool call ids are `call_N` (OpenAI) or `toolu_N`
//! (Anthropic), N counting the calls of the server's lifetime, so they are unique per request and
//! across requests. `[flaky:...]` counts per distinct last user message, like `[error:...]` only
//! when the conversation does not end with a tool result, and forgets the oldest messages beyond
//! [`MAX_REMEMBERED`].
//!
//! Usage: the prompt is the number of characters of all message contents (system prompt and
//! tool results included, tool calls and tool definitions not) divided by 4, at least 1; the
//! output is the number of text, reasoning and tool-call chunks. A streamed OpenAI answer ends
//! with a usage-only chunk (`choices: []`) when the request sets `stream_options.include_usage`.
//! On the Anthropic endpoint a request carrying any `cache_control` caches its prefix (the
//! system prompt and the tool definitions, whose size is the system prompt's characters divided
//! by 4): the first time that prefix is seen it is reported as `cache_creation_input_tokens`,
//! afterwards as `cache_read_input_tokens`, and `input_tokens` is the rest of the prompt. The
//! server remembers the last [`MAX_REMEMBERED`] prefixes.
//!
//! Reasoning sent back is checked as providers check it: on the Anthropic endpoint, every
//! `thinking` block of a request must carry a signature the server issued, for the same text, and
//! every `redacted_thinking` block data it issued; on both endpoints, an assistant message with a
//! tool call made under `[thinking]` must carry back exactly the reasoning of that answer (its
//! blocks, in order, or its `reasoning_content`). Otherwise the answer is a 400
//! (`invalid_request_error`) naming the message, as `messages.N: ...`.
//!
//! Every well-formed request body, to either endpoint, is recorded: `GET /requests` returns them
//! as a JSON array, most recent last, at most [`MAX_RECORDED_REQUESTS`]; `DELETE /requests`
//! forgets them. `GET /healthz` answers 200. Started with an API key (`fake-model --api-key KEY`),
//! the server answers a model request without that key with a 401. The server is the floor the benchmarks compare
//! against, so an answer without delay is rendered into one buffer and sent in one piece, and
//! nothing is logged per request.

mod anthropic;
mod frames;
mod openai;
mod plan;
mod thoughts;

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::hash::Hash;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use bytes::Bytes;
use serde::Deserialize;

/// How many request bodies `GET /requests` keeps.
pub const MAX_RECORDED_REQUESTS: usize = 1000;
/// How many `[flaky:...]` messages and cached prefixes the server remembers.
pub const MAX_REMEMBERED: usize = 10_000;

/// The fake server's shared state.
#[derive(Default)]
struct FakeState {
    /// The recorded request bodies, oldest first; each is valid JSON.
    requests: Mutex<VecDeque<Bytes>>,
    /// Requests answered so far; numbers the answer ids.
    request_counter: AtomicU64,
    /// Tool calls made so far; numbers the tool call ids.
    tool_call_counter: AtomicU64,
    /// How many times each `[flaky:...]` message has failed.
    flaky_failures: Mutex<BoundedMap<String, u64>>,
    /// The hashes of the prompt prefixes the Anthropic endpoint has cached.
    cached_prefixes: Mutex<BoundedMap<u64, ()>>,
    /// The reasoning sent, to check what requests carry back.
    thoughts: Mutex<thoughts::Ledger>,
}

/// The fake server's routes, with fresh state.
pub fn router() -> Router {
    router_with_key(None)
}

/// The fake server's routes, with fresh state; with `api_key`, a model request that does not
/// carry it (as `Authorization: Bearer KEY` or `x-api-key: KEY`) is answered 401 and not recorded.
pub fn router_with_key(api_key: Option<String>) -> Router {
    let models = Router::new()
        .route("/v1/chat/completions", post(openai::chat_completions))
        .route("/chat/completions", post(openai::chat_completions))
        .route("/v1/messages", post(anthropic::messages))
        .route("/messages", post(anthropic::messages));
    let models = match api_key {
        Some(key) => models.route_layer(axum::middleware::from_fn(move |request: axum::extract::Request, next: axum::middleware::Next| {
            let allowed = carries_key(request.headers(), &key);
            async move { if allowed { next.run(request).await } else { wrong_key() } }
        })),
        None => models,
    };
    models
        .route("/requests", get(list_requests).delete(clear_requests))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(Arc::new(FakeState::default()))
}

/// Whether a request carries `key` the OpenAI or the Anthropic way.
fn carries_key(headers: &axum::http::HeaderMap, key: &str) -> bool {
    let bearer = headers.get(header::AUTHORIZATION).and_then(|value| value.to_str().ok()).and_then(|value| value.strip_prefix("Bearer "));
    let api_key = headers.get("x-api-key").and_then(|value| value.to_str().ok());
    bearer == Some(key) || api_key == Some(key)
}

fn wrong_key() -> Response {
    let body = serde_json::json!({"error": {"message": "fake: wrong or missing API key", "type": "authentication_error", "code": "invalid_api_key"}});
    (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response()
}

/// Serves the fake model on `listener` until `shutdown` completes; open connections, even those
/// in the middle of a delayed stream, are dropped then rather than waited for.
pub async fn serve(listener: tokio::net::TcpListener, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
    serve_router(listener, router(), shutdown).await
}

/// Serves `router` (one of this crate's) like [`serve`].
pub async fn serve_router(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let listener = listener.tap_io(|stream| {
        // Small SSE frames must not wait for Nagle's algorithm; failure only costs latency.
        let _ = stream.set_nodelay(true);
    });
    let server = std::future::IntoFuture::into_future(axum::serve(listener, router));
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

    /// The base URL to give an OpenAI or Anthropic client: `http://ADDR/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.address)
    }
}

impl Drop for FakeModelServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Message content: a string, or an array of parts whose `text`s count (anything else counts as
/// no text).
#[derive(Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
    Other(serde::de::IgnoredAny),
}

#[derive(Deserialize)]
struct ContentPart {
    #[serde(default)]
    text: Option<String>,
}

impl Content {
    fn text(&self) -> String {
        match self {
            Content::Text(text) => text.clone(),
            Content::Parts(parts) => parts.iter().filter_map(|part| part.text.as_deref()).collect(),
            Content::Other(_) => String::new(),
        }
    }

    fn char_count(&self) -> usize {
        match self {
            Content::Text(text) => text.chars().count(),
            Content::Parts(parts) => {
                parts.iter().filter_map(|part| part.text.as_deref()).map(|text| text.chars().count()).sum()
            }
            Content::Other(_) => 0,
        }
    }
}

/// The prompt tokens of a prompt of `chars` characters: a quarter, at least 1.
fn prompt_tokens(chars: usize) -> u64 {
    (chars as u64 / 4).max(1)
}

impl FakeState {
    fn record(&self, body: Bytes) {
        let mut requests = self.requests.lock().unwrap_or_else(PoisonError::into_inner);
        if requests.len() == MAX_RECORDED_REQUESTS {
            requests.pop_front();
        }
        requests.push_back(body);
    }

    /// The number of the request being answered, from 1.
    fn next_request_number(&self) -> u64 {
        self.request_counter.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Reserves `count` tool call numbers; returns the first.
    fn next_tool_call_numbers(&self, count: u64) -> u64 {
        self.tool_call_counter.fetch_add(count, Ordering::Relaxed) + 1
    }

    /// Whether a request whose last user message is `text` fails, `text` being allowed
    /// `failures` failures in all; counts the failure.
    fn count_flaky_failure(&self, text: &str, failures: u64) -> bool {
        let mut counts = self.flaky_failures.lock().unwrap_or_else(PoisonError::into_inner);
        let failed = counts.get(text).copied().unwrap_or(0);
        if failed >= failures {
            return false;
        }
        counts.insert(text.to_owned(), failed + 1);
        true
    }

    /// Remembers the reasoning of an answer that calls `call_ids` (see [`thoughts::Ledger::issue`]).
    fn issue_thoughts(&self, thoughts: &[thoughts::Thought], call_ids: &[String]) {
        self.thoughts.lock().unwrap_or_else(PoisonError::into_inner).issue(thoughts, call_ids);
    }

    /// Checks the reasoning each assistant message of a request carries back, `thoughts_of`
    /// giving a message's reasoning and tool call ids (`None` for other messages); the error
    /// names the message by its index.
    fn check_thoughts<M>(
        &self,
        messages: &[M],
        thoughts_of: impl Fn(&M) -> Option<(Vec<thoughts::Thought>, Vec<String>)>,
    ) -> Result<(), String> {
        let ledger = self.thoughts.lock().unwrap_or_else(PoisonError::into_inner);
        for (index, message) in messages.iter().enumerate() {
            if let Some((returned, call_ids)) = thoughts_of(message) {
                ledger.check(&returned, &call_ids).map_err(|error| format!("messages.{index}: {error}"))?;
            }
        }
        Ok(())
    }

    /// Remembers a cached prefix; returns whether it was already cached.
    fn remember_prefix(&self, hash: u64) -> bool {
        let mut prefixes = self.cached_prefixes.lock().unwrap_or_else(PoisonError::into_inner);
        prefixes.insert(hash, ()).is_some()
    }
}

/// A map that forgets its oldest keys beyond [`MAX_REMEMBERED`].
struct BoundedMap<K, V> {
    values: HashMap<K, V>,
    /// The keys, oldest first.
    order: VecDeque<K>,
}

impl<K, V> Default for BoundedMap<K, V> {
    fn default() -> Self {
        BoundedMap { values: HashMap::new(), order: VecDeque::new() }
    }
}

impl<K: Hash + Eq + Clone, V> BoundedMap<K, V> {
    fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.values.get(key)
    }

    /// Inserts or replaces; returns the value replaced.
    fn insert(&mut self, key: K, value: V) -> Option<V> {
        let replaced = self.values.insert(key.clone(), value);
        if replaced.is_none() {
            self.order.push_back(key);
            if self.order.len() > MAX_REMEMBERED
                && let Some(oldest) = self.order.pop_front()
            {
                self.values.remove(&oldest);
            }
        }
        replaced
    }
}

async fn list_requests(State(state): State<Arc<FakeState>>) -> Response {
    let requests = state.requests.lock().unwrap_or_else(PoisonError::into_inner);
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
    state.requests.lock().unwrap_or_else(PoisonError::into_inner).clear();
    StatusCode::NO_CONTENT
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn remembered_things_are_bounded_and_the_oldest_go_first() {
        let state = FakeState::default();
        assert!(!state.remember_prefix(0));
        assert!(state.remember_prefix(0));
        for hash in 1..=MAX_REMEMBERED as u64 {
            assert!(!state.remember_prefix(hash));
        }
        assert_eq!(state.cached_prefixes.lock().unwrap().values.len(), MAX_REMEMBERED);
        assert!(!state.remember_prefix(0), "the oldest prefix was forgotten");

        assert!(state.count_flaky_failure("a [flaky:2:500]", 2));
        assert!(state.count_flaky_failure("a [flaky:2:500]", 2));
        assert!(!state.count_flaky_failure("a [flaky:2:500]", 2));
        assert!(state.count_flaky_failure("b [flaky:2:500]", 2), "each message counts on its own");
    }
}
