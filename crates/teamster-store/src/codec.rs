//! Backend-neutral conversions between store records and the flat values backends keep in
//! their tables: JSON text for protocol types, signed 64-bit integers for counters, the row
//! tuples that queries select, and the row sets of a log batch.
//!
//! Every SQL backend stores the same columns (only the dialect differs), so the conversions
//! live here once. Nothing here knows SQL.

use std::collections::HashSet;
use std::hash::Hash;

use serde::Serialize;
use serde::de::DeserializeOwned;
use teamster_protocol::CancelReason;
use teamster_protocol::control::SessionControl;
use teamster_protocol::session::SessionKind;

use teamster_protocol::agent::AgentSpec;

use crate::{
    AgentRecord, ContentEvent, Error, ExpiredLease, LogWrite, Result, SessionAgentRecord, SessionRecord, StreamEvent, TurnLease,
    TurnRecord,
};

/// Encodes a protocol value as JSON text.
pub fn to_json<T: Serialize + ?Sized>(value: &T, what: &str) -> Result<String> {
    serde_json::to_string(value).map_err(|error| Error::Backend(format!("encoding {what}: {error}")))
}

/// Decodes JSON text that a store wrote; a failure means the stored data is corrupt.
pub fn from_json<T: DeserializeOwned>(text: &str, what: &str) -> Result<T> {
    serde_json::from_str(text).map_err(|error| Error::Corrupt(format!("{what}: {error}")))
}

/// Converts a counter for a signed 64-bit integer column.
pub fn to_i64(value: u64, what: &str) -> Result<i64> {
    i64::try_from(value).map_err(|_| Error::Backend(format!("{what} {value} does not fit in a 64-bit integer column")))
}

/// Converts a stored integer back to a counter.
pub fn to_u64(value: i64, what: &str) -> Result<u64> {
    u64::try_from(value).map_err(|_| Error::Corrupt(format!("{what} is negative: {value}")))
}

/// Clamps a read bound into the signed 64-bit range; bounds past the largest integer match
/// nothing more than the largest integer does.
pub fn clamp_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// How long a new turn is protected from takeovers until its creator claims its lease, in
/// milliseconds: `create_turn` sets the lease's expiry this far ahead, with no owner. The
/// creator's first renewal comes within a second; one that comes later than this only hands
/// the turn over (the creator then finds the lease taken and stops).
pub const UNCLAIMED_LEASE_GRACE_MS: i64 = 10_000;

/// A lease's time to live in whole milliseconds, at least 1, for an integer column.
pub fn lease_millis(ttl: std::time::Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX).max(1)
}

/// The wire name of a cancel reason (`client-cancelled`, ...), as stored.
pub fn cancel_reason_name(reason: CancelReason) -> &'static str {
    match reason {
        CancelReason::ServerExecutionTimeout => "server-execution-timeout",
        CancelReason::ClientCancelled => "client-cancelled",
        CancelReason::CancelledForNextTurn => "cancelled-for-next-turn",
        CancelReason::Abandoned => "abandoned",
    }
}

/// A cancel reason from its stored wire name.
pub fn cancel_reason(name: &str) -> Result<CancelReason> {
    serde_json::from_value(serde_json::Value::String(name.to_owned()))
        .map_err(|_| Error::Corrupt(format!("unknown cancel reason {name:?}")))
}

/// An agent version as selected: `id, name, version, spec, created_at, updated_at, tenant,
/// created_by`.
pub type AgentRow = (String, String, i64, String, String, String, String, Option<String>);

/// A session as selected: `id, kind, agent_id, agent_version, agent_name, draft_spec, title,
/// created_by, created_at, updated_at, last_turn_id, control`.
pub type SessionRow = (
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
    Option<String>,
    Option<String>,
);

/// A turn as selected: `id, session_id, previous_turn_id, input, state, created_by,
/// created_at, control`.
pub type TurnRow = (String, String, Option<String>, String, String, String, String, Option<String>);

/// Assembles an agent version from its row.
pub fn agent(row: AgentRow) -> Result<AgentRecord> {
    let (id, name, version, spec, created_at, updated_at, tenant, created_by) = row;
    Ok(AgentRecord {
        version: to_u64(version, "agent version")?,
        spec: from_json(&spec, "agent spec")?,
        id,
        name,
        created_at,
        updated_at,
        tenant,
        created_by: created_by.map(|subject| from_json(&subject, "agent creator")).transpose()?,
    })
}

/// What a write that adds an agent version returns of the agent: `name, version, created_at,
/// tenant, created_by`.
pub type AddedVersionRow = (String, i64, String, String, Option<String>);

