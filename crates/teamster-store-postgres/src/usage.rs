//! The counters of the operator's limits ([`UsageStore`]) in PostgreSQL, shared by every
//! replica: request buckets updated by one upsert per request, running-turn places reserved
//! under a per-subject advisory lock, tenants' spend added by one upsert.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::Connection;
use teamster_store::codec::{clamp_i64, lease_millis};
use teamster_store::{RequestTaken, Result, Spend, TurnPlace, UsageStore};
use teamster_store_sql::{ADD_MODEL_USES, MODEL_USES, error};

use crate::PostgresStore;
use crate::leases::NOW_MS;

/// The statement's start in milliseconds since the Unix epoch: one instant however often a
/// statement names it.
const STATEMENT_MS: &str = "(extract(epoch FROM statement_timestamp()) * 1000)::bigint";

/// Takes a token of a subject's bucket. `$1` the subject, `$2` the capacity, `$3` tokens
/// gained per millisecond. The row is locked by the upsert, so concurrent requests of one
/// subject (from any replica) take turns; the elapsed time never counts backwards.
static TAKE_REQUEST: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let refilled = format!("LEAST($2, bucket.tokens + GREATEST(0, {STATEMENT_MS} - bucket.at_ms) * $3)");
    format!(
        "INSERT INTO request_buckets AS bucket (subject_id, tokens, at_ms, granted) VALUES ($1, $2 - 1, {STATEMENT_MS}, TRUE) \
         ON CONFLICT (subject_id) DO UPDATE SET \
             tokens = CASE WHEN {refilled} >= 1 THEN {refilled} - 1 ELSE {refilled} END, \
             granted = {refilled} >= 1, \
             at_ms = GREATEST(bucket.at_ms, {STATEMENT_MS}) \
         RETURNING granted, tokens"
    )
});

/// Whether the place `place` still counts: a reservation not yet expired, or bound to a
/// running turn whose lease is live.
static PLACE_COUNTS: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "((place.turn_id IS NULL AND place.expires_at > {NOW_MS}) OR EXISTS ( \
             SELECT 1 FROM turns JOIN turn_leases AS lease ON lease.turn_id = turns.id \
             WHERE turns.id = place.turn_id AND turns.status = 'running' AND lease.expires_at > {NOW_MS}))"
    )
});

/// Under the subject's lock: deletes its places that no longer count, counts the others (but
/// the session's own), and reserves the new place if they are fewer than the most allowed.
/// `$1` subject, `$2` session, `$3` place id, `$4` the most allowed, `$5` the reservation's
/// time to live in milliseconds. Returns the count.
static RESERVE_PLACE: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "WITH gone AS ( \
             DELETE FROM turn_places AS place WHERE place.subject_id = $1 AND NOT {counts} RETURNING place.id \
         ), counted AS ( \
             SELECT count(*) AS places FROM turn_places AS place \
             WHERE place.subject_id = $1 AND place.session_id <> $2 AND place.id NOT IN (SELECT id FROM gone) \
         ), reserved AS ( \
             INSERT INTO turn_places (id, subject_id, session_id, turn_id, expires_at) \
             SELECT $3, $1, $2, NULL, {NOW_MS} + $5 FROM counted WHERE places < $4 \
         ) \
         SELECT places FROM counted",
        counts = *PLACE_COUNTS
    )
});

#[async_trait]
impl UsageStore for PostgresStore {
    async fn take_request(&self, subject_id: &str, per_minute: u32) -> Result<RequestTaken> {
        let capacity = f64::from(per_minute.max(1));
        let (granted, tokens_left): (bool, f64) = on_connection!(self, |connection| async {
            sqlx::query_as(&TAKE_REQUEST)
                .bind(subject_id)
                .bind(capacity)
                .bind(capacity / 60_000.0)
                .fetch_one(connection)
                .await
                .map_err(error::backend)
        })?;
        Ok(RequestTaken { granted, tokens_left })
    }

