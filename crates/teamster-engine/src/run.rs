//! The turn loop: model steps and tool calls until the agent is done.

use std::sync::Arc;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use teamster_llm::{Message, ModelClient, ModelRequest};
use teamster_protocol::agent::{ModelParams, ResponseFormat};
use teamster_protocol::settings::ModelPricing;
use teamster_protocol::event::{ModelMessage, ToolCall, ToolResponse};
use teamster_protocol::{Event, TurnMetrics, ids, timestamp};
use tokio_util::sync::CancellationToken;

use crate::compaction::{CompactionError, Summarizer, compact};
use crate::context::{ContextPolicy, Conversation};
use crate::gates::{Decision, Resolution, Split, UserQuestions};
use crate::history::assistant_message;
use crate::large_results::LargeResults;
use crate::sink::EventSink;
use crate::step::{StepEnd, model_step};
use crate::structured::{CORRECTIONS, OutputCheck};
use crate::toolbox::ToolBox;
use crate::usage::MetricsAccumulator;

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
    /// The agent's seed messages, rendered: always sent right after the instructions.
    pub seed_messages: Vec<Message>,
    /// The conversation so far (see [`crate::history_from_events`]), ending with this turn's
    /// input.
    pub messages: Vec<Message>,
    pub toolbox: ToolBox,
    /// The most model calls this turn may make.
    pub iteration_limit: u64,
    pub context: ContextPolicy,
    /// The model's prices, for the turn's cost; `None` when unknown.
    pub pricing: Option<ModelPricing>,
    /// Whether the agent may ask the user questions (`ask_user_question`).
    pub ask_user_questions: bool,
    /// The decisions on calls an earlier turn left waiting, applied before the first model
    /// call.
    pub resolutions: Vec<Resolution>,
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
    /// Run the ungated calls, announce the gated ones, and end the turn waiting for a human.
    NeedsHuman(Split),
    /// The message is the agent's answer.
    Final,
}

fn next_step(message: &ModelMessage, toolbox: &ToolBox) -> NextStep {
    let calls = match &message.tool_calls {
        Some(calls) if !calls.is_empty() => calls,
        _ => return NextStep::Final,
    };
    let split = Split::of(calls, |name| toolbox.get(name).map(|tool| tool.gate).unwrap_or_default());
    if split.approval.is_empty() && split.client_side.is_empty() {
        NextStep::RunTools(split.run_now)
    } else {
        NextStep::NeedsHuman(split)
    }
}

