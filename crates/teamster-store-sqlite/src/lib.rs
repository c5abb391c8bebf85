//! SQLite storage for Teamster: [`SqliteStore`] implements [`teamster_store::Store`] on one
//! database file, or on an in-memory database for tests, with sqlx, and with rusqlite for the
//! statements of the turn path.
//!
//! All writes go through one writer, so writers queue on a lock instead of contending for
//! SQLite's write lock and sleeping in its busy handler; reads go through a few more
//! connections that WAL mode lets run beside the writer (see `connections`). An in-memory
//! database lives only as long as its connections, so the store's connections reach it by name
//! through a shared cache, and its writer serves reads too. The schema is in `migrations/` and
//! is applied on connect.
//!
//! Every sqlx call costs round trips to the worker thread of its connection, which are
//! expensive next to the SQL itself, so each sqlx write is one command where it can be: the
//! transaction, its statements and the commit go together. The calls every turn makes (its
//! session and agent, its creation and its log batches) skip the worker threads altogether and
//! run on the calling thread (see `direct`); a log batch of any size is three JSON parameters
//! (see `event_log`).

mod connections;
mod direct;
mod event_log;
mod leases;
mod usage;

use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::str::FromStr;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::types::ToSql;
use sqlx::migrate::Migrator;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use sqlx::{ConnectOptions, Sqlite};
use teamster_protocol::control::SessionControl;
use teamster_protocol::{AgentSpec, CancelReason};
use teamster_store::codec::{self, TurnColumns, to_i64, to_json};
use teamster_store::{
    AgentRecord, ChangeFeed, ContentEvent, ContentQuery, Error, LogWrite, Result, SessionFile, SessionQuery,
    SessionRecord, StreamEvent, TurnRecord,
};
use teamster_store::{AgentStore, CoordinationStore, EventLog, SessionStore, SettingsStore};
use teamster_store::{ExpiredLease, QueueKind, QueuedMessage, ResourceRecord, TurnLease};
use teamster_store_sql::{Sql, agent_query, error, session_query};

use crate::connections::Connections;
use crate::direct::Target;

/// The schema, embedded at build time.
static MIGRATOR: Migrator = sqlx::migrate!();

/// The statements both backends share.
const SQL: Sql<Sqlite> = Sql::new(leases::NOW_MS);

/// How long a statement waits for a lock held by another process before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The most read connections of a file database.
const MAX_READERS: usize = 4;

/// Creates a turn, with its initial log writes, if and only if the session's last turn is the
/// expected one, in one transaction on the direct writer.
///
/// Parameters: `$1` to `$8` are the turn's columns, `$9` the expected last turn, `$10` its
/// control column, `$11` to `$13` the encoded writes. The compare-and-set is the `UPDATE`; when it matches no row,
/// `changes()` is 0 and the `INSERT` gets a NULL id, so the command stops at a NOT NULL
/// violation before anything else runs, and the caller rolls back. The turn gets an unclaimed
/// lease that its creator's first renewal claims.
static CREATE_TURN: LazyLock<Vec<String>> = LazyLock::new(|| {
    let mut statements = vec![
        "UPDATE sessions SET last_turn_id = $1 WHERE id = $2 AND last_turn_id IS $9".to_owned(),
        "INSERT INTO turns (id, session_id, previous_turn_id, input, state, status, created_by, created_at, control) \
         SELECT CASE WHEN changes() = 1 THEN $1 END, $2, $3, $4, $5, $6, $7, $8, $10"
            .to_owned(),
        format!(
            "INSERT INTO turn_leases (turn_id, owner, expires_at, claims) VALUES ($1, NULL, {} + {}, 0)",
            leases::NOW_MS,
            codec::UNCLAIMED_LEASE_GRACE_MS
        ),
    ];
    statements.extend(event_log::log_statements(11, None));
    statements
});

