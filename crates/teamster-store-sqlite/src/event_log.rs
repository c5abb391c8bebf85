//! The write path of the event log: a batch of [`LogWrite`]s becomes three JSON arrays (stream
//! rows, content rows, turn states) and four statements that read them with `json_each`.
//!
//! This is the group-commit path, so its cost per event matters, and on SQLite through sqlx
//! that cost is dominated by round trips to the connection's worker thread. Statements whose
//! text does not depend on the batch's size let a whole batch, transaction included, go as
//! one command whose prepared statements sqlx caches and reuses. Encoding a batch as JSON and
//! decoding it inside SQLite costs far less than a round trip per row or per chunk of rows.

use std::sync::LazyLock;

use teamster_store::codec::{LogRows, to_json};
use teamster_store::{LogWrite, Result};

/// Applies a batch in one transaction: parameters `$1` to `$3` are the arrays of
/// [`EncodedBatch`].
///
/// Commands of several statements number their parameters `$N`, never `?N`: for `?N`, SQLite
/// also counts the unused slots below N, and sqlx binds those positionally across statements
/// until it runs out of arguments and stops binding, leaving later parameters NULL.
pub(crate) static WRITE_BATCH: LazyLock<String> =
    LazyLock::new(|| format!("BEGIN IMMEDIATE; {} COMMIT;", log_statements(1)));

/// The statements that apply an [`EncodedBatch`] whose arrays are parameters `first`,
/// `first + 1` and `first + 2`, inside a transaction the caller opened.
///
/// Rows for turns that do not exist are skipped (their session was deleted while the batch
/// queued); the foreign keys would reject them and fail the other turns' rows. A stream row
/// already stored stays: it is the event that was sent. Every row set is deduplicated while
/// encoding ([`LogRows`]), so the statements never see two rows for one key.
pub(crate) fn log_statements(first: usize) -> String {
    let (stream, content, states) = (first, first + 1, first + 2);
    // The last statement relies on SQLite's rule that in an aggregate query with a single
    // max(), bare columns come from the row holding the maximum: each session takes the `at`
    // of its last state change in batch order.
    format!(
        "INSERT INTO stream_events (turn_id, sequence, data) \
         SELECT row.value ->> 0, row.value ->> 1, row.value ->> 2 FROM json_each(${stream}) AS row \
         WHERE EXISTS (SELECT 1 FROM turns WHERE turns.id = row.value ->> 0) \
         ON CONFLICT (turn_id, sequence) DO NOTHING; \
         INSERT INTO content_events (turn_id, sequence, kind, data) \
         SELECT row.value ->> 0, row.value ->> 1, row.value ->> 2, row.value ->> 3 FROM json_each(${content}) AS row \
         WHERE EXISTS (SELECT 1 FROM turns WHERE turns.id = row.value ->> 0) \
         ON CONFLICT (turn_id, sequence) DO UPDATE SET kind = excluded.kind, data = excluded.data; \
         UPDATE turns SET state = change.value ->> 1, status = change.value ->> 2, \
         finished_at = CASE WHEN change.value ->> 2 = 'running' THEN NULL ELSE change.value ->> 3 END \
         FROM json_each(${states}) AS change WHERE turns.id = change.value ->> 0; \
         UPDATE sessions SET updated_at = latest.at FROM ( \
             SELECT turns.session_id AS session_id, change.value ->> 3 AS at, MAX(change.key) \
             FROM json_each(${states}) AS change JOIN turns ON turns.id = change.value ->> 0 \
             GROUP BY turns.session_id \
         ) AS latest WHERE sessions.id = latest.session_id;"
    )
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
}

/// Encodes a batch for [`log_statements`].
pub(crate) fn encode(batch: &[LogWrite]) -> Result<EncodedBatch> {
    let rows = LogRows::new(batch)?;
    Ok(EncodedBatch {
        stream: to_json(&rows.stream, "stream events")?,
        content: to_json(&rows.content, "content events")?,
        states: to_json(&rows.states, "turn states")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_statements_number_their_parameters_from_first() {
        let statements = log_statements(9);
        for parameter in ["$9)", "$10)", "$11)"] {
            assert!(statements.contains(parameter), "{parameter} in {statements}");
        }
        assert!(!statements.contains("$1)") && !statements.contains("$12") && !statements.contains('?'));
    }
}
