//! PostgreSQL storage for Teamster: [`PostgresStore`] implements [`teamster_store::Store`] on a
//! PostgreSQL database with sqlx, for teams and for several replicas sharing one database.
//!
//! The store holds a small pool of connections of its own (`connections`), which costs no round
//! trip per use; a connection that failed, or whose caller was cancelled mid-call, is closed
//! rather than reused, and idle ones are checked after a failure. The schema is in
//! `migrations/` and is applied on connect; sqlx takes an advisory lock for it, so replicas
//! starting together migrate once.
//!
//! Every multi-row write is atomic: single statements (common table expressions that insert
//! and update together) where they can be, transactions elsewhere. `create_turn` compares and
//! sets the session's last turn with an `UPDATE ... WHERE last_turn_id IS NOT DISTINCT FROM`:
//! concurrent creates queue on the session's row lock and re-check the condition once the
//! winner commits, so exactly one wins, in one process or across replicas. The log write path
//! and its lock order are in `event_log`.
//!
//! Replicas learn of each other's writes through the change feed (`feed`): log writes, cancel
//! requests and setting writes send a notification in the statement that makes them, and
//! [`CoordinationStore::changes`] reads them on a LISTEN connection of its own.

/// Runs `$call`, a future of a store [`Result`] that uses `$connection` (a `&mut PgConnection`
/// taken from the store's pool), and hands the connection back with its outcome.
macro_rules! on_connection {
    ($store:expr, |$connection:ident| $call:expr) => {{
        let mut held = $store.connections.acquire().await?;
        let $connection: &mut sqlx::postgres::PgConnection = &mut held;
        let outcome = $call.await;
        held.release(outcome)
    }};
}

mod connections;
mod event_log;
mod files;
mod leases;
mod feed;
mod usage;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::migrate::Migrator;
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, Postgres};
use teamster_protocol::control::SessionControl;
use teamster_protocol::{AgentSpec, CancelReason};
use teamster_store::codec::{self, LogRows, TurnColumns, to_i64, to_json};
use teamster_store::{
    AgentRecord, ChangeFeed, ContentEvent, ContentQuery, Error, LogWrite, Result, SessionQuery,
    SessionFile, SessionRecord, StreamEvent, TurnRecord,
};
use teamster_store::{AgentStore, CoordinationStore, EventLog, SessionStore, SettingsStore};
use teamster_store::{ExpiredLease, QueueKind, QueuedMessage, ResourceRecord, TurnLease};
use teamster_store_sql::{Sql, error};

use crate::connections::Connections;

/// The schema, embedded at build time.
static MIGRATOR: Migrator = sqlx::migrate!();

/// The statements both backends share.
const SQL: Sql<Postgres> = Sql::new(leases::NOW_MS);

/// The URL query parameter that sets the pool size; it is not passed on to the server.
const POOL_SIZE_PARAMETER: &str = "pool_size";

/// How long a call waits for a pooled connection (and for the server to accept a new one)
/// before failing.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// Creates a turn, if and only if the session's last turn is the expected one, and makes it
/// the session's last turn: common table expressions whose `created` holds the new turn's id
/// (none when the compare-and-set failed). Parameters: `$1` to `$8` are the turn's columns,
/// `$9` the expected last turn, `$10` its control column. The turn gets an unclaimed lease
/// that its creator's first renewal claims.
static CREATE_TURN_CTES: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "swapped AS ( \
             UPDATE sessions SET last_turn_id = $1 WHERE id = $2 AND last_turn_id IS NOT DISTINCT FROM $9 RETURNING id \
         ), created AS ( \
             INSERT INTO turns (id, session_id, previous_turn_id, input, state, status, created_by, created_at, control) \
             SELECT $1, id, $3, $4, $5, $6, $7, $8, $10 FROM swapped RETURNING id \
         ), leased AS ( \
             INSERT INTO turn_leases (turn_id, owner, expires_at, claims) \
             SELECT id, NULL, {} + {}, 0 FROM created \
         )",
        leases::NOW_MS,
        codec::UNCLAIMED_LEASE_GRACE_MS
    )
});

