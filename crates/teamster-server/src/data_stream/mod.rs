//! The AI SDK data stream dialect (flowai's harness events): a turn's events translated into
//! camelCase parts (`step-start`, `text`, `reasoning`, `tool-invocation`, `tool-progress`, `tool-agent`,
//! `data-tool-agent`, `approval-required`, `approval-decision`, `plan-status-change`,
//! `data-file-registered`, `custom`,
//! `finish` then `data-cost-summary` and `data-latency-summary`, or `error`).
//!
//! The translation is a pure function of the event log: [`Translator`] is a fold over a turn's
//! events in sequence order, after the earlier turns its input answers ([`Translator::settle`]),
//! so a live stream, a resumed one and a replay yield the same parts for every event. It sits
//! beside the native and gateway dialects and knows nothing of HTTP.

mod parts;
pub mod prior;

use std::collections::HashMap;

use serde_json::Value;
use teamster_protocol::event::{
    FinishReason, ModelMessage, ModelMessageDelta, ThreadCreated, ThreadDone, ThreadState, ToolCallsPending, ToolInfo,
    ToolProgress, ToolResponse,
};
use teamster_protocol::input::Approval;
use teamster_protocol::{Event, MAIN_THREAD_ID, TurnInput, TurnMetrics, TurnState};
use teamster_service::SUBMIT_PLAN;

use crate::streamed::{Folded, Messages, call_input, is_exec, produced_files};

pub use parts::Part;
use parts::{AgentUsage, ApprovalDecision, ApprovalRequest, Outcome, PlanStatusChange, Usage};

/// A tool call the stream has seen whole.
#[derive(Clone, Debug)]
struct Call {
    name: String,
    args: Value,
    thread_id: String,
    /// Whether it is a `submit_plan` call, so a plan.
    plan: bool,
    /// Whether it is an `exec` call, whose result lists the files it made.
    exec: bool,
}

/// A sub-agent thread, shown as `tool-agent` parts.
#[derive(Clone, Debug)]
struct AgentThread {
    name: String,
    model: Option<String>,
    tool_call_id: String,
}

/// The status strings of `plan-status-change`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PlanStatus {
    Draft,
    PendingApproval,
    Approved,
    Executing,
}

/// The fold from events to data stream parts. Feed it every event of a turn in order with
/// [`Translator::translate`]; a resumed stream feeds the events it skips too and drops their
/// parts, so every event yields what it yielded the first time.
#[derive(Debug, Default)]
pub struct Translator {
    /// Tool calls by id, from every model message seen whole.
    calls: HashMap<String, Call>,
    /// Model messages being streamed.
    messages: Messages,
    /// Sub-agent threads by thread id (threads started by a known tool call; a compaction
    /// thread is not one, and its events are not shown).
    agents: HashMap<String, AgentThread>,
    /// Plans that are not settled yet, by `submit_plan` call id.
    plans: HashMap<String, PlanStatus>,
    /// The finish reason of the main thread's latest model message.
    last_finish: Option<FinishReason>,
    /// When the turn was created, for the latency summary.
    started_at: Option<String>,
    /// Set once `finish` or `error` went out: nothing else follows.
    ended: bool,
}

impl Translator {
    /// Folds an earlier turn of the session silently: its input, its content events (folded
    /// model messages, no deltas) and its end. The turn being streamed may answer its calls,
    /// carry its sub-agents on, or settle its plans.
    pub fn settle(&mut self, input: &[TurnInput], events: &[Event], state: &TurnState) {
        let mut ignored = Vec::new();
        self.decisions(input, &mut ignored);
        for event in events {
            self.event(event, &mut ignored);
        }
        self.turn_done(state, &mut ignored);
        self.last_finish = None;
        self.started_at = None;
        self.ended = false;
    }

    /// The parts one event of the turn yields, in order (often none).
    pub fn translate(&mut self, event: &Event) -> Vec<Part> {
        let mut parts = Vec::new();
        if !self.ended {
            self.event(event, &mut parts);
        }
        parts
    }

