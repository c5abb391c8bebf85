//! Turn leases and stream retention: the statements behind the lease methods of
//! [`teamster_store::Store`] and `delete_expired_streams`.
//!
//! Leases live in `turn_leases`, one row per turn, with their expiry in milliseconds on the
//! database server's clock, so replicas whose clocks disagree agree on expiry. Each method is
//! one statement, and compare-and-set is its `WHERE` clause: a concurrent statement on the same
//! lease row waits for the row lock and re-checks the condition on the committed row, so of two
//! racing takeovers exactly one matches.
//!
//! Locks: lease statements lock lease rows only (and, through the foreign key of a new lease
//! row, key-share its turn, which no log write conflicts with). Log writes never touch lease
//! rows, so renewals never wait on them. `delete_expired_streams` locks finished turns, skipping
//! any that another transaction holds.

use std::time::Duration;

use sqlx::PgPool;
use teamster_store::codec::{self, clamp_i64, lease_millis};
use teamster_store::{ExpiredLease, Result, TurnLease};

use crate::error;

/// The current time in milliseconds since the Unix epoch, on the server's clock, in SQL.
pub(crate) const NOW_MS: &str = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

/// Whether the lease row `lease` is held by `${owner}` at the claim `{claims}` (an SQL
/// expression): claimed by the owner at that claim, or still unclaimed when the claim is the
/// creator's first.
fn held(owner: usize, claims: &str) -> String {
    format!(
        "((lease.owner = ${owner} AND lease.claims = {claims}) \
         OR (lease.owner IS NULL AND lease.claims = 0 AND {claims} = 1)) \
         AND EXISTS (SELECT 1 FROM turns WHERE turns.id = lease.turn_id AND turns.status = 'running')"
    )
}

/// Takes over an expired lease (see [`teamster_store::CoordinationStore::claim_turn`]). A running turn
/// without a lease row (left running before leases existed) counts as expired at claim 0.
pub(crate) async fn claim_turn(
    pool: &PgPool,
    turn_id: &str,
    owner: &str,
    ttl: Duration,
    expected_claims: u64,
) -> Result<Option<TurnLease>> {
    let sql = format!(
        "INSERT INTO turn_leases AS lease (turn_id, owner, expires_at, claims) \
         SELECT id, $2, {NOW_MS} + $3, $4 + 1 FROM turns WHERE id = $1 AND status = 'running' \
         ON CONFLICT (turn_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at, \
         claims = excluded.claims WHERE lease.claims = $4 AND lease.expires_at <= {NOW_MS} \
         RETURNING claims"
    );
    let claimed: Option<i64> = sqlx::query_scalar(&sql)
        .bind(turn_id)
        .bind(owner)
        .bind(lease_millis(ttl))
        .bind(clamp_i64(expected_claims))
        .fetch_optional(pool)
        .await
        .map_err(error::backend)?;
    claimed
        .map(|claims| codec::held_lease(turn_id, claims))
        .transpose()
}

/// Extends the leases `owner` holds among `leases`, in one statement.
pub(crate) async fn renew_leases(pool: &PgPool, owner: &str, leases: &[TurnLease], ttl: Duration) -> Result<Vec<String>> {
    if leases.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "UPDATE turn_leases AS lease SET owner = $1, claims = wanted.claims, expires_at = {NOW_MS} + $2 \
         FROM unnest($3::text[], $4::bigint[]) AS wanted (turn_id, claims) \
         WHERE lease.turn_id = wanted.turn_id AND {} RETURNING lease.turn_id",
        held(1, "wanted.claims")
    );
    sqlx::query_scalar(&sql)
        .bind(owner)
        .bind(lease_millis(ttl))
        .bind(leases.iter().map(|lease| lease.turn_id.as_str()).collect::<Vec<&str>>())
        .bind(leases.iter().map(|lease| clamp_i64(lease.claims)).collect::<Vec<i64>>())
        .fetch_all(pool)
        .await
        .map_err(error::backend)
}

/// Ends a lease `owner` holds now, leaving it at its claim for a takeover.
pub(crate) async fn release_lease(pool: &PgPool, owner: &str, lease: &TurnLease) -> Result<bool> {
    let sql = format!(
        "UPDATE turn_leases AS lease SET owner = $1, claims = $3, expires_at = 0 WHERE lease.turn_id = $2 AND {}",
        held(1, "$3")
    );
    let released = sqlx::query(&sql)
        .bind(owner)
        .bind(&lease.turn_id)
        .bind(clamp_i64(lease.claims))
        .execute(pool)
        .await
        .map_err(error::backend)?;
    Ok(released.rows_affected() > 0)
}

/// Running turns whose lease has expired, or that have none.
pub(crate) async fn expired_leases(pool: &PgPool, limit: u32) -> Result<Vec<ExpiredLease>> {
    let sql = format!(
        "SELECT turns.session_id, turns.id, lease.owner, coalesce(lease.claims, 0) \
         FROM turns LEFT JOIN turn_leases AS lease ON lease.turn_id = turns.id \
         WHERE turns.status = 'running' AND (lease.expires_at IS NULL OR lease.expires_at <= {NOW_MS}) \
         ORDER BY lease.expires_at NULLS FIRST, turns.id LIMIT $1"
    );
    let rows: Vec<(String, String, Option<String>, i64)> =
        sqlx::query_as(&sql).bind(i64::from(limit)).fetch_all(pool).await.map_err(error::backend)?;
    rows.into_iter().map(codec::expired_lease).collect()
}

/// Deletes the streams and leases of the turns that finished longest ago, before
/// `finished_before`, at most `max_turns`, in one statement. Turns another transaction holds
/// are skipped (a session being deleted, a concurrent sweep on another replica), so the
/// statement waits for no turn lock while it holds others.
pub(crate) async fn delete_expired_streams(pool: &PgPool, finished_before: &str, max_turns: u32) -> Result<u32> {
    let deleted: i64 = sqlx::query_scalar(
        "WITH expired AS ( \
             SELECT id FROM turns WHERE finished_at IS NOT NULL AND NOT stream_deleted AND finished_at < $1 \
             ORDER BY finished_at, id LIMIT $2 FOR NO KEY UPDATE SKIP LOCKED \
         ), streams AS ( \
             DELETE FROM stream_events WHERE turn_id IN (SELECT id FROM expired) \
         ), spent AS ( \
             DELETE FROM turn_leases WHERE turn_id IN (SELECT id FROM expired) \
         ), marked AS ( \
             UPDATE turns SET stream_deleted = TRUE WHERE id IN (SELECT id FROM expired) RETURNING id \
         ) \
         SELECT count(*) FROM marked",
    )
    .bind(finished_before)
    .bind(i64::from(max_turns))
    .fetch_one(pool)
    .await
    .map_err(error::backend)?;
    Ok(u32::try_from(deleted).unwrap_or(u32::MAX))
}
