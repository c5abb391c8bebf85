//! The turn loop: model steps and tool calls until the agent is done.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use teamster_llm::{Message, ModelClient, ModelRequest};
use teamster_protocol::agent::{ModelParams, ResponseFormat, StopWhen};
use teamster_protocol::settings::ModelPricing;
use teamster_protocol::event::{AgentParent, ModelMessage, ThreadState, TOOL_ERROR_PREFIX, ToolCall, ToolResponse};
use teamster_tools::{CallContext, ToolGate};
use teamster_protocol::{Event, RequestContext, TurnMetrics, ids, timestamp};
use tokio_util::sync::CancellationToken;

use crate::compaction::{CompactionError, Summarizer, compact};
use crate::context::{ContextPolicy, Conversation};
use crate::fan_out::FanOut;
use crate::gates::{Decision, Resolution, Split, UserQuestions};
use crate::history::assistant_message;
use crate::large_results::{LargeResults, ResultFiles};
use crate::progress::CallProgress;
use crate::sink::EventSink;
use crate::skills::{SkillNote, skills_section};
use crate::step::{StepEnd, model_step};
use crate::spend_limit::{Admission, Reservations, SpendLimit};
use crate::steering::Steering;
use crate::structured::{CORRECTIONS, OutputCheck};
use crate::sub_agents::{self, NamedSubAgent, RUN_SUB_AGENT, SubAgentPolicy, SubAgentRequest, SubAgentTool};
use crate::toolbox::ToolBox;
use crate::usage::{Meter, MetricsAccumulator};

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
    /// The agent's skills, listed in the system prompt after the instructions.
    pub skills: Vec<SkillNote>,
    /// The agent's seed messages, rendered: always sent right after the instructions.
    pub seed_messages: Vec<Message>,
    /// The conversation so far (see [`crate::history_from_events`]), ending with this turn's
    /// input.
    pub messages: Vec<Message>,
    pub toolbox: ToolBox,
    /// The most model calls this turn may make.
    pub iteration_limit: u64,
    /// Model calls the turn made before it was resumed (see [`crate::resume_turn`]); they count
    /// against `iteration_limit`. 0 for a new turn.
    pub iterations_done: u64,
    pub context: ContextPolicy,
    /// The model's prices, for the turn's cost; `None` when unknown.
    pub pricing: Option<ModelPricing>,
    /// Whether the agent may ask the user questions (`ask_user_question`).
    pub ask_user_questions: bool,
    /// Instructions the user sends while the turn runs, joined before the next model call.
    pub steering: Option<Arc<dyn Steering>>,
    /// The decisions on calls an earlier turn left waiting, applied before the first model
    /// call.
    pub resolutions: Vec<Resolution>,
    /// Which sub-agents the agent may start; `None` for none.
    pub sub_agents: Option<SubAgentPolicy>,
    /// The stored history events, needed only to resume sub-agent threads that wait for a
    /// decision (empty otherwise).
    pub events: Vec<Event>,
    /// Where large tool results are also kept as files (the session's sandbox), if anywhere.
    pub result_files: Option<Arc<dyn ResultFiles>>,
    /// The budget the turn's model calls spend from, checked before each of them; `None` for
    /// none.
    pub spend_limit: Option<Arc<dyn SpendLimit>>,
    /// How far the turn may fan out: parallel tool calls per message, sub-agent threads.
    pub fan_out: FanOut,
    /// Places for model calls shared by every turn of the same subject (its concurrency
    /// limit): each model call of every thread holds one while it runs; `None` for no limit.
    pub model_calls: Option<Arc<tokio::sync::Semaphore>>,
    /// Set by [`crate::resume_turn`] for a turn that stopped at a message waiting for a human:
    /// once `resolutions` have run (the message's calls that run at once), the turn ends
    /// waiting, as it would have. `None` for every other turn.
    pub ends_waiting: Option<EndsWaiting>,
    /// The application's context for the turn, handed to every tool call of every thread.
    pub request_context: Option<RequestContext>,
}

/// The message a resumed turn ends with, and what it waits for (see [`TurnPlan::ends_waiting`]).
#[derive(Debug, Clone, PartialEq)]
pub struct EndsWaiting {
    pub message: ModelMessage,
    pub required_actions: Vec<Event>,
}