/// [`CREATE_TURN_CTES`] alone. Returns whether the turn was created and whether the session
/// exists.
static CREATE_TURN: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!("WITH {} SELECT EXISTS (SELECT 1 FROM created), EXISTS (SELECT 1 FROM sessions WHERE id = $2)", *CREATE_TURN_CTES)
});

/// [`CREATE_TURN_CTES`] with the new turn's first stream and content rows (see
/// [`event_log::create_turn_with_rows`]).
static CREATE_TURN_WITH_ROWS: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| event_log::create_turn_with_rows(&CREATE_TURN_CTES));

/// How a [`PostgresStore`] connects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    /// The most connections the store opens at once.
    pub max_connections: u32,
}

impl Default for PoolConfig {
    fn default() -> PoolConfig {
        PoolConfig { max_connections: PoolConfig::DEFAULT_MAX_CONNECTIONS }
    }
}

impl PoolConfig {
    /// Enough for the group-commit writer, turn creation and concurrent readers of one
    /// replica, and small next to PostgreSQL's default limit of 100 connections.
    pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;
}

/// A Teamster store in PostgreSQL. Cloning is cheap and shares the connections and the change
/// feed.
#[derive(Clone)]
pub struct PostgresStore {
    connections: Arc<Connections>,
    /// The NOTIFY channel of the schema the store uses.
    channel: Arc<str>,
    /// The change feed, started by the first [`CoordinationStore::changes`] call.
    feed: Arc<feed::FeedSlot>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("PostgresStore").finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Creates a turn and its first writes (see [`TurnStore::create_turn`]). Returns whether
    /// the statement announced its session's change too (the one-statement form does).
    async fn insert_turn(
        &self,
        connection: &mut sqlx::postgres::PgConnection,
        turn: &TurnRecord,
        columns: TurnColumns,
        expected_last_turn_id: Option<&str>,
        writes: &LogRows<'_>,
    ) -> Result<bool> {
        // First writes without a turn state (`turn.created`) go in the same statement, its
        // own transaction, with the announcements of the turn's stream and of its session:
        // one round trip.
        if !event_log::needs_transaction(writes) {
            let query = SQL.new_turn(&CREATE_TURN_WITH_ROWS, turn, columns, expected_last_turn_id);
            let (created, session_exists, _announced, _session_announced): (bool, bool, i64, i64) =
                event_log::bind_first_rows(query, writes)
                    .bind(&*self.channel)
                    .fetch_one(&mut *connection)
                    .await
                    .map_err(error::on("turn"))?;
            return created_or_not(turn, session_exists, created).map(|()| true);
        }
        let mut transaction = connection.begin().await.map_err(error::backend)?;
        let (created, session_exists): (bool, bool) = SQL
            .new_turn(&CREATE_TURN, turn, columns, expected_last_turn_id)
            .fetch_one(&mut *transaction)
            .await
            .map_err(error::on("turn"))?;
        // Dropping the transaction without committing rolls it back (sqlx sends the
        // `ROLLBACK` ahead of the connection's next statement).
        created_or_not(turn, session_exists, created)?;
        event_log::write_batch(&mut transaction, writes, None, &self.channel).await?;
        transaction.commit().await.map_err(error::backend).map(|()| false)
    }

    /// Announces a committed change to `session_id` (see `feed`'s payloads), on the connection
    /// that wrote it. A failure loses only the wake-up (readers re-read on a timer of their
    /// own), so it is logged, never the write's error.
    async fn announce_session(
        &self,
        connection: &mut sqlx::postgres::PgConnection,
        session_id: &str,
        listed_for: Option<&str>,
    ) {
        let announced = sqlx::query("SELECT pg_notify($1, $2)")
            .bind(&*self.channel)
            .bind(feed::session_payload(session_id, listed_for))
            .execute(connection)
            .await;
        if let Err(error) = announced {
            tracing::warn!(session = %session_id, %error, "a session change could not be announced");
        }
    }

