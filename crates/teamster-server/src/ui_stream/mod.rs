//! The AI SDK UI message stream (what `useChat` reads): a turn's events translated into
//! `UIMessageChunk`s, one assistant message per turn (a turn answering waiting calls continues
//! the message that made them). `start` carries the turn id as the message id; each main-thread model call is a step (`start-step` … `finish-step`) with its
//! `reasoning-*` and `text-*` parts and its tool calls (`tool-input-start`,
//! `tool-input-available`, then `tool-output-available`, or `tool-approval-request` for a gated
//! call), with a running call's progress as its `data-tool-progress` part updated in place;
//! sub-agent threads are `data-agent` parts updated in place (a sub-agent's call that waits
//! for approval or an answer is a tool part like the main thread's); the turn ends with
//! `message-metadata` (usage and cost) and `finish`, with `abort` when it was cancelled, or
//! with `error`.
//!
//! A turn that answers calls an earlier turn left waiting starts by announcing those calls
//! again with their decisions, so a reader that has only this turn's stream (a resumed or
//! replayed one) builds the same parts as one that continues the earlier message.
//!
//! Like the data stream, the translation is a pure fold of the event log after the earlier
//! turns the turn answers (`data_stream::prior`), so live, resumed and replayed streams agree.

pub mod chunks;
pub mod request;
pub mod response;

use std::collections::{HashMap, HashSet};

use serde_json::{Value, json};
use teamster_protocol::event::{
    FinishReason, ModelMessage, ModelMessageDelta, ThreadCreated, ThreadDone, ThreadState, ToolCallsPending, ToolInfo, ToolProgress,
    ToolResponse,
};
use teamster_protocol::input::Approval;
use teamster_protocol::{Event, MAIN_THREAD_ID, TurnInput, TurnMetrics, TurnState};

use crate::data_stream::prior::Fold;
use crate::data_stream::result_value;
use crate::streamed::{Folded, Messages, call_input, is_exec, produced_files};
use teamster_service::RUN_SUB_AGENT;
pub use chunks::Chunk;
use chunks::{Metadata, Usage};


/// A tool call the stream has seen whole.
#[derive(Clone, Debug)]
struct Call {
    name: String,
    input: Value,
    /// Whether it is an `exec` call, whose result lists the files it made.
    exec: bool,
}

/// A sub-agent thread, shown as a `data-agent` part.
#[derive(Clone, Debug)]
struct AgentThread {
    name: String,
    model: Option<String>,
    tool_call_id: String,
    prompt: String,
}

/// The fold from events to UI message chunks. Feed it every event of a turn in order with
/// [`Translator::translate`].
#[derive(Debug, Default)]
pub struct Translator {
    /// The tool calls shown as parts, by id: every main-thread call, and the calls of
    /// sub-agents that wait for the user (approvals and questions).
    calls: HashMap<String, Call>,
    /// Sub-agents' calls, by id, in case one waits for the user.
    sub_agent_calls: HashMap<String, Call>,
    /// Model messages being streamed.
    messages: Messages,
    /// The ids of the text and reasoning parts open now.
    open_text: HashSet<String>,
    open_reasoning: HashSet<String>,
    /// Sub-agent threads by thread id.
    agents: HashMap<String, AgentThread>,
    /// Calls the user denied: their results are the denial, shown as `output-denied`.
    denied: HashSet<String>,
    /// Whether a step is open (a `start-step` without its `finish-step`).
    in_step: bool,
    /// The finish reason of the main thread's latest model message.
    last_finish: Option<FinishReason>,
    /// What each main-thread command printed so far, by call id: stdout, stderr, and whether
    /// more was printed than streamed (bounded by the engine's cap on streamed output).
    shell: HashMap<String, (String, String, bool)>,
    /// Set once the turn ended: nothing else follows.
    ended: bool,
}