/// The output a model call reserves from a budget when its `max_tokens` is not set.
const DEFAULT_OUTPUT_RESERVATION: u64 = 4096;

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
/// metrics of every model call made on every thread, including interrupted ones and
/// compaction calls.
pub async fn run_turn(
    plan: TurnPlan,
    sink: &dyn EventSink,
    cancel: &CancellationToken,
) -> (TurnOutcome, TurnMetrics) {
    let metrics = Mutex::new(MetricsAccumulator::default());
    let TurnPlan {
        thread_id,
        model,
        model_id,
        params,
        response_format,
        instructions,
        skills,
        seed_messages,
        messages,
        mut toolbox,
        iteration_limit,
        iterations_done,
        context,
        pricing,
        ask_user_questions,
        resolutions,
        sub_agents,
        events,
        result_files,
        steering,
        spend_limit,
        fan_out,
        model_calls,
        ends_waiting,
        request_context,
    } = plan;
    let large_results = Arc::new(LargeResults::with_files(result_files));
    if context.large_result_tokens.is_some() {
        toolbox.add(large_results.clone()).await;
    }
    if ask_user_questions {
        toolbox.add(Arc::new(UserQuestions)).await;
    }
    if let Some(policy) = sub_agents.as_ref().filter(|policy| policy.offered_at(0)) {
        toolbox.add(Arc::new(SubAgentTool::new(policy))).await;
    }
    let shared = Shared {
        sink,
        cancel,
        metrics: &metrics,
        sub_agents: sub_agents.as_ref(),
        events: &events,
        steering: steering.as_deref(),
        spend_limit: spend_limit.as_deref(),
        reservations: spend_limit.as_ref().map(|limit| limit.reservations().unwrap_or_default()),
        largest_call: AtomicU64::new(0),
        fan_out,
        threads_started: AtomicU32::new(0),
        model_calls,
        request_context: request_context.as_ref(),
    };
    let main = Thread {
        id: thread_id,
        model,
        model_id,
        pricing,
        params,
        response_format,
        conversation: Conversation {
            instructions,
            skills: skills_section(&skills),
            seeds: seed_messages,
            messages,
            policy: context,
            large_results,
        },
        toolbox,
        iteration_limit,
        iterations_done,
        depth: 0,
        forked: false,
        stop_when: None,
        tool_calls_made: 0,
        ends_waiting,
    };
    let ThreadEnd { outcome, .. } = run_thread(main, resolutions, &shared).await;
    let totals = metrics.lock().unwrap_or_else(std::sync::PoisonError::into_inner).metrics();
    if let Some(limit) = &spend_limit {
        limit.settle(&totals);
    }
    (outcome, totals)
}

/// What every thread of a turn shares.
struct Shared<'a> {
    sink: &'a dyn EventSink,
    cancel: &'a CancellationToken,
    metrics: &'a Mutex<MetricsAccumulator>,
    sub_agents: Option<&'a SubAgentPolicy>,
    /// The stored history, for resuming sub-agent threads.
    events: &'a [Event],
    /// Instructions the user sends while the turn runs (for the main thread).
    steering: Option<&'a dyn Steering>,
    /// The budget every thread's model calls spend from.
    spend_limit: Option<&'a dyn SpendLimit>,
    /// What the model calls in flight reserved from that budget.
    reservations: Option<Arc<Reservations>>,
    /// The most tokens one model call of the turn has spent so far: a call reserves at least
    /// that much.
    largest_call: AtomicU64,
    fan_out: FanOut,
    /// The sub-agent threads the turn has started, at every depth.
    threads_started: AtomicU32,
    /// The subject's places for model calls.
    model_calls: Option<Arc<tokio::sync::Semaphore>>,
    /// The turn's request context, for every tool call.
    request_context: Option<&'a RequestContext>,
}

/// One thread of a turn: the main agent or a sub-agent.
struct Thread {
    id: String,
    model: Arc<dyn ModelClient>,
    model_id: String,
    pricing: Option<ModelPricing>,
    params: ModelParams,
    response_format: Option<ResponseFormat>,
    conversation: Conversation,
    toolbox: ToolBox,
    iteration_limit: u64,
    /// Model calls made before the thread started here (a resumed turn's).
    iterations_done: u64,
    /// 0 for the main thread, 1 for its sub-agents, and so on.
    depth: u32,
    /// Whether it is a forked sub-agent (which cannot fork again).
    forked: bool,
    /// When a declared sub-agent stops early.
    stop_when: Option<StopWhen>,
    /// The tool calls the thread has made, against `stop_when`.
    tool_calls_made: u64,
    /// What the thread ends with once its resolutions ran (a resumed turn's main thread).
    ends_waiting: Option<EndsWaiting>,
}

