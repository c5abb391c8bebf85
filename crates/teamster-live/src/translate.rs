//! [`TurnTranslator`]: a turn's native events, in order, into [`LiveEvent`]s. One translator
//! follows one turn from its `turn.created` (a channel that joins a running turn replays it
//! from the start, so the translator sees every event).
//!
//! The main thread's messages become `message_*` and `tool_*` events; the threads of
//! sub-agents become `subagent_*` events; what a turn waits for becomes
//! `tool_approval_required` and `tool_suspended`; each model call's usage adds to
//! `usage_update`.

use std::collections::{BTreeMap, HashMap};

use teamster_protocol::event::{ModelMessage, ModelMessageDelta, ThinkingBlock, ThreadState, ToolCallsPending};
use teamster_protocol::{Event, MAIN_THREAD_ID, TurnState};

use crate::display::{AgentEndStatus, SubagentStatus, UsageTotals};
use crate::event::LiveEvent;

/// Translates one turn's events (see the [module](self)).
#[derive(Debug, Default)]
pub struct TurnTranslator {
    turn_id: String,
    /// The main thread's message being streamed, and its text so far.
    streaming: Option<String>,
    streamed_text: String,
    /// The tool calls whose input streams in the message, by their index in it.
    inputs: BTreeMap<u32, (String, String)>,
    /// Every tool call seen, by id: its tool's name and input.
    calls: HashMap<String, (String, String)>,
    /// The usage of this turn's model calls so far.
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
        match event {
            Event::TurnCreated(created) => {
                self.turn_id.clone_from(&created.turn_id);
                vec![LiveEvent::AgentStart { turn_id: created.turn_id.clone() }]
            }
            Event::ModelMessageDelta(delta) if delta.thread_id == MAIN_THREAD_ID => self.main_delta(delta),
            Event::ModelMessageDelta(delta) => match &delta.content {
                Some(text) if !text.is_empty() => {
                    vec![LiveEvent::SubagentTextDelta { thread_id: delta.thread_id.clone(), delta: text.clone() }]
                }
                _ => Vec::new(),
            },
            Event::ModelMessage(message) => {
                let mut events = if message.thread_id == MAIN_THREAD_ID {
                    self.main_message(message)
                } else {
                    self.subagent_message(message)
                };
                if let Some(usage) = &message.usage {
                    self.usage.add(usage);
                    events.push(LiveEvent::UsageUpdate { usage: self.usage.clone() });
                }
                events
            }
            Event::ToolProgress(progress) if progress.thread_id == MAIN_THREAD_ID => vec![LiveEvent::ToolUpdate {
                tool_call_id: progress.tool_call_id.clone(),
                tool_name: progress.tool_name.clone(),
                progress: progress.progress,
                total: progress.total,
                message: progress.message.clone(),
            }],
            Event::ToolProgress(_) => Vec::new(),
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
            Event::SandboxCreated(sandbox) => vec![LiveEvent::Info { message: format!("sandbox {} is ready", sandbox.sandbox_id) }],
            Event::McpInitialize(_) => Vec::new(),
            Event::TurnDone(done) => self.turn_done(&done.state),
        }
    }

    fn main_delta(&mut self, delta: &ModelMessageDelta) -> Vec<LiveEvent> {
        let mut events = self.start_message(&delta.id);
        let reasoning_delta = delta.reasoning_content.clone().filter(|text| !text.is_empty()).or_else(|| thinking(delta.thinking_blocks.as_deref()));
        let text_delta = delta.content.clone().filter(|text| !text.is_empty());
        if let Some(text) = &text_delta {
            self.streamed_text.push_str(text);
        }
        if text_delta.is_some() || reasoning_delta.is_some() {
            events.push(LiveEvent::MessageUpdate { message_id: delta.id.clone(), text_delta, reasoning_delta });
        }
        for call in delta.tool_calls.iter().flatten() {
            let name = call.function.as_ref().and_then(|function| function.name.clone());
            let arguments = call.function.as_ref().and_then(|function| function.arguments.clone()).unwrap_or_default();
            let tool_call_id = match (self.inputs.get(&call.index), &call.id) {
                (Some((id, _)), _) => id.clone(),
                (None, Some(id)) => {
                    let tool_name = name.unwrap_or_default();
                    self.inputs.insert(call.index, (id.clone(), tool_name.clone()));
                    events.push(LiveEvent::ToolInputStart { tool_call_id: id.clone(), tool_name });
                    id.clone()
                }
                // A delta before the call's id: nothing to name it by yet.
                (None, None) => continue,
            };
            if !arguments.is_empty() {
                events.push(LiveEvent::ToolInputDelta { tool_call_id, delta: arguments });
            }
        }
        events
    }

    fn start_message(&mut self, message_id: &str) -> Vec<LiveEvent> {
        if self.streaming.as_deref() == Some(message_id) {
            return Vec::new();
        }
        self.streaming = Some(message_id.to_owned());
        self.streamed_text.clear();
        self.inputs.clear();
        vec![LiveEvent::MessageStart { message_id: message_id.to_owned() }]
    }

    fn main_message(&mut self, message: &ModelMessage) -> Vec<LiveEvent> {
        let mut events = self.start_message(&message.id);
        let reasoning = message.reasoning_content.clone().filter(|text| !text.is_empty()).or_else(|| thinking(message.thinking_blocks.as_deref()));
        let calls = message.tool_calls.as_deref().unwrap_or_default();
        for call in calls {
            if !self.inputs.values().any(|(id, _)| *id == call.id) {
                events.push(LiveEvent::ToolInputStart { tool_call_id: call.id.clone(), tool_name: call.function.name.clone() });
            }
            events.push(LiveEvent::ToolInputEnd { tool_call_id: call.id.clone() });
        }
        events.push(LiveEvent::MessageEnd { message_id: message.id.clone(), text: message.text(), reasoning });
        for call in calls {
            self.calls.insert(call.id.clone(), (call.function.name.clone(), call.function.arguments.clone()));
            events.push(LiveEvent::ToolStart {
                tool_call_id: call.id.clone(),
                tool_name: call.function.name.clone(),
                arguments: call.function.arguments.clone(),
            });
        }
        self.streaming = None;
        self.streamed_text.clear();
        self.inputs.clear();
        events
    }

    fn subagent_message(&mut self, message: &ModelMessage) -> Vec<LiveEvent> {
        let calls = message.tool_calls.as_deref().unwrap_or_default();
        calls
            .iter()
            .map(|call| {
                self.calls.insert(call.id.clone(), (call.function.name.clone(), call.function.arguments.clone()));
                LiveEvent::SubagentToolStart {
                    thread_id: message.thread_id.clone(),
                    tool_call_id: call.id.clone(),
                    tool_name: call.function.name.clone(),
                    arguments: call.function.arguments.clone(),
                }
            })
            .collect()
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
