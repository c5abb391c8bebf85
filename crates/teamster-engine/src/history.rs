//! Rebuilding a thread's conversation from stored events.
//!
//! The event log is the only memory: a turn's history is the folded content events of its
//! ancestor turns, turned back into model messages.

use std::collections::HashSet;

use teamster_llm::{AssistantToolCall, Message};
use teamster_protocol::Event;
use teamster_protocol::event::{ModelMessage, ThreadDone, ThreadState};
use teamster_protocol::input::TurnInput;

use crate::{attachments, compaction};

/// What the model is told about a tool call that never got a result.
const NO_RESULT: &str =
    "The tool call has no result: the turn ended before it returned, or the user moved on without deciding on it.";

/// Turns content events (oldest first) into the messages of one thread.
///
/// Messages interrupted mid-stream keep their text but lose their tool calls, and every tool
/// call without a recorded response gets one saying so, so the result is always a valid chat.
pub fn history_from_events<'a>(events: impl IntoIterator<Item = &'a Event>, thread_id: &str) -> Vec<Message> {
    let mut messages = Vec::new();
    for event in events {
        match event {
            Event::TurnCreated(created) if thread_id == teamster_protocol::MAIN_THREAD_ID => {
                for item in &created.input {
                    if let TurnInput::Message { content } = item {
                        messages.push(attachments::user_message(content));
                    }
                }
            }
            // A sub-agent thread starts with its task.
            Event::ThreadCreated(created) if created.thread_id == thread_id => {
                messages.push(Message::user(created.agent_info.input.clone()));
            }
            Event::ModelMessage(message) if message.thread_id == thread_id => {
                // Instructions that joined the turn came right before the message they steered.
                for steer in message.steering.iter().flatten() {
                    messages.push(attachments::user_message(&steer.content));
                }
                // A message interrupted mid-stream may hold half-formed tool calls: keep its text only.
                if let Some(assistant) = assistant_message(message, message.finish_reason.is_some()) {
                    messages.push(assistant);
                }
            }
            Event::ToolResponse(response) if response.thread_id == thread_id => {
                messages.push(Message::Tool {
                    tool_call_id: response.tool_call_id.clone(),
                    content: response.content.clone(),
                });
            }
            Event::ThreadDone(ThreadDone {
                parent: Some(parent),
                compaction: Some(compaction),
                state: ThreadState::Done { output },
                ..
            }) if parent.thread_id == thread_id => {
                // The live turn compacted the same messages it had rebuilt this way.
                messages = close_dangling_tool_calls(messages);
                let replaced = usize::try_from(compaction.replaced_messages).unwrap_or(usize::MAX);
                compaction::apply(&mut messages, replaced, &output.text());
            }
            _ => {}
        }
    }
    close_dangling_tool_calls(messages)
}

/// The chat message for a model message, or `None` when it has neither text nor (kept) tool
/// calls. Its reasoning goes with it, the provider's blocks exactly as they were received.
pub(crate) fn assistant_message(message: &ModelMessage, with_tool_calls: bool) -> Option<Message> {
    let text = message.text();
    let tool_calls: Vec<AssistantToolCall> = if with_tool_calls {
        message
            .tool_calls
            .iter()
            .flatten()
            .map(|call| AssistantToolCall {
                id: call.id.clone(),
                name: call.function.name.clone(),
                arguments: call.function.arguments.clone(),
            })
            .collect()
    } else {
        Vec::new()
    };
    if text.is_empty() && tool_calls.is_empty() {
        return None;
    }
    Some(Message::Assistant {
        content: (!text.is_empty()).then_some(text),
        reasoning: message.reasoning_content.clone(),
        thinking: message.thinking_blocks.clone().unwrap_or_default(),
        tool_calls,
    })
}