/// Runs a turn to its end, streaming every event to `sink`. Returns the outcome and the
/// metrics of every model call made, including interrupted ones and compaction calls.
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
    let TurnPlan {
        thread_id,
        model,
        model_id,
        params,
        response_format,
        instructions,
        seed_messages,
        messages,
        mut toolbox,
        iteration_limit,
        context,
        pricing,
        ask_user_questions,
        resolutions,
    } = plan;
    let output_check = match OutputCheck::new(response_format.as_ref()) {
        Ok(check) => check,
        Err(message) => return TurnOutcome::Failed { message },
    };
    let large_results = Arc::new(LargeResults::default());
    if context.large_result_tokens.is_some() {
        toolbox.add(large_results.clone()).await;
    }
    if ask_user_questions {
        toolbox.add(Arc::new(UserQuestions)).await;
    }
    let mut conversation =
        Conversation { instructions, seeds: seed_messages, messages, policy: context, large_results };
    let summarizer = Summarizer {
        model: model.as_ref(),
        model_id: &model_id,
        pricing: pricing.as_ref(),
        parent_thread: &thread_id,
        sink,
        cancel,
    };
    // Reported input tokens per estimated token, learnt from this turn's calls, so that the
    // compaction check follows the provider's tokenizer rather than the estimate alone.
    if !resolutions.is_empty() && !resolve(&resolutions, &mut conversation, &thread_id, &toolbox, sink, cancel).await {
        return TurnOutcome::Interrupted;
    }
    let mut calibration = 1.0_f64;
    let mut corrections = 0;
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
        // Read each time: tools may be loaded during the turn.
        let definitions = toolbox.definitions();
        let mut prepared = conversation.prepare(&definitions);
        if let Some(threshold) = context.compaction_threshold {
            let expected = (prepared.parts.total() as f64 * calibration).ceil() as u64;
            if expected > threshold {
                // Thresholds are compared in estimated tokens: the calibrated threshold.
                let estimated_threshold = ((threshold as f64) / calibration).floor() as u64;
                match compact(&mut conversation, &definitions, estimated_threshold, &summarizer, metrics).await {
                    Ok(true) => prepared = conversation.prepare(&definitions),
                    Ok(false) => {}
                    Err(CompactionError::Interrupted) => return TurnOutcome::Interrupted,
                    Err(CompactionError::Failed(message)) => return TurnOutcome::Failed { message },
                }
            }
        }
        let estimated = prepared.parts.total();
        let request = ModelRequest {
            model: model_id.clone(),
            messages: prepared.messages,
            tools: definitions,
            params: params.clone(),
            response_format: response_format.clone(),
        };
        let step = model_step(model.as_ref(), request, &thread_id, &toolbox, prepared.parts, sink, cancel).await;
        if let Some(usage) = &step.message.usage {
            metrics.add(usage, pricing.as_ref());
            if matches!(step.end, StepEnd::Complete) && estimated > 0 && usage.input_tokens > 0 {
                calibration = (usage.input_tokens as f64 / estimated as f64).max(1.0);
            }
        }
        match step.end {
            StepEnd::Complete => {}
            StepEnd::Interrupted => return TurnOutcome::Interrupted,
            StepEnd::Failed(error) => {
                return TurnOutcome::Failed { message: format!("The model call failed: {error}") };
            }
        }
        let message = step.message;
        conversation.messages.extend(assistant_message(&message, true));
        match next_step(&message, &toolbox) {
            NextStep::Final => {
                let Some(check) = &output_check else {
                    return TurnOutcome::Done { output: Some(message), required_actions: Vec::new() };
                };
                match check.check(&message.text()) {
                    Ok(()) => return TurnOutcome::Done { output: Some(message), required_actions: Vec::new() },
                    Err(problem) if corrections < CORRECTIONS => {
                        corrections += 1;
                        conversation.messages.push(Message::User { content: check.correction(&problem) });
                    }
                    Err(problem) => {
                        return TurnOutcome::Failed {
                            message: format!("The agent's final answer is not in the required format: {problem}."),
                        };
                    }
                }
            }
            NextStep::RunTools(calls) => match run_tools(&calls, &thread_id, &toolbox, sink, cancel).await {
                Some(results) => conversation.messages.extend(results),
                None => return TurnOutcome::Interrupted,
            },
            NextStep::NeedsHuman(split) => {
                let required_actions = split.pending_events(&thread_id, &message.id);
                for event in &required_actions {
                    sink.emit_content(event);
                }
                if run_tools(&split.run_now, &thread_id, &toolbox, sink, cancel).await.is_none() {
                    return TurnOutcome::Interrupted;
                }
                return TurnOutcome::Done { output: Some(message), required_actions };
            }
        }
    }
}

/// Applies the decisions on waiting calls: settled calls get their result at once, allowed
/// ones run. Each result replaces the placeholder the rebuilt history gave the call. Returns
/// false when cancelled.
async fn resolve(
    resolutions: &[Resolution],
    conversation: &mut Conversation,
    thread_id: &str,
    toolbox: &ToolBox,
    sink: &dyn EventSink,
    cancel: &CancellationToken,
) -> bool {
    let mut results = Vec::with_capacity(resolutions.len());
    for resolution in resolutions {
        if let Some(content) = resolution.settled_content() {
            sink.emit_content(&Event::ToolResponse(ToolResponse {
                id: ids::new_id("evt"),
                thread_id: thread_id.to_owned(),
                created_at: timestamp::now(),
                tool_call_id: resolution.call.id.clone(),
                content: content.clone(),
            }));
            results.push(Message::Tool { tool_call_id: resolution.call.id.clone(), content });
        }
    }
    let allowed: Vec<ToolCall> = resolutions
        .iter()
        .filter(|resolution| resolution.decision == Decision::Allow)
        .map(|resolution| resolution.call.clone())
        .collect();
    match run_tools(&allowed, thread_id, toolbox, sink, cancel).await {
        Some(ran) => results.extend(ran),
        None => return false,
    }
    for result in results {
        conversation.settle(result);
    }
    true
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