/// One session, and the latest version of one agent, by id: the shared queries, on a direct
/// connection.
static GET_SESSION: LazyLock<String> = LazyLock::new(session_query);
static GET_AGENT: LazyLock<String> = LazyLock::new(|| agent_query("agents.id = $1", false));

/// A Teamster store in SQLite. Cloning is cheap and shares the connections.
#[derive(Clone)]
pub struct SqliteStore {
    connections: Arc<Connections>,
    /// The exclusive lock on `<database>.lock` that keeps a second process off a database file
    /// (one process writes a SQLite store; several replicas need PostgreSQL). Released when the
    /// last clone of the store is dropped, on `close`, or when the process ends.
    lock: Arc<std::sync::Mutex<Option<std::fs::File>>>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("SqliteStore").finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens (creating if missing) the database at `url_or_path` and brings its schema up to
    /// date.
    ///
    /// Accepts `sqlite://PATH` (any sqlx SQLite URL), a bare file path, and `sqlite::memory:`
    /// for a private in-memory database. A missing file and its parent directories are
    /// created. File databases use WAL journaling with `synchronous=NORMAL`.
    pub async fn connect(url_or_path: &str) -> Result<SqliteStore> {
        // A bare `:memory:` would give every connection a database of its own.
        let url_or_path = if url_or_path == ":memory:" { "sqlite::memory:" } else { url_or_path };
        let options = if url_or_path.starts_with("sqlite:") {
            SqliteConnectOptions::from_str(url_or_path)
                .map_err(|error| Error::Backend(format!("invalid SQLite URL {url_or_path:?}: {error}")))?
        } else {
            SqliteConnectOptions::new().filename(url_or_path)
        };
        let options = options.foreign_keys(true).busy_timeout(BUSY_TIMEOUT).synchronous(SqliteSynchronous::Normal);
        let in_memory = is_in_memory(url_or_path);
        // An in-memory database is reached by name through a shared cache, so that the direct
        // connections find the one the sqlx connection made; the name is this store's own.
        let options = if in_memory {
            static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let number = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            options.filename(format!("file:teamster-memory-{number}")).in_memory(true).shared_cache(true)
        } else {
            options
        };
        let path = options.get_filename().to_owned();

        let (writer_options, readers, lock) = if in_memory {
            (options.clone(), 0, None)
        } else {
            create_parent_directory(&path)?;
            let lock = lock_database(&path)?;
            create_private_file(&path)?;
            (options.clone().create_if_missing(true).journal_mode(SqliteJournalMode::Wal), MAX_READERS, Some(lock))
        };
        // Overwritten and deleted content is zeroed where that costs no extra I/O, so that an
        // overwritten secret does not linger in a page.
        let writer_options = writer_options.pragma("secure_delete", "FAST");
        let mut writer = writer_options.connect().await.map_err(error::backend)?;
        MIGRATOR
            .run(&mut writer)
            .await
            .map_err(|error| Error::Backend(format!("migrating the schema: {error}")))?;
        // Readers open after the writer has created the file and switched it to WAL (a lasting
        // property of the file); `query_only` guards the one-writer rule.
        let reader_options = options.pragma("query_only", "ON");
        tracing::debug!(path = %path.display(), "opened the SQLite store");
        let target = Target { path, in_memory };
        Ok(SqliteStore {
            connections: Arc::new(Connections::new(writer, readers, reader_options, target)?),
            lock: Arc::new(std::sync::Mutex::new(lock)),
        })
    }

    /// Closes every connection and releases the database file; the store fails every call
    /// afterwards.
    pub async fn close(&self) {
        self.connections.close().await;
        self.lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    }