/// Ensures every assistant tool call is answered right after its message, and drops tool
/// results that answer no call.
fn close_dangling_tool_calls(messages: Vec<Message>) -> Vec<Message> {
    let mut out = Vec::with_capacity(messages.len());
    let mut open: Vec<String> = Vec::new();
    let mut answered: HashSet<String> = HashSet::new();
    let flush = |out: &mut Vec<Message>, open: &mut Vec<String>, answered: &mut HashSet<String>| {
        for id in open.drain(..) {
            if !answered.contains(&id) {
                out.push(Message::Tool { tool_call_id: id, content: NO_RESULT.to_owned() });
            }
        }
        answered.clear();
    };
    for message in messages {
        match &message {
            Message::Tool { tool_call_id, .. } => {
                if open.contains(tool_call_id) && answered.insert(tool_call_id.clone()) {
                    out.push(message);
                }
            }
            Message::Assistant { tool_calls, .. } => {
                flush(&mut out, &mut open, &mut answered);
                open.extend(tool_calls.iter().map(|call| call.id.clone()));
                out.push(message);
            }
            _ => {
                flush(&mut out, &mut open, &mut answered);
                out.push(message);
            }
        }
    }
    flush(&mut out, &mut open, &mut answered);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rebuilds_a_valid_chat_from_events() {
        let events: Vec<Event> = serde_json::from_str(
            r#"[
            {"type":"turn.created","id":"e1","turn_id":"t1","previous_turn_id":null,"input":[{"type":"user.message","content":"hi"}],"state":{"status":"running"},"created_by":{"subject_id":"u","subject_type":"user","subject_slug":"u"},"created_at":"x","thread_id":"main"},
            {"type":"model.message","id":"m1","thread_id":"main","created_at":"x","tool_calls":[{"id":"c1","type":"function","function":{"name":"t","arguments":"{}"},"tool_info":{"type":"truefoundry-system","name":"t"}},{"id":"c2","type":"function","function":{"name":"t","arguments":"{}"},"tool_info":{"type":"truefoundry-system","name":"t"}}],"finish_reason":"tool_calls"},
            {"type":"tool.response","id":"r1","thread_id":"main","created_at":"x","tool_call_id":"c1","content":"one"},
            {"type":"tool.response","id":"r9","thread_id":"main","created_at":"x","tool_call_id":"zz","content":"stray"},
            {"type":"model.message","id":"m2","thread_id":"other","created_at":"x","content":"sub-agent text","finish_reason":"stop"},
            {"type":"model.message","id":"m3","thread_id":"main","created_at":"x","content":"partial","tool_calls":[{"id":"c3","type":"function","function":{"name":"t","arguments":"{\"a"},"tool_info":{"type":"truefoundry-system","name":"t"}}]}
            ]"#,
        )
        .unwrap();
        let messages = history_from_events(&events, "main");
        let rendered: Vec<String> = messages
            .iter()
            .map(|m| match m {
                Message::User { content, .. } => format!("user:{content}"),
                Message::Assistant { content, tool_calls, .. } => format!(
                    "assistant:{}:{}",
                    content.clone().unwrap_or_default(),
                    tool_calls.iter().map(|c| c.id.as_str()).collect::<Vec<_>>().join(",")
                ),
                Message::Tool { tool_call_id, content } => format!("tool:{tool_call_id}:{content}"),
                Message::System { content } => format!("system:{content}"),
            })
            .collect();
        assert_eq!(
            rendered,
            vec![
                "user:hi".to_owned(),
                "assistant::c1,c2".to_owned(),
                "tool:c1:one".to_owned(),
                format!("tool:c2:{NO_RESULT}"),
                "assistant:partial:".to_owned(),
            ]
        );
    }

    #[test]
    fn reasoning_and_thinking_blocks_go_back_as_received() {
        let event: Event = serde_json::from_str(
            r#"{"type":"model.message","id":"m1","thread_id":"main","created_at":"x","reasoning_content":"hm","thinking_blocks":[{"type":"thinking","thinking":"hm","signature":"EqQB+/="},{"type":"redacted_thinking","data":"c2VjcmV0"}],"tool_calls":[{"id":"c1","type":"function","function":{"name":"t","arguments":"{}"},"tool_info":{"type":"truefoundry-system","name":"t"}}],"finish_reason":"tool_calls"}"#,
        )
        .unwrap();
        let Some(Message::Assistant { reasoning, thinking, .. }) = history_from_events([&event], "main").first().cloned()
        else {
            panic!("no assistant message");
        };
        assert_eq!(reasoning.as_deref(), Some("hm"));
        assert_eq!(
            thinking,
            vec![
                teamster_llm::ThinkingBlock::Thinking { thinking: "hm".into(), signature: "EqQB+/=".into() },
                teamster_llm::ThinkingBlock::RedactedThinking { data: "c2VjcmV0".into() },
            ]
        );
    }
}