    /// Connects to the database at `url` (`postgres://user:password@host:port/database`, any
    /// libpq-style URL that sqlx accepts) and brings its schema up to date.
    ///
    /// An optional `pool_size=N` query parameter sets the pool's size (default
    /// [`PoolConfig::DEFAULT_MAX_CONNECTIONS`]). Errors never include the URL, which may hold a
    /// password.
    pub async fn connect(url: &str) -> Result<PostgresStore> {
        let (url, pool) = split_pool_config(url)?;
        PostgresStore::connect_with(&url, pool).await
    }

    /// Connects like [`PostgresStore::connect`], with an explicit pool configuration.
    pub async fn connect_with(url: &str, config: PoolConfig) -> Result<PostgresStore> {
        let options = PgConnectOptions::from_str(url)
            .map_err(|error| Error::Backend(format!("invalid PostgreSQL URL: {error}")))?;
        let mut first = tokio::time::timeout(ACQUIRE_TIMEOUT, options.connect())
            .await
            .map_err(|_| Error::Backend("timed out connecting to PostgreSQL".to_owned()))?
            .map_err(error::backend)?;
        MIGRATOR.run(&mut first).await.map_err(|error| Error::Backend(format!("migrating the schema: {error}")))?;
        let channel: Option<String> =
            sqlx::query_scalar(feed::CHANNEL_QUERY).fetch_optional(&mut first).await.map_err(error::backend)?;
        let channel: Arc<str> =
            channel.ok_or_else(|| Error::Backend("the connection has no current schema".to_owned()))?.into();
        tracing::debug!(max_connections = config.max_connections, "opened the PostgreSQL store");
        Ok(PostgresStore {
            connections: Arc::new(Connections::new(options.clone(), config.max_connections, first)),
            feed: Arc::new(feed::FeedSlot::new(options, channel.clone())),
            channel,
        })
    }

    /// Closes every connection and stops the change feed; the store fails every call
    /// afterwards.
    pub async fn close(&self) {
        self.feed.stop().await;
        self.connections.close().await;
    }

    /// The NOTIFY channel the store announces its changes on (`teamster_<schema oid>`).
    pub fn change_channel(&self) -> &str {
        &self.channel
    }

    /// Applies a batch of log writes, under `fence` if any, as one statement (see `event_log`).
    /// Returns the ids of the turns left out.
    async fn write_under(&self, fence: Option<&event_log::Fence<'_>>, batch: &[LogWrite]) -> Result<Vec<String>> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let rows = LogRows::new(batch)?;
        on_connection!(self, |connection| event_log::write_batch(connection, &rows, fence, &self.channel))
    }
}

#[async_trait]
impl AgentStore for PostgresStore {
    async fn create_agent(&self, agent: &AgentRecord) -> Result<()> {
        let spec = to_json(&agent.spec, "agent spec")?;
        let version = to_i64(agent.version, "agent version")?;
        let created_by = agent.created_by.as_ref().map(|subject| to_json(subject, "agent creator")).transpose()?;
        on_connection!(self, |connection| async {
            sqlx::query(
                "WITH agent AS ( \
                     INSERT INTO agents (id, name, latest_version, created_at, tenant, created_by) VALUES ($1, $2, $3, $4, $7, $8) RETURNING id \
                 ) \
                 INSERT INTO agent_versions (agent_id, version, spec, created_at) SELECT id, $3, $5, $6 FROM agent",
            )
            .bind(&agent.id)
            .bind(&agent.name)
            .bind(version)
            .bind(&agent.created_at)
            .bind(spec)
            .bind(&agent.updated_at)
            .bind(&agent.tenant)
            .bind(created_by.as_deref())
            .execute(connection)
            .await
            .map_err(error::on("agent"))
        })?;
        Ok(())
    }