    /// Applies a batch of log writes in one command, under `fence` (an owner and the leases it
    /// holds) if any. Returns the ids of the turns left out.
    async fn write_under(&self, fence: Option<(&str, &[TurnLease])>, batch: &[LogWrite]) -> Result<Vec<String>> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let writes = event_log::encode(batch)?;
        let leases = fence.map(|(_, leases)| event_log::encode_leases(leases)).transpose()?;
        let owner = fence.map(|(owner, _)| owner.to_owned());
        let statements = &event_log::WRITE_BATCH[usize::from(fence.is_some())];
        let apply = move |direct: &mut direct::DirectConnection| {
            let mut arguments: Vec<&dyn ToSql> = vec![&writes.stream, &writes.content, &writes.states, &writes.turns];
            if let (Some(owner), Some(leases)) = (&owner, &leases) {
                arguments.extend([owner as &dyn ToSql, leases]);
            }
            direct.transaction(statements, &arguments).map_err(direct::backend)
        };
        // One turn's batch (every batch of sequential turns) runs here; a batch of several
        // turns' events, under load, on a blocking thread, so that the runtime serves the
        // turns meanwhile.
        let left_out = if writes.turn_count <= 1 {
            apply(self.connections.write().await?.direct()?)?
        } else {
            let mut writer = self.connections.write_direct_owned().await?;
            let task = tokio::task::spawn_blocking(move || apply(writer.direct()?));
            task.await.map_err(|error| Error::Backend(format!("the log batch's thread failed: {error}")))??
        };
        self.committed();
        Ok(left_out)
    }

    /// Starts a checkpoint in the background when the direct writer's commits call for one.
    fn committed(&self) {
        if self.connections.count_commit() {
            let connections = self.connections.clone();
            tokio::spawn(async move { connections.checkpoint().await });
        }
    }
}

#[async_trait]
impl AgentStore for SqliteStore {
    async fn create_agent(&self, agent: &AgentRecord) -> Result<()> {
        let spec = to_json(&agent.spec, "agent spec")?;
        let version = to_i64(agent.version, "agent version")?;
        let created_by = agent.created_by.as_ref().map(|subject| to_json(subject, "agent creator")).transpose()?;
        let mut writer = self.connections.write().await?;
        let outcome = sqlx::query(
            "BEGIN IMMEDIATE; \
             INSERT INTO agents (id, name, latest_version, created_at, tenant, created_by) VALUES ($1, $2, $3, $4, $7, $8); \
             INSERT INTO agent_versions (agent_id, version, spec, created_at) VALUES ($1, $3, $5, $6); \
             COMMIT;",
        )
        .bind(&agent.id)
        .bind(&agent.name)
        .bind(version)
        .bind(&agent.created_at)
        .bind(spec)
        .bind(&agent.updated_at)
        .bind(&agent.tenant)
        .bind(created_by.as_deref())
        .execute(writer.begin()?)
        .await;
        writer.settle(outcome, error::on("agent")).await.map(drop)
    }

    async fn add_agent_version(&self, agent_id: &str, spec: &AgentSpec, at: &str) -> Result<AgentRecord> {
        let spec_json = to_json(spec, "agent spec")?;
        let mut writer = self.connections.write().await?;
        // An unknown agent updates and inserts nothing and returns no row.
        let outcome = sqlx::query_as::<_, codec::AddedVersionRow>(
            "BEGIN IMMEDIATE; \
             UPDATE agents SET latest_version = latest_version + 1 WHERE id = $1 \
             RETURNING name, latest_version, created_at, tenant, created_by; \
             INSERT INTO agent_versions (agent_id, version, spec, created_at) \
             SELECT id, latest_version, $2, $3 FROM agents WHERE id = $1; \
             COMMIT;",
        )
        .bind(agent_id)
        .bind(spec_json)
        .bind(at)
        .fetch_all(writer.begin()?)
        .await;
        let rows = writer.settle(outcome, error::on("agent version")).await?;
        codec::added_version(agent_id, spec, at, rows.into_iter().next().ok_or(Error::NotFound("agent"))?)
    }

    async fn get_agent(&self, agent_id: &str) -> Result<AgentRecord> {
        let read = |reader: &mut direct::DirectConnection| reader.query_row(&GET_AGENT, &[&agent_id], direct::agent_row);
        let row = self.connections.read_direct(|reader| read(reader).map_err(direct::backend)).await?;
        codec::agent(row.ok_or(Error::NotFound("agent"))?)
    }

