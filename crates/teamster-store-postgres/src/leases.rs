//! Turn leases and stream retention in PostgreSQL's dialect: the server's clock, lease renewal
//! and `delete_expired_streams`. Claims, releases and the expired-lease listing are shared
//! ([`teamster_store_sql::Sql`]).
//!
//! Leases live in `turn_leases`, one row per turn, with their expiry in milliseconds on the
//! database server's clock, so replicas whose clocks disagree agree on expiry. Each method is
//! one statement, and compare-and-set is its `WHERE` clause: a concurrent statement on the same
//! lease row waits for the row lock and re-checks the condition on the committed row, so of two
//! racing takeovers exactly one matches.
//!
//! Locks: lease statements lock lease rows only (and, through the foreign key of a new lease
//! row, key-share its turn, which no log write conflicts with). Fenced log writes key-share
//! lock lease rows, which only takeovers (a key change, see migration 0008) conflict with, so
//! renewals never wait on them. `delete_expired_streams` locks finished turns, skipping
//! any that another transaction holds.

use std::time::Duration;

use sqlx::PgConnection;
use teamster_store::codec::{clamp_i64, lease_millis};
use teamster_store::{Result, TurnLease};
use teamster_store_sql::{error, lease_held};

/// The current time in milliseconds since the Unix epoch, on the server's clock, in SQL.
pub(crate) const NOW_MS: &str = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

/// Extends the leases `owner` holds among `leases`, in one statement.
pub(crate) async fn renew_leases(connection: &mut PgConnection, owner: &str, leases: &[TurnLease], ttl: Duration) -> Result<Vec<String>> {
    if leases.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "UPDATE turn_leases AS lease SET owner = $1, claims = wanted.claims, expires_at = {NOW_MS} + $2 \
         FROM unnest($3::text[], $4::bigint[]) AS wanted (turn_id, claims) \
         WHERE lease.turn_id = wanted.turn_id AND {} RETURNING lease.turn_id",
        lease_held(1, "wanted.claims")
    );
    sqlx::query_scalar(&sql)
        .bind(owner)
        .bind(lease_millis(ttl))
        .bind(leases.iter().map(|lease| lease.turn_id.as_str()).collect::<Vec<&str>>())
        .bind(leases.iter().map(|lease| clamp_i64(lease.claims)).collect::<Vec<i64>>())
        .fetch_all(connection)
        .await
        .map_err(error::backend)
}

/// Deletes the streams and leases of the turns that finished longest ago, before
/// `finished_before`, at most `max_turns`, in one statement. Turns another transaction holds
/// are skipped (a session being deleted, a concurrent sweep on another replica), so the
/// statement waits for no turn lock while it holds others.
pub(crate) async fn delete_expired_streams(connection: &mut PgConnection, finished_before: &str, max_turns: u32) -> Result<u32> {
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
    .fetch_one(connection)
    .await
    .map_err(error::backend)?;
    Ok(u32::try_from(deleted).unwrap_or(u32::MAX))
}