    async fn add_agent_version(&self, agent_id: &str, spec: &AgentSpec, at: &str) -> Result<AgentRecord> {
        let spec_json = to_json(spec, "agent spec")?;
        // An unknown agent updates and inserts nothing and returns no row. Concurrent updates
        // queue on the agent's row, so each gets its own version number.
        let row: Option<codec::AddedVersionRow> = on_connection!(self, |connection| async {
            sqlx::query_as(
                "WITH bumped AS ( \
                     UPDATE agents SET latest_version = latest_version + 1 WHERE id = $1 \
                     RETURNING id, name, latest_version, created_at, tenant, created_by \
                 ), stored AS ( \
                     INSERT INTO agent_versions (agent_id, version, spec, created_at) \
                     SELECT id, latest_version, $2, $3 FROM bumped \
                 ) \
                 SELECT name, latest_version, created_at, tenant, created_by FROM bumped",
            )
            .bind(agent_id)
            .bind(spec_json)
            .bind(at)
            .fetch_optional(connection)
            .await
            .map_err(error::on("agent version"))
        })?;
        codec::added_version(agent_id, spec, at, row.ok_or(Error::NotFound("agent"))?)
    }

    async fn get_agent(&self, agent_id: &str) -> Result<AgentRecord> {
        on_connection!(self, |connection| SQL.get_agent(connection, agent_id))
    }

    async fn get_agent_by_name(&self, tenant: &str, name: &str) -> Result<AgentRecord> {
        on_connection!(self, |connection| SQL.get_agent_by_name(connection, tenant, name))
    }

    async fn get_agent_version(&self, agent_id: &str, version: u64) -> Result<AgentRecord> {
        on_connection!(self, |connection| SQL.get_agent_version(connection, agent_id, version))
    }

    async fn list_agents(&self) -> Result<Vec<AgentRecord>> {
        on_connection!(self, |connection| SQL.list_agents(connection))
    }

    async fn delete_agent(&self, agent_id: &str) -> Result<bool> {
        on_connection!(self, |connection| SQL.delete_agent(connection, agent_id))
    }
}

#[async_trait]
impl SessionStore for PostgresStore {
    async fn create_session(&self, session: &SessionRecord) -> Result<()> {
        on_connection!(self, |connection| async {
            SQL.create_session(&mut *connection, session).await?;
            self.announce_session(connection, &session.id, Some(&session.created_by.subject_id)).await;
            Ok(())
        })
    }

    async fn get_session(&self, session_id: &str) -> Result<SessionRecord> {
        on_connection!(self, |connection| SQL.get_session(connection, session_id))
    }

    async fn update_session_control(&self, session_id: &str, control: &SessionControl, at: &str) -> Result<()> {
        on_connection!(self, |connection| async {
            SQL.update_session_control(&mut *connection, session_id, control, at).await?;
            self.announce_session(connection, session_id, None).await;
            Ok(())
        })
    }

    async fn update_session(&self, session: &SessionRecord) -> Result<()> {
        // Locks its session alone (see `event_log` for the lock order).
        on_connection!(self, |connection| async {
            SQL.update_session(&mut *connection, session).await?;
            self.announce_session(connection, &session.id, Some(&session.created_by.subject_id)).await;
            Ok(())
        })
    }

    async fn delete_session(&self, session_id: &str) -> Result<bool> {
        // Locks the session, then cascades to its turns (see `event_log` for the lock order).
        on_connection!(self, |connection| async {
            let deleted: Option<(String,)> =
                sqlx::query_as("DELETE FROM sessions WHERE id = $1 RETURNING created_by_id")
                    .bind(session_id)
                    .fetch_optional(&mut *connection)
                    .await
                    .map_err(error::backend)?;
            let Some((created_by,)) = deleted else { return Ok(false) };
            self.announce_session(connection, session_id, Some(&created_by)).await;
            Ok(true)
        })
    }