    fn event(&mut self, event: &Event, parts: &mut Vec<Part>) {
        match event {
            Event::TurnCreated(created) => {
                self.started_at = Some(created.created_at.clone());
                self.decisions(&created.input, parts);
            }
            Event::ModelMessage(message) => self.message(message, parts),
            Event::ModelMessageDelta(delta) => self.delta(delta, parts),
            Event::ToolResponse(response) => self.response(response, parts),
            Event::ToolProgress(progress) => self.progress(progress, parts),
            Event::ShellOutput(output) => {
                if self.shown(&output.thread_id) && self.calls.contains_key(&output.tool_call_id) {
                    parts.push(Part::shell_output(output));
                }
            }
            Event::ThreadCreated(created) => self.thread_created(created, parts),
            Event::ThreadDone(done) => self.thread_done(done, parts),
            Event::ToolApprovalRequired(pending) => self.pending(pending, "tool", parts),
            Event::ToolResponseRequired(pending) => self.pending(pending, "question", parts),
            Event::McpAuthRequired(auth) => parts.push(Part::custom("mcp-auth-required", auth)),
            // A sandbox made by the turn: its workspace is ready.
            Event::SandboxCreated(sandbox) => {
                parts.push(Part::custom("sandbox-created", sandbox));
                parts.push(Part::custom("workspace-status", &crate::streamed::workspace_ready(sandbox)));
            }
            Event::McpInitialize(_) => {}
            Event::TurnDone(done) => self.turn_done(&done.state, parts),
        }
    }

    /// Whether events of `thread_id` are shown: the main thread's and sub-agents'.
    fn shown(&self, thread_id: &str) -> bool {
        thread_id == MAIN_THREAD_ID || self.agents.contains_key(thread_id)
    }

    /// The decisions of a turn's input: each answers a call an earlier turn left waiting.
    fn decisions(&mut self, input: &[TurnInput], parts: &mut Vec<Part>) {
        for item in input {
            let (id, outcome, feedback, response) = match item {
                TurnInput::Message { .. } => continue,
                TurnInput::ToolApproval { tool_call_id, approval: Approval::Allow { .. }, .. } => {
                    (tool_call_id, Outcome::Approve, None, None)
                }
                TurnInput::ToolApproval { tool_call_id, approval: Approval::Deny { reason }, .. } => {
                    (tool_call_id, Outcome::Reject, reason.clone(), None)
                }
                TurnInput::ToolResponse { tool_call_id, content, .. } => {
                    (tool_call_id, Outcome::Approve, None, Some(content.clone()))
                }
            };
            let approved = outcome == Outcome::Approve;
            parts.push(Part::ApprovalDecision { data: ApprovalDecision { id: id.clone(), outcome, feedback, response } });
            if self.plans.get(id) == Some(&PlanStatus::PendingApproval) {
                self.plan_status(id, if approved { PlanStatus::Approved } else { PlanStatus::Draft }, parts);
            }
        }
    }

    fn message(&mut self, message: &ModelMessage, parts: &mut Vec<Part>) {
        if !self.shown(&message.thread_id) {
            return;
        }
        if message.thread_id == MAIN_THREAD_ID {
            parts.push(Part::StepStart);
        }
        // A message may arrive whole rather than as a placeholder and its deltas.
        let text = message.text();
        self.show_text(&message.thread_id, message.reasoning_content.as_deref(), [Some(text.as_str()), message.refusal.as_deref()], parts);
        if let Folded::Whole(message) = self.messages.start(message) {
            self.complete(*message, parts);
        }
    }

    fn delta(&mut self, delta: &ModelMessageDelta, parts: &mut Vec<Part>) {
        let folded = self.messages.delta(delta);
        if matches!(folded, Folded::Unknown) {
            return;
        }
        self.show_text(&delta.thread_id, delta.reasoning_content.as_deref(), [delta.content.as_deref(), delta.refusal.as_deref()], parts);
        if let Folded::Whole(message) = folded {
            self.complete(*message, parts);
        }
    }

    /// The main thread's reasoning and text (refusals shown as text); sub-agents' text is
    /// their own, and their answer arrives in `tool-agent`.
    fn show_text(&self, thread_id: &str, reasoning: Option<&str>, texts: [Option<&str>; 2], parts: &mut Vec<Part>) {
        if thread_id != MAIN_THREAD_ID {
            return;
        }
        if let Some(reasoning) = reasoning.filter(|text| !text.is_empty()) {
            parts.push(Part::Reasoning { text: reasoning.to_owned() });
        }
        for text in texts.into_iter().flatten().filter(|text| !text.is_empty()) {
            parts.push(Part::Text { text: text.to_owned() });
        }
    }