/// The agent version a write just added, from what the write returned.
pub fn added_version(agent_id: &str, spec: &AgentSpec, at: &str, returned: AddedVersionRow) -> Result<AgentRecord> {
    let (name, version, created_at, tenant, created_by) = returned;
    Ok(AgentRecord {
        id: agent_id.to_owned(),
        name,
        version: to_u64(version, "agent version")?,
        spec: spec.clone(),
        created_at,
        updated_at: at.to_owned(),
        tenant,
        created_by: created_by.map(|subject| from_json(&subject, "agent creator")).transpose()?,
    })
}

/// A stream event from its row: `sequence, data`.
pub fn stream_event((sequence, data): (i64, String)) -> Result<StreamEvent> {
    Ok(StreamEvent { sequence: to_u64(sequence, "sequence number")?, data })
}

/// A content event from its row: `sequence, kind, data`.
pub fn content_event((sequence, kind, data): (i64, String, String)) -> Result<ContentEvent> {
    Ok(ContentEvent { sequence: to_u64(sequence, "sequence number")?, kind, data })
}

/// A lease this replica now holds on `turn_id`, from the claim count the store returned.
pub fn held_lease(turn_id: &str, claims: i64) -> Result<TurnLease> {
    Ok(TurnLease { turn_id: turn_id.to_owned(), claims: to_u64(claims, "lease claims")? })
}

/// An expired lease from its row: `session_id, turn_id, owner, claims`.
pub fn expired_lease((session_id, turn_id, owner, claims): (String, String, Option<String>, i64)) -> Result<ExpiredLease> {
    Ok(ExpiredLease { session_id, turn_id, owner, claims: to_u64(claims, "lease claims")? })
}

/// Assembles a session from its row.
pub fn session(row: SessionRow) -> Result<SessionRecord> {
    let (
        id,
        kind,
        agent_id,
        agent_version,
        agent_name,
        draft_spec,
        title,
        created_by,
        created_at,
        updated_at,
        last_turn_id,
        control,
        resource_id,
    ) = row;
    let agent = match (SessionKind::parse(&kind), agent_id, agent_version, agent_name, draft_spec) {
        (Some(SessionKind::Saved), Some(agent_id), Some(version), Some(agent_name), _) => {
            SessionAgentRecord::Saved { agent_id, agent_name, version: to_u64(version, "session agent version")? }
        }
        (Some(SessionKind::Draft), _, _, agent_name, Some(spec)) => {
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
        control: control_from(control.as_deref(), "session control")?,
        resource_id,
    })
}

/// Assembles a turn from its row.
pub fn turn(row: TurnRow) -> Result<TurnRecord> {
    let (id, session_id, previous_turn_id, input, state, created_by, created_at, control) = row;
    let TurnControlColumn { control, request_context } =
        control.as_deref().map_or(Ok(TurnControlColumn::default()), |json| from_json(json, "turn control"))?;
    Ok(TurnRecord {
        control,
        request_context,
        input: from_json(&input, "turn input")?,
        state: from_json(&state, "turn state")?,
        created_by: from_json(&created_by, "turn created_by")?,
        id,
        session_id,
        previous_turn_id,
        created_at,
    })
}

/// A control column: NULL when nothing is chosen.
fn control_from(column: Option<&str>, what: &str) -> Result<SessionControl> {
    column.map_or(Ok(SessionControl::default()), |json| from_json(json, what))
}

/// A control column for writing: NULL when nothing is chosen.
pub fn control_column(control: &SessionControl, what: &str) -> Result<Option<String>> {
    if control.is_empty() { Ok(None) } else { to_json(control, what).map(Some) }
}

/// A turn's control column: its mode and model, and the request context it was created with
/// (no schema change: a column written before has none).
#[derive(Default, serde::Serialize, serde::Deserialize)]
struct TurnControlColumn {
    #[serde(flatten)]
    control: SessionControl,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    request_context: Option<teamster_protocol::RequestContext>,
}

/// The agent columns of a session row, encoded for writing.
#[derive(Debug)]
pub struct SessionAgentColumns<'a> {
    /// `session` or `session/draft` ([`SessionKind::as_str`]).
    pub kind: &'static str,
    /// The saved agent and its pinned version; `None` for drafts.
    pub agent_id: Option<&'a str>,
    pub agent_version: Option<i64>,
    /// The saved agent's name, or a draft's optional link to one.
    pub agent_name: Option<&'a str>,
    /// A draft's spec as JSON; `None` for saved sessions.
    pub draft_spec: Option<String>,
}

