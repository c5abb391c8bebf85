//! The counters of the operator's limits ([`UsageStore`]) in SQLite. One process uses a SQLite
//! store, and every write goes through its one writer connection, so each call is one command
//! on the writer and needs no lock of its own.

use std::time::Duration;

use async_trait::async_trait;
use teamster_store::codec::{clamp_i64, lease_millis};
use teamster_store::{RequestTaken, Result, Spend, TurnPlace, UsageStore};
use teamster_store_sql::{ADD_MODEL_USES, MODEL_USES, error};

use crate::SqliteStore;
use crate::leases::NOW_MS;

/// Takes a token of a subject's bucket. `$1` the subject, `$2` the capacity, `$3` tokens
/// gained per millisecond.
static TAKE_REQUEST: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let refilled = format!("min($2, request_buckets.tokens + max(0, {NOW_MS} - request_buckets.at_ms) * $3)");
    format!(
        "INSERT INTO request_buckets (subject_id, tokens, at_ms, granted) VALUES ($1, $2 - 1, {NOW_MS}, 1) \
         ON CONFLICT (subject_id) DO UPDATE SET \
             tokens = CASE WHEN {refilled} >= 1 THEN {refilled} - 1 ELSE {refilled} END, \
             granted = {refilled} >= 1, \
             at_ms = max(request_buckets.at_ms, {NOW_MS}) \
         RETURNING granted, tokens"
    )
});

/// Deletes a subject's places that no longer count, then reserves the new place if the others
/// (but the session's own) are fewer than the most allowed, and answers how many there were.
/// `$1` subject, `$2` session, `$3` place id, `$4` the most allowed, `$5` the reservation's
/// time to live in milliseconds.
static RESERVE_PLACE: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "BEGIN IMMEDIATE; \
         DELETE FROM turn_places AS place WHERE place.subject_id = $1 AND NOT \
             ((place.turn_id IS NULL AND place.expires_at > {NOW_MS}) OR EXISTS ( \
                 SELECT 1 FROM turns JOIN turn_leases AS lease ON lease.turn_id = turns.id \
                 WHERE turns.id = place.turn_id AND turns.status = 'running' AND lease.expires_at > {NOW_MS})); \
         INSERT INTO turn_places (id, subject_id, session_id, turn_id, expires_at) \
         SELECT $3, $1, $2, NULL, {NOW_MS} + $5 \
         WHERE (SELECT count(*) FROM turn_places WHERE subject_id = $1 AND session_id <> $2) < $4; \
         SELECT count(*) FROM turn_places WHERE subject_id = $1 AND session_id <> $2 AND id <> $3; \
         COMMIT;"
    )
});

#[async_trait]
impl UsageStore for SqliteStore {
    async fn take_request(&self, subject_id: &str, per_minute: u32) -> Result<RequestTaken> {
        let capacity = f64::from(per_minute.max(1));
        let mut writer = self.connections.write().await?;
        let (granted, tokens_left): (bool, f64) = sqlx::query_as(&TAKE_REQUEST)
            .bind(subject_id)
            .bind(capacity)
            .bind(capacity / 60_000.0)
            .fetch_one(writer.connection()?)
            .await
            .map_err(error::backend)?;
        Ok(RequestTaken { granted, tokens_left })
    }

    async fn forget_idle_requests(&self, idle: Duration) -> Result<u64> {
        let sql = format!("DELETE FROM request_buckets WHERE at_ms < {NOW_MS} - $1");
        let mut writer = self.connections.write().await?;
        let done = sqlx::query(&sql).bind(lease_millis(idle)).execute(writer.connection()?).await.map_err(error::backend)?;
        Ok(done.rows_affected())
    }

    async fn reserve_turn_place(&self, place: &TurnPlace, max: u32, ttl: Duration) -> Result<Option<u32>> {
        let mut writer = self.connections.write().await?;
        let outcome = sqlx::query_scalar::<_, i64>(&RESERVE_PLACE)
            .bind(&place.subject_id)
            .bind(&place.session_id)
            .bind(&place.id)
            .bind(i64::from(max))
            .bind(lease_millis(ttl))
            .fetch_all(writer.begin()?)
            .await;
        let counted = writer.settle(outcome, error::on("turn place")).await?.into_iter().next().unwrap_or_default();
        let counted = u32::try_from(counted).unwrap_or(u32::MAX);
        Ok((counted >= max).then_some(counted))
    }

    async fn bind_turn_place(&self, place_id: &str, turn_id: &str) -> Result<bool> {
        let mut writer = self.connections.write().await?;
        let done = sqlx::query("UPDATE turn_places SET turn_id = $2 WHERE id = $1")
            .bind(place_id)
            .bind(turn_id)
            .execute(writer.connection()?)
            .await
            .map_err(error::backend)?;
        Ok(done.rows_affected() > 0)
    }

    async fn release_turn_place(&self, place_id: &str) -> Result<bool> {
        let mut writer = self.connections.write().await?;
        let done = sqlx::query("DELETE FROM turn_places WHERE id = $1")
            .bind(place_id)
            .execute(writer.connection()?)
            .await
            .map_err(error::backend)?;
        Ok(done.rows_affected() > 0)
    }

    async fn add_tenant_spend(&self, tenant: &str, window: u64, added: Spend) -> Result<Spend> {
        let mut writer = self.connections.write().await?;
        let outcome = sqlx::query_as::<_, (i64, f64)>(
            "BEGIN IMMEDIATE; \
             DELETE FROM tenant_spend WHERE tenant = $1 AND window_number < $2; \
             INSERT INTO tenant_spend (tenant, window_number, tokens, cost_usd) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (tenant, window_number) DO UPDATE SET \
                 tokens = tokens + excluded.tokens, cost_usd = cost_usd + excluded.cost_usd \
             RETURNING tokens, cost_usd; \
             COMMIT;",
        )
        .bind(tenant)
        .bind(clamp_i64(window))
        .bind(clamp_i64(added.tokens))
        .bind(added.cost_usd)
        .fetch_all(writer.begin()?)
        .await;
        let rows = writer.settle(outcome, error::backend).await?;
        let (tokens, cost_usd) = rows.into_iter().next().unwrap_or_default();
        Ok(Spend { tokens: u64::try_from(tokens).unwrap_or_default(), cost_usd })
    }

    async fn add_model_uses(&self, tenant: &str, model: &str, uses: u64) -> Result<()> {
        let mut writer = self.connections.write().await?;
        sqlx::query(ADD_MODEL_USES).bind(tenant).bind(model).bind(clamp_i64(uses)).execute(writer.connection()?).await.map_err(error::backend)?;
        Ok(())
    }

    async fn model_uses(&self, tenant: &str) -> Result<Vec<(String, u64)>> {
        let rows: Vec<(String, i64)> = sqlx::query_as(MODEL_USES)
            .bind(tenant)
            .fetch_all(&mut *self.connections.read().await?)
            .await
            .map_err(error::backend)?;
        Ok(rows.into_iter().map(|(model, uses)| (model, u64::try_from(uses).unwrap_or_default())).collect())
    }
}
