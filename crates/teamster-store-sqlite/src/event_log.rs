//! The write path of the event log: a batch of [`LogWrite`]s becomes three JSON arrays (stream
//! rows, content rows, turn states) and four statements that read them with `json_each`.
//!
//! A fenced batch (`EventLog::write_held`) writes only the turns whose lease row its owner
//! holds at the claim given, checked by each statement; one process writes a SQLite store, so
//! no takeover can commit between the check and the write.
//!
//! This is the group-commit path, so its cost per event matters. Statements whose text does
//! not depend on the batch's size are prepared once and reused, and encoding a batch as JSON
//! and decoding it inside SQLite costs far less than a statement per row or per chunk of rows.

use std::sync::LazyLock;

use teamster_store::codec::{LogRows, clamp_i64, to_json};
use teamster_store::{LogWrite, Result, TurnLease};
use teamster_store_sql::lease_holder;

/// The statements that apply a batch, unfenced then fenced, run in one transaction on the
/// direct writer: parameters `$1` to `$4` are the arrays of [`EncodedBatch`], and a fenced
/// batch's `$5` and `$6` its lease owner and leases ([`encode_leases`]). The last statement
/// returns the ids of the turns the batch left out, checked once per turn of the batch rather
/// than once per row.
pub(crate) static WRITE_BATCH: LazyLock<[Vec<String>; 2]> = LazyLock::new(|| {
    [false, true].map(|fenced| {
        let fence = fenced.then_some(5);
        let mut statements = log_statements(1, fence).to_vec();
        statements.push(format!("SELECT turn.value FROM json_each($4) AS turn WHERE NOT ({})", writable("turn.value", fence)));
        statements
    })
});

/// The statements that apply an [`EncodedBatch`] whose arrays are parameters `first`,
/// `first + 1` and `first + 2`, inside a transaction the caller opened; with a `fence`, only
/// to the turns whose lease parameter `$fence` holds as parameter `$fence + 1` says.
///
/// Rows for turns that do not exist are skipped (their session was deleted while the batch
/// queued); the foreign keys would reject them and fail the other turns' rows. A stream row
/// already stored stays: it is the event that was sent. Every row set is deduplicated while
/// encoding ([`LogRows`]), so the statements never see two rows for one key.
pub(crate) fn log_statements(first: usize, fence: Option<usize>) -> [String; 4] {
    let (stream, content, states) = (first, first + 1, first + 2);
    let row_turn = writable("row.value ->> 0", fence);
    let changed_turn = writable("change.value ->> 0", fence);
    // The last statement relies on SQLite's rule that in an aggregate query with a single
    // max(), bare columns come from the row holding the maximum: each session takes the `at`
    // of its last state change in batch order.
    [
        format!(
            "INSERT INTO stream_events (turn_id, sequence, data) \
             SELECT row.value ->> 0, row.value ->> 1, row.value ->> 2 FROM json_each(${stream}) AS row \
             WHERE {row_turn} \
             ON CONFLICT (turn_id, sequence) DO NOTHING"
        ),
        format!(
            "INSERT INTO content_events (turn_id, sequence, kind, data) \
             SELECT row.value ->> 0, row.value ->> 1, row.value ->> 2, row.value ->> 3 FROM json_each(${content}) AS row \
             WHERE {row_turn} \
             ON CONFLICT (turn_id, sequence) DO UPDATE SET kind = excluded.kind, data = excluded.data"
        ),
        format!(
            "UPDATE turns SET state = change.value ->> 1, status = change.value ->> 2, \
             finished_at = CASE WHEN change.value ->> 2 = 'running' THEN NULL ELSE change.value ->> 3 END \
             FROM json_each(${states}) AS change WHERE turns.id = change.value ->> 0 AND {changed_turn}"
        ),
        format!(
            "UPDATE sessions SET updated_at = latest.at FROM ( \
                 SELECT turns.session_id AS session_id, change.value ->> 3 AS at, MAX(change.key) \
                 FROM json_each(${states}) AS change JOIN turns ON turns.id = change.value ->> 0 \
                 WHERE {changed_turn} GROUP BY turns.session_id \
             ) AS latest WHERE sessions.id = latest.session_id"
        ),
    ]
}

/// Whether the turn with id `turn_id` (an SQL expression) may be written: it exists, and with a
/// `fence`, its lease is held by parameter `$fence` at the claim that parameter `$fence + 1`
/// (the JSON of [`encode_leases`]) gives for it.
///
/// The fenced form is an `IN` over a subquery that does not depend on the row, so SQLite
/// computes the set of writable turns once per statement instead of once per row (a lease row
/// exists only for an existing turn: its foreign key cascades).
fn writable(turn_id: &str, fence: Option<usize>) -> String {
    match fence {
        None => format!("EXISTS (SELECT 1 FROM turns WHERE turns.id = {turn_id})"),
        Some(owner) => format!(
            "{turn_id} IN (SELECT lease.turn_id FROM json_each(${}) AS held JOIN turn_leases AS lease \
             ON lease.turn_id = held.value ->> 0 WHERE {})",
            owner + 1,
            lease_holder(owner, "(held.value ->> 1)")
        ),
    }
}

/// The leases of a fenced batch, as the JSON array `[[turn_id, claims], ...]`.
pub(crate) fn encode_leases(leases: &[TurnLease]) -> Result<String> {
    let rows: Vec<(&str, i64)> = leases.iter().map(|lease| (lease.turn_id.as_str(), clamp_i64(lease.claims))).collect();
    to_json(&rows, "leases")
}

/// A batch of log writes as the JSON arrays that [`log_statements`] read.
pub(crate) struct EncodedBatch {
    /// `[[turn_id, sequence, data], ...]`, the first event for each (turn, sequence), in
    /// batch order.
    pub(crate) stream: String,
    /// `[[turn_id, sequence, kind, data], ...]`, the last write for each (turn, sequence).
    pub(crate) content: String,
    /// `[[turn_id, state_json, status, at], ...]`, the last state for each turn, in batch
    /// order.
    pub(crate) states: String,
    /// `[turn_id, ...]`, every turn the batch writes to, once each.
    pub(crate) turns: String,
    /// How many turns that is.
    pub(crate) turn_count: usize,
}

/// Encodes a batch for [`log_statements`].
pub(crate) fn encode(batch: &[LogWrite]) -> Result<EncodedBatch> {
    let rows = LogRows::new(batch)?;
    let turn_ids = rows.turn_ids();
    Ok(EncodedBatch {
        turn_count: turn_ids.len(),
        stream: to_json(&rows.stream, "stream events")?,
        content: to_json(&rows.content, "content events")?,
        states: to_json(&rows.states, "turn states")?,
        turns: to_json(&turn_ids, "turn ids")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_statements_number_their_parameters_from_first() {
        let statements = log_statements(9, None).join("; ");
        for parameter in ["$9)", "$10)", "$11)"] {
            assert!(statements.contains(parameter), "{parameter} in {statements}");
        }
        assert!(!statements.contains("$1)") && !statements.contains("$12") && !statements.contains('?'));
        let fenced = log_statements(9, Some(12)).join("; ");
        assert!(fenced.contains("$12 ") && fenced.contains("$13)") && !fenced.contains("$14"), "{fenced}");
    }
}
