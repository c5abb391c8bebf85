//! Turn input items: what a client sends to start or resume a turn.
//!
//! They are never standalone events; they appear in a turn's `input`, in `turn.created.input`
//! and in agent seed messages.

use serde::{Deserialize, Serialize};

/// One item of a turn's `input`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type")]
pub enum TurnInput {
    #[serde(rename = "user.message")]
    Message { content: UserContent },
    /// A decision on a call waiting for approval.
    #[serde(rename = "user.tool_approval")]
    ToolApproval {
        /// The waiting call's thread. Left out (or empty), it is the thread the call waits in.
        #[serde(default)]
        thread_id: String,
        /// The waiting call. Left out (or empty) when exactly one call waits: that one.
        #[serde(default)]
        tool_call_id: String,
        approval: Approval,
    },
    /// The answer to a call waiting for the user (`ask_user_question`, a client-side tool).
    #[serde(rename = "user.tool_response")]
    ToolResponse {
        /// The waiting call's thread. Left out (or empty), it is the thread the call waits in.
        #[serde(default)]
        thread_id: String,
        /// The waiting call. Left out (or empty) when exactly one call waits: that one.
        #[serde(default)]
        tool_call_id: String,
        /// The answer: text, or the chosen labels of a multi-select question as an array (kept
        /// as the JSON text of that array).
        #[serde(deserialize_with = "answer_text")]
        #[cfg_attr(feature = "openapi", schema(value_type = Answer))]
        content: String,
    },
}

/// An answer as clients may send it: text, or the labels chosen in a multi-select question.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum Answer {
    /// The answer's text.
    Text(String),
    /// The chosen options' labels (`multi_select` questions).
    Labels(Vec<String>),
}

impl Answer {
    /// The answer as the call's result: the text, or the JSON text of the labels.
    pub fn into_text(self) -> String {
        match self {
            Answer::Text(text) => text,
            Answer::Labels(labels) => serde_json::Value::from(labels).to_string(),
        }
    }
}

fn answer_text<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    Answer::deserialize(deserializer).map(Answer::into_text)
}

/// The kind of a turn's input: the specs require one kind per turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputKind {
    Messages,
    ToolDecisions,
}

impl TurnInput {
    pub fn kind(&self) -> InputKind {
        match self {
            TurnInput::Message { .. } => InputKind::Messages,
            TurnInput::ToolApproval { .. } | TurnInput::ToolResponse { .. } => InputKind::ToolDecisions,
        }
    }
}

/// A user message body: plain text or an array of text and file parts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum UserContent {
    Text(String),
    Parts(Vec<UserContentPart>),
}

impl UserContent {
    /// The text of the message, parts joined by newlines; files are named, not inlined.
    pub fn to_text(&self) -> String {
        match self {
            UserContent::Text(text) => text.clone(),
            UserContent::Parts(parts) => parts
                .iter()
                .map(|part| match part {
                    UserContentPart::Text { text } => text.clone(),
                    UserContentPart::File { name, .. } => format!("[attached file: {name}]"),
                })
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }

    /// Whether the message carries nothing: empty text, or no part with text or a file.
    pub fn is_empty(&self) -> bool {
        match self {
            UserContent::Text(text) => text.trim().is_empty(),
            UserContent::Parts(parts) => parts.iter().all(|part| match part {
                UserContentPart::Text { text } => text.trim().is_empty(),
                UserContentPart::File { .. } => false,
            }),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type")]
pub enum UserContentPart {
    #[serde(rename = "text")]
    Text { text: String },
    /// A file as a data URL: `data:<mime>;base64,<payload>`.
    #[serde(rename = "file")]
    File { name: String, data: String },
}

/// A human decision on a gated tool call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "status")]
pub enum Approval {
    #[serde(rename = "allow")]
    Allow {
        /// Teamster extension ("always allow"): the session grants the tool, or its category,
        /// from now on. Clients that do not know it send nothing.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        always: Option<crate::control::GrantScope>,
    },
    #[serde(rename = "deny")]
    Deny {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
}

impl Approval {
    /// An approval of this call only.
    pub const fn allow() -> Approval {
        Approval::Allow { always: None }
    }
}

/// A seed message of an agent spec (text only).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InitialUserMessage {
    #[serde(rename = "type", default = "user_message_type")]
    pub kind: String,
    pub content: String,
}

fn user_message_type() -> String {
    "user.message".to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_may_leave_the_call_out_and_answers_may_be_labels() {
        let item: TurnInput =
            serde_json::from_str(r#"{"type":"user.tool_response","content":["Add tests","Update docs"]}"#).unwrap();
        let TurnInput::ToolResponse { thread_id, tool_call_id, content } = item else { panic!("{item:?}") };
        assert_eq!((thread_id.as_str(), tool_call_id.as_str()), ("", ""));
        assert_eq!(serde_json::from_str::<Vec<String>>(&content).unwrap(), ["Add tests", "Update docs"]);
        assert!(serde_json::from_str::<TurnInput>(r#"{"type":"user.tool_response","content":[1]}"#).is_err());
        let item: TurnInput = serde_json::from_str(r#"{"type":"user.tool_approval","approval":{"status":"allow"}}"#).unwrap();
        assert!(matches!(item, TurnInput::ToolApproval { ref tool_call_id, .. } if tool_call_id.is_empty()));
    }

    #[test]
    fn decodes_every_input_kind() {
        let items: Vec<TurnInput> = serde_json::from_str(
            r#"[{"type":"user.message","content":"hi"},
                {"type":"user.message","content":[{"type":"text","text":"a"},{"type":"file","name":"f.txt","data":"data:text/plain;base64,aGk="}]},
                {"type":"user.tool_approval","thread_id":"main","tool_call_id":"c1","approval":{"status":"deny","reason":null}},
                {"type":"user.tool_response","thread_id":"main","tool_call_id":"c2","content":"42"}]"#,
        )
        .unwrap();
        assert_eq!(items.len(), 4);
        assert_eq!(items[1].kind(), InputKind::Messages);
        assert_eq!(items[2].kind(), InputKind::ToolDecisions);
        assert!(matches!(&items[2], TurnInput::ToolApproval { approval: Approval::Deny { reason: None }, .. }));
        assert!(serde_json::from_str::<TurnInput>(r#"{"type":"user.other"}"#).is_err());
        assert!(UserContent::Text("  ".into()).is_empty());
    }
}