    async fn get_agent_by_name(&self, tenant: &str, name: &str) -> Result<AgentRecord> {
        SQL.get_agent_by_name(&mut *self.connections.read().await?, tenant, name).await
    }

    async fn get_agent_version(&self, agent_id: &str, version: u64) -> Result<AgentRecord> {
        SQL.get_agent_version(&mut *self.connections.read().await?, agent_id, version).await
    }

    async fn list_agents(&self) -> Result<Vec<AgentRecord>> {
        SQL.list_agents(&mut *self.connections.read().await?).await
    }

    async fn delete_agent(&self, agent_id: &str) -> Result<bool> {
        SQL.delete_agent(self.connections.write().await?.connection()?, agent_id).await
    }
}

#[async_trait]
impl SessionStore for SqliteStore {
    async fn create_session(&self, session: &SessionRecord) -> Result<()> {
        SQL.create_session(self.connections.write().await?.connection()?, session).await
    }

    async fn get_session(&self, session_id: &str) -> Result<SessionRecord> {
        let read =
            |reader: &mut direct::DirectConnection| reader.query_row(&GET_SESSION, &[&session_id], direct::session_row);
        let row = self.connections.read_direct(|reader| read(reader).map_err(direct::backend)).await?;
        codec::session(row.ok_or(Error::NotFound("session"))?)
    }

    async fn update_session_control(&self, session_id: &str, control: &SessionControl, at: &str) -> Result<()> {
        SQL.update_session_control(self.connections.write().await?.connection()?, session_id, control, at).await
    }

    async fn update_session(&self, session: &SessionRecord) -> Result<()> {
        SQL.update_session(self.connections.write().await?.connection()?, session).await
    }

    async fn delete_session(&self, session_id: &str) -> Result<bool> {
        SQL.delete_session(self.connections.write().await?.connection()?, session_id).await
    }

    async fn list_sessions(&self, query: &SessionQuery) -> Result<Vec<SessionRecord>> {
        SQL.list_sessions(&mut *self.connections.read().await?, query).await
    }

    async fn list_resources(&self, created_by: &str, limit: u32) -> Result<Vec<ResourceRecord>> {
        SQL.list_resources(&mut *self.connections.read().await?, created_by, limit).await
    }

    async fn queue_message(&self, message: &QueuedMessage, max: u32) -> Result<bool> {
        SQL.queue_message(self.connections.write().await?.connection()?, message, max).await
    }

    async fn queued_messages(&self, session_id: &str, kind: QueueKind) -> Result<Vec<QueuedMessage>> {
        SQL.queued_messages(&mut *self.connections.read().await?, session_id, kind).await
    }

    async fn remove_queued(&self, session_id: &str, id: &str) -> Result<bool> {
        SQL.remove_queued(self.connections.write().await?.connection()?, session_id, id).await
    }

    async fn queued_sessions(&self, limit: u32) -> Result<Vec<String>> {
        SQL.queued_sessions(&mut *self.connections.read().await?, limit).await
    }

    async fn sessions_with_queued(&self, session_ids: &[&str], kind: QueueKind) -> Result<Vec<String>> {
        if session_ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids = to_json(session_ids, "session ids")?;
        let rows: Vec<(String,)> = sqlx::query_as(
            "SELECT DISTINCT session_id FROM queued_messages WHERE session_id IN (SELECT value FROM json_each($1)) AND kind = $2",
        )
        .bind(ids)
        .bind(kind.as_str())
        .fetch_all(&mut *self.connections.read().await?)
        .await
        .map_err(error::backend)?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }

    async fn put_file(&self, file: &SessionFile) -> Result<()> {
        let mut writer = self.connections.write().await?;
        let inserted = sqlx::query(
            "INSERT INTO session_files (session_id, digest, media_type, data, created_at) \
             SELECT id, $2, $3, $4, $5 FROM sessions WHERE id = $1 \
             ON CONFLICT (session_id, digest) DO NOTHING",
        )
        .bind(&file.session_id)
        .bind(&file.digest)
        .bind(&file.media_type)
        .bind(&file.data)
        .bind(&file.created_at)
        .execute(writer.connection()?)
        .await
        .map_err(error::backend)?;
        if inserted.rows_affected() == 0 {
            // Either the file was there already, or there is no such session.
            let session: Option<(String,)> = sqlx::query_as("SELECT id FROM sessions WHERE id = $1")
                .bind(&file.session_id)
                .fetch_optional(writer.connection()?)
                .await
                .map_err(error::backend)?;
            if session.is_none() {
                return Err(Error::NotFound("session"));
            }
        }
        Ok(())
    }

    async fn get_file(&self, session_id: &str, digest: &str) -> Result<SessionFile> {
        let mut reader = self.connections.read().await?;
        let row: Option<(String, Vec<u8>, String)> = sqlx::query_as(
            "SELECT media_type, data, created_at FROM session_files WHERE session_id = $1 AND digest = $2",
        )
        .bind(session_id)
        .bind(digest)
        .fetch_optional(&mut *reader)
        .await
        .map_err(error::backend)?;
        let (media_type, data, created_at) = row.ok_or(Error::NotFound("file"))?;
        Ok(SessionFile { session_id: session_id.to_owned(), digest: digest.to_owned(), media_type, data, created_at })
    }
}

#[async_trait]
impl EventLog for SqliteStore {
    async fn create_turn(
        &self,
        turn: &TurnRecord,
        expected_last_turn_id: Option<&str>,
        initial_writes: &[LogWrite],
    ) -> Result<()> {
        let columns = TurnColumns::new(turn)?;
        let writes = event_log::encode(initial_writes)?;
        let mut writer = self.connections.write().await?;
        let arguments: [&dyn ToSql; 13] = [
            &turn.id,
            &turn.session_id,
            &turn.previous_turn_id,
            &columns.input,
            &columns.state,
            &columns.status,
            &columns.created_by,
            &turn.created_at,
            &expected_last_turn_id,
            &columns.control,
            &writes.stream,
            &writes.content,
            &writes.states,
        ];
        let direct = writer.direct()?;
        match direct.transaction::<String>(&CREATE_TURN, &arguments) {
            Ok(_) => {
                self.committed();
                return Ok(());
            }
            Err(error) if !direct::is_not_null_violation(&error) => return Err(direct::on("turn")(error)),
            Err(_) => {}
        }
        let session = direct.query_row("SELECT 1 FROM sessions WHERE id = $1", &[&turn.session_id], |_| Ok(()));
        Err(match session.map_err(direct::backend)? {
            Some(()) => Error::Conflict(format!("the last turn of session {} is not the expected one", turn.session_id)),
            None => Error::NotFound("session"),
        })
    }

    async fn get_turn(&self, session_id: &str, turn_id: &str) -> Result<TurnRecord> {
        SQL.get_turn(&mut *self.connections.read().await?, session_id, turn_id).await
    }

    async fn running_turns(&self) -> Result<Vec<TurnRecord>> {
        SQL.running_turns(&mut *self.connections.read().await?).await
    }

    async fn oldest_turns(&self, session_id: &str, limit: u32) -> Result<Vec<TurnRecord>> {
        SQL.oldest_turns(&mut *self.connections.read().await?, session_id, limit).await
    }

    async fn write(&self, batch: &[LogWrite]) -> Result<()> {
        self.write_under(None, batch).await.map(drop)
    }

    async fn write_held(&self, owner: &str, leases: &[TurnLease], batch: &[LogWrite]) -> Result<Vec<String>> {
        self.write_under(Some((owner, leases)), batch).await
    }

    async fn read_stream(&self, turn_id: &str, after: u64, limit: u32) -> Result<Vec<StreamEvent>> {
        SQL.read_stream(&mut *self.connections.read().await?, turn_id, after, limit).await
    }