    async fn list_sessions(&self, query: &SessionQuery) -> Result<Vec<SessionRecord>> {
        on_connection!(self, |connection| SQL.list_sessions(connection, query))
    }

    async fn list_resources(&self, created_by: &str, limit: u32) -> Result<Vec<ResourceRecord>> {
        on_connection!(self, |connection| SQL.list_resources(connection, created_by, limit))
    }

    async fn queue_message(&self, message: &QueuedMessage, max: u32) -> Result<bool> {
        on_connection!(self, |connection| async {
            let queued = SQL.queue_message(&mut *connection, message, max).await?;
            if queued {
                self.announce_session(connection, &message.session_id, None).await;
            }
            Ok(queued)
        })
    }

    async fn queued_messages(&self, session_id: &str, kind: QueueKind) -> Result<Vec<QueuedMessage>> {
        on_connection!(self, |connection| SQL.queued_messages(connection, session_id, kind))
    }

    async fn remove_queued(&self, session_id: &str, id: &str) -> Result<bool> {
        on_connection!(self, |connection| async {
            let removed = SQL.remove_queued(&mut *connection, session_id, id).await?;
            if removed {
                self.announce_session(connection, session_id, None).await;
            }
            Ok(removed)
        })
    }

    async fn queued_sessions(&self, limit: u32) -> Result<Vec<String>> {
        on_connection!(self, |connection| SQL.queued_sessions(connection, limit))
    }

    async fn sessions_with_queued(&self, session_ids: &[&str], kind: QueueKind) -> Result<Vec<String>> {
        if session_ids.is_empty() {
            return Ok(Vec::new());
        }
        let rows: Vec<(String,)> =
            on_connection!(self, |connection| async {
                sqlx::query_as("SELECT DISTINCT session_id FROM queued_messages WHERE session_id = ANY($1) AND kind = $2")
                    .bind(session_ids)
                    .bind(kind.as_str())
                    .fetch_all(connection)
                    .await
                    .map_err(error::backend)
            })?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }

    async fn put_file(&self, file: &SessionFile) -> Result<()> {
        on_connection!(self, |connection| files::put_file(connection, file))
    }

    async fn get_file(&self, session_id: &str, digest: &str) -> Result<SessionFile> {
        on_connection!(self, |connection| files::get_file(connection, session_id, digest))
    }
}

#[async_trait]
impl EventLog for PostgresStore {
    async fn create_turn(
        &self,
        turn: &TurnRecord,
        expected_last_turn_id: Option<&str>,
        initial_writes: &[LogWrite],
    ) -> Result<()> {
        let columns = TurnColumns::new(turn)?;
        let writes = LogRows::new(initial_writes)?;
        on_connection!(self, |connection| async {
            let announced = self.insert_turn(&mut *connection, turn, columns, expected_last_turn_id, &writes).await?;
            if !announced {
                self.announce_session(connection, &turn.session_id, None).await;
            }
            Ok(())
        })
    }

    async fn get_turn(&self, session_id: &str, turn_id: &str) -> Result<TurnRecord> {
        on_connection!(self, |connection| SQL.get_turn(connection, session_id, turn_id))
    }


    async fn running_turns(&self) -> Result<Vec<TurnRecord>> {
        on_connection!(self, |connection| SQL.running_turns(connection))
    }

    async fn oldest_turns(&self, session_id: &str, limit: u32) -> Result<Vec<TurnRecord>> {
        on_connection!(self, |connection| SQL.oldest_turns(connection, session_id, limit))
    }

    async fn write(&self, batch: &[LogWrite]) -> Result<()> {
        self.write_under(None, batch).await.map(drop)
    }

    async fn write_held(&self, owner: &str, leases: &[TurnLease], batch: &[LogWrite]) -> Result<Vec<String>> {
        self.write_under(Some(&event_log::Fence { owner, leases }), batch).await
    }

