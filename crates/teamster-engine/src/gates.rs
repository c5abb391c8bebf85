//! Tool calls that wait for a human: approvals and client-side tools.
//!
//! A model message's gated calls are announced with `tool.approval_required` or
//! `tool.response_required` and the turn ends with them as required actions; the engine keeps
//! nothing. The next turn brings a [`Resolution`] per waiting call (built by the caller from
//! the stored events and that turn's input), which the engine applies before its first model
//! call: an allowed call runs, a denied one tells the model why, a client-side result is used
//! as it is.

use async_trait::async_trait;
use teamster_protocol::event::{ToolCall, ToolCallRef, ToolCallsPending, ToolInfo};
use teamster_protocol::{Event, ids, timestamp};
use teamster_tools::{Tool, ToolAnnotations, ToolGate, ToolOutput, ToolSource};

/// The built-in client-side tool with which the agent asks the user a question.
pub const ASK_USER_QUESTION: &str = "ask_user_question";

/// How a waiting call was decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Run it.
    Allow,
    /// Do not run it; the model is told, with the user's reason when given.
    Deny { reason: Option<String> },
    /// The client ran it (or the user answered); this is its result.
    Respond { content: String },
}

/// A waiting call, the thread it waits in, and its decision.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolution {
    pub thread_id: String,
    pub call: ToolCall,
    pub decision: Decision,
}

impl Resolution {
    /// What the model is told for a call that does not run.
    pub(crate) fn settled_content(&self) -> Option<String> {
        match &self.decision {
            Decision::Allow => None,
            Decision::Deny { reason: Some(reason) } if !reason.trim().is_empty() => {
                Some(format!("The user denied this tool call. Their reason: {reason}"))
            }
            Decision::Deny { .. } => Some("The user denied this tool call.".to_owned()),
            Decision::Respond { content } => Some(content.clone()),
        }
    }
}

/// A model message's calls, split by what they wait for.
#[derive(Default)]
pub(crate) struct Split {
    pub run_now: Vec<ToolCall>,
    pub approval: Vec<ToolCall>,
    pub client_side: Vec<ToolCall>,
}

impl Split {
    pub fn of(calls: &[ToolCall], gate_of: impl Fn(&str) -> ToolGate) -> Split {
        let mut split = Split::default();
        for call in calls {
            match gate_of(&call.function.name) {
                ToolGate::None => split.run_now.push(call.clone()),
                ToolGate::Approval => split.approval.push(call.clone()),
                ToolGate::ClientSide => split.client_side.push(call.clone()),
            }
        }
        split
    }

    /// The events announcing the waiting calls of the message `source_event_id`, approvals
    /// first.
    pub fn pending_events(&self, thread_id: &str, source_event_id: &str) -> Vec<Event> {
        let pending = |calls: &[ToolCall]| ToolCallsPending {
            id: ids::new_id("evt"),
            created_at: timestamp::now(),
            thread_id: thread_id.to_owned(),
            tool_calls: calls
                .iter()
                .map(|call| ToolCallRef { id: call.id.clone(), source_event_id: source_event_id.to_owned() })
                .collect(),
        };
        let mut events = Vec::new();
        if !self.approval.is_empty() {
            events.push(Event::ToolApprovalRequired(pending(&self.approval)));
        }
        if !self.client_side.is_empty() {
            events.push(Event::ToolResponseRequired(pending(&self.client_side)));
        }
        events
    }
}

/// The `ask_user_question` tool: the client shows the question and sends the answer back as
/// the call's result.
pub(crate) struct UserQuestions;

#[async_trait]
impl ToolSource for UserQuestions {
    async fn list(&self) -> Result<Vec<Tool>, teamster_tools::Error> {
        Ok(vec![Tool {
            name: ASK_USER_QUESTION.to_owned(),
            description: "Asks the user a question and waits for the answer. Use it when you need a \
                decision or information only the user has; offer options when the answer is one \
                of a few choices."
                .to_owned(),
            input_schema: serde_json::json!({
                "type": "object",
                "properties": {
                    "question": {"type": "string", "description": "The question, in full."},
                    "options": {
                        "type": "array",
                        "description": "Choices to offer, if any.",
                        "items": {
                            "type": "object",
                            "properties": {
                                "label": {"type": "string"},
                                "description": {"type": "string"}
                            },
                            "required": ["label"]
                        }
                    },
                    "multi_select": {"type": "boolean", "description": "Whether several options may be chosen."}
                },
                "required": ["question"]
            }),
            info: ToolInfo::System { name: ASK_USER_QUESTION.to_owned() },
            annotations: ToolAnnotations { read_only: true, destructive: false, idempotent: false },
            gate: ToolGate::ClientSide,
        }])
    }

    async fn call(&self, _name: &str, _arguments: &str) -> ToolOutput {
        ToolOutput::error("ask_user_question is answered by the user, not run by the server.")
    }
}
