//! Turn leases and stream retention: the statements behind the lease methods of
//! [`teamster_store::Store`] and `delete_expired_streams`.
//!
//! Leases live in `turn_leases`, one row per turn, with their expiry in milliseconds on
//! SQLite's clock (one process owns a SQLite database, so it is also the only clock). Writes go
//! through the writer connection like every other write, so compare-and-set needs nothing more
//! than a `WHERE` clause.

use std::time::Duration;

use teamster_store::codec::{self, clamp_i64, lease_millis, to_json};
use teamster_store::{ExpiredLease, Result, TurnLease};

use crate::connections::Connections;
use crate::error;

/// The current time in milliseconds since the Unix epoch, in SQL.
pub(crate) const NOW_MS: &str = "CAST(unixepoch('subsec') * 1000 AS INTEGER)";

/// Whether the lease row `lease` is held by `?{owner}` at the claim `{claims}` (an SQL
/// expression): claimed by the owner at that claim, or still unclaimed when the claim is the
/// creator's first.
fn held(owner: usize, claims: &str) -> String {
    format!(
        "((lease.owner = ?{owner} AND lease.claims = {claims}) \
         OR (lease.owner IS NULL AND lease.claims = 0 AND {claims} = 1)) \
         AND EXISTS (SELECT 1 FROM turns WHERE turns.id = lease.turn_id AND turns.status = 'running')"
    )
}

/// Takes over an expired lease (see [`teamster_store::CoordinationStore::claim_turn`]). A running turn
/// without a lease row (left running before leases existed) counts as expired at claim 0.
pub(crate) async fn claim_turn(
    connections: &Connections,
    turn_id: &str,
    owner: &str,
    ttl: Duration,
    expected_claims: u64,
) -> Result<Option<TurnLease>> {
    let sql = format!(
        "INSERT INTO turn_leases AS lease (turn_id, owner, expires_at, claims) \
         SELECT id, ?2, {NOW_MS} + ?3, ?4 + 1 FROM turns WHERE id = ?1 AND status = 'running' \
         ON CONFLICT (turn_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at, \
         claims = excluded.claims WHERE lease.claims = ?4 AND lease.expires_at <= {NOW_MS} \
         RETURNING claims"
    );
    let mut writer = connections.write().await?;
    let claimed: Option<i64> = sqlx::query_scalar(&sql)
        .bind(turn_id)
        .bind(owner)
        .bind(lease_millis(ttl))
        .bind(clamp_i64(expected_claims))
        .fetch_optional(writer.connection()?)
        .await
        .map_err(error::backend)?;
    claimed
        .map(|claims| codec::held_lease(turn_id, claims))
        .transpose()
}

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
        "UPDATE turn_leases AS lease SET owner = ?1, claims = wanted.value ->> 1, expires_at = {NOW_MS} + ?2 \
         FROM json_each(?3) AS wanted WHERE lease.turn_id = wanted.value ->> 0 AND {} RETURNING turn_id",
        held(1, "(wanted.value ->> 1)")
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

/// Ends a lease `owner` holds now, leaving it at its claim for a takeover.
pub(crate) async fn release_lease(connections: &Connections, owner: &str, lease: &TurnLease) -> Result<bool> {
    let sql = format!(
        "UPDATE turn_leases AS lease SET owner = ?1, claims = ?3, expires_at = 0 WHERE lease.turn_id = ?2 AND {}",
        held(1, "?3")
    );
    let mut writer = connections.write().await?;
    let released = sqlx::query(&sql)
        .bind(owner)
        .bind(&lease.turn_id)
        .bind(clamp_i64(lease.claims))
        .execute(writer.connection()?)
        .await
        .map_err(error::backend)?;
    Ok(released.rows_affected() > 0)
}

/// Running turns whose lease has expired, or that have none.
pub(crate) async fn expired_leases(connections: &Connections, limit: u32) -> Result<Vec<ExpiredLease>> {
    let sql = format!(
        "SELECT turns.session_id, turns.id, lease.owner, coalesce(lease.claims, 0) \
         FROM turns LEFT JOIN turn_leases AS lease ON lease.turn_id = turns.id \
         WHERE turns.status = 'running' AND (lease.expires_at IS NULL OR lease.expires_at <= {NOW_MS}) \
         ORDER BY lease.expires_at NULLS FIRST, turns.id LIMIT ?1"
    );
    let mut reader = connections.read().await?;
    let rows: Vec<(String, String, Option<String>, i64)> =
        sqlx::query_as(&sql).bind(i64::from(limit)).fetch_all(&mut *reader).await.map_err(error::backend)?;
    rows.into_iter().map(codec::expired_lease).collect()
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