impl<'a> SessionAgentColumns<'a> {
    /// Encodes the agent of a session.
    pub fn new(agent: &'a SessionAgentRecord) -> Result<SessionAgentColumns<'a>> {
        Ok(match agent {
            SessionAgentRecord::Saved { agent_id, agent_name, version } => SessionAgentColumns {
                kind: SessionKind::Saved.as_str(),
                agent_id: Some(agent_id),
                agent_version: Some(to_i64(*version, "agent version")?),
                agent_name: Some(agent_name),
                draft_spec: None,
            },
            SessionAgentRecord::Draft { spec, agent_name } => SessionAgentColumns {
                kind: SessionKind::Draft.as_str(),
                agent_id: None,
                agent_version: None,
                agent_name: agent_name.as_deref(),
                draft_spec: Some(to_json(spec, "draft spec")?),
            },
        })
    }
}

/// The JSON columns of a turn row, encoded for writing.
#[derive(Debug)]
pub struct TurnColumns {
    pub input: String,
    pub state: String,
    /// The state's status alone (`running`, `done`, ...), for finding running turns.
    pub status: &'static str,
    pub created_by: String,
    /// The mode and model, NULL when the turn runs with its agent's.
    pub control: Option<String>,
}

impl TurnColumns {
    /// Encodes the JSON columns of a turn.
    pub fn new(turn: &TurnRecord) -> Result<TurnColumns> {
        Ok(TurnColumns {
            input: to_json(&turn.input, "turn input")?,
            state: to_json(&turn.state, "turn state")?,
            status: turn.state.status(),
            created_by: to_json(&turn.created_by, "turn created_by")?,
            control: match &turn.request_context {
                None => control_column(&turn.control, "turn control")?,
                Some(context) => Some(to_json(
                    &TurnControlColumn { control: turn.control.clone(), request_context: Some(context.clone()) },
                    "turn control",
                )?),
            },
        })
    }
}

/// A stream row of a log batch: `(turn_id, sequence, data)`.
pub type StreamRow<'a> = (&'a str, i64, &'a str);
/// A content row of a log batch: `(turn_id, sequence, kind, data)`.
pub type ContentRow<'a> = (&'a str, i64, &'a str, &'a str);
/// A state row of a log batch: `(turn_id, state_json, status, at)`.
pub type StateRow<'a> = (&'a str, String, &'static str, &'a str);

/// A batch of [`LogWrite`]s split into the three row sets a backend applies, with the
/// contract's duplicate rules already applied, so that each set holds one row per key:
/// - `stream`: the first event for each (turn, sequence), in batch order (a stored stream
///   event is never replaced, so a later duplicate is lost anyway);
/// - `content`: the last write for each (turn, sequence), in batch order;
/// - `states`: the last state for each turn, in batch order, so a session's `updated_at` is
///   the `at` of the last of its rows.
#[derive(Debug, Default)]
pub struct LogRows<'a> {
    pub stream: Vec<StreamRow<'a>>,
    pub content: Vec<ContentRow<'a>>,
    pub states: Vec<StateRow<'a>>,
}

impl<'a> LogRows<'a> {
    /// Splits and deduplicates a batch.
    pub fn new(batch: &'a [LogWrite]) -> Result<LogRows<'a>> {
        let mut rows = LogRows { stream: Vec::with_capacity(batch.len()), ..LogRows::default() };
        for write in batch {
            match write {
                LogWrite::Stream { turn_id, sequence, data } => {
                    rows.stream.push((turn_id, to_i64(*sequence, "sequence number")?, data));
                }
                LogWrite::Content { turn_id, sequence, kind, data } => {
                    rows.content.push((turn_id, to_i64(*sequence, "sequence number")?, kind, data));
                }
                LogWrite::TurnState { turn_id, state, at } => {
                    rows.states.push((turn_id, to_json(state, "turn state")?, state.status(), at));
                }
            }
        }
        keep_first(&mut rows.stream, |&(turn_id, sequence, _)| (turn_id, sequence));
        keep_last(&mut rows.content, |&(turn_id, sequence, ..)| (turn_id, sequence));
        keep_last(&mut rows.states, |&(turn_id, ..)| turn_id);
        Ok(rows)
    }

    /// Whether the batch writes nothing.
    pub fn is_empty(&self) -> bool {
        self.stream.is_empty() && self.content.is_empty() && self.states.is_empty()
    }

    /// Every turn the batch writes to, once each, in no particular order.
    pub fn turn_ids(&self) -> Vec<&'a str> {
        let mut ids: HashSet<&'a str> = self.stream.iter().map(|row| row.0).collect();
        ids.extend(self.content.iter().map(|row| row.0));
        ids.extend(self.states.iter().map(|row| row.0));
        ids.into_iter().collect()
    }
}