    /// A message is whole: its tool calls are known and each gets its `call` part.
    fn complete(&mut self, message: ModelMessage, parts: &mut Vec<Part>) {
        if message.thread_id == MAIN_THREAD_ID {
            self.last_finish = message.finish_reason;
        }
        for call in message.tool_calls.iter().flatten() {
            let args = call_input(call);
            let plan = call.function.name == SUBMIT_PLAN && matches!(call.tool_info, ToolInfo::System { .. });
            let known = Call { name: call.function.name.clone(), args, thread_id: message.thread_id.clone(), plan, exec: is_exec(call) };
            parts.push(Part::invocation(&call.id, &known, None));
            self.calls.insert(call.id.clone(), known);
        }
    }

    fn response(&mut self, response: &ToolResponse, parts: &mut Vec<Part>) {
        if !self.shown(&response.thread_id) {
            return;
        }
        if self.plans.get(&response.tool_call_id) == Some(&PlanStatus::Approved) {
            self.plan_status(&response.tool_call_id, PlanStatus::Executing, parts);
        }
        let result = result_value(&response.content);
        match self.calls.get(&response.tool_call_id) {
            Some(call) => {
                parts.push(Part::invocation(&response.tool_call_id, call, Some(result)));
                if call.exec {
                    for file in produced_files(response) {
                        parts.push(Part::file_registered(file, &response.tool_call_id, &response.thread_id));
                    }
                }
            }
            None => {
                let unknown =
                    Call { name: String::new(), args: Value::Null, thread_id: response.thread_id.clone(), plan: false, exec: false };
                parts.push(Part::invocation(&response.tool_call_id, &unknown, Some(result)));
            }
        }
    }

    /// A running call's progress, after its `call` part (a call the stream never saw shows none).
    fn progress(&self, progress: &ToolProgress, parts: &mut Vec<Part>) {
        if !self.shown(&progress.thread_id) || !self.calls.contains_key(&progress.tool_call_id) {
            return;
        }
        parts.push(Part::progress(progress));
    }

    fn thread_created(&mut self, created: &ThreadCreated, parts: &mut Vec<Part>) {
        if !self.calls.contains_key(&created.parent.tool_call_id) {
            return;
        }
        let agent = AgentThread {
            name: created.agent_info.name.clone(),
            model: created.agent_info.model.clone(),
            tool_call_id: created.parent.tool_call_id.clone(),
        };
        parts.push(Part::ToolAgent {
            agent_name: agent.name.clone(),
            state: "call",
            tool_call_id: agent.tool_call_id.clone(),
            thread_id: created.thread_id.clone(),
            prompt: Some(created.agent_info.input.clone()),
            result: None,
            error: None,
        });
        self.agents.insert(created.thread_id.clone(), agent);
    }

    fn thread_done(&mut self, done: &ThreadDone, parts: &mut Vec<Part>) {
        let Some(agent) = self.agents.get(&done.thread_id) else { return };
        let (result, error) = match &done.state {
            ThreadState::Done { output } => (Some(output.text()), None),
            ThreadState::Error { error, .. } => (None, Some(error.clone())),
        };
        parts.push(Part::ToolAgent {
            agent_name: agent.name.clone(),
            state: "result",
            tool_call_id: agent.tool_call_id.clone(),
            thread_id: done.thread_id.clone(),
            prompt: None,
            result,
            error,
        });
        parts.push(Part::DataToolAgent {
            data: AgentUsage {
                agent_name: agent.name.clone(),
                model: agent.model.clone(),
                thread_id: done.thread_id.clone(),
                usage: Usage::of(done.metrics.as_ref()),
            },
        });
    }

    fn pending(&mut self, pending: &ToolCallsPending, kind: &'static str, parts: &mut Vec<Part>) {
        for reference in &pending.tool_calls {
            let call = self.calls.get(&reference.id).cloned();
            let plan = call.as_ref().is_some_and(|call| call.plan);
            if plan {
                self.plans.insert(reference.id.clone(), PlanStatus::PendingApproval);
                parts.push(Part::PlanStatusChange {
                    data: PlanStatusChange { plan_id: reference.id.clone(), from: "draft", to: "pending_approval" },
                });
            }
            let (target, payload) = match call {
                Some(call) if plan => (reference.id.clone(), call.args),
                Some(call) => (call.name, call.args),
                None => (String::new(), Value::Null),
            };
            parts.push(Part::ApprovalRequired {
                data: ApprovalRequest {
                    id: reference.id.clone(),
                    kind: if plan { "plan" } else { kind },
                    target,
                    payload,
                    thread_id: pending.thread_id.clone(),
                },
            });
        }
    }

