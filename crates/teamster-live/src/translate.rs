//! [`TurnTranslator`]: a turn's native events, in order, into [`LiveEvent`]s. One translator
//! follows one turn from its `turn.created` (a channel that joins a running turn replays it
//! from the start, so the translator sees every event).
//!
//! A model message arrives as a placeholder `model.message` that its `model.message.delta`s
//! fold into (the gateway protocol's stream): the placeholder starts it, the deltas stream it,
//! and the first event of its thread that is not one of its deltas (or the turn's end) ends
//! it. Threads stream at once, so each thread has its open message. The main thread's messages
//! become `message_*` and `tool_*` events; the threads of sub-agents become `subagent_*`
//! events; what a turn waits for becomes `tool_approval_required` and `tool_suspended`; each
//! model call's usage adds to `usage_update`.

use std::collections::{BTreeMap, HashMap};

use teamster_protocol::event::{ModelMessage, ModelMessageDelta, ThinkingBlock, ThreadState, ToolCallsPending, Usage};
use teamster_protocol::workspace::WorkspaceStatus;
use teamster_protocol::{Event, MAIN_THREAD_ID, TurnState};

use crate::display::{AgentEndStatus, SubagentStatus, UsageTotals};
use crate::event::LiveEvent;

/// A message being streamed: what its placeholder and deltas have said so far.
#[derive(Debug, Default)]
struct OpenMessage {
    id: String,
    text: String,
    reasoning: String,
    /// Its tool calls by index: id, tool name, input so far.
    calls: BTreeMap<u32, (String, String, String)>,
    usage: Option<Usage>,
}

/// Translates one turn's events (see the [module](self)).
#[derive(Debug, Default)]
pub struct TurnTranslator {
    turn_id: String,
    /// Each thread's message being streamed.
    open: HashMap<String, OpenMessage>,
    /// Every tool call seen, by id: its tool's name and input.
    calls: HashMap<String, (String, String)>,
    /// The usage of the model calls so far.
    usage: UsageTotals,
}

impl TurnTranslator {
    /// A translator for a turn, adding to `usage` (the session's before the turn).
    pub fn new(usage: UsageTotals) -> TurnTranslator {
        TurnTranslator { usage, ..TurnTranslator::default() }
    }

    /// The usage so far, the session's before the turn included.
    pub fn usage(&self) -> &UsageTotals {
        &self.usage
    }

    /// The live events one native event stands for, in order (none for some).
    pub fn translate(&mut self, event: &Event) -> Vec<LiveEvent> {
        let mut events = Vec::new();
        // Whatever is not a delta of a thread's open message ends it.
        match event {
            Event::ModelMessageDelta(delta) => {
                if self.open.get(&delta.thread_id).is_some_and(|open| open.id != delta.id) {
                    events.extend(self.close(&delta.thread_id));
                }
            }
            Event::ThreadCreated(thread) => events.extend(self.close(&thread.parent.thread_id)),
            Event::TurnDone(_) | Event::McpAuthRequired(_) | Event::SandboxCreated(_) | Event::TurnCreated(_) => {
                let threads: Vec<String> = self.open.keys().cloned().collect();
                for thread in threads {
                    events.extend(self.close(&thread));
                }
            }
            other => {
                if let Some(thread) = thread_of(other) {
                    events.extend(self.close(thread));
                }
            }
        }
        events.extend(self.event(event));
        events
    }