impl Fold for Translator {
    /// Folds an earlier turn silently: only the calls it made and their threads matter later.
    fn settle(&mut self, _input: &[TurnInput], events: &[Event], _state: &TurnState) {
        let mut ignored = Vec::new();
        for event in events {
            match event {
                Event::ModelMessage(message) => self.message(message, &mut ignored),
                Event::ThreadCreated(created) => self.thread_created(created, &mut ignored),
                Event::ToolApprovalRequired(pending) => self.approvals(pending, &mut ignored),
                Event::ToolResponseRequired(pending) => self.questions(pending, &mut ignored),
                _ => {}
            }
        }
        *self = Translator {
            calls: std::mem::take(&mut self.calls),
            sub_agent_calls: std::mem::take(&mut self.sub_agent_calls),
            agents: std::mem::take(&mut self.agents),
            ..Translator::default()
        };
    }
}

impl Translator {
    /// The chunks one event of the turn yields, in order (often none).
    pub fn translate(&mut self, event: &Event) -> Vec<Chunk> {
        let mut chunks = Vec::new();
        if !self.ended {
            self.event(event, &mut chunks);
        }
        chunks
    }

    /// Whether the turn has ended (its last chunks are out).
    pub fn ended(&self) -> bool {
        self.ended
    }

    fn event(&mut self, event: &Event, chunks: &mut Vec<Chunk>) {
        match event {
            Event::TurnCreated(created) => {
                // A turn answering waiting calls continues the message that made them.
                let answers = created.input.iter().any(|item| !matches!(item, TurnInput::Message { .. }));
                chunks.push(Chunk::Start { message_id: (!answers).then(|| created.turn_id.clone()) });
                self.decisions(&created.input, chunks);
            }
            Event::ModelMessage(message) => self.message(message, chunks),
            Event::ModelMessageDelta(delta) => self.delta(delta, chunks),
            Event::ToolResponse(response) => self.response(response, chunks),
            Event::ToolProgress(progress) => self.progress(progress, chunks),
            Event::ShellOutput(output) => self.shell_output(output, chunks),
            Event::ThreadCreated(created) => self.thread_created(created, chunks),
            Event::ThreadDone(done) => self.thread_done(done, chunks),
            Event::ToolApprovalRequired(pending) => self.approvals(pending, chunks),
            // A question is a client-side call: its part waits as `input-available` for
            // `addToolOutput`.
            Event::ToolResponseRequired(pending) => self.questions(pending, chunks),
            Event::McpAuthRequired(auth) => {
                chunks.push(Chunk::data("mcp-auth-required", &auth.id, serde_json::to_value(auth).unwrap_or_default()));
            }
            // A sandbox made by the turn: its workspace is ready. News of the session, not of the
            // conversation: transient, for the client's `onData`.
            Event::SandboxCreated(sandbox) => {
                chunks.push(Chunk::transient_data("workspace-status", "workspace", crate::streamed::workspace_ready(sandbox)));
            }
            Event::McpInitialize(_) => {}
            Event::TurnDone(done) => self.turn_done(&done.state, chunks),
        }
    }

    /// The decided calls of an earlier turn, announced again with their decisions.
    fn decisions(&mut self, input: &[TurnInput], chunks: &mut Vec<Chunk>) {
        for item in input {
            let (id, approval) = match item {
                TurnInput::Message { .. } => continue,
                TurnInput::ToolApproval { thread_id, tool_call_id, approval } => (part_call_id(thread_id, tool_call_id), Some(approval)),
                TurnInput::ToolResponse { thread_id, tool_call_id, .. } => (part_call_id(thread_id, tool_call_id), None),
            };
            let id = &id;
            let Some(call) = self.calls.get(id) else { continue };
            chunks.push(Chunk::ToolInputAvailable { tool_call_id: id.clone(), tool_name: call.name.clone(), input: call.input.clone() });
            let Some(approval) = approval else { continue };
            chunks.push(Chunk::ToolApprovalRequest { approval_id: id.clone(), tool_call_id: id.clone() });
            let (approved, reason) = match approval {
                Approval::Allow { .. } => (true, None),
                Approval::Deny { reason } => (false, reason.clone()),
            };
            chunks.push(Chunk::ToolApprovalResponse { approval_id: id.clone(), approved, reason });
            if !approved {
                self.denied.insert(id.clone());
                chunks.push(Chunk::ToolOutputDenied { tool_call_id: id.clone() });
            }
        }
    }