    /// Moves a plan to `to`, announcing the change.
    fn plan_status(&mut self, plan_id: &str, to: PlanStatus, parts: &mut Vec<Part>) {
        let Some(status) = self.plans.get_mut(plan_id) else { return };
        let from = status_name(*status);
        *status = to;
        parts.push(Part::PlanStatusChange { data: PlanStatusChange { plan_id: plan_id.to_owned(), from, to: status_name(to) } });
        // A rejected plan is revised as a new call: this one is settled.
        if to == PlanStatus::Draft {
            self.plans.remove(plan_id);
        }
    }

    /// Plans being carried out end with the turn: executed when it ends with nothing waiting,
    /// failed when it ends in error or cancelled.
    fn settle_plans(&mut self, to: &'static str, parts: &mut Vec<Part>) {
        let mut ended: Vec<(String, PlanStatus)> = self
            .plans
            .iter()
            .filter(|(_, status)| matches!(status, PlanStatus::Approved | PlanStatus::Executing))
            .map(|(id, status)| (id.clone(), *status))
            .collect();
        // Sorted, so the order is the same on every replay.
        ended.sort_by(|left, right| left.0.cmp(&right.0));
        for (id, status) in ended {
            self.plans.remove(&id);
            parts.push(Part::PlanStatusChange { data: PlanStatusChange { plan_id: id, from: status_name(status), to } });
        }
    }

    fn turn_done(&mut self, state: &TurnState, parts: &mut Vec<Part>) {
        match state {
            TurnState::Running => {}
            TurnState::Done { required_actions, metrics, completed_at, .. } => {
                if required_actions.is_empty() {
                    self.settle_plans("executed", parts);
                }
                let waits_on_tools = required_actions.iter().any(|action| !matches!(action, Event::McpAuthRequired(_)));
                let reason = match self.last_finish {
                    _ if waits_on_tools => "tool-calls",
                    _ if !required_actions.is_empty() => "other",
                    None | Some(FinishReason::Stop) => "stop",
                    Some(FinishReason::Length) => "length",
                    Some(FinishReason::ContentFilter) => "content-filter",
                    Some(FinishReason::ToolCalls | FinishReason::FunctionCall) => "tool-calls",
                };
                self.finish(reason, None, metrics.as_ref(), completed_at, parts);
            }
            TurnState::Cancelled { reason, metrics, completed_at, .. } => {
                self.settle_plans("failed", parts);
                let reason = serde_json::to_value(reason).ok().and_then(|value| value.as_str().map(str::to_owned));
                self.finish("other", reason, metrics.as_ref(), completed_at, parts);
            }
            TurnState::Error { message, .. } => {
                self.settle_plans("failed", parts);
                parts.push(Part::Error { error: parts::ErrorBody { message: message.clone(), code: "turn_error" } });
            }
        }
        self.ended = true;
    }

    fn finish(
        &mut self,
        reason: &'static str,
        cancel_reason: Option<String>,
        metrics: Option<&TurnMetrics>,
        completed_at: &str,
        parts: &mut Vec<Part>,
    ) {
        parts.push(Part::Finish { finish_reason: reason, cancel_reason, usage: Usage::of(metrics) });
        parts.push(Part::cost_summary(metrics));
        parts.push(Part::latency_summary(self.started_at.as_deref(), completed_at));
    }
}

fn status_name(status: PlanStatus) -> &'static str {
    match status {
        PlanStatus::Draft => "draft",
        PlanStatus::PendingApproval => "pending_approval",
        PlanStatus::Approved => "approved",
        PlanStatus::Executing => "executing",
    }
}

/// A tool result as the `result` of its part: JSON when the text is a JSON object or array,
/// else the text.
pub(crate) fn result_value(content: &str) -> Value {
    let trimmed = content.trim_start();
    if (trimmed.starts_with('{') || trimmed.starts_with('['))
        && let Ok(value) = serde_json::from_str(content)
    {
        return value;
    }
    Value::String(content.to_owned())
}