    fn event(&mut self, event: &Event) -> Vec<LiveEvent> {
        match event {
            Event::TurnCreated(created) => {
                self.turn_id.clone_from(&created.turn_id);
                vec![LiveEvent::AgentStart { turn_id: created.turn_id.clone() }]
            }
            Event::ModelMessage(message) => self.open_message(message),
            Event::ModelMessageDelta(delta) => self.delta(delta),
            Event::ToolProgress(progress) if progress.thread_id == MAIN_THREAD_ID => vec![LiveEvent::ToolUpdate {
                tool_call_id: progress.tool_call_id.clone(),
                tool_name: progress.tool_name.clone(),
                progress: progress.progress,
                total: progress.total,
                message: progress.message.clone(),
            }],
            Event::ToolProgress(_) => Vec::new(),
            Event::ShellOutput(output) if output.thread_id == MAIN_THREAD_ID => vec![LiveEvent::ShellOutput {
                tool_call_id: output.tool_call_id.clone(),
                tool_name: output.tool_name.clone(),
                stream: output.stream.clone(),
                text: output.text.clone(),
            }],
            Event::ShellOutput(_) => Vec::new(),
            Event::ToolResponse(response) => {
                let tool_name = self.calls.get(&response.tool_call_id).map(|(name, _)| name.clone()).unwrap_or_default();
                if response.thread_id == MAIN_THREAD_ID {
                    vec![LiveEvent::ToolEnd { tool_call_id: response.tool_call_id.clone(), tool_name, result: response.content.clone() }]
                } else {
                    vec![LiveEvent::SubagentToolEnd {
                        thread_id: response.thread_id.clone(),
                        tool_call_id: response.tool_call_id.clone(),
                        tool_name,
                        result: response.content.clone(),
                    }]
                }
            }
            Event::ThreadCreated(thread) => {
                vec![LiveEvent::SubagentStart {
                    thread_id: thread.thread_id.clone(),
                    agent_name: thread.agent_info.name.clone(),
                    task: thread.agent_info.input.clone(),
                    model: thread.agent_info.model.clone(),
                    tool_call_id: thread.parent.tool_call_id.clone(),
                }]
            }
            Event::ThreadDone(thread) => {
                let (status, result, error) = match &thread.state {
                    ThreadState::Done { output } => (SubagentStatus::Done, Some(output.text()), None),
                    ThreadState::Error { error, output } => {
                        (SubagentStatus::Error, output.as_ref().map(|output| output.text()), Some(error.clone()))
                    }
                };
                vec![LiveEvent::SubagentEnd { thread_id: thread.thread_id.clone(), status, result, error }]
            }
            Event::ToolApprovalRequired(pending) => self.pending(pending, |tool_call_id, tool_name, arguments| {
                LiveEvent::ToolApprovalRequired { tool_call_id, tool_name, arguments }
            }),
            Event::ToolResponseRequired(pending) => self.pending(pending, |tool_call_id, tool_name, arguments| {
                let suspend_payload = serde_json::from_str(&arguments).unwrap_or(serde_json::Value::String(arguments));
                LiveEvent::ToolSuspended { tool_call_id, tool_name, suspend_payload }
            }),
            Event::McpAuthRequired(required) => {
                let servers: Vec<&str> = required.mcp_servers.iter().map(|server| server.name.as_str()).collect();
                vec![LiveEvent::Info { message: format!("authorize the MCP servers {} to go on", servers.join(", ")) }]
            }
            // A turn that made the sandbox: its workspace is ready.
            Event::SandboxCreated(sandbox) => {
                let mut events = vec![LiveEvent::Info { message: format!("sandbox {} is ready", sandbox.sandbox_id) }];
                events.extend(LiveEvent::workspace(WorkspaceStatus::Ready, Some(&sandbox.sandbox_id), None));
                events
            }
            Event::McpInitialize(_) => Vec::new(),
            Event::TurnDone(done) => self.turn_done(&done.state),
        }
    }

    /// A placeholder (or a whole message, where no deltas follow): it opens the thread's message.
    fn open_message(&mut self, message: &ModelMessage) -> Vec<LiveEvent> {
        let mut open = OpenMessage { id: message.id.clone(), text: message.text(), usage: message.usage.clone(), ..OpenMessage::default() };
        open.reasoning = message.reasoning_content.clone().or_else(|| thinking(message.thinking_blocks.as_deref())).unwrap_or_default();
        let mut events = Vec::new();
        if message.thread_id == MAIN_THREAD_ID {
            events.push(LiveEvent::MessageStart { message_id: message.id.clone() });
            if !open.text.is_empty() {
                events.push(LiveEvent::MessageUpdate { message_id: message.id.clone(), text_delta: Some(open.text.clone()), reasoning_delta: None });
            }
        }
        for (index, call) in message.tool_calls.iter().flatten().enumerate() {
            let index = u32::try_from(index).unwrap_or(u32::MAX);
            open.calls.insert(index, (call.id.clone(), call.function.name.clone(), call.function.arguments.clone()));
            if message.thread_id == MAIN_THREAD_ID {
                events.push(LiveEvent::ToolInputStart { tool_call_id: call.id.clone(), tool_name: call.function.name.clone() });
            }
        }
        self.open.insert(message.thread_id.clone(), open);
        events
    }

    /// More of a thread's open message.
    fn delta(&mut self, delta: &ModelMessageDelta) -> Vec<LiveEvent> {
        let main = delta.thread_id == MAIN_THREAD_ID;
        let mut events = Vec::new();
        let open = match self.open.get_mut(&delta.thread_id) {
            Some(open) => open,
            None => {
                // A delta without its placeholder (a stream joined mid-message): it opens one.
                if main {
                    events.push(LiveEvent::MessageStart { message_id: delta.id.clone() });
                }
                self.open.entry(delta.thread_id.clone()).or_insert(OpenMessage { id: delta.id.clone(), ..OpenMessage::default() })
            }
        };
        let text_delta = delta.content.clone().filter(|text| !text.is_empty());
        let reasoning_delta = delta.reasoning_content.clone().filter(|text| !text.is_empty()).or_else(|| thinking(delta.thinking_blocks.as_deref()));
        if let Some(text) = &text_delta {
            open.text.push_str(text);
        }
        if let Some(reasoning) = &reasoning_delta {
            open.reasoning.push_str(reasoning);
        }
        if let Some(usage) = &delta.usage {
            open.usage = Some(usage.clone());
        }
        match (main, &text_delta) {
            (true, _) if text_delta.is_some() || reasoning_delta.is_some() => {
                events.push(LiveEvent::MessageUpdate { message_id: delta.id.clone(), text_delta, reasoning_delta });
            }
            (false, Some(text)) => events.push(LiveEvent::SubagentTextDelta { thread_id: delta.thread_id.clone(), delta: text.clone() }),
            _ => {}
        }
        for call in delta.tool_calls.iter().flatten() {
            let function = call.function.as_ref();
            let arguments = function.and_then(|function| function.arguments.clone()).unwrap_or_default();
            let slot = open.calls.entry(call.index).or_default();
            let new = slot.0.is_empty() && slot.1.is_empty();
            if let Some(id) = call.id.as_ref().filter(|id| !id.is_empty()) {
                slot.0.clone_from(id);
            }
            if let Some(name) = function.and_then(|function| function.name.as_ref()).filter(|name| !name.is_empty()) {
                slot.1.clone_from(name);
            }
            slot.2.push_str(&arguments);
            if main && new {
                events.push(LiveEvent::ToolInputStart { tool_call_id: slot.0.clone(), tool_name: slot.1.clone() });
            }
            if main && !arguments.is_empty() {
                events.push(LiveEvent::ToolInputDelta { tool_call_id: slot.0.clone(), delta: arguments });
            }
        }
        events
    }