/// Removes every row that an earlier row with the same key precedes, keeping the order of the
/// rest.
fn keep_first<T, K: Eq + Hash>(rows: &mut Vec<T>, key: impl Fn(&T) -> K) {
    if rows.len() < 2 {
        return;
    }
    let mut seen = HashSet::with_capacity(rows.len());
    rows.retain(|row| seen.insert(key(row)));
}

/// Removes every row that a later row with the same key replaces, keeping the order of the
/// rest.
fn keep_last<T, K: Eq + Hash>(rows: &mut Vec<T>, key: impl Fn(&T) -> K) {
    if rows.len() < 2 {
        return;
    }
    let mut seen = HashSet::with_capacity(rows.len());
    let mut kept: Vec<T> = Vec::with_capacity(rows.len());
    while let Some(row) = rows.pop() {
        if seen.insert(key(&row)) {
            kept.push(row);
        }
    }
    kept.reverse();
    *rows = kept;
}

#[cfg(test)]
mod tests {
    use teamster_protocol::TurnState;

    use super::*;

    #[test]
    fn keep_first_and_keep_last_keep_one_row_per_key_in_order() {
        let rows = vec![("a", 1), ("b", 2), ("a", 3), ("c", 4), ("b", 5)];
        let mut first = rows.clone();
        keep_first(&mut first, |&(key, _)| key);
        assert_eq!(first, [("a", 1), ("b", 2), ("c", 4)]);
        let mut last = rows;
        keep_last(&mut last, |&(key, _)| key);
        assert_eq!(last, [("a", 3), ("c", 4), ("b", 5)]);
    }

    #[test]
    fn cancel_reasons_round_trip_through_their_wire_names() {
        for reason in [
            CancelReason::ServerExecutionTimeout,
            CancelReason::ClientCancelled,
            CancelReason::CancelledForNextTurn,
            CancelReason::Abandoned,
        ] {
            let name = cancel_reason_name(reason);
            assert_eq!(serde_json::to_value(reason).expect("serialises"), serde_json::json!(name));
            assert_eq!(cancel_reason(name).expect("a known name"), reason);
        }
        assert!(matches!(cancel_reason("bored"), Err(Error::Corrupt(_))));
    }

    #[test]
    fn log_rows_split_a_batch_by_the_duplicate_rules() {
        let done = TurnState::Done { output: None, required_actions: vec![], completed_at: "t2".into(), metrics: None };
        let batch = vec![
            LogWrite::Stream { turn_id: "a".into(), sequence: 1, data: "first".into() },
            LogWrite::Content { turn_id: "a".into(), sequence: 1, kind: "model.message", data: "old".into() },
            LogWrite::TurnState { turn_id: "a".into(), state: TurnState::Running, at: "t1".into() },
            LogWrite::Stream { turn_id: "a".into(), sequence: 1, data: "second".into() },
            LogWrite::Stream { turn_id: "b".into(), sequence: 1, data: "other turn".into() },
            LogWrite::Content { turn_id: "a".into(), sequence: 1, kind: "model.message", data: "new".into() },
            LogWrite::TurnState { turn_id: "b".into(), state: TurnState::Running, at: "t1".into() },
            LogWrite::TurnState { turn_id: "a".into(), state: done.clone(), at: "t2".into() },
        ];
        let rows = LogRows::new(&batch).expect("a valid batch");
        assert_eq!(rows.stream, [("a", 1, "first"), ("b", 1, "other turn")]);
        assert_eq!(rows.content, [("a", 1, "model.message", "new")]);
        let done_json = to_json(&done, "state").expect("encodes");
        assert_eq!(
            rows.states,
            [("b", r#"{"status":"running"}"#.to_owned(), "running", "t1"), ("a", done_json, "done", "t2")]
        );
        let mut turn_ids = rows.turn_ids();
        turn_ids.sort_unstable();
        assert_eq!(turn_ids, ["a", "b"]);
    }

    #[test]
    fn counters_out_of_range_are_errors_and_bounds_clamp() {
        assert!(matches!(to_i64(u64::MAX, "sequence"), Err(Error::Backend(_))));
        assert!(matches!(to_u64(-1, "sequence"), Err(Error::Corrupt(_))));
        assert_eq!(clamp_i64(u64::MAX), i64::MAX);
        assert_eq!(clamp_i64(7), 7);
    }
}