    async fn last_sequence(&self, turn_id: &str) -> Result<u64> {
        SQL.last_sequence(&mut *self.connections.read().await?, turn_id).await
    }

    async fn read_content(&self, turn_id: &str, query: &ContentQuery) -> Result<Vec<ContentEvent>> {
        SQL.read_content(&mut *self.connections.read().await?, turn_id, query).await
    }

    async fn delete_expired_streams(&self, finished_before: &str, max_turns: u32) -> Result<u32> {
        leases::delete_expired_streams(&self.connections, finished_before, max_turns).await
    }
}

#[async_trait]
impl CoordinationStore for SqliteStore {
    async fn claim_turn(&self, turn_id: &str, owner: &str, ttl: Duration, expected_claims: u64) -> Result<Option<TurnLease>> {
        SQL.claim_turn(self.connections.write().await?.connection()?, turn_id, owner, ttl, expected_claims).await
    }

    async fn renew_leases(&self, owner: &str, held: &[TurnLease], ttl: Duration) -> Result<Vec<String>> {
        leases::renew_leases(&self.connections, owner, held, ttl).await
    }

    async fn release_lease(&self, owner: &str, lease: &TurnLease) -> Result<bool> {
        SQL.release_lease(self.connections.write().await?.connection()?, owner, lease).await
    }

    async fn expired_leases(&self, limit: u32) -> Result<Vec<ExpiredLease>> {
        SQL.expired_leases(&mut *self.connections.read().await?, limit).await
    }

    async fn request_cancel(&self, turn_id: &str, reason: CancelReason) -> Result<bool> {
        let mut writer = self.connections.write().await?;
        let recorded = sqlx::query(
            "UPDATE turns SET cancel_requested = coalesce(cancel_requested, $2) WHERE id = $1 AND status = 'running'",
        )
        .bind(turn_id)
        .bind(codec::cancel_reason_name(reason))
        .execute(writer.connection()?)
        .await
        .map_err(error::backend)?;
        Ok(recorded.rows_affected() > 0)
    }

    async fn cancel_requests(&self, turn_ids: &[&str]) -> Result<Vec<(String, CancelReason)>> {
        if turn_ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids = to_json(turn_ids, "turn ids")?;
        let mut reader = self.connections.read().await?;
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT id, cancel_requested FROM turns WHERE id IN (SELECT value FROM json_each($1)) \
             AND status = 'running' AND cancel_requested IS NOT NULL",
        )
        .bind(ids)
        .fetch_all(&mut *reader)
        .await
        .map_err(error::backend)?;
        rows.into_iter().map(|(id, reason)| Ok((id, codec::cancel_reason(&reason)?))).collect()
    }

    /// One process owns a SQLite database and sees every change itself: there is no feed.
    async fn changes(&self) -> Result<Option<ChangeFeed>> {
        Ok(None)
    }
}

#[async_trait]
impl SettingsStore for SqliteStore {
    async fn put_setting(&self, kind: &str, name: &str, value: &str, at: &str) -> Result<()> {
        let mut writer = self.connections.write().await?;
        sqlx::query(
            "INSERT INTO settings (kind, name, value, updated_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (kind, name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
        )
        .bind(kind)
        .bind(name)
        .bind(value)
        .bind(at)
        .execute(writer.connection()?)
        .await
        .map_err(error::backend)?;
        Ok(())
    }

    async fn get_setting(&self, kind: &str, name: &str) -> Result<Option<String>> {
        SQL.get_setting(&mut *self.connections.read().await?, kind, name).await
    }

    async fn list_settings(&self, kind: &str) -> Result<Vec<(String, String)>> {
        SQL.list_settings(&mut *self.connections.read().await?, kind).await
    }

    async fn delete_setting(&self, kind: &str, name: &str) -> Result<bool> {
        let mut writer = self.connections.write().await?;
        let deleted = sqlx::query("DELETE FROM settings WHERE kind = $1 AND name = $2")
            .bind(kind)
            .bind(name)
            .execute(writer.connection()?)
            .await
            .map_err(error::backend)?;
        Ok(deleted.rows_affected() > 0)
    }

