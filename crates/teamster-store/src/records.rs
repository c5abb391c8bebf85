//! The records a store holds.

use std::sync::Arc;

use teamster_protocol::control::SessionControl;
use teamster_protocol::{AgentSpec, Subject, TurnState, input::TurnInput, session::SessionKind};

/// One version of an agent. `version` starts at 1 and grows by one per update.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentRecord {
    pub id: String,
    pub name: String,
    pub version: u64,
    pub spec: AgentSpec,
    /// When the agent was first created.
    pub created_at: String,
    /// When this version was stored.
    pub updated_at: String,
    /// The tenant the agent belongs to (the same for every version). Agents stored before
    /// agents had owners belong to `local`.
    pub tenant: String,
    /// Who created the agent; `None` for agents stored before agents had owners.
    pub created_by: Option<Subject>,
}

/// A session: one conversation with one agent version (or with its own spec, for drafts).
#[derive(Clone, Debug, PartialEq)]
pub struct SessionRecord {
    pub id: String,
    pub agent: SessionAgentRecord,
    pub title: Option<String>,
    pub created_by: Subject,
    pub created_at: String,
    pub updated_at: String,
    /// The newest turn, the one `previous_turn_id: auto` chains to.
    pub last_turn_id: Option<String>,
    /// The mode and model chosen for the session's next turns.
    pub control: SessionControl,
    /// The resource the session is about (the application's id for a user, a repository, a
    /// ticket).
    pub resource_id: Option<String>,
}

/// A resource some of a subject's sessions are about ([`SessionStore::list_resources`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceRecord {
    pub resource_id: String,
    /// How many of the subject's sessions are about it.
    pub sessions: u64,
    /// The latest `updated_at` of those sessions.
    pub updated_at: String,
}

impl SessionRecord {
    pub fn kind(&self) -> SessionKind {
        match self.agent {
            SessionAgentRecord::Saved { .. } => SessionKind::Saved,
            SessionAgentRecord::Draft { .. } => SessionKind::Draft,
        }
    }
}

// A draft carries a whole spec inline. Records are short-lived and few at a time, so boxing
// it would buy nothing but an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum SessionAgentRecord {
    /// Bound to a saved agent, pinned to the version current at creation.
    Saved { agent_id: String, agent_name: String, version: u64 },
    /// Carries its own spec, optionally linked to a saved agent by name.
    Draft { spec: AgentSpec, agent_name: Option<String> },
}

/// Which sessions to list, in which order, from which keyset position.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SessionQuery {
    pub created_by: Option<String>,
    /// Only the sessions this subject id may see: its own, and those of the saved agents in
    /// `or_of_agents` (which a manager of those agents may see), whoever made them.
    pub visible_to: Option<String>,
    /// See `visible_to`; ignored without it.
    pub or_of_agents: Vec<String>,
    /// With `visible_to`: also every session whose creator's id starts with this prefix (a
    /// tenant's subjects are `<tenant>:<name>`, so an admin of the tenant sees `<tenant>:`).
    pub or_created_by_prefix: Option<String>,
    pub agent_name: Option<String>,
    pub agent_id: Option<String>,
    pub kind: Option<SessionKind>,
    pub session_id: Option<String>,
    pub resource_id: Option<String>,
    /// Inclusive bounds on `created_at`.
    pub created_from: Option<String>,
    pub created_to: Option<String>,
    pub order_by: SessionOrder,
    pub descending: bool,
    /// Keyset cursor: the (order key, id) of the last item of the previous page.
    pub after: Option<(String, String)>,
    pub limit: u32,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SessionOrder {
    #[default]
    CreatedAt,
    UpdatedAt,
}

/// A turn. Its state is `running` until the turn's `turn.done` is written.
#[derive(Clone, Debug, PartialEq)]
pub struct TurnRecord {
    pub id: String,
    pub session_id: String,
    pub previous_turn_id: Option<String>,
    pub input: Vec<TurnInput>,
    pub state: TurnState,
    pub created_by: Subject,
    pub created_at: String,
    /// The mode and model the turn runs with.
    pub control: SessionControl,
    /// The application's context the turn was created with.
    pub request_context: Option<teamster_protocol::RequestContext>,
}

/// One write to the event log; batches of these are applied in one transaction.
#[derive(Clone, Debug, PartialEq)]
pub enum LogWrite {
    /// Appends an event to a turn's stream. `data` is the exact JSON sent to clients.
    Stream { turn_id: Arc<str>, sequence: u64, data: Arc<str> },
    /// Records a folded, list-visible event at the sequence number of the event it folds.
    /// Writing the same (turn, sequence) again replaces it.
    Content { turn_id: Arc<str>, sequence: u64, kind: &'static str, data: Arc<str> },
    /// Sets a turn's state (and bumps its session's `updated_at` to `at`).
    TurnState { turn_id: Arc<str>, state: TurnState, at: String },
}

/// A stored stream event.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamEvent {
    pub sequence: u64,
    pub data: String,
}

/// A stored content event.
#[derive(Clone, Debug, PartialEq)]
pub struct ContentEvent {
    pub sequence: u64,
    pub kind: String,
    pub data: String,
}

/// Which of a turn's content events a [`ContentQuery`] reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ContentKinds {
    /// Every one.
    #[default]
    All,
    /// All but `turn.created` and `turn.done` (the turn-events endpoint).
    TurnContent,
    /// `thread.created` and `thread.done` alone (thread listings).
    Threads,
}

/// Which content events of a turn to read.
#[derive(Clone, Debug, PartialEq)]
pub struct ContentQuery {
    /// Which kinds of events to read.
    pub kinds: ContentKinds,
    pub descending: bool,
    /// Exclusive keyset bound: only sequence numbers after (ascending) or before
    /// (descending) this one.
    pub after: Option<u64>,
    pub limit: u32,
}

/// A replica's hold on a running turn. Every claim of a turn counts one up, so `claims` tells
/// this hold from any later one: a hold that was taken over no longer matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnLease {
    pub turn_id: String,
    /// Which claim of the turn this is: 1 for its creator's, more after takeovers.
    pub claims: u64,
}

/// A running turn whose lease has expired or was released: no replica runs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpiredLease {
    pub session_id: String,
    pub turn_id: String,
    /// The replica that held it last; `None` if nobody ever claimed it.
    pub owner: Option<String>,
    /// How many times the turn has been claimed so far.
    pub claims: u64,
}

/// A file of a session, stored once and named by the SHA-256 digest of its bytes (lowercase
/// hex): large attachments are kept here and referenced from the turns and events that carry
/// them. It is deleted with its session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionFile {
    pub session_id: String,
    pub digest: String,
    pub media_type: String,
    pub data: Vec<u8>,
    pub created_at: String,
}

/// What a queued message of a session is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueKind {
    /// Starts the session's next turn once the running one ends.
    FollowUp,
    /// Joins the running turn at its next model step.
    Steer,
}

impl QueueKind {
    pub fn as_str(self) -> &'static str {
        match self {
            QueueKind::FollowUp => "follow_up",
            QueueKind::Steer => "steer",
        }
    }
}

/// A message a client queued for a session: kept until it is used or removed, in order.
#[derive(Clone, Debug, PartialEq)]
pub struct QueuedMessage {
    pub session_id: String,
    pub id: String,
    pub kind: QueueKind,
    pub content: teamster_protocol::UserContent,
    pub created_by: Subject,
    pub created_at: String,
    /// The id of the API key it was queued with (`None` for a caller without one): once that key
    /// is revoked, the message neither starts a turn nor joins one.
    pub credential: Option<String>,
}