    async fn forget_idle_requests(&self, idle: Duration) -> Result<u64> {
        let sql = format!("DELETE FROM request_buckets WHERE at_ms < {NOW_MS} - $1");
        let done = on_connection!(self, |connection| async {
            sqlx::query(&sql)
                .bind(lease_millis(idle))
                .execute(connection)
                .await
                .map_err(error::backend)
        })?;
        Ok(done.rows_affected())
    }

    async fn reserve_turn_place(&self, place: &TurnPlace, max: u32, ttl: Duration) -> Result<Option<u32>> {
        let counted: i64 = on_connection!(self, |connection| async {
            let mut transaction = connection.begin().await.map_err(error::backend)?;
            // Serialises the subject's reservations across replicas until the commit; the key
            // is a 64-bit hash of the subject in a space of this table's own.
            sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('teamster.turn_places:' || $1, 0))")
                .bind(&place.subject_id)
                .execute(&mut *transaction)
                .await
                .map_err(error::backend)?;
            let counted: i64 = sqlx::query_scalar(&RESERVE_PLACE)
                .bind(&place.subject_id)
                .bind(&place.session_id)
                .bind(&place.id)
                .bind(i64::from(max))
                .bind(lease_millis(ttl))
                .fetch_one(&mut *transaction)
                .await
                .map_err(error::on("turn place"))?;
            transaction.commit().await.map_err(error::backend)?;
            Ok(counted)
        })?;
        let counted = u32::try_from(counted).unwrap_or(u32::MAX);
        Ok((counted >= max).then_some(counted))
    }

    async fn bind_turn_place(&self, place_id: &str, turn_id: &str) -> Result<bool> {
        let done = on_connection!(self, |connection| async {
            sqlx::query("UPDATE turn_places SET turn_id = $2 WHERE id = $1")
                .bind(place_id)
                .bind(turn_id)
                .execute(connection)
                .await
                .map_err(error::backend)
        })?;
        Ok(done.rows_affected() > 0)
    }

    async fn release_turn_place(&self, place_id: &str) -> Result<bool> {
        let done =
            on_connection!(self, |connection| async {
                sqlx::query("DELETE FROM turn_places WHERE id = $1")
                    .bind(place_id)
                    .execute(connection)
                    .await
                    .map_err(error::backend)
            })?;
        Ok(done.rows_affected() > 0)
    }

    async fn add_tenant_spend(&self, tenant: &str, window: u64, added: Spend) -> Result<Spend> {
        let (tokens, cost_usd): (i64, f64) = on_connection!(self, |connection| async {
            sqlx::query_as(
                "WITH past AS ( \
                     DELETE FROM tenant_spend WHERE tenant = $1 AND window_number < $2 \
                 ) \
                 INSERT INTO tenant_spend AS spend (tenant, window_number, tokens, cost_usd) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (tenant, window_number) DO UPDATE SET \
                     tokens = spend.tokens + excluded.tokens, cost_usd = spend.cost_usd + excluded.cost_usd \
                 RETURNING tokens, cost_usd",
            )
            .bind(tenant)
            .bind(clamp_i64(window))
            .bind(clamp_i64(added.tokens))
            .bind(added.cost_usd)
            .fetch_one(connection)
            .await
            .map_err(error::backend)
        })?;
        Ok(Spend { tokens: u64::try_from(tokens).unwrap_or_default(), cost_usd })
    }

    async fn add_model_uses(&self, tenant: &str, model: &str, uses: u64) -> Result<()> {
        on_connection!(self, |connection| async {
            sqlx::query(ADD_MODEL_USES).bind(tenant).bind(model).bind(clamp_i64(uses)).execute(connection).await.map_err(error::backend)
        })?;
        Ok(())
    }

    async fn model_uses(&self, tenant: &str) -> Result<Vec<(String, u64)>> {
        let rows: Vec<(String, i64)> = on_connection!(self, |connection| async {
            sqlx::query_as(MODEL_USES).bind(tenant).fetch_all(connection).await.map_err(error::backend)
        })?;
        Ok(rows.into_iter().map(|(model, uses)| (model, u64::try_from(uses).unwrap_or_default())).collect())
    }
}
