//! The turn loop: model steps and tool calls until the agent is done.

use std::sync::Arc;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use teamster_llm::{Message, ModelClient, ModelRequest};
use teamster_protocol::agent::{ModelParams, ResponseFormat};
use teamster_protocol::event::{ModelMessage, ToolCall, ToolResponse};
use teamster_protocol::{Event, TurnMetrics, ids, timestamp};
use tokio_util::sync::CancellationToken;

use crate::history::assistant_message;
use crate::sink::EventSink;
use crate::step::{StepEnd, model_step};
use crate::toolbox::ToolBox;
use crate::usage::{InputParts, MetricsAccumulator, estimate_tokens};

/// Everything one turn of one thread needs. Built by the caller from the agent spec, the
/// stored history and the turn's input.
pub struct TurnPlan {
    pub thread_id: String,
    pub model: Arc<dyn ModelClient>,
    /// The provider's model id.
    pub model_id: String,
    pub params: ModelParams,
    pub response_format: Option<ResponseFormat>,
    /// The system prompt, variables already rendered.
    pub instructions: Option<String>,
    /// The conversation so far, ending with this turn's input.
    pub messages: Vec<Message>,
    pub toolbox: ToolBox,
    /// The most model calls this turn may make.
    pub iteration_limit: u64,
}

/// How a turn ended, before the caller turns it into a `turn.done` state.
// One value per turn; boxing the common `Done` variant would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum TurnOutcome {
    /// The agent answered; `required_actions` is non-empty when it waits for a human.
    Done { output: Option<ModelMessage>, required_actions: Vec<Event> },
    /// The cancellation token fired; the caller knows why.
    Interrupted,
    /// The turn cannot go on; the message says why in words a user can act on.
    Failed { message: String },
}

/// What to do after a model step.
enum NextStep {
    /// Run these tool calls, then call the model again.
    RunTools(Vec<ToolCall>),
    /// The message is the agent's answer.
    Final,
}

fn next_step(message: &ModelMessage) -> NextStep {
    match &message.tool_calls {
        Some(calls) if !calls.is_empty() => NextStep::RunTools(calls.clone()),
        _ => NextStep::Final,
    }
}

/// Runs a turn to its end, streaming every event to `sink`. Returns the outcome and the
/// metrics of every model call made, including interrupted ones.
pub async fn run_turn(
    plan: TurnPlan,
    sink: &dyn EventSink,
    cancel: &CancellationToken,
) -> (TurnOutcome, TurnMetrics) {
    let mut metrics = MetricsAccumulator::default();
    let outcome = run_loop(plan, sink, cancel, &mut metrics).await;
    (outcome, metrics.metrics())
}

async fn run_loop(
    plan: TurnPlan,
    sink: &dyn EventSink,
    cancel: &CancellationToken,
    metrics: &mut MetricsAccumulator,
) -> TurnOutcome {
    let TurnPlan { thread_id, model, model_id, params, response_format, instructions, mut messages, toolbox, iteration_limit } =
        plan;
    let definitions = toolbox.definitions();
    let parts = InputParts {
        instructions: instructions.as_deref().map(estimate_tokens).unwrap_or_default(),
        tool_definitions: definitions
            .iter()
            .map(|tool| estimate_tokens(&tool.description) + estimate_tokens(&tool.parameters.to_string()) + estimate_tokens(&tool.name))
            .sum(),
    };
    let mut iterations = 0;
    loop {
        if iterations >= iteration_limit {
            return TurnOutcome::Failed {
                message: format!(
                    "The agent reached its iteration limit of {iteration_limit} model calls without finishing."
                ),
            };
        }
        iterations += 1;
        let mut request_messages = Vec::with_capacity(messages.len() + 1);
        if let Some(instructions) = &instructions {
            request_messages.push(Message::System { content: instructions.clone() });
        }
        request_messages.extend(messages.iter().cloned());
        let request = ModelRequest {
            model: model_id.clone(),
            messages: request_messages,
            tools: definitions.clone(),
            params: params.clone(),
            response_format: response_format.clone(),
        };
        let step = model_step(model.as_ref(), request, &thread_id, &toolbox, parts, sink, cancel).await;
        if let Some(usage) = &step.message.usage {
            metrics.add(usage);
        }
        match step.end {
            StepEnd::Complete => {}
            StepEnd::Interrupted => return TurnOutcome::Interrupted,
            StepEnd::Failed(error) => {
                return TurnOutcome::Failed { message: format!("The model call failed: {error}") };
            }
        }
        let message = step.message;
        messages.extend(assistant_message(&message, true));
        match next_step(&message) {
            NextStep::Final => {
                return TurnOutcome::Done { output: Some(message), required_actions: Vec::new() };
            }
            NextStep::RunTools(calls) => {
                match run_tools(&calls, &thread_id, &toolbox, sink, cancel).await {
                    Some(results) => messages.extend(results),
                    None => return TurnOutcome::Interrupted,
                }
            }
        }
    }
}

/// Runs a message's tool calls concurrently, recording each `tool.response` as it arrives.
/// Returns the tool messages in call order, or `None` when cancelled (running calls are
/// dropped, which stops them).
async fn run_tools(
    calls: &[ToolCall],
    thread_id: &str,
    toolbox: &ToolBox,
    sink: &dyn EventSink,
    cancel: &CancellationToken,
) -> Option<Vec<Message>> {
    let mut pending: FuturesUnordered<_> = calls
        .iter()
        .enumerate()
        .map(|(index, call)| async move {
            (index, toolbox.call(&call.function.name, &call.function.arguments).await)
        })
        .collect();
    let mut results: Vec<Option<String>> = vec![None; calls.len()];
    loop {
        let next = tokio::select! {
            biased;
            () = cancel.cancelled() => return None,
            next = pending.next() => next,
        };
        let Some((index, output)) = next else { break };
        let content = if output.is_error { format!("Error: {}", output.content) } else { output.content };
        sink.emit_content(&Event::ToolResponse(ToolResponse {
            id: ids::new_id("evt"),
            thread_id: thread_id.to_owned(),
            created_at: timestamp::now(),
            tool_call_id: calls[index].id.clone(),
            content: content.clone(),
        }));
        results[index] = Some(content);
    }
    Some(
        calls
            .iter()
            .zip(results)
            .map(|(call, content)| Message::Tool {
                tool_call_id: call.id.clone(),
                content: content.unwrap_or_default(),
            })
            .collect(),
    )
}