/// How a thread ended.
struct ThreadEnd {
    outcome: TurnOutcome,
    /// The usage of the thread's own model calls.
    metrics: TurnMetrics,
    /// The parent's result when the thread stopped by its `stop_when`.
    stopped: Option<String>,
}

/// The result of one tool call, as the calling thread sees it.
enum CallResult {
    /// The call's result, already recorded as a `tool.response`.
    Done(String),
    /// A sub-agent waits for a human; these are its required actions.
    Waiting(Vec<Event>),
}

/// Runs one thread until it answers, stops, waits for a human, fails or is cancelled. Boxed:
/// sub-agents run threads inside threads.
fn run_thread<'a>(
    thread: Thread,
    resolutions: Vec<Resolution>,
    shared: &'a Shared<'a>,
) -> Pin<Box<dyn Future<Output = ThreadEnd> + Send + 'a>> {
    Box::pin(async move {
        let mut meter = Meter::new(shared.metrics);
        let mut stopped = None;
        let outcome = thread_loop(thread, resolutions, shared, &mut meter, &mut stopped).await;
        ThreadEnd { outcome, metrics: meter.thread.metrics(), stopped }
    })
}

async fn thread_loop(
    mut thread: Thread,
    resolutions: Vec<Resolution>,
    shared: &Shared<'_>,
    meter: &mut Meter<'_>,
    stopped: &mut Option<String>,
) -> TurnOutcome {
    let output_check = match OutputCheck::new(thread.response_format.as_ref()) {
        Ok(check) => check,
        Err(message) => return TurnOutcome::Failed { message },
    };
    let waiting = match resolutions.is_empty() {
        true => Vec::new(),
        false => match resolve(&resolutions, &mut thread, shared).await {
            None => return TurnOutcome::Interrupted,
            Some(waiting) => waiting,
        },
    };
    if let Some(end) = thread.ends_waiting.take() {
        let mut required_actions = end.required_actions;
        required_actions.extend(waiting);
        return TurnOutcome::Done { output: Some(end.message), required_actions };
    }
    if !waiting.is_empty() {
        return TurnOutcome::Done { output: None, required_actions: waiting };
    }
    let context = thread.conversation.policy;
    // Reported input tokens per estimated token, learnt from this turn's calls, so that the
    // compaction check follows the provider's tokenizer rather than the estimate alone.
    let mut calibration = 1.0_f64;
    let mut corrections = 0;
    let mut iterations = thread.iterations_done;
    loop {
        if iterations >= thread.iteration_limit {
            return TurnOutcome::Failed {
                message: format!(
                    "The agent reached its iteration limit of {} model calls without finishing.",
                    thread.iteration_limit
                ),
            };
        }
        if let Some(limit) = shared.spend_limit {
            let spent = shared.metrics.lock().unwrap_or_else(std::sync::PoisonError::into_inner).metrics();
            if let Some(message) = limit.exhausted(&spent) {
                return TurnOutcome::Failed { message };
            }
        }
        iterations += 1;
        // One of the subject's places for model calls, held through compaction and the step.
        let place = match &shared.model_calls {
            Some(places) => tokio::select! {
                biased;
                () = shared.cancel.cancelled() => return TurnOutcome::Interrupted,
                place = places.clone().acquire_owned() => place.ok(),
            },
            None => None,
        };
        let steered = match shared.steering.filter(|_| thread.depth == 0) {
            Some(steering) => steering.take().await,
            None => Vec::new(),
        };
        for steer in &steered {
            thread.conversation.settle(crate::attachments::user_message(&steer.content));
        }
        // Read each time: tools may be loaded during the turn.
        let definitions = thread.toolbox.definitions();
        let mut prepared = thread.conversation.prepare(&definitions);
        if let Some(threshold) = context.compaction_threshold {
            let expected = (prepared.parts.total() as f64 * calibration).ceil() as u64;
            if expected > threshold {
                // Thresholds are compared in estimated tokens: the calibrated threshold.
                let estimated_threshold = ((threshold as f64) / calibration).floor() as u64;
                let summarizer = Summarizer {
                    model: thread.model.as_ref(),
                    model_id: &thread.model_id,
                    pricing: thread.pricing.as_ref(),
                    parent_thread: &thread.id,
                    sink: shared.sink,
                    cancel: shared.cancel,
                };
                match compact(&mut thread.conversation, &definitions, estimated_threshold, &summarizer, meter).await {
                    Ok(true) => prepared = thread.conversation.prepare(&definitions),
                    Ok(false) => {}
                    Err(CompactionError::Interrupted) => return TurnOutcome::Interrupted,
                    Err(CompactionError::Failed(message)) => return TurnOutcome::Failed { message },
                }
            }
        }
        let estimated = prepared.parts.total();
        // The call's worst case is reserved from the budget before it starts (see
        // `crate::spend_limit`), and given back once its spend is counted below.
        let reserved = match (shared.spend_limit, &shared.reservations) {
            (Some(limit), Some(reservations)) => {
                let output = thread.params.max_tokens.unwrap_or(DEFAULT_OUTPUT_RESERVATION);
                let input = (estimated as f64 * calibration).ceil() as u64;
                let tokens = input.saturating_add(output).max(shared.largest_call.load(Ordering::Relaxed));
                let spent = || shared.metrics.lock().unwrap_or_else(std::sync::PoisonError::into_inner).metrics();
                match reservations.admit(limit, spent, tokens, shared.cancel).await {
                    Admission::Granted(reserved) => Some(reserved),
                    Admission::Refused(message) => return TurnOutcome::Failed { message },
                    Admission::Cancelled => return TurnOutcome::Interrupted,
                }
            }
            _ => None,
        };
        let request = ModelRequest {
            model: thread.model_id.clone(),
            messages: prepared.messages,
            tools: definitions,
            params: thread.params.clone(),
            response_format: thread.response_format.clone(),
            sub_agent: thread.depth > 0,
        };
        let step = model_step(
            thread.model.as_ref(),
            request,
            (&thread.id, (!steered.is_empty()).then_some(steered)),
            &thread.toolbox,
            prepared.parts,
            shared.sink,
            shared.cancel,
        )
        .await;
        drop(place);
        if let Some(usage) = &step.message.usage {
            meter.add(usage, thread.pricing.as_ref());
            shared.largest_call.fetch_max(usage.input_tokens.saturating_add(usage.output_tokens), Ordering::Relaxed);
            if matches!(step.end, StepEnd::Complete) && estimated > 0 && usage.input_tokens > 0 {
                calibration = (usage.input_tokens as f64 / estimated as f64).max(1.0);
            }
        }
        // Counted: the reservation goes back (before any tool runs, which may wait on
        // sub-agents' calls).
        drop(reserved);
        match step.end {
            StepEnd::Complete => {}
            StepEnd::Interrupted => return TurnOutcome::Interrupted,
            StepEnd::Failed(error) => {
                return TurnOutcome::Failed { message: format!("The model call failed: {error}") };
            }
        }
        let message = step.message;
        thread.conversation.messages.extend(assistant_message(&message, true));
        let split = match next_step(&message, &thread.toolbox) {
            NextStep::Final => {
                let Some(check) = &output_check else {
                    return TurnOutcome::Done { output: Some(message), required_actions: Vec::new() };
                };
                match check.check(&message.text()) {
                    Ok(()) => return TurnOutcome::Done { output: Some(message), required_actions: Vec::new() },
                    Err(problem) if corrections < CORRECTIONS => {
                        corrections += 1;
                        thread.conversation.messages.push(Message::user(check.correction(&problem)));
                        continue;
                    }
                    Err(problem) => {
                        return TurnOutcome::Failed {
                            message: format!("The agent's final answer is not in the required format: {problem}."),
                        };
                    }
                }
            }
            NextStep::RunTools(calls) => Split { run_now: calls, ..Split::default() },
            NextStep::NeedsHuman(split) => split,
        };
        // Sub-agents cannot ask the user (nor wait for approval below the first level): such
        // calls are answered with an error.
        let (split, refused) = refused_in_sub_agents(split, thread.depth);
        let mut required_actions = split.pending_events(&thread.id, &message.id);
        for event in &required_actions {
            shared.sink.emit_content(event);
        }
        let Some(results) = run_tools(&split.run_now, &refused, &thread, shared).await else {
            return TurnOutcome::Interrupted;
        };
        let mut finished = Vec::new();
        for (call_id, result) in results {
            match result {
                CallResult::Done(content) => finished.push(Message::Tool { tool_call_id: call_id, content }),
                CallResult::Waiting(events) => required_actions.extend(events),
            }
        }
        if !required_actions.is_empty() {
            return TurnOutcome::Done { output: Some(message), required_actions };
        }
        let calls = message.tool_calls.as_deref().unwrap_or_default();
        thread.tool_calls_made += calls.len() as u64;
        let why = thread.stop_when.as_ref().and_then(|stop| {
            let names: Vec<&str> = calls.iter().map(|call| call.function.name.as_str()).collect();
            sub_agents::stops(stop, &names, thread.tool_calls_made)
        });
        if let Some(why) = why {
            let results: Vec<(String, String)> = finished
                .iter()
                .filter_map(|result| match result {
                    Message::Tool { tool_call_id, content } => calls
                        .iter()
                        .find(|call| call.id == *tool_call_id)
                        .map(|call| (call.function.name.clone(), content.clone())),
                    _ => None,
                })
                .collect();
            *stopped = Some(sub_agents::stopped_answer(&message, &why, &results));
            return TurnOutcome::Done { output: Some(message), required_actions: Vec::new() };
        }
        thread.conversation.messages.extend(finished);
    }
}

