//! One model step: stream a model call as a placeholder `model.message` and its deltas, and
//! fold them into the complete message.

use futures_util::{FutureExt, StreamExt};
use teamster_llm::{ModelClient, ModelEvent, ModelRequest, TokenUsage};
use teamster_protocol::event::{
    DeltaFunction, DeltaToolCall, FinishReason, ModelMessage, ModelMessageDelta, Steer, ToolInfo, fold,
};
use teamster_protocol::{Event, ids, timestamp};
use tokio_util::sync::CancellationToken;

use crate::sink::EventSink;
use crate::toolbox::ToolBox;
use crate::usage::{InputParts, estimate_tokens, usage_of};

/// How a model step ended. The message is the fold of everything streamed so far.
pub(crate) enum StepEnd {
    Complete,
    Interrupted,
    Failed(teamster_llm::Error),
}

pub(crate) struct Step {
    pub message: ModelMessage,
    pub end: StepEnd,
}

/// Streams one model call to the sink and records the folded message.
pub(crate) async fn model_step(
    model: &dyn ModelClient,
    request: ModelRequest,
    (thread_id, steering): (&str, Option<Vec<Steer>>),
    toolbox: &ToolBox,
    parts: InputParts,
    sink: &dyn EventSink,
    cancel: &CancellationToken,
) -> Step {
    let estimated_input = parts.total();
    let created_at = timestamp::now();
    let mut message = ModelMessage {
        id: ids::new_id("msg"),
        thread_id: thread_id.to_owned(),
        created_at: created_at.clone(),
        steering,
        ..ModelMessage::default()
    };
    let placeholder = sink.emit(&Event::ModelMessage(message.clone()));

    let mut stream = model.stream(request);
    let mut first_delta = true;
    let mut finish_reason = None;
    let mut reported_usage: Option<TokenUsage> = None;
    // Whether each tool call index has been sent with its `tool_info` yet.
    let mut announced: Vec<bool> = Vec::new();
    let end = loop {
        // What the model has sent already is taken at once; before waiting for more, the sink
        // hands on the deltas of the burst together.
        let next = match stream.next().now_or_never() {
            Some(next) if !cancel.is_cancelled() => next,
            _ => {
                sink.pause();
                tokio::select! {
                    biased;
                    () = cancel.cancelled() => break StepEnd::Interrupted,
                    next = stream.next() => next,
                }
            }
        };
        let event = match next {
            None => break StepEnd::Complete,
            Some(Err(error)) => break StepEnd::Failed(error),
            Some(Ok(event)) => event,
        };
        let base = || ModelMessageDelta {
            id: message.id.clone(),
            thread_id: message.thread_id.clone(),
            ..ModelMessageDelta::default()
        };
        // A fragment too long for one SSE line goes out as several deltas; they fold to the same.
        let deltas: Vec<ModelMessageDelta> = match event {
            ModelEvent::Text(text) => {
                delta_pieces(text).map(|piece| ModelMessageDelta { content: Some(piece), ..base() }).collect()
            }
            ModelEvent::Reasoning(text) => {
                delta_pieces(text).map(|piece| ModelMessageDelta { reasoning_content: Some(piece), ..base() }).collect()
            }
            ModelEvent::Thinking(block) => vec![ModelMessageDelta { thinking_blocks: Some(vec![block]), ..base() }],
            ModelEvent::Refusal(text) => {
                delta_pieces(text).map(|piece| ModelMessageDelta { refusal: Some(piece), ..base() }).collect()
            }
            ModelEvent::ToolCall { index, id, name, arguments } => {
                let slot = index as usize;
                if announced.len() <= slot {
                    announced.resize(slot + 1, false);
                }
                let tool_info = match &name {
                    Some(name) if !announced[slot] => {
                        announced[slot] = true;
                        Some(toolbox.get(name).map(|tool| tool.info.clone()).unwrap_or_else(|| {
                            ToolInfo::System { name: name.clone() }
                        }))
                    }
                    _ => None,
                };
                let mut head = Some((id, name, tool_info));
                delta_pieces(arguments)
                    .map(|piece| {
                        // The call's id, name and tool info travel with its first fragment.
                        let (id, name, tool_info) = head.take().unwrap_or_default();
                        ModelMessageDelta {
                            tool_calls: Some(vec![DeltaToolCall {
                                index,
                                kind: id.as_ref().map(|_| "function".to_owned()),
                                id,
                                function: Some(DeltaFunction { name, arguments: (!piece.is_empty()).then_some(piece) }),
                                tool_info,
                                provider_specific_fields: None,
                            }]),
                            ..base()
                        }
                    })
                    .collect()
            }
            ModelEvent::Finish(reason) => {
                finish_reason = Some(reason);
                continue;
            }
            ModelEvent::Usage(usage) => {
                reported_usage = Some(usage);
                continue;
            }
        };
        for mut delta in deltas {
            if first_delta {
                delta.created_at = Some(created_at.clone());
                first_delta = false;
            }
            fold(&mut message, &delta);
            sink.emit_delta(&Event::ModelMessageDelta(delta));
        }
    };

    // The last delta carries the finish reason and usage. An interrupted or failed call has
    // no reported usage, so its spend is estimated from what was sent and streamed.
    let tokens = reported_usage.unwrap_or_else(|| TokenUsage {
        input_tokens: estimated_input,
        output_tokens: estimate_tokens(&message.text())
            + estimate_tokens(message.reasoning_content.as_deref().unwrap_or_default()),
        ..TokenUsage::default()
    });
    let has_tool_calls = message.tool_calls.as_ref().is_some_and(|calls| !calls.is_empty());
    let finish_reason = match end {
        StepEnd::Complete => Some(finish_reason.unwrap_or(if has_tool_calls {
            FinishReason::ToolCalls
        } else {
            FinishReason::Stop
        })),
        StepEnd::Interrupted | StepEnd::Failed(_) => None,
    };
    let last = ModelMessageDelta {
        id: message.id.clone(),
        thread_id: message.thread_id.clone(),
        created_at: first_delta.then(|| created_at.clone()),
        finish_reason,
        usage: Some(usage_of(tokens, parts)),
        ..ModelMessageDelta::default()
    };
    fold(&mut message, &last);
    sink.emit(&Event::ModelMessageDelta(last));
    sink.record(placeholder, &Event::ModelMessage(message.clone()));
    Step { message, end }
}

/// The most characters one delta's fragment may take as a JSON string; longer fragments are
/// sent as several deltas, so that every event fits on an SSE line (see `teamster_protocol::sse`).
const MAX_DELTA_CHARS: usize = 64 * 1024;

/// `text` cut into pieces of at most [`MAX_DELTA_CHARS`] serialised characters, in order; an
/// empty text is one empty piece. Short texts (the usual case) are passed on without a scan.
fn delta_pieces(text: String) -> std::vec::IntoIter<String> {
    use teamster_protocol::sse::{json_string_chars, json_string_prefix};
    if text.len() * 6 + 2 <= MAX_DELTA_CHARS || json_string_chars(&text) <= MAX_DELTA_CHARS {
        return vec![text].into_iter();
    }
    let mut pieces = Vec::new();
    let mut rest = text.as_str();
    while !rest.is_empty() {
        let piece = json_string_prefix(rest, MAX_DELTA_CHARS);
        pieces.push(piece.to_owned());
        rest = &rest[piece.len()..];
    }
    pieces.into_iter()
}