    fn message(&mut self, message: &ModelMessage, chunks: &mut Vec<Chunk>) {
        // Sub-agents' messages are their own; their thread's `data-agent` part shows them, and
        // only their calls that wait for the user become parts.
        if message.thread_id != MAIN_THREAD_ID {
            if let Folded::Whole(message) = self.messages.start(message) {
                self.keep_sub_agent_calls(&message);
            }
            return;
        }
        self.end_step(chunks);
        chunks.push(Chunk::StartStep);
        self.in_step = true;
        // A message may arrive whole rather than as a placeholder and its deltas.
        let text = message.text();
        self.show(&message.id, message.reasoning_content.as_deref(), [Some(text.as_str()), message.refusal.as_deref()], chunks);
        if let Folded::Whole(message) = self.messages.start(message) {
            self.complete(*message, chunks);
        }
    }

    fn delta(&mut self, delta: &ModelMessageDelta, chunks: &mut Vec<Chunk>) {
        let folded = self.messages.delta(delta);
        if matches!(folded, Folded::Unknown) {
            return;
        }
        if delta.thread_id != MAIN_THREAD_ID {
            if let Folded::Whole(message) = folded {
                self.keep_sub_agent_calls(&message);
            }
            return;
        }
        self.show(&delta.id, delta.reasoning_content.as_deref(), [delta.content.as_deref(), delta.refusal.as_deref()], chunks);
        if let Folded::Whole(message) = folded {
            self.complete(*message, chunks);
        }
    }

    /// Reasoning and text of a main-thread message (refusals shown as text); reasoning ends
    /// when the text begins.
    fn show(&mut self, message_id: &str, reasoning: Option<&str>, texts: [Option<&str>; 2], chunks: &mut Vec<Chunk>) {
        let reasoning_id = format!("{message_id}-reasoning");
        if let Some(reasoning) = reasoning.filter(|text| !text.is_empty()) {
            if self.open_reasoning.insert(reasoning_id.clone()) {
                chunks.push(Chunk::ReasoningStart { id: reasoning_id.clone() });
            }
            chunks.push(Chunk::ReasoningDelta { id: reasoning_id.clone(), delta: reasoning.to_owned() });
        }
        for text in texts.into_iter().flatten().filter(|text| !text.is_empty()) {
            if self.open_reasoning.remove(&reasoning_id) {
                chunks.push(Chunk::ReasoningEnd { id: reasoning_id.clone() });
            }
            if self.open_text.insert(message_id.to_owned()) {
                chunks.push(Chunk::TextStart { id: message_id.to_owned() });
            }
            chunks.push(Chunk::TextDelta { id: message_id.to_owned(), delta: text.to_owned() });
        }
    }

    /// A message is whole: its open parts end, and main-thread tool calls are announced.
    fn complete(&mut self, message: ModelMessage, chunks: &mut Vec<Chunk>) {
        let message_id = message.id.as_str();
        self.last_finish = message.finish_reason;
        let reasoning_id = format!("{message_id}-reasoning");
        if self.open_reasoning.remove(&reasoning_id) {
            chunks.push(Chunk::ReasoningEnd { id: reasoning_id });
        }
        if self.open_text.remove(message_id) {
            chunks.push(Chunk::TextEnd { id: message_id.to_owned() });
        }
        for call in message.tool_calls.iter().flatten() {
            // A sub-agent is shown by its thread's `data-agent` part, not as a tool part that
            // would stay unfinished while the sub-agent waits for the user.
            if call.function.name == RUN_SUB_AGENT && matches!(call.tool_info, ToolInfo::System { .. }) {
                continue;
            }
            let input = call_input(call);
            let known = Call { name: call.function.name.clone(), input, exec: is_exec(call) };
            chunks.push(Chunk::ToolInputStart { tool_call_id: call.id.clone(), tool_name: known.name.clone() });
            chunks.push(Chunk::ToolInputAvailable { tool_call_id: call.id.clone(), tool_name: known.name.clone(), input: known.input.clone() });
            self.calls.insert(call.id.clone(), known);
        }
    }