/// In a sub-agent, client-side calls (questions to the user) are not allowed, and below the
/// first level of sub-agents neither are calls that wait for approval (only a direct
/// sub-agent of the main thread can be resumed): such calls are taken out of the waiting calls
/// and answered with an error.
fn refused_in_sub_agents(mut split: Split, depth: u32) -> (Split, Vec<(ToolCall, &'static str)>) {
    let mut refused = Vec::new();
    if depth >= 1 {
        let reason = "Sub-agents cannot ask the user questions; decide yourself or report what you need.";
        refused.extend(std::mem::take(&mut split.client_side).into_iter().map(|call| (call, reason)));
    }
    if depth >= 2 {
        let reason = "Tools that need approval cannot run in a sub-agent of a sub-agent; report what you need.";
        refused.extend(std::mem::take(&mut split.approval).into_iter().map(|call| (call, reason)));
    }
    (split, refused)
}

/// Applies the decisions on waiting calls. Settled calls get their result at once, allowed ones
/// run, and the calls of waiting sub-agent threads resume those threads first; a sub-agent that
/// finishes gives its spawning call its result. Each result replaces the placeholder the
/// rebuilt history gave the call. Returns what still waits (empty when everything went on), or
/// `None` when cancelled.
async fn resolve(resolutions: &[Resolution], thread: &mut Thread, shared: &Shared<'_>) -> Option<Vec<Event>> {
    let mut results = Vec::with_capacity(resolutions.len());
    let mut waiting = Vec::new();
    // Sub-agent threads with decisions of their own, in the order they appear.
    let mut sub_threads: Vec<&str> = Vec::new();
    for resolution in resolutions.iter().filter(|resolution| resolution.thread_id != thread.id) {
        if !sub_threads.contains(&resolution.thread_id.as_str()) {
            sub_threads.push(&resolution.thread_id);
        }
    }
    for sub_thread in sub_threads {
        let decisions: Vec<Resolution> =
            resolutions.iter().filter(|resolution| resolution.thread_id == sub_thread).cloned().collect();
        match resume_sub_agent(sub_thread, decisions, thread, shared).await {
            None => return None,
            Some((call_id, CallResult::Done(content))) => results.push(Message::Tool { tool_call_id: call_id, content }),
            Some((_, CallResult::Waiting(events))) => waiting.extend(events),
        }
    }
    let own: Vec<&Resolution> = resolutions.iter().filter(|resolution| resolution.thread_id == thread.id).collect();
    for resolution in &own {
        if let Some(content) = resolution.settled_content() {
            record_response(shared.sink, &thread.id, &resolution.call.id, &content);
            results.push(Message::Tool { tool_call_id: resolution.call.id.clone(), content });
        }
    }
    let allowed: Vec<ToolCall> = own
        .iter()
        .filter(|resolution| resolution.decision == Decision::Allow)
        .map(|resolution| resolution.call.clone())
        .collect();
    for (call_id, result) in run_tools(&allowed, &[], thread, shared).await? {
        match result {
            CallResult::Done(content) => results.push(Message::Tool { tool_call_id: call_id, content }),
            CallResult::Waiting(events) => waiting.extend(events),
        }
    }
    for result in results {
        thread.conversation.settle(result);
    }
    Some(waiting)
}

/// Records a `tool.response`.
fn record_response(sink: &dyn EventSink, thread_id: &str, tool_call_id: &str, content: &str) {
    sink.emit_content(&Event::ToolResponse(ToolResponse {
        id: ids::new_id("evt"),
        thread_id: thread_id.to_owned(),
        created_at: timestamp::now(),
        tool_call_id: tool_call_id.to_owned(),
        content: content.to_owned(),
    }));
}

/// Runs a message's tool calls concurrently, recording each `tool.response` as it arrives;
/// `refused` calls are answered with an error at once. Returns each call's result in call
/// order, or `None` when cancelled: running tool calls are dropped, which stops them, and
/// running sub-agents stop on the same cancellation and close their threads.
async fn run_tools(
    calls: &[ToolCall],
    refused: &[(ToolCall, &str)],
    thread: &Thread,
    shared: &Shared<'_>,
) -> Option<Vec<(String, CallResult)>> {
    // Every call is in the log before it can have an effect (see `crate::resume`).
    if !calls.is_empty() && !shared.sink.checkpoint().await {
        return None;
    }
    let mut results: Vec<(String, CallResult)> = Vec::with_capacity(calls.len() + refused.len());
    for (call, reason) in refused {
        let content = format!("{TOOL_ERROR_PREFIX}{reason}");
        record_response(shared.sink, &thread.id, &call.id, &content);
        results.push((call.id.clone(), CallResult::Done(content)));
    }
    // At most `max_parallel_tool_calls` run at once; the others wait their turn, in call order.
    let calls_in_order: Vec<_> = calls
        .iter()
        .enumerate()
        .map(|(index, call)| async move {
            if shared.cancel.is_cancelled() {
                return (index, None);
            }
            if call.function.name == RUN_SUB_AGENT {
                return (index, Some(run_sub_agent(call, thread, shared).await));
            }
            let progress = CallProgress::new(shared.sink, &thread.id, &call.id, &call.function.name);
            let output = tokio::select! {
                biased;
                () = shared.cancel.cancelled() => return (index, None),
                output = thread.toolbox.call_in(&call.function.name, &call.function.arguments, CallContext { progress: &progress, request_context: shared.request_context }) => output,
            };
            shared.sink.tool_called(&call.function.name, output.is_error);
            let content = if output.is_error { format!("{TOOL_ERROR_PREFIX}{}", output.content) } else { output.content };
            thread.conversation.large_results.keep_file(&call.id, &content, thread.conversation.policy.large_result_tokens).await;
            record_response(shared.sink, &thread.id, &call.id, &content);
            (index, Some(CallResult::Done(content)))
        })
        .collect();
    let mut pending = futures_util::stream::iter(calls_in_order)
        .buffer_unordered(shared.fan_out.max_parallel_tool_calls.max(1) as usize);
    let mut ordered: Vec<Option<CallResult>> = (0..calls.len()).map(|_| None).collect();
    while let Some((index, result)) = pending.next().await {
        ordered[index] = result;
    }
    if shared.cancel.is_cancelled() {
        return None;
    }
    results.extend(calls.iter().zip(ordered).map(|(call, result)| {
        (call.id.clone(), result.unwrap_or_else(|| CallResult::Done(String::new())))
    }));
    Some(results)
}

/// Runs a [`RUN_SUB_AGENT`] call: checks it, opens the thread, runs it, and closes it (unless
/// it waits for a human). The result is recorded as the call's `tool.response` when the
/// sub-agent finishes or cannot start.
async fn run_sub_agent(call: &ToolCall, parent: &Thread, shared: &Shared<'_>) -> CallResult {
    let refuse = |message: String| {
        let content = format!("{TOOL_ERROR_PREFIX}{message}");
        record_response(shared.sink, &parent.id, &call.id, &content);
        CallResult::Done(content)
    };
    let Some(policy) = shared.sub_agents.filter(|policy| policy.offered_at(parent.depth)) else {
        return refuse("Sub-agents cannot be started here.".to_owned());
    };
    let request = match SubAgentRequest::parse(&call.function.arguments) {
        Ok(request) => request,
        Err(message) => return refuse(message),
    };
    let child = match child_thread(&request, parent, policy, None) {
        Ok(child) => child,
        Err(message) => return refuse(message),
    };
    // Every thread the turn starts, at every depth, counts against one cap.
    let cap = shared.fan_out.max_threads_per_turn;
    if shared.threads_started.fetch_update(Ordering::AcqRel, Ordering::Acquire, |started| (started < cap).then_some(started + 1)).is_err() {
        return refuse(format!(
            "This turn has started its limit of {cap} sub-agent threads; no more can be started in it. Do the rest of the work yourself, or report what is left."
        ));
    }
    let parent_ref = AgentParent { thread_id: parent.id.clone(), tool_call_id: call.id.clone() };
    let model_name = match child.forked {
        true => None,
        false => request.model.clone().or_else(|| named(policy, &request).and_then(|agent| agent.model.clone())),
    };
    let created = sub_agents::created_event(&child.id, &request, model_name.as_deref(), &parent_ref, child.forked);
    shared.sink.emit_content(&created);
    let child_id = child.id.clone();
    let end = run_thread(child, Vec::new(), shared).await;
    close_sub_agent(&child_id, &request.name, &parent_ref, end, shared)
}

/// Ends a sub-agent's run: `thread.done` and the parent's result, or its waiting calls.
fn close_sub_agent(
    thread_id: &str,
    title: &str,
    parent: &AgentParent,
    ThreadEnd { outcome, metrics, stopped }: ThreadEnd,
    shared: &Shared<'_>,
) -> CallResult {
    let (state, content) = match outcome {
        TurnOutcome::Done { required_actions, .. } if !required_actions.is_empty() => {
            return CallResult::Waiting(required_actions);
        }
        TurnOutcome::Done { output: Some(output), .. } => {
            let content = stopped.unwrap_or_else(|| sub_agents::answer_of(&output));
            (ThreadState::Done { output: Box::new(output) }, content)
        }
        TurnOutcome::Done { output: None, .. } => {
            let message = "The sub-agent finished without an answer.".to_owned();
            (ThreadState::Error { error: message.clone(), output: None }, format!("{TOOL_ERROR_PREFIX}{message}"))
        }
        TurnOutcome::Interrupted => {
            let message = "The sub-agent was stopped: the turn was cancelled.".to_owned();
            (ThreadState::Error { error: message.clone(), output: None }, format!("{TOOL_ERROR_PREFIX}{message}"))
        }
        TurnOutcome::Failed { message } => {
            let content = format!("{TOOL_ERROR_PREFIX}The sub-agent failed: {message}");
            (ThreadState::Error { error: message, output: None }, content)
        }
    };
    shared.sink.emit_content(&sub_agents::done_event(thread_id, title, parent, state, metrics));
    record_response(shared.sink, &parent.thread_id, &parent.tool_call_id, &content);
    CallResult::Done(content)
}

/// The declared sub-agent a request names, if any.
fn named<'p>(policy: &'p SubAgentPolicy, request: &SubAgentRequest) -> Option<&'p NamedSubAgent> {
    request.agent.as_deref().and_then(|name| policy.named.iter().find(|agent| agent.name == name))
}