    async fn read_stream(&self, turn_id: &str, after: u64, limit: u32) -> Result<Vec<StreamEvent>> {
        on_connection!(self, |connection| SQL.read_stream(connection, turn_id, after, limit))
    }

    async fn last_sequence(&self, turn_id: &str) -> Result<u64> {
        on_connection!(self, |connection| SQL.last_sequence(connection, turn_id))
    }

    async fn read_content(&self, turn_id: &str, query: &ContentQuery) -> Result<Vec<ContentEvent>> {
        on_connection!(self, |connection| SQL.read_content(connection, turn_id, query))
    }

    async fn delete_expired_streams(&self, finished_before: &str, max_turns: u32) -> Result<u32> {
        on_connection!(self, |connection| leases::delete_expired_streams(connection, finished_before, max_turns))
    }
}

#[async_trait]
impl CoordinationStore for PostgresStore {
    async fn claim_turn(&self, turn_id: &str, owner: &str, ttl: Duration, expected_claims: u64) -> Result<Option<TurnLease>> {
        on_connection!(self, |connection| SQL.claim_turn(connection, turn_id, owner, ttl, expected_claims))
    }

    async fn renew_leases(&self, owner: &str, held: &[TurnLease], ttl: Duration) -> Result<Vec<String>> {
        on_connection!(self, |connection| leases::renew_leases(connection, owner, held, ttl))
    }

    async fn release_lease(&self, owner: &str, lease: &TurnLease) -> Result<bool> {
        on_connection!(self, |connection| SQL.release_lease(connection, owner, lease))
    }

    async fn expired_leases(&self, limit: u32) -> Result<Vec<ExpiredLease>> {
        on_connection!(self, |connection| SQL.expired_leases(connection, limit))
    }

    async fn request_cancel(&self, turn_id: &str, reason: CancelReason) -> Result<bool> {
        // A single row changes and nothing else is locked: this cannot take part in a deadlock.
        let recorded = on_connection!(self, |connection| async {
            sqlx::query(
                "WITH requested AS ( \
                     UPDATE turns SET cancel_requested = coalesce(cancel_requested, $2) \
                     WHERE id = $1 AND status = 'running' RETURNING id, cancel_requested \
                 ) \
                 SELECT pg_notify($3, 'c:' || cancel_requested || ':' || id) FROM requested",
            )
            .bind(turn_id)
            .bind(codec::cancel_reason_name(reason))
            .bind(&*self.channel)
            .execute(connection)
            .await
            .map_err(error::backend)
        })?;
        Ok(recorded.rows_affected() > 0)
    }

    async fn cancel_requests(&self, turn_ids: &[&str]) -> Result<Vec<(String, CancelReason)>> {
        if turn_ids.is_empty() {
            return Ok(Vec::new());
        }
        let rows: Vec<(String, String)> = on_connection!(self, |connection| async {
            sqlx::query_as(
                "SELECT id, cancel_requested FROM turns WHERE id = ANY($1) \
                 AND status = 'running' AND cancel_requested IS NOT NULL",
            )
            .bind(turn_ids)
            .fetch_all(connection)
            .await
            .map_err(error::backend)
        })?;
        rows.into_iter().map(|(id, reason)| Ok((id, codec::cancel_reason(&reason)?))).collect()
    }

    async fn changes(&self) -> Result<Option<ChangeFeed>> {
        self.feed.subscribe().await.map(Some)
    }
}

#[async_trait]
impl SettingsStore for PostgresStore {
    async fn put_setting(&self, kind: &str, name: &str, value: &str, at: &str) -> Result<()> {
        on_connection!(self, |connection| async {
            sqlx::query(
                "WITH stored AS ( \
                     INSERT INTO settings (kind, name, value, updated_at) VALUES ($1, $2, $3, $4) \
                     ON CONFLICT (kind, name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at \
                     RETURNING kind \
                 ) \
                 SELECT pg_notify($5, 's:' || kind) FROM stored",
            )
            .bind(kind)
            .bind(name)
            .bind(value)
            .bind(at)
            .bind(&*self.channel)
            .execute(connection)
            .await
            .map_err(error::backend)
        })?;
        Ok(())
    }