    /// A sub-agent's message is whole: its calls are kept in case one waits for the user.
    fn keep_sub_agent_calls(&mut self, message: &ModelMessage) {
        for call in message.tool_calls.iter().flatten() {
            let id = part_call_id(&message.thread_id, &call.id);
            self.sub_agent_calls.insert(id, Call { name: call.function.name.clone(), input: call_input(call), exec: is_exec(call) });
        }
    }

    /// A sub-agent's call that waits for the user becomes a part, as a main-thread call is.
    fn surface(&mut self, tool_call_id: &str, chunks: &mut Vec<Chunk>) -> bool {
        if self.calls.contains_key(tool_call_id) {
            return true;
        }
        let Some(call) = self.sub_agent_calls.remove(tool_call_id) else { return false };
        chunks.push(Chunk::ToolInputStart { tool_call_id: tool_call_id.to_owned(), tool_name: call.name.clone() });
        chunks.push(Chunk::ToolInputAvailable { tool_call_id: tool_call_id.to_owned(), tool_name: call.name.clone(), input: call.input.clone() });
        self.calls.insert(tool_call_id.to_owned(), call);
        true
    }

    fn response(&mut self, response: &ToolResponse, chunks: &mut Vec<Chunk>) {
        let tool_call_id = part_call_id(&response.thread_id, &response.tool_call_id);
        if !self.calls.contains_key(&tool_call_id) || self.denied.contains(&tool_call_id) {
            return;
        }
        let files = match self.calls.get(&tool_call_id) {
            Some(call) if call.exec => produced_files(response),
            _ => Vec::new(),
        };
        match response.failure() {
            Some(error) => chunks.push(Chunk::ToolOutputError { tool_call_id: tool_call_id.clone(), error_text: error.to_owned() }),
            None => chunks.push(Chunk::ToolOutputAvailable { tool_call_id: tool_call_id.clone(), output: result_value(&response.content) }),
        }
        // Each file the call made, now available for download; the latest of a path replaces
        // the part of an earlier call.
        for file in files {
            let data = json!({ "path": file.path, "size": file.size, "toolCallId": tool_call_id });
            chunks.push(Chunk::data("file", &file.path, data));
        }
    }

    /// What a main-thread command printed so far, one part per call, replaced as it grows.
    fn shell_output(&mut self, output: &teamster_protocol::event::ShellOutput, chunks: &mut Vec<Chunk>) {
        if output.thread_id != MAIN_THREAD_ID || !self.calls.contains_key(&output.tool_call_id) {
            return;
        }
        let printed = self.shell.entry(output.tool_call_id.clone()).or_default();
        match output.stream.as_str() {
            "stderr" => printed.1.push_str(&output.text),
            _ => printed.0.push_str(&output.text),
        }
        printed.2 |= output.truncated;
        let data = json!({
            "toolCallId": output.tool_call_id,
            "toolName": output.tool_name,
            "stdout": printed.0,
            "stderr": printed.1,
            "truncated": printed.2,
        });
        chunks.push(Chunk::data("shell-output", &format!("{}-output", output.tool_call_id), data));
    }

    /// A main-thread call's latest progress, one part per call.
    fn progress(&self, progress: &ToolProgress, chunks: &mut Vec<Chunk>) {
        if progress.thread_id != MAIN_THREAD_ID || !self.calls.contains_key(&progress.tool_call_id) {
            return;
        }
        let data = json!({
            "toolCallId": progress.tool_call_id,
            "toolName": progress.tool_name,
            "progress": progress.progress,
            "total": progress.total,
            "message": progress.message,
        });
        chunks.push(Chunk::data("tool-progress", &format!("{}-progress", progress.tool_call_id), data));
    }

    fn approvals(&mut self, pending: &ToolCallsPending, chunks: &mut Vec<Chunk>) {
        for reference in &pending.tool_calls {
            let id = part_call_id(&pending.thread_id, &reference.id);
            if self.surface(&id, chunks) {
                chunks.push(Chunk::ToolApprovalRequest { approval_id: id.clone(), tool_call_id: id });
            }
        }
    }