/// The thread a sub-agent request runs on. `resumed_messages` are the thread's messages when
/// it is resumed from the log; a new thread starts from its task (after the parent's context
/// when forked).
fn child_thread(
    request: &SubAgentRequest,
    parent: &Thread,
    policy: &SubAgentPolicy,
    resumed: Option<(String, Vec<Message>)>,
) -> Result<Thread, String> {
    let declared = match &request.agent {
        Some(name) => Some(named(policy, request).ok_or_else(|| {
            let known: Vec<&str> = policy.named.iter().map(|agent| agent.name.as_str()).collect();
            format!("There is no declared sub-agent {name:?}; declared: {}.", known.join(", "))
        })?),
        None if !policy.dynamic => {
            return Err("Only declared sub-agents can be started: set `agent` to one of their names.".to_owned());
        }
        None => None,
    };
    let fork = request.forks(declared);
    if fork && parent.forked {
        return Err("A forked sub-agent cannot fork again.".to_owned());
    }
    let (model, model_id, pricing) = match request.model.as_deref().or(declared.and_then(|agent| agent.model.as_deref())) {
        Some(name) if !fork => {
            let resolved = policy.models.resolve(name)?;
            (resolved.client, resolved.model_id, resolved.pricing)
        }
        _ => (parent.model.clone(), parent.model_id.clone(), parent.pricing),
    };
    let depth = parent.depth + 1;
    let (id, messages) = match resumed {
        Some(resumed) => resumed,
        None if fork => {
            (ids::new_id("thread"), sub_agents::forked_messages(&parent.conversation.messages, &request.task))
        }
        None => (ids::new_id("thread"), vec![Message::user(request.task.clone())]),
    };
    let conversation = if fork {
        Conversation {
            instructions: parent.conversation.instructions.clone(),
            skills: parent.conversation.skills.clone(),
            seeds: parent.conversation.seeds.clone(),
            messages,
            policy: parent.conversation.policy,
            large_results: parent.conversation.large_results.clone(),
        }
    } else {
        Conversation {
            instructions: Some(sub_agents::instructions_for(request, declared)),
            // A sub-agent works in the same sandbox, with the same skills.
            skills: parent.conversation.skills.clone(),
            seeds: Vec::new(),
            messages,
            policy: parent.conversation.policy,
            large_results: parent.conversation.large_results.clone(),
        }
    };
    // A fork keeps the parent's exact tool list (for the prompt cache); others lose the tools
    // a sub-agent may not use, and keep only the declared subset.
    let toolbox = if fork {
        parent.toolbox.clone()
    } else {
        let allowed = declared.and_then(|agent| agent.tools.clone());
        let may_spawn = policy.offered_at(depth);
        parent.toolbox.restricted(|tool| {
            if tool.name == RUN_SUB_AGENT {
                return may_spawn;
            }
            if tool.gate == ToolGate::ClientSide {
                return false;
            }
            allowed.as_ref().is_none_or(|names| names.contains(&tool.name) || is_builtin(&tool.name))
        })
    };
    // A fork runs as its parent does; a declared sub-agent with its own bounds.
    let own = declared.filter(|_| !fork);
    // A resumed thread's earlier calls count against its `stop_when`.
    let tool_calls_made = match fork {
        true => 0,
        false => conversation.messages.iter().map(|message| match message {
            Message::Assistant { tool_calls, .. } => tool_calls.len() as u64,
            _ => 0,
        }).sum(),
    };
    Ok(Thread {
        id,
        model,
        model_id,
        pricing,
        params: if fork { parent.params.clone() } else { ModelParams::default() },
        response_format: None,
        conversation,
        toolbox,
        iteration_limit: own.and_then(|agent| agent.max_iterations).unwrap_or(parent.iteration_limit),
        iterations_done: 0,
        depth,
        forked: fork,
        stop_when: own.and_then(|agent| agent.stop_when.clone()),
        tool_calls_made,
        ends_waiting: None,
    })
}

