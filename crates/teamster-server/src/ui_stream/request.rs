//! The body `DefaultChatTransport` sends (`id`, `messages`, `trigger`, `messageId`, and the
//! app's own fields), checked field by field, and what of it becomes a turn's input: the
//! server keeps the history, so only the last message counts: a user message, or the
//! assistant message carrying approval responses and client tool outputs for the calls the
//! session's last turn left waiting.

use serde_json::Value;
use teamster_protocol::input::{Approval, TurnInput, UserContent, UserContentPart};
use teamster_protocol::{Event, TurnState, ids};

use crate::error::ApiError;

/// What the chat request asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Trigger {
    /// `submit-message`: a new user message, or answers to waiting calls.
    Submit,
    /// `regenerate-message`: the last answer again.
    Regenerate,
}

/// A checked chat request.
#[derive(Debug)]
pub struct ChatRequest {
    /// The chat id, which is the session id.
    pub id: String,
    pub trigger: Trigger,
    /// The agent named by the body's `agent` or the `agent` query parameter.
    pub agent: Option<String>,
    /// The last message of `messages`.
    pub last: Value,
    /// Whether the turn outlives its stream (body `keepRunning`, for `useChat({ resume: true })`);
    /// otherwise a client that goes away cancels it.
    pub keep_running: bool,
}

/// Checks `body` as the AI SDK sends it; `agent_param` is the query's `agent`.
pub fn parse(body: Value, agent_param: Option<String>) -> Result<ChatRequest, ApiError> {
    let Value::Object(mut body) = body else {
        return Err(ApiError::bad_request("invalid_request", "the body must be a JSON object"));
    };
    let id = match body.get("id") {
        Some(Value::String(id)) if ids::is_valid_id(id) => id.clone(),
        _ => return Err(invalid("id", "id must be the chat id: 1 to 128 characters of [A-Za-z0-9._~-]")),
    };
    let trigger = match body.get("trigger").and_then(Value::as_str) {
        Some("submit-message") => Trigger::Submit,
        Some("regenerate-message") => Trigger::Regenerate,
        _ => return Err(invalid("trigger", "trigger must be \"submit-message\" or \"regenerate-message\"")),
    };
    if !matches!(body.get("messageId"), None | Some(Value::Null | Value::String(_))) {
        return Err(invalid("messageId", "messageId must be a string"));
    }
    let agent = match body.get("agent") {
        None | Some(Value::Null) => agent_param,
        Some(Value::String(agent)) => Some(agent.clone()),
        Some(_) => return Err(invalid("agent", "agent must be an agent's name")),
    };
    let keep_running = match body.get("keepRunning") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(keep)) => *keep,
        Some(_) => return Err(invalid("keepRunning", "keepRunning must be a boolean")),
    };
    let Some(Value::Array(messages)) = body.remove("messages") else {
        return Err(invalid("messages", "messages must be an array of UI messages"));
    };
    for (index, message) in messages.iter().enumerate() {
        let role = message.get("role").and_then(Value::as_str);
        if !matches!(role, Some("system" | "user" | "assistant")) || !message.get("parts").is_some_and(Value::is_array) {
            return Err(invalid("messages", &format!("messages[{index}] must have a role (system, user or assistant) and parts")));
        }
    }
    let Some(last) = messages.into_iter().next_back() else {
        return Err(invalid("messages", "messages must not be empty"));
    };
    Ok(ChatRequest { id, trigger, agent, last, keep_running })
}

/// The role of a checked message.
pub fn role(message: &Value) -> &str {
    message.get("role").and_then(Value::as_str).unwrap_or_default()
}