    /// Ends a thread's open message, if it has one: its tool inputs end, the message ends, its
    /// tool calls start, and its usage adds up.
    fn close(&mut self, thread_id: &str) -> Vec<LiveEvent> {
        let Some(open) = self.open.remove(thread_id) else { return Vec::new() };
        let mut events = Vec::new();
        let main = thread_id == MAIN_THREAD_ID;
        if main {
            events.extend(open.calls.values().map(|(id, _, _)| LiveEvent::ToolInputEnd { tool_call_id: id.clone() }));
            let reasoning = (!open.reasoning.is_empty()).then(|| open.reasoning.clone());
            events.push(LiveEvent::MessageEnd { message_id: open.id.clone(), text: open.text.clone(), reasoning });
        }
        for (id, name, arguments) in open.calls.into_values() {
            self.calls.insert(id.clone(), (name.clone(), arguments.clone()));
            events.push(match main {
                true => LiveEvent::ToolStart { tool_call_id: id, tool_name: name, arguments },
                false => LiveEvent::SubagentToolStart { thread_id: thread_id.to_owned(), tool_call_id: id, tool_name: name, arguments },
            });
        }
        if let Some(usage) = &open.usage {
            self.usage.add(usage);
            events.push(LiveEvent::UsageUpdate { usage: self.usage.clone() });
        }
        events
    }

    fn pending(&self, pending: &ToolCallsPending, event: impl Fn(String, String, String) -> LiveEvent) -> Vec<LiveEvent> {
        pending
            .tool_calls
            .iter()
            .map(|call| {
                let (name, arguments) = self.calls.get(&call.id).cloned().unwrap_or_default();
                event(call.id.clone(), name, arguments)
            })
            .collect()
    }

    fn turn_done(&mut self, state: &TurnState) -> Vec<LiveEvent> {
        let turn_id = self.turn_id.clone();
        let (status, reason, metrics) = match state {
            TurnState::Done { required_actions, metrics, .. } => {
                let status = if required_actions.is_empty() { AgentEndStatus::Done } else { AgentEndStatus::Waiting };
                (status, None, metrics.as_ref())
            }
            TurnState::Cancelled { reason, metrics, .. } => {
                let reason = serde_json::to_value(reason).ok().and_then(|value| value.as_str().map(str::to_owned));
                (AgentEndStatus::Cancelled, reason, metrics.as_ref())
            }
            TurnState::Error { message, metrics, .. } => (AgentEndStatus::Error, Some(message.clone()), metrics.as_ref()),
            TurnState::Running => return Vec::new(),
        };
        let mut events = Vec::new();
        if let (AgentEndStatus::Error, Some(message)) = (status, &reason) {
            events.push(LiveEvent::Error { message: message.clone() });
        }
        if let Some(cost) = metrics.and_then(|metrics| metrics.total_cost_in_usd) {
            self.usage.add_cost(cost);
            events.push(LiveEvent::UsageUpdate { usage: self.usage.clone() });
        }
        events.push(LiveEvent::AgentEnd { turn_id, status, reason });
        events
    }
}

/// The text of thinking blocks, if any has some.
fn thinking(blocks: Option<&[ThinkingBlock]>) -> Option<String> {
    let text: String = blocks
        .into_iter()
        .flatten()
        .filter_map(|block| match block {
            ThinkingBlock::Thinking { thinking, .. } => Some(thinking.as_str()),
            ThinkingBlock::RedactedThinking { .. } => None,
        })
        .collect();
    (!text.is_empty()).then_some(text)
}

/// The thread an event belongs to, for the events that end its open message.
fn thread_of(event: &Event) -> Option<&str> {
    match event {
        Event::ModelMessage(message) => Some(&message.thread_id),
        Event::ToolResponse(response) => Some(&response.thread_id),
        Event::ToolProgress(progress) => Some(&progress.thread_id),
        Event::ShellOutput(output) => Some(&output.thread_id),
        Event::ToolApprovalRequired(pending) | Event::ToolResponseRequired(pending) => Some(&pending.thread_id),
        Event::ThreadDone(thread) => Some(&thread.thread_id),
        Event::McpInitialize(initialize) => Some(&initialize.thread_id),
        _ => None,
    }
}
