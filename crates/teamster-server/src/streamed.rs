//! Model messages as a stream carries them: a placeholder (or the message whole) and its
//! deltas, folded until the message is whole, when its tool calls are known. Both AI SDK
//! dialects translate from this fold.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::Value;
use teamster_protocol::ToolInfo;
use teamster_protocol::event::{ModelMessage, ModelMessageDelta, ToolCall, ToolResponse, fold};
use teamster_service::EXEC_TOOL;

/// What a message's event left of it.
pub(crate) enum Folded {
    /// A delta of no message this fold knows (its placeholder was not shown).
    Unknown,
    /// Still streaming.
    Partial,
    /// Complete, with its tool calls.
    Whole(Box<ModelMessage>),
}

/// The messages being streamed, folded so far, by id.
#[derive(Debug, Default)]
pub(crate) struct Messages(HashMap<String, ModelMessage>);

impl Messages {
    /// A message's first event: its placeholder, or the message whole.
    pub(crate) fn start(&mut self, message: &ModelMessage) -> Folded {
        if message.finish_reason.is_some() || message.tool_calls.is_some() {
            return Folded::Whole(Box::new(message.clone()));
        }
        self.0.insert(message.id.clone(), message.clone());
        Folded::Partial
    }

    /// A delta folded into its message; the last one (with the finish reason) completes it.
    pub(crate) fn delta(&mut self, delta: &ModelMessageDelta) -> Folded {
        let Some(message) = self.0.get_mut(&delta.id) else { return Folded::Unknown };
        fold(message, delta);
        if delta.finish_reason.is_none() {
            return Folded::Partial;
        }
        self.0.remove(&delta.id).map_or(Folded::Unknown, |message| Folded::Whole(Box::new(message)))
    }
}

/// Whether a call is of the sandbox's `exec` tool (by whatever name the agent shows it), whose
/// results list the files it made.
pub(crate) fn is_exec(call: &ToolCall) -> bool {
    matches!(&call.tool_info, ToolInfo::System { name } if name == EXEC_TOOL)
}

/// A file an `exec` call made or changed in the sandbox's workspace, as its result lists it.
#[derive(Debug, Deserialize)]
pub(crate) struct ProducedFile {
    pub path: String,
    pub size: u64,
}

/// The files an `exec` call's result lists (none when it lists none or is not its JSON); a
/// failed call's result is the JSON after the failure prefix.
pub(crate) fn produced_files(response: &ToolResponse) -> Vec<ProducedFile> {
    #[derive(Deserialize)]
    struct ExecResult {
        #[serde(default)]
        files: Vec<ProducedFile>,
    }
    let json = response.failure().unwrap_or(&response.content);
    serde_json::from_str::<ExecResult>(json).map(|result| result.files).unwrap_or_default()
}

/// A tool call's arguments as JSON, or as their text when they are not JSON.
pub(crate) fn call_input(call: &ToolCall) -> Value {
    serde_json::from_str(&call.function.arguments).unwrap_or_else(|_| Value::String(call.function.arguments.clone()))
}

/// The workspace a turn's `sandbox.created` made, as the streams' `workspace-status` parts carry
/// it: `status` `ready`, its `sandbox_id`, and when (the native stream says it with the
/// `sandbox.created` event itself; the gateway's client knows no other).
pub(crate) fn workspace_ready(sandbox: &teamster_protocol::event::SandboxCreated) -> Value {
    serde_json::json!({ "status": "ready", "sandbox_id": sandbox.sandbox_id, "created_at": sandbox.created_at })
}