    /// Questions wait as `input-available` parts; a sub-agent's question becomes one here.
    fn questions(&mut self, pending: &ToolCallsPending, chunks: &mut Vec<Chunk>) {
        for reference in &pending.tool_calls {
            self.surface(&part_call_id(&pending.thread_id, &reference.id), chunks);
        }
    }

    fn thread_created(&mut self, created: &ThreadCreated, chunks: &mut Vec<Chunk>) {
        let agent = AgentThread {
            name: created.agent_info.name.clone(),
            model: created.agent_info.model.clone(),
            tool_call_id: created.parent.tool_call_id.clone(),
            prompt: created.agent_info.input.clone(),
        };
        chunks.push(agent_part(&created.thread_id, &agent, json!({ "status": "running" })));
        self.agents.insert(created.thread_id.clone(), agent);
    }

    fn thread_done(&mut self, done: &ThreadDone, chunks: &mut Vec<Chunk>) {
        let Some(agent) = self.agents.get(&done.thread_id).cloned() else { return };
        let usage = Usage::of(done.metrics.as_ref());
        let outcome = match &done.state {
            ThreadState::Done { output } => json!({ "status": "done", "result": output.text(), "usage": usage }),
            ThreadState::Error { error, .. } => json!({ "status": "error", "error": error, "usage": usage }),
        };
        chunks.push(agent_part(&done.thread_id, &agent, outcome));
    }

    fn end_step(&mut self, chunks: &mut Vec<Chunk>) {
        if std::mem::take(&mut self.in_step) {
            chunks.push(Chunk::FinishStep);
        }
    }

    fn turn_done(&mut self, state: &TurnState, chunks: &mut Vec<Chunk>) {
        self.end_step(chunks);
        match state {
            TurnState::Running => return,
            TurnState::Done { required_actions, metrics, .. } => {
                chunks.push(metadata(metrics.as_ref()));
                let waits_on_tools = required_actions.iter().any(|action| !matches!(action, Event::McpAuthRequired(_)));
                let reason = match self.last_finish {
                    _ if waits_on_tools => "tool-calls",
                    _ if !required_actions.is_empty() => "other",
                    None | Some(FinishReason::Stop) => "stop",
                    Some(FinishReason::Length) => "length",
                    Some(FinishReason::ContentFilter) => "content-filter",
                    Some(FinishReason::ToolCalls | FinishReason::FunctionCall) => "tool-calls",
                };
                chunks.push(Chunk::Finish { finish_reason: reason });
            }
            TurnState::Cancelled { reason, metrics, .. } => {
                chunks.push(metadata(metrics.as_ref()));
                let reason = serde_json::to_value(reason).ok().and_then(|value| value.as_str().map(str::to_owned));
                chunks.push(Chunk::Abort { reason });
            }
            TurnState::Error { message, .. } => chunks.push(Chunk::Error { error_text: message.clone() }),
        }
        self.ended = true;
    }
}

/// The `toolCallId` of a call's part: its id on the main thread; a sub-agent's call ids are
/// only unique in their thread, so theirs is `<thread id>.<call id>`.
pub fn part_call_id(thread_id: &str, tool_call_id: &str) -> String {
    if thread_id == MAIN_THREAD_ID { tool_call_id.to_owned() } else { format!("{thread_id}.{tool_call_id}") }
}

/// The `data-agent` part of a sub-agent thread: who it is, and `status` with what it has.
fn agent_part(thread_id: &str, agent: &AgentThread, status: Value) -> Chunk {
    let mut data = json!({
        "threadId": thread_id,
        "agentName": agent.name,
        "model": agent.model,
        "toolCallId": agent.tool_call_id,
        "prompt": agent.prompt,
    });
    if let (Some(data), Value::Object(status)) = (data.as_object_mut(), status) {
        data.extend(status);
    }
    Chunk::data("agent", thread_id, data)
}

fn metadata(metrics: Option<&TurnMetrics>) -> Chunk {
    Chunk::MessageMetadata {
        message_metadata: Metadata { usage: Usage::of(metrics), cost_usd: metrics.and_then(|metrics| metrics.total_cost_in_usd) },
    }
}
