//! Sessions as both dialects show them.
//!
//! One JSON shape serves both: the gateway reads `type`, `agent_name`, `agent_spec` and
//! `created_by_subject`; the native API reads `agent` and `created_by`. Clients of either
//! ignore the other's keys. A session bound to a saved agent is `type: "session"`; one that
//! carries its own spec (a gateway draft, a native inline session) is `type: "session/draft"`.

use serde::{Deserialize, Serialize};

use crate::agent::AgentSpec;
use crate::control::SessionControl;
use crate::turn::Subject;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Session {
    /// `agent-session` for a session of the native API.
    #[serde(rename = "type")]
    pub kind: SessionKind,
    pub id: String,
    /// The saved agent the session runs, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_name: Option<String>,
    /// The spec of an agent that is not saved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_spec: Option<AgentSpec>,
    /// What the session runs: a saved agent (by id and version) or an inline spec.
    pub agent: SessionAgent,
    /// The session's title.
    pub title: Option<String>,
    /// The id of the subject that created it.
    pub created_by: String,
    pub created_by_subject: Subject,
    pub created_at: String,
    pub updated_at: String,
    /// Teamster extension, in listings (`GET /api/v1/sessions`): the start of the session's
    /// first user message, on one line (at most 200 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<String>,
    /// Teamster extension: the resource the session is about (the application's id for a
    /// user, a repository, a ticket), set at creation or by `PATCH`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_id: Option<String>,
    /// Teamster extension: the mode and model the session's next turn runs with, where a
    /// client or an approved plan chose them.
    #[serde(default, skip_serializing_if = "SessionControl::is_empty", flatten)]
    pub control: SessionControl,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum SessionKind {
    #[serde(rename = "session")]
    Saved,
    #[serde(rename = "session/draft")]
    Draft,
}

impl SessionKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SessionKind::Saved => "session",
            SessionKind::Draft => "session/draft",
        }
    }

    pub fn parse(text: &str) -> Option<SessionKind> {
        match text {
            "session" => Some(SessionKind::Saved),
            "session/draft" => Some(SessionKind::Draft),
            _ => None,
        }
    }
}

/// The native API's view of what a session runs.
// An inline spec is the common case for drafts; boxing it would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type")]
pub enum SessionAgent {
    #[serde(rename = "reference")]
    Reference { id: String, name: Option<String>, version: u64 },
    #[serde(rename = "inline")]
    Inline { spec: AgentSpec },
}
