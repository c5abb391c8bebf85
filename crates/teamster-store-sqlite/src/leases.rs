//! Turn leases and stream retention in SQLite's dialect: its clock, lease renewal and
//! `delete_expired_streams`. Claims, releases and the expired-lease listing are shared
//! ([`teamster_store_sql::Sql`]).
//!
//! Leases live in `turn_leases`, one row per turn, with their expiry in milliseconds on
//! SQLite's clock (one process owns a SQLite database, so it is also the only clock). Writes go
//! through the writer connection like every other write, so compare-and-set needs nothing more
//! than a `WHERE` clause.

use std::time::Duration;

use teamster_store::codec::{clamp_i64, lease_millis, to_json};
use teamster_store::{Result, TurnLease};
use teamster_store_sql::{error, lease_held};

use crate::connections::Connections;

/// The current time in milliseconds since the Unix epoch, in SQL.
pub(crate) const NOW_MS: &str = "CAST(unixepoch('subsec') * 1000 AS INTEGER)";

/// Extends the leases `owner` holds among `leases`, in one statement.
pub(crate) async fn renew_leases(
    connections: &Connections,
    owner: &str,
    leases: &[TurnLease],
    ttl: Duration,
) -> Result<Vec<String>> {
    if leases.is_empty() {
        return Ok(Vec::new());
    }
    let held_json: Vec<(&str, i64)> = leases.iter().map(|lease| (lease.turn_id.as_str(), clamp_i64(lease.claims))).collect();
    let sql = format!(
        "UPDATE turn_leases AS lease SET owner = $1, claims = wanted.value ->> 1, expires_at = {NOW_MS} + $2 \
         FROM json_each($3) AS wanted WHERE lease.turn_id = wanted.value ->> 0 AND {} RETURNING turn_id",
        lease_held(1, "(wanted.value ->> 1)")
    );
    let mut writer = connections.write().await?;
    sqlx::query_scalar(&sql)
        .bind(owner)
        .bind(lease_millis(ttl))
        .bind(to_json(&held_json, "leases")?)
        .fetch_all(writer.connection()?)
        .await
        .map_err(error::backend)
}

/// Deletes the streams and leases of the turns that finished longest ago, before
/// `finished_before`, at most `max_turns`, in one transaction. The turns are chosen by the
/// same ordered query in each statement; the writer connection is the only writer, so both
/// see the same turns.
pub(crate) async fn delete_expired_streams(connections: &Connections, finished_before: &str, max_turns: u32) -> Result<u32> {
    const EXPIRED: &str = "SELECT id FROM turns WHERE finished_at IS NOT NULL AND stream_deleted = 0 \
         AND finished_at < $1 ORDER BY finished_at, id LIMIT $2";
    let sql = format!(
        "BEGIN IMMEDIATE; \
         DELETE FROM stream_events WHERE turn_id IN ({EXPIRED}); \
         DELETE FROM turn_leases WHERE turn_id IN ({EXPIRED}); \
         UPDATE turns SET stream_deleted = 1 WHERE id IN ({EXPIRED}) RETURNING id; \
         COMMIT;"
    );
    let mut writer = connections.write().await?;
    let outcome = sqlx::query_scalar::<_, String>(&sql)
        .bind(finished_before)
        .bind(i64::from(max_turns))
        .fetch_all(writer.begin()?)
        .await;
    let deleted = writer.settle(outcome, error::backend).await?;
    Ok(u32::try_from(deleted.len()).unwrap_or(u32::MAX))
}
