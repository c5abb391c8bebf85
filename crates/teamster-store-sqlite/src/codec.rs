//! Conversions between store records and SQLite values: JSON text for protocol types,
//! `INTEGER` for counters, and the row shapes the queries select.

use serde::Serialize;
use serde::de::DeserializeOwned;
use teamster_store::{AgentRecord, Error, Result, SessionAgentRecord, SessionRecord, TurnRecord};

/// The columns every agent query selects, in [`AgentRow`] order.
pub(crate) const AGENT_COLUMNS: &str =
    "agents.id, agents.name, agent_versions.version, agent_versions.spec, agents.created_at, agent_versions.created_at";

/// `id, name, version, spec, created_at, updated_at`.
pub(crate) type AgentRow = (String, String, i64, String, String, String);

/// The columns every session query selects, in [`SessionRow`] order.
pub(crate) const SESSION_COLUMNS: &str = "id, kind, agent_id, agent_version, agent_name, draft_spec, title, \
     created_by, created_at, updated_at, last_turn_id";

/// `id, kind, agent_id, agent_version, agent_name, draft_spec, title, created_by, created_at,
/// updated_at, last_turn_id`.
pub(crate) type SessionRow = (
    String,
    String,
    Option<String>,
    Option<i64>,
    Option<String>,
    Option<String>,
    Option<String>,
    String,
    String,
    String,
    Option<String>,
);

/// The columns every turn query selects, in [`TurnRow`] order.
pub(crate) const TURN_COLUMNS: &str = "id, session_id, previous_turn_id, input, state, created_by, created_at";

/// `id, session_id, previous_turn_id, input, state, created_by, created_at`.
pub(crate) type TurnRow = (String, String, Option<String>, String, String, String, String);

/// The `kind` column of saved sessions.
pub(crate) const SAVED: &str = "session";
/// The `kind` column of draft sessions.
pub(crate) const DRAFT: &str = "session/draft";

/// Encodes a protocol value as JSON text.
pub(crate) fn to_json<T: Serialize>(value: &T, what: &str) -> Result<String> {
    serde_json::to_string(value).map_err(|error| Error::Backend(format!("encoding {what}: {error}")))
}

/// Decodes JSON text that this store wrote.
pub(crate) fn from_json<T: DeserializeOwned>(text: &str, what: &str) -> Result<T> {
    serde_json::from_str(text).map_err(|error| Error::Corrupt(format!("{what}: {error}")))
}

/// Converts a counter for an `INTEGER` column (SQLite integers are signed 64-bit).
pub(crate) fn to_i64(value: u64, what: &str) -> Result<i64> {
    i64::try_from(value).map_err(|_| Error::Backend(format!("{what} {value} does not fit in a SQLite integer")))
}

/// Converts a stored `INTEGER` back to a counter.
pub(crate) fn to_u64(value: i64, what: &str) -> Result<u64> {
    u64::try_from(value).map_err(|_| Error::Corrupt(format!("{what} is negative: {value}")))
}

/// Clamps a read bound into `INTEGER` range; bounds past the largest integer match nothing
/// more than the largest integer does.
pub(crate) fn clamp_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

pub(crate) fn agent(row: AgentRow) -> Result<AgentRecord> {
    let (id, name, version, spec, created_at, updated_at) = row;
    Ok(AgentRecord {
        version: to_u64(version, "agent version")?,
        spec: from_json(&spec, "agent spec")?,
        id,
        name,
        created_at,
        updated_at,
    })
}

pub(crate) fn session(row: SessionRow) -> Result<SessionRecord> {
    let (id, kind, agent_id, agent_version, agent_name, draft_spec, title, created_by, created_at, updated_at, last_turn_id) =
        row;
    let agent = match (kind.as_str(), agent_id, agent_version, agent_name, draft_spec) {
        (SAVED, Some(agent_id), Some(version), Some(agent_name), _) => SessionAgentRecord::Saved {
            agent_id,
            agent_name,
            version: to_u64(version, "session agent version")?,
        },
        (DRAFT, _, _, agent_name, Some(spec)) => {
            SessionAgentRecord::Draft { spec: from_json(&spec, "session draft spec")?, agent_name }
        }
        _ => return Err(Error::Corrupt(format!("session {id} has kind {kind:?} without its agent columns"))),
    };
    Ok(SessionRecord {
        agent,
        title,
        created_by: from_json(&created_by, "session created_by")?,
        id,
        created_at,
        updated_at,
        last_turn_id,
    })
}

pub(crate) fn turn(row: TurnRow) -> Result<TurnRecord> {
    let (id, session_id, previous_turn_id, input, state, created_by, created_at) = row;
    Ok(TurnRecord {
        input: from_json(&input, "turn input")?,
        state: from_json(&state, "turn state")?,
        created_by: from_json(&created_by, "turn created_by")?,
        id,
        session_id,
        previous_turn_id,
        created_at,
    })
}
