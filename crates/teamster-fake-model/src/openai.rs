//! The OpenAI chat completions endpoint: its requests, and the plan rendered as
//! `chat.completion.chunk` frames or as one `chat.completion`.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Deserialize;

use crate::frames::{Frames, push_json_string, push_u64};
use crate::plan::{Chat, MIDSTREAM_CHUNKS, MIDSTREAM_MESSAGE, Outcome, Plan, PlanBody, REASONING_CHUNKS, fragments};
use crate::thoughts::Thought;
use crate::{Content, FakeState};

/// The error event `[midstream-error]` ends with.
const MIDSTREAM_ERROR: &[u8] = b"data: {\"error\":{\"message\":\"fake mid-stream failure\"}}\n\n";

#[derive(Deserialize)]
struct ChatRequest {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    messages: Vec<RequestMessage>,
    #[serde(default)]
    tools: Vec<serde::de::IgnoredAny>,
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
    /// An assistant message's reasoning, sent back.
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    tool_calls: Vec<RequestToolCall>,
}

/// An assistant message's tool call; only its id matters here.
#[derive(Deserialize)]
struct RequestToolCall {
    #[serde(default)]
    id: String,
}

impl RequestMessage {
    fn text(&self) -> String {
        self.content.as_ref().map(Content::text).unwrap_or_default()
    }

    /// The reasoning an assistant message carries back, and the ids of its tool calls; `None` for
    /// other messages.
    fn thoughts(&self) -> Option<(Vec<Thought>, Vec<String>)> {
        if self.role != "assistant" {
            return None;
        }
        let reasoning = self.reasoning_content.iter().filter(|text| !text.is_empty()).cloned().map(Thought::Text);
        Some((reasoning.collect(), self.tool_calls.iter().map(|call| call.id.clone()).collect()))
    }
}

impl Chat for ChatRequest {
    fn last_user_text(&self) -> String {
        self.messages.iter().rev().find(|message| message.role == "user").map(RequestMessage::text).unwrap_or_default()
    }

    fn final_tool_result(&self) -> Option<String> {
        let trailing: Vec<String> =
            self.messages.iter().rev().take_while(|message| message.role == "tool").map(RequestMessage::text).collect();
        (!trailing.is_empty()).then(|| trailing.into_iter().rev().collect::<Vec<_>>().join(" | "))
    }

    fn user_texts(&self) -> Vec<String> {
        self.messages.iter().filter(|message| message.role == "user").map(RequestMessage::text).collect()
    }

    fn system_text(&self) -> String {
        self.messages.iter().filter(|message| message.role == "system").map(RequestMessage::text).collect()
    }

    fn offers_tools(&self) -> bool {
        !self.tools.is_empty()
    }
}

pub(crate) async fn chat_completions(State(state): State<Arc<FakeState>>, body: Bytes) -> Response {
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
    let request_number = state.next_request_number();
    if let Err(message) = state.check_thoughts(&request.messages, RequestMessage::thoughts) {
        return error_response(StatusCode::BAD_REQUEST, &message, "invalid_request_error");
    }

    let last_user_text = request.last_user_text();
    let plan = match crate::plan::decide(&state, &request, &last_user_text) {
        Outcome::Answer(plan) => plan,
        Outcome::Fail(status) => {
            let mut response = error_response(status, &format!("fake error {}", status.as_u16()), "fake");
            if status == StatusCode::TOO_MANY_REQUESTS {
                response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            return response;
        }
    };

    let prompt_chars: usize =
        request.messages.iter().map(|message| message.content.as_ref().map_or(0, Content::char_count)).sum();
    let prompt_tokens = crate::prompt_tokens(prompt_chars);
    let model = request.model.as_deref().unwrap_or("fake-model");
    let created = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let id = format!("chatcmpl-fake-{request_number}");
    if plan.thinking {
        state.issue_thoughts(&[Thought::Text(REASONING_CHUNKS.concat())], &plan.call_ids("call_"));
    }

    if request.stream.unwrap_or(false) {
        let include_usage = request.stream_options.and_then(|options| options.include_usage).unwrap_or(false);
        stream_response(&plan, &id, created, model, prompt_tokens, include_usage)
    } else {
        plan.wait_whole().await;
        json_response(&plan, &id, created, model, prompt_tokens)
    }
}

fn error_response(status: StatusCode, message: &str, kind: &str) -> Response {
    let body = serde_json::json!({"error": {"message": message, "type": kind, "code": kind}});
    (status, axum::Json(body)).into_response()
}

fn finish_reason(plan: &Plan<'_>) -> &'static str {
    if plan.calls_tools() { "tool_calls" } else { "stop" }
}

/// Renders the plan as a `chat.completion` JSON.
fn json_response(plan: &Plan<'_>, id: &str, created: u64, model: &str, prompt_tokens: u64) -> Response {
    if let PlanBody::MidstreamError = plan.body {
        return error_response(StatusCode::INTERNAL_SERVER_ERROR, MIDSTREAM_MESSAGE, "fake");
    }
    let mut message = serde_json::Map::new();
    message.insert("role".into(), "assistant".into());
    message.insert("content".into(), plan.text().into());
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
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish_reason(plan)}],
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
            return sse.frames.into_response(plan.delay, false);
        }
    }
    sse.delta(|buf| buf.extend_from_slice(b"{}"), Some(finish_reason(plan)));
    if include_usage {
        sse.usage(prompt_tokens, plan.chunk_count());
    }
    sse.raw_frame(b"data: [DONE]\n\n");
    sse.frames.into_response(plan.delay, true)
}

/// Writes `chat.completion.chunk` frames.
struct SseWriter {
    frames: Frames,
    /// Everything of a chunk before the value of `choices`.
    prefix: Vec<u8>,
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
        SseWriter { frames: Frames::new(), prefix, include_usage }
    }

    /// One chunk whose delta `write_delta` writes.
    fn delta(&mut self, write_delta: impl FnOnce(&mut Vec<u8>), finish_reason: Option<&str>) {
        let buf = &mut self.frames.buf;
        buf.extend_from_slice(b"data: ");
        buf.extend_from_slice(&self.prefix);
        buf.extend_from_slice(br#"[{"index":0,"delta":"#);
        write_delta(buf);
        buf.extend_from_slice(br#","logprobs":null,"finish_reason":"#);
        match finish_reason {
            Some(reason) => push_json_string(buf, reason),
            None => buf.extend_from_slice(b"null"),
        }
        buf.push(b'}');
        buf.push(b']');
        if self.include_usage {
            buf.extend_from_slice(br#","usage":null"#);
        }
        buf.extend_from_slice(b"}\n\n");
        self.frames.end_frame();
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
        let buf = &mut self.frames.buf;
        buf.extend_from_slice(b"data: ");
        buf.extend_from_slice(&self.prefix);
        buf.extend_from_slice(br#"[],"usage":{"prompt_tokens":"#);
        push_u64(buf, prompt_tokens);
        buf.extend_from_slice(br#","completion_tokens":"#);
        push_u64(buf, completion_tokens);
        buf.extend_from_slice(br#","total_tokens":"#);
        push_u64(buf, prompt_tokens + completion_tokens);
        buf.extend_from_slice(b"}}\n\n");
        self.frames.end_frame();
    }

    fn raw_frame(&mut self, frame: &[u8]) {
        self.frames.buf.extend_from_slice(frame);
        self.frames.end_frame();
    }
}
