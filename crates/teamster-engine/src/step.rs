//! One model step: stream a model call as a placeholder `model.message` and its deltas, and
//! fold them into the complete message.

use futures_util::StreamExt;
use teamster_llm::{ModelClient, ModelEvent, ModelRequest, TokenUsage};
use teamster_protocol::event::{
    DeltaFunction, DeltaToolCall, FinishReason, ModelMessage, ModelMessageDelta, ToolInfo, fold,
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
    thread_id: &str,
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
        let next = tokio::select! {
            biased;
            () = cancel.cancelled() => break StepEnd::Interrupted,
            next = stream.next() => next,
        };
        let event = match next {
            None => break StepEnd::Complete,
            Some(Err(error)) => break StepEnd::Failed(error),
            Some(Ok(event)) => event,
        };
        let mut delta = ModelMessageDelta {
            id: message.id.clone(),
            thread_id: message.thread_id.clone(),
            ..ModelMessageDelta::default()
        };
        match event {
            ModelEvent::Text(text) => delta.content = Some(text),
            ModelEvent::Reasoning(text) => delta.reasoning_content = Some(text),
            ModelEvent::Refusal(text) => delta.refusal = Some(text),
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
                delta.tool_calls = Some(vec![DeltaToolCall {
                    index,
                    kind: id.as_ref().map(|_| "function".to_owned()),
                    id,
                    function: Some(DeltaFunction {
                        name,
                        arguments: (!arguments.is_empty()).then_some(arguments),
                    }),
                    tool_info,
                    provider_specific_fields: None,
                }]);
            }
            ModelEvent::Finish(reason) => {
                finish_reason = Some(reason);
                continue;
            }
            ModelEvent::Usage(usage) => {
                reported_usage = Some(usage);
                continue;
            }
        }
        if first_delta {
            delta.created_at = Some(created_at.clone());
            first_delta = false;
        }
        fold(&mut message, &delta);
        sink.emit(&Event::ModelMessageDelta(delta));
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