    async fn get_setting(&self, kind: &str, name: &str) -> Result<Option<String>> {
        on_connection!(self, |connection| SQL.get_setting(connection, kind, name))
    }

    async fn list_settings(&self, kind: &str) -> Result<Vec<(String, String)>> {
        on_connection!(self, |connection| SQL.list_settings(connection, kind))
    }

    async fn delete_setting(&self, kind: &str, name: &str) -> Result<bool> {
        let deleted = on_connection!(self, |connection| async {
            sqlx::query(
                "WITH deleted AS (DELETE FROM settings WHERE kind = $1 AND name = $2 RETURNING kind) \
                 SELECT pg_notify($3, 's:' || kind) FROM deleted",
            )
            .bind(kind)
            .bind(name)
            .bind(&*self.channel)
            .execute(connection)
            .await
            .map_err(error::backend)
        })?;
        Ok(deleted.rows_affected() > 0)
    }
}

/// The outcome of a create-turn statement: whether the session exists, and whether the turn was
/// created (its compare-and-set succeeded).
fn created_or_not(turn: &TurnRecord, session_exists: bool, created: bool) -> Result<()> {
    match (session_exists, created) {
        (false, _) => Err(Error::NotFound("session")),
        (true, false) => {
            Err(Error::Conflict(format!("the last turn of session {} is not the expected one", turn.session_id)))
        }
        (true, true) => Ok(()),
    }
}

/// Takes the `pool_size` parameter out of a URL: returns the URL without it (sqlx would warn
/// about a parameter it does not know) and the pool configuration it sets.
fn split_pool_config(url: &str) -> Result<(String, PoolConfig)> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), PoolConfig::default()));
    };
    let mut config = PoolConfig::default();
    let mut kept = Vec::new();
    for parameter in query.split('&') {
        match parameter.split_once('=') {
            Some((POOL_SIZE_PARAMETER, value)) => {
                config.max_connections = value.parse().ok().filter(|&size| size > 0).ok_or_else(|| {
                    Error::Backend(format!("{POOL_SIZE_PARAMETER} must be a positive integer, got {value:?}"))
                })?;
            }
            _ => kept.push(parameter),
        }
    }
    let url = if kept.is_empty() { base.to_owned() } else { format!("{base}?{}", kept.join("&")) };
    Ok((url, config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_bad_url_fails_without_showing_the_password() {
        let failed = PostgresStore::connect("postgres://app:hunter2@db:not-a-port/teamster").await;
        match failed {
            Err(Error::Backend(message)) => assert!(!message.contains("hunter2"), "{message}"),
            other => panic!("expected a Backend error, got {other:?}"),
        }
    }

    #[test]
    fn pool_size_comes_out_of_the_url() {
        let split = |url: &str| split_pool_config(url).expect("a valid URL");
        let default = PoolConfig::default();
        assert_eq!(split("postgres://db/x"), ("postgres://db/x".to_owned(), default));
        assert_eq!(
            split("postgres://db/x?pool_size=3"),
            ("postgres://db/x".to_owned(), PoolConfig { max_connections: 3 })
        );
        assert_eq!(
            split("postgres://db/x?sslmode=disable&pool_size=25&application_name=t"),
            ("postgres://db/x?sslmode=disable&application_name=t".to_owned(), PoolConfig { max_connections: 25 })
        );
        assert_eq!(split("postgres://db/x?sslmode=disable"), ("postgres://db/x?sslmode=disable".to_owned(), default));
        for bad in ["postgres://db/x?pool_size=0", "postgres://db/x?pool_size=many", "postgres://db/x?pool_size="] {
            assert!(matches!(split_pool_config(bad), Err(Error::Backend(_))), "{bad}");
        }
    }
}