/// Built-in helpers every sub-agent keeps whatever its declared tools.
fn is_builtin(name: &str) -> bool {
    [crate::large_results::READ_TOOL_RESULT, crate::deferred::SEARCH_TOOLS, crate::deferred::LOAD_TOOLS].contains(&name)
}

/// Resumes a sub-agent thread that waited for a human, with its decisions. Returns the
/// spawning call's id and its result (or what still waits), or `None` when cancelled.
async fn resume_sub_agent(
    thread_id: &str,
    decisions: Vec<Resolution>,
    parent: &Thread,
    shared: &Shared<'_>,
) -> Option<(String, CallResult)> {
    let created = shared.events.iter().find_map(|event| match event {
        Event::ThreadCreated(created) if created.thread_id == thread_id => Some(created),
        _ => None,
    });
    let found = created.and_then(|created| {
        sub_agents::spawning_call(shared.events, &created.parent).map(|(_, request)| (created, request))
    });
    let Some((created, request)) = found else {
        // Nothing to resume: the spawning call keeps the placeholder result a rebuilt history
        // gives every call without one.
        tracing::warn!(%thread_id, "a waiting sub-agent thread is not in the history");
        return Some((String::new(), CallResult::Waiting(Vec::new())));
    };
    let parent_ref = created.parent.clone();
    let Some(policy) = shared.sub_agents else {
        let content = "Error: The sub-agent could not be resumed: the agent no longer runs sub-agents.";
        record_response(shared.sink, &parent_ref.thread_id, &parent_ref.tool_call_id, content);
        return Some((parent_ref.tool_call_id, CallResult::Done(content.to_owned())));
    };
    let mut messages = Vec::new();
    if request.forks(named(policy, &request)) {
        let before_spawn: Vec<&Event> = shared
            .events
            .iter()
            .take_while(|event| !matches!(event, Event::ModelMessage(message) if message.tool_calls.iter().flatten().any(|call| call.id == parent_ref.tool_call_id)))
            .collect();
        messages = crate::history_from_events(before_spawn, &parent_ref.thread_id);
    }
    messages.extend(crate::history_from_events(shared.events, thread_id));
    let child = match child_thread(&request, parent, policy, Some((thread_id.to_owned(), messages))) {
        Ok(child) => child,
        Err(message) => {
            let content = format!("{TOOL_ERROR_PREFIX}{message}");
            record_response(shared.sink, &parent_ref.thread_id, &parent_ref.tool_call_id, &content);
            return Some((parent_ref.tool_call_id, CallResult::Done(content)));
        }
    };
    let end = run_thread(child, decisions, shared).await;
    if matches!(end.outcome, TurnOutcome::Interrupted) && shared.cancel.is_cancelled() {
        close_sub_agent(thread_id, &request.name, &parent_ref, end, shared);
        return None;
    }
    let result = close_sub_agent(thread_id, &request.name, &parent_ref, end, shared);
    Some((parent_ref.tool_call_id, result))
}