/// A user message's text and file parts as a turn's message content.
pub fn user_content(message: &Value) -> Result<UserContent, ApiError> {
    let mut parts = Vec::new();
    for part in parts_of(message) {
        match part.get("type").and_then(Value::as_str) {
            Some("text") => parts.push(UserContentPart::Text { text: string(part, "text").to_owned() }),
            Some("file") => {
                let url = string(part, "url");
                if !url.starts_with("data:") {
                    return Err(invalid("messages", "a file part's url must be a data: URL"));
                }
                let name = part.get("filename").and_then(Value::as_str).unwrap_or("file").to_owned();
                parts.push(UserContentPart::File { name, data: url.to_owned() });
            }
            // Other parts (step markers, data parts) carry nothing for the model.
            _ => {}
        }
    }
    let content = match parts.as_slice() {
        [UserContentPart::Text { text }] => UserContent::Text(text.clone()),
        _ => UserContent::Parts(parts),
    };
    if content.is_empty() {
        return Err(invalid("messages", "the last message is a user message with no text or file"));
    }
    Ok(content)
}

/// A call the session's last turn left waiting.
struct Waiting<'a> {
    thread_id: &'a str,
    tool_call_id: &'a str,
    approval: bool,
}

/// The answers an assistant message carries for the calls `state` (the session's last turn)
/// left waiting: approval responses and client tool outputs. An approval for a call that is
/// not waiting for one is refused; outputs of calls the server ran are the server's already.
pub fn decisions(message: &Value, state: &TurnState) -> Result<Vec<TurnInput>, ApiError> {
    let mut waiting = std::collections::HashMap::new();
    if let TurnState::Done { required_actions, .. } = state {
        for action in required_actions {
            let (pending, approval) = match action {
                Event::ToolApprovalRequired(pending) => (pending, true),
                Event::ToolResponseRequired(pending) => (pending, false),
                _ => continue,
            };
            for call in &pending.tool_calls {
                let waits = Waiting { thread_id: &pending.thread_id, tool_call_id: &call.id, approval };
                waiting.insert(super::part_call_id(&pending.thread_id, &call.id), waits);
            }
        }
    }
    let mut input = Vec::new();
    for part in parts_of(message) {
        let kind = part.get("type").and_then(Value::as_str).unwrap_or_default();
        if !kind.starts_with("tool-") && kind != "dynamic-tool" {
            continue;
        }
        let part_id = string(part, "toolCallId");
        let call = waiting.get(part_id);
        match part.get("state").and_then(Value::as_str) {
            Some("approval-responded") => {
                let Some(call) = call.filter(|call| call.approval) else {
                    return Err(invalid("messages", &format!("tool call {part_id:?} is not waiting for an approval")));
                };
                let response = part.get("approval").cloned().unwrap_or_default();
                let approval = match response.get("approved").and_then(Value::as_bool) {
                    Some(true) => Approval::allow(),
                    Some(false) => Approval::Deny { reason: response.get("reason").and_then(Value::as_str).map(str::to_owned) },
                    None => return Err(invalid("messages", &format!("the approval of tool call {part_id:?} has no approved"))),
                };
                input.push(TurnInput::ToolApproval { thread_id: call.thread_id.to_owned(), tool_call_id: call.tool_call_id.to_owned(), approval });
            }
            Some(state @ ("output-available" | "output-error")) => {
                let Some(call) = call.filter(|call| !call.approval) else { continue };
                let content = match (state, part.get("output")) {
                    ("output-error", _) => string(part, "errorText").to_owned(),
                    (_, Some(Value::String(text))) => text.clone(),
                    (_, Some(output)) => output.to_string(),
                    (_, None) => String::new(),
                };
                input.push(TurnInput::ToolResponse { thread_id: call.thread_id.to_owned(), tool_call_id: call.tool_call_id.to_owned(), content });
            }
            _ => {}
        }
    }
    if input.is_empty() {
        return Err(invalid("messages", "the last message is the assistant's but answers no call that is waiting"));
    }
    Ok(input)
}

fn parts_of(message: &Value) -> &[Value] {
    message.get("parts").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
}

fn string<'a>(value: &'a Value, field: &str) -> &'a str {
    value.get(field).and_then(Value::as_str).unwrap_or_default()
}

fn invalid(param: &str, message: &str) -> ApiError {
    ApiError::bad_request("invalid_request", message).with_param(param)
}
