//! Traces of turns, following the OpenTelemetry GenAI conventions: a span per turn
//! (`invoke_agent`), per model call (`chat`), per tool call (`execute_tool`) and per sub-agent
//! thread (`invoke_agent`), made from the turn's events as the sink sees them, so the engine
//! knows nothing of tracing. Deltas are never looked at: a model call's span starts with its
//! placeholder and ends when the sink records the whole message. A turn's spans go out together when it ends (`otlp.rs`).

use std::collections::HashMap;

use teamster_protocol::event::{ModelMessage, ThreadState};
use teamster_protocol::{Event, MAIN_THREAD_ID, TurnState};

tokio::task_local! {
    /// The trace of the request being handled, when its caller sent one.
    static CALLER: Option<TraceParent>;
}

/// Runs `future` (a request's handling) with the caller's trace, which the turns it starts
/// continue.
pub async fn with_caller_trace<F: Future>(parent: Option<TraceParent>, future: F) -> F::Output {
    CALLER.scope(parent, future).await
}

/// The trace of the request being handled here, if any.
pub fn caller_parent() -> Option<TraceParent> {
    CALLER.try_with(|parent| *parent).ok().flatten()
}

/// The most spans one turn records; later ones are dropped.
const MAX_SPANS: usize = 2_000;

/// The caller's trace, from a W3C `traceparent` header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
}

impl TraceParent {
    /// Reads `00-<trace id>-<parent id>-<flags>`; anything else (or all-zero ids) is `None`,
    /// and the turn starts a trace of its own.
    pub fn parse(header: &str) -> Option<TraceParent> {
        let mut parts = header.trim().split('-');
        let (version, trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if version != "00" || parts.next().is_some() || flags.len() != 2 || u8::from_str_radix(flags, 16).is_err() {
            return None;
        }
        let trace_id: [u8; 16] = hex_bytes(trace)?;
        let span_id: [u8; 8] = hex_bytes(span)?;
        (trace_id != [0; 16] && span_id != [0; 8]).then_some(TraceParent { trace_id, span_id })
    }
}

fn hex_bytes<const N: usize>(text: &str) -> Option<[u8; N]> {
    if text.len() != N * 2 || !text.bytes().all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte)) {
        return None;
    }
    let mut bytes = [0; N];
    for (index, byte) in bytes.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[index * 2..index * 2 + 2], 16).ok()?;
    }
    Some(bytes)
}

/// An attribute's value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Text(String),
    Int(i64),
    Float(f64),
}

/// One finished span.
#[derive(Clone, Debug, PartialEq)]
pub struct Span {
    pub span_id: [u8; 8],
    pub parent_span_id: Option<[u8; 8]>,
    pub name: String,
    /// OTLP's `SpanKind`: 1 internal, 3 client.
    pub kind: i32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub attributes: Vec<(&'static str, Value)>,
    /// Set when the span's work failed.
    pub error: Option<String>,
}

/// A span not ended yet.
struct Open {
    span: Span,
    ended: bool,
}

/// The spans of one turn, built from its events in order.
pub struct TurnTrace {
    pub trace_id: [u8; 16],
    spans: Vec<Open>,
    /// A thread's span, by thread id (the main thread's is the turn's).
    threads: HashMap<String, usize>,
    /// Model calls streaming, by message id: their span.
    calls: HashMap<String, usize>,
    /// Tool calls running, by thread and call id.
    tools: HashMap<(String, String), usize>,
    model: Option<String>,
    next_id: u64,
}

impl TurnTrace {
    /// Starts the turn's span at `now_ns`, as a child of `parent` when the caller sent one.
    /// `ids` seeds the trace and span ids (random in the server).
    pub fn new(parent: Option<TraceParent>, session_id: &str, turn_id: &str, model: Option<&str>, ids: [u8; 16], now_ns: u64) -> TurnTrace {
        let trace_id = parent.map_or(ids, |parent| parent.trace_id);
        let mut trace = TurnTrace {
            trace_id,
            spans: Vec::new(),
            threads: HashMap::new(),
            calls: HashMap::new(),
            tools: HashMap::new(),
            model: model.map(str::to_owned),
            next_id: u64::from_le_bytes(ids[8..].try_into().unwrap_or_default()),
        };
        let mut attributes = vec![
            ("gen_ai.operation.name", Value::Text("invoke_agent".to_owned())),
            ("gen_ai.conversation.id", Value::Text(session_id.to_owned())),
            ("teamster.turn.id", Value::Text(turn_id.to_owned())),
        ];
        if let Some(model) = model {
            attributes.push(("gen_ai.request.model", Value::Text(model.to_owned())));
        }
        let turn = trace.open("invoke_agent turn".to_owned(), 1, parent.map(|parent| parent.span_id), now_ns, attributes);
        if let Some(turn) = turn {
            trace.threads.insert(MAIN_THREAD_ID.to_owned(), turn);
        }
        trace
    }