    /// The writer zeroes what it overwrites within a page (`secure_delete`); checkpointing
    /// the WAL into the file and truncating it leaves no older copy of those pages.
    async fn scrub_overwritten_settings(&self) -> Result<()> {
        let mut writer = self.connections.write().await?;
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)").execute(writer.connection()?).await.map_err(error::backend)?;
        Ok(())
    }
}

/// Whether a URL names an in-memory database (`sqlite::memory:`, `sqlite://:memory:`, or
/// `mode=memory`), which lives only as long as its one connection.
fn is_in_memory(url_or_path: &str) -> bool {
    let Some(rest) = url_or_path.strip_prefix("sqlite:") else {
        return false;
    };
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    let (database, parameters) = rest.split_once('?').unwrap_or((rest, ""));
    database == ":memory:" || parameters.split('&').any(|parameter| parameter == "mode=memory")
}

/// The mode of the files the store creates (the database, its lock).
const PRIVATE_FILE_MODE: u32 = 0o600;

/// Takes the exclusive lock on `<database>.lock`, created beside the database: a second process
/// on the same file would break the one-writer rule the store relies on.
fn lock_database(path: &Path) -> Result<std::fs::File> {
    let mut lock_path = path.as_os_str().to_owned();
    lock_path.push(".lock");
    let lock_path = std::path::PathBuf::from(lock_path);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(PRIVATE_FILE_MODE)
        .open(&lock_path)
        .map_err(|error| Error::Backend(format!("cannot open the lock file {}: {error}", lock_path.display())))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::Backend(format!(
            "the database {} is in use by another process (it holds {}); a SQLite database belongs to one \
             Teamster server (use PostgreSQL for several)",
            path.display(),
            lock_path.display()
        ))),
        Err(std::fs::TryLockError::Error(error)) => {
            Err(Error::Backend(format!("cannot lock {}: {error}", lock_path.display())))
        }
    }
}

/// Creates the directory a database file goes in, if it is missing. Its mode is the process's
/// default: the files in it are private (0600), and the directory often holds more than the
/// database (the sandbox root, whose sandboxes run as other users who must pass through it).
fn create_parent_directory(file: &Path) -> Result<()> {
    match file.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => std::fs::create_dir_all(parent).map_err(|error| {
            Error::Backend(format!("creating the database directory {}: {error}", parent.display()))
        }),
        _ => Ok(()),
    }
}

/// Creates a missing database file readable and writable by its owner only, before SQLite opens
/// it: SQLite would make it with the process's umask (commonly world-readable), and gives its
/// `-wal` and `-shm` files the database file's mode. An existing file keeps its mode; one that
/// others may read is named in a warning, since the database holds every session and the sealed
/// secrets.
fn create_private_file(path: &Path) -> Result<()> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(PRIVATE_FILE_MODE)
        .open(path)
        .map_err(|error| Error::Backend(format!("cannot open the database file {}: {error}", path.display())))?;
    let mode = file.metadata().map(|meta| meta.permissions().mode()).unwrap_or(PRIVATE_FILE_MODE);
    if mode & 0o077 != 0 {
        tracing::warn!(
            path = %path.display(),
            mode = format!("{:o}", mode & 0o777),
            "the database file is readable by other users; `chmod 600` it (and its -wal and -shm files)"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::is_in_memory;

    #[test]
    fn recognizes_in_memory_urls() {
        for url in ["sqlite::memory:", "sqlite://:memory:", "sqlite://?mode=memory", "sqlite:x.db?mode=memory&cache=shared"] {
            assert!(is_in_memory(url), "{url}");
        }
        for url in ["sqlite://data/teamster.db", "sqlite:teamster.db", ":memory:.db", "/tmp/sqlite::memory:"] {
            assert!(!is_in_memory(url), "{url}");
        }
    }
}