    /// The trace id as W3C writes it (32 lowercase hex digits).
    pub fn trace_id_hex(&self) -> String {
        self.trace_id.iter().map(|byte| format!("{byte:02x}")).collect()
    }

    fn open(&mut self, name: String, kind: i32, parent: Option<[u8; 8]>, now_ns: u64, attributes: Vec<(&'static str, Value)>) -> Option<usize> {
        if self.spans.len() >= MAX_SPANS {
            return None;
        }
        self.next_id = self.next_id.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let span_id = self.next_id.max(1).to_le_bytes();
        let span = Span { span_id, parent_span_id: parent, name, kind, start_ns: now_ns, end_ns: now_ns, attributes, error: None };
        self.spans.push(Open { span, ended: false });
        Some(self.spans.len() - 1)
    }

    fn end(&mut self, index: usize, now_ns: u64) {
        if let Some(open) = self.spans.get_mut(index).filter(|open| !open.ended) {
            open.span.end_ns = now_ns;
            open.ended = true;
        }
    }

    fn span_id(&self, index: Option<usize>) -> Option<[u8; 8]> {
        index.and_then(|index| self.spans.get(index)).map(|open| open.span.span_id)
    }

    /// Takes in one event of the turn, seen at `now_ns`.
    pub fn observe(&mut self, event: &Event, now_ns: u64) {
        match event {
            Event::ModelMessage(message) => {
                let parent = self.span_id(self.threads.get(&message.thread_id).copied());
                let name = format!("chat {}", self.model.as_deref().unwrap_or("model"));
                let mut attributes = vec![("gen_ai.operation.name", Value::Text("chat".to_owned()))];
                if let Some(model) = &self.model {
                    attributes.push(("gen_ai.request.model", Value::Text(model.clone())));
                }
                if let Some(index) = self.open(name, 3, parent, now_ns, attributes) {
                    self.calls.insert(message.id.clone(), index);
                }
            }
            Event::ToolResponse(response) => {
                if let Some(index) = self.tools.remove(&(response.thread_id.clone(), response.tool_call_id.clone())) {
                    if let Some(error) = response.failure() {
                        self.spans[index].span.error = Some(error.chars().take(200).collect());
                    }
                    self.end(index, now_ns);
                }
            }
            Event::ThreadCreated(created) => {
                let key = (created.parent.thread_id.clone(), created.parent.tool_call_id.clone());
                let parent = self.tools.get(&key).copied().or_else(|| self.threads.get(&created.parent.thread_id).copied());
                let attributes = vec![
                    ("gen_ai.operation.name", Value::Text("invoke_agent".to_owned())),
                    ("gen_ai.agent.name", Value::Text(created.agent_info.name.clone())),
                    ("teamster.thread.id", Value::Text(created.thread_id.clone())),
                ];
                let name = format!("invoke_agent {}", created.agent_info.name);
                let parent = self.span_id(parent);
                if let Some(index) = self.open(name, 1, parent, now_ns, attributes) {
                    self.threads.insert(created.thread_id.clone(), index);
                }
            }
            Event::ThreadDone(done) => {
                if let Some(index) = self.threads.get(&done.thread_id).copied() {
                    if let ThreadState::Error { error, .. } = &done.state {
                        self.spans[index].span.error = Some(error.chars().take(200).collect());
                    }
                    self.end(index, now_ns);
                }
            }
            Event::TurnDone(done) => self.turn_done(&done.state, now_ns),
            _ => {}
        }
    }

    /// A model call ended, `message` whole: its usage, and a span for each tool call it made.
    pub fn message_recorded(&mut self, message: &ModelMessage, now_ns: u64) {
        let Some(index) = self.calls.remove(&message.id) else { return };
        let span = &mut self.spans[index].span;
        if let Some(usage) = &message.usage {
            span.attributes.push(("gen_ai.usage.input_tokens", Value::Int(saturating(usage.input_tokens))));
            span.attributes.push(("gen_ai.usage.output_tokens", Value::Int(saturating(usage.output_tokens))));
        }
        if let Some(reason) = message.finish_reason.and_then(|reason| serde_json::to_value(reason).ok()) {
            span.attributes.push(("gen_ai.response.finish_reasons", Value::Text(reason.as_str().unwrap_or_default().to_owned())));
        }
        self.end(index, now_ns);
        let parent = self.span_id(self.threads.get(&message.thread_id).copied());
        for call in message.tool_calls.iter().flatten() {
            let attributes = vec![
                ("gen_ai.operation.name", Value::Text("execute_tool".to_owned())),
                ("gen_ai.tool.name", Value::Text(call.function.name.clone())),
                ("gen_ai.tool.call.id", Value::Text(call.id.clone())),
            ];
            if let Some(tool) = self.open(format!("execute_tool {}", call.function.name), 1, parent, now_ns, attributes) {
                self.tools.insert((message.thread_id.clone(), call.id.clone()), tool);
            }
        }
    }

    /// The turn ended: its outcome and totals on its span, and every span still open ends.
    fn turn_done(&mut self, state: &TurnState, now_ns: u64) {
        let (status, metrics, error) = match state {
            TurnState::Running => return,
            TurnState::Done { metrics, .. } => ("done", metrics.as_ref(), None),
            TurnState::Cancelled { metrics, .. } => ("cancelled", metrics.as_ref(), None),
            TurnState::Error { message, metrics, .. } => ("error", metrics.as_ref(), Some(message.chars().take(200).collect())),
        };
        if let Some(turn) = self.spans.first_mut() {
            let attributes = &mut turn.span.attributes;
            attributes.push(("teamster.turn.status", Value::Text(status.to_owned())));
            if let Some(metrics) = metrics {
                attributes.push(("gen_ai.usage.input_tokens", Value::Int(saturating(metrics.total_input_tokens))));
                attributes.push(("gen_ai.usage.output_tokens", Value::Int(saturating(metrics.total_output_tokens))));
                if let Some(cost) = metrics.total_cost_in_usd {
                    attributes.push(("teamster.cost.usd", Value::Float(cost)));
                }
            }
            turn.span.error = error;
        }
        for index in 0..self.spans.len() {
            self.end(index, now_ns);
        }
    }

    /// The turn's spans, once it ended (open ones end at `now_ns`).
    pub fn finish(mut self, now_ns: u64) -> Vec<Span> {
        for index in 0..self.spans.len() {
            self.end(index, now_ns);
        }
        self.spans.into_iter().map(|open| open.span).collect()
    }
}

fn saturating(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_headers_are_read_strictly() {
        let parent = TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        assert_eq!(parent.trace_id[0], 0x4b);
        assert_eq!(parent.span_id[7], 0xb7);
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad}");
        }
    }
}
