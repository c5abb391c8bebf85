//! [`Sql`]: the statements both backends run alike, written once, generic over the driver and
//! run on whatever executor the backend hands in (PostgreSQL's pool, SQLite's reader or writer
//! connection).
//!
//! Every statement numbers its parameters `$N`, which both drivers read as the N-th bound
//! value. Deletes and updates that report whether they matched use `RETURNING` instead of a row
//! count, which sqlx gives only per driver.

use std::marker::PhantomData;
use std::time::Duration;

use sqlx::query::QueryAs;
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, FromRow, IntoArguments, Type};
use teamster_store::SessionControl;
use teamster_store::codec::{
    self, AgentRow, SessionAgentColumns, SessionRow, TurnColumns, TurnRow, clamp_i64, lease_millis, to_json, to_u64,
};
use teamster_store::{
    AgentRecord, ContentEvent, ContentKinds, ContentQuery, Error, ExpiredLease, QueueKind, QueuedMessage, Result, SessionAgentRecord,
    ResourceRecord, SessionQuery, SessionRecord, StreamEvent, TurnLease, TurnRecord,
};

use crate::columns::{AGENT_COLUMNS, TURN_COLUMNS, agent_query, session_query};
use crate::error;
use crate::listing::session_listing;

/// The shared statements for the driver `DB`. A backend keeps one as a constant, built with
/// its SQL for the current time.
#[derive(Debug)]
pub struct Sql<DB> {
    now_ms: &'static str,
    driver: PhantomData<fn() -> DB>,
}

impl<DB> Sql<DB> {
    /// The statements of a backend whose current time in milliseconds since the Unix epoch is
    /// the SQL expression `now_ms` (the lease statements compare expiries with it).
    pub const fn new(now_ms: &'static str) -> Sql<DB> {
        Sql { now_ms, driver: PhantomData }
    }
}

/// Whether the lease row `lease` is held by parameter `$owner` at the claim `claims` (an SQL
/// expression) and its turn is running. Backends use it in their own renewal statement.
pub fn lease_held(owner: usize, claims: &str) -> String {
    format!(
        "{} AND EXISTS (SELECT 1 FROM turns WHERE turns.id = lease.turn_id AND turns.status = 'running')",
        lease_holder(owner, claims)
    )
}

/// Whether the lease row `lease` is at the claim `claims` (an SQL expression) of parameter
/// `$owner`: claimed by the owner at that claim, or still unclaimed when the claim is the
/// creator's first. Backends fence log writes with it.
pub fn lease_holder(owner: usize, claims: &str) -> String {
    format!(
        "((lease.owner = ${owner} AND lease.claims = {claims}) \
         OR (lease.owner IS NULL AND lease.claims = 0 AND {claims} = 1))"
    )
}

impl<DB> Sql<DB>
where
    DB: Database,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> Option<i64>: Encode<'q, DB>,
    for<'q> String: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB>,
    usize: ColumnIndex<DB::Row>,
{
    // Agents.

    /// The latest version of the agent with id `agent_id`.
    pub async fn get_agent<'c>(&self, executor: impl Executor<'c, Database = DB>, agent_id: &str) -> Result<AgentRecord> {
        self.agent_where(executor, "agents.id = $1", agent_id, None).await
    }

    /// The latest version of the agent named `name` in `tenant`.
    pub async fn get_agent_by_name<'c>(
        &self,
        executor: impl Executor<'c, Database = DB>,
        tenant: &str,
        name: &str,
    ) -> Result<AgentRecord> {
        let sql = agent_query("agents.tenant = $1 AND agents.name = $2", false);
        let row = sqlx::query_as::<DB, AgentRow>(&sql).bind(tenant).bind(name).fetch_optional(executor).await.map_err(error::backend)?;
        codec::agent(row.ok_or(Error::NotFound("agent"))?)
    }

    /// One version of the agent with id `agent_id`.
    pub async fn get_agent_version<'c>(
        &self,
        executor: impl Executor<'c, Database = DB>,
        agent_id: &str,
        version: u64,
    ) -> Result<AgentRecord> {
        self.agent_where(executor, "agents.id = $1", agent_id, Some(version)).await
    }

    /// Reads one version of an agent selected by `condition` on `$1`; `version` `None` means
    /// the latest.
    async fn agent_where<'c>(
        &self,
        executor: impl Executor<'c, Database = DB>,
        condition: &str,
        key: &str,
        version: Option<u64>,
    ) -> Result<AgentRecord> {
        let sql = agent_query(condition, version.is_some());
        let mut query = sqlx::query_as::<DB, AgentRow>(&sql).bind(key);
        if let Some(version) = version {
            query = query.bind(clamp_i64(version));
        }
        let row = query.fetch_optional(executor).await.map_err(error::backend)?;
        codec::agent(row.ok_or(Error::NotFound("agent"))?)
    }

    /// The latest version of every agent, by name (then tenant).
    pub async fn list_agents<'c>(&self, executor: impl Executor<'c, Database = DB>) -> Result<Vec<AgentRecord>> {
        let sql = format!(
            "SELECT {AGENT_COLUMNS} FROM agents JOIN agent_versions \
             ON agent_versions.agent_id = agents.id AND agent_versions.version = agents.latest_version \
             ORDER BY agents.name, agents.tenant"
        );
        let rows: Vec<AgentRow> = sqlx::query_as(&sql).fetch_all(executor).await.map_err(error::backend)?;
        rows.into_iter().map(codec::agent).collect()
    }

    /// Deletes an agent; its versions go with it (ON DELETE CASCADE) and sessions do not
    /// reference agents. Returns whether there was one.
    pub async fn delete_agent<'c>(&self, executor: impl Executor<'c, Database = DB>, agent_id: &str) -> Result<bool> {
        self.delete_where(executor, "DELETE FROM agents WHERE id = $1 RETURNING id", agent_id).await
    }

    // Sessions.

    /// Inserts a new session.
    pub async fn create_session<'c>(&self, executor: impl Executor<'c, Database = DB>, session: &SessionRecord) -> Result<()> {
        let agent = SessionAgentColumns::new(&session.agent)?;
        let created_by = to_json(&session.created_by, "session created_by")?;
        sqlx::query::<DB>(
            "INSERT INTO sessions (id, kind, agent_id, agent_version, agent_name, draft_spec, title, \
             created_by_id, created_by, created_at, updated_at, last_turn_id, control, resource_id) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
        )
        .bind(session.id.as_str())
        .bind(agent.kind)
        .bind(agent.agent_id)
        .bind(agent.agent_version)
        .bind(agent.agent_name)
        .bind(agent.draft_spec)
        .bind(session.title.as_deref())
        .bind(session.created_by.subject_id.as_str())
        .bind(created_by)
        .bind(session.created_at.as_str())
        .bind(session.updated_at.as_str())
        .bind(session.last_turn_id.as_deref())
        .bind(codec::control_column(&session.control, "session control")?)
        .bind(session.resource_id.as_deref())
        .execute(executor)
        .await
        .map_err(error::on("session"))?;
        Ok(())
    }

    /// One session.
    pub async fn get_session<'c>(&self, executor: impl Executor<'c, Database = DB>, session_id: &str) -> Result<SessionRecord> {
        let sql = session_query();
        let row: Option<SessionRow> =
            sqlx::query_as(&sql).bind(session_id).fetch_optional(executor).await.map_err(error::backend)?;
        codec::session(row.ok_or(Error::NotFound("session"))?)
    }

    /// Writes a session's title and update time, and a draft's agent; a saved session stays
    /// pinned to its agent version.
    /// Replaces a session's control and sets its `updated_at`.
    pub async fn update_session_control<'c>(
        &self,
        executor: impl Executor<'c, Database = DB>,
        session_id: &str,
        control: &SessionControl,
        at: &str,
    ) -> Result<()> {
        let updated: Option<(String,)> = sqlx::query_as("UPDATE sessions SET control = $1, updated_at = $2 WHERE id = $3 RETURNING id")
            .bind(codec::control_column(control, "session control")?)
            .bind(at)
            .bind(session_id)
            .fetch_optional(executor)
            .await
            .map_err(error::backend)?;
        updated.map(drop).ok_or(Error::NotFound("session"))
    }

    pub async fn update_session<'c>(&self, executor: impl Executor<'c, Database = DB>, session: &SessionRecord) -> Result<()> {
        let (draft_spec, draft_agent_name) = match &session.agent {
            SessionAgentRecord::Draft { spec, agent_name } => (Some(to_json(spec, "draft spec")?), agent_name.as_deref()),
            SessionAgentRecord::Saved { .. } => (None, None),
        };
        let updated: Option<(String,)> = sqlx::query_as(
            "UPDATE sessions SET title = $1, updated_at = $2, \
             draft_spec = CASE WHEN kind = 'session/draft' AND CAST($3 AS TEXT) IS NOT NULL THEN $3 ELSE draft_spec END, \
             agent_name = CASE WHEN kind = 'session/draft' AND CAST($3 AS TEXT) IS NOT NULL THEN $4 ELSE agent_name END, \
             resource_id = $6 \
             WHERE id = $5 RETURNING id",
        )
        .bind(session.title.as_deref())
        .bind(session.updated_at.as_str())
        .bind(draft_spec)
        .bind(draft_agent_name)
        .bind(session.id.as_str())
        .bind(session.resource_id.as_deref())
        .fetch_optional(executor)
        .await
        .map_err(error::backend)?;
        updated.map(drop).ok_or(Error::NotFound("session"))
    }

    /// Deletes a session; its turns, and through them both event tables and its files, go with
    /// it (ON DELETE CASCADE). Returns whether there was one.
    pub async fn delete_session<'c>(&self, executor: impl Executor<'c, Database = DB>, session_id: &str) -> Result<bool> {
        self.delete_where(executor, "DELETE FROM sessions WHERE id = $1 RETURNING id", session_id).await
    }

    /// The sessions a [`SessionQuery`] selects, in its order, one page.
    pub async fn list_sessions<'c>(
        &self,
        executor: impl Executor<'c, Database = DB>,
        query: &SessionQuery,
    ) -> Result<Vec<SessionRecord>> {
        let (sql, values) = session_listing(query);
        let mut listing = sqlx::query_as::<DB, SessionRow>(&sql);
        for value in values {
            listing = listing.bind(value);
        }
        let rows = listing.bind(i64::from(query.limit)).fetch_all(executor).await.map_err(error::backend)?;
        rows.into_iter().map(codec::session).collect()
    }

    /// The resources of a creator's sessions, the latest updated first.
    pub async fn list_resources<'c>(
        &self,
        executor: impl Executor<'c, Database = DB>,
        created_by: &str,
        limit: u32,
    ) -> Result<Vec<ResourceRecord>> {
        let rows: Vec<(String, i64, String)> = sqlx::query_as(
            "SELECT resource_id, COUNT(*), MAX(updated_at) FROM sessions \
             WHERE created_by_id = $1 AND resource_id IS NOT NULL \
             GROUP BY resource_id ORDER BY MAX(updated_at) DESC, resource_id LIMIT $2",
        )
        .bind(created_by)
        .bind(i64::from(limit))
        .fetch_all(executor)
        .await
        .map_err(error::backend)?;
        Ok(rows
            .into_iter()
            .map(|(resource_id, sessions, updated_at)| ResourceRecord { resource_id, sessions: u64::try_from(sessions).unwrap_or_default(), updated_at })
            .collect())
    }

    // Turns and their logs.

    /// The backend's own create-turn statement `sql` (its compare-and-set is dialect), with
    /// the new turn bound to parameters `$1` to `$8` (id, session, previous turn, input, state,
    /// status, creator, creation time) and the expected last turn to `$9`.
    pub fn new_turn<'q, O>(
        &self,
        sql: &'q str,
        turn: &'q TurnRecord,
        columns: TurnColumns,
        expected_last_turn_id: Option<&'q str>,
    ) -> QueryAs<'q, DB, O, DB::Arguments<'q>>
    where
        O: for<'r> FromRow<'r, DB::Row>,
    {
        sqlx::query_as(sql)
            .bind(turn.id.as_str())
            .bind(turn.session_id.as_str())
            .bind(turn.previous_turn_id.as_deref())
            .bind(columns.input)
            .bind(columns.state)
            .bind(columns.status)
            .bind(columns.created_by)
            .bind(turn.created_at.as_str())
            .bind(expected_last_turn_id)
            .bind(columns.control)
    }

    /// One turn of a session.
    pub async fn get_turn<'c>(
        &self,
        executor: impl Executor<'c, Database = DB>,
        session_id: &str,
        turn_id: &str,
    ) -> Result<TurnRecord> {
        let sql = format!("SELECT {TURN_COLUMNS} FROM turns WHERE id = $1 AND session_id = $2");
        let row: Option<TurnRow> =
            sqlx::query_as(&sql).bind(turn_id).bind(session_id).fetch_optional(executor).await.map_err(error::backend)?;
        codec::turn(row.ok_or(Error::NotFound("turn"))?)
    }

    /// Every running turn, oldest first.
    /// A session's first turns by creation, oldest first, at most `limit`.
    pub async fn oldest_turns<'c>(
        &self,
        executor: impl Executor<'c, Database = DB>,
        session_id: &str,
        limit: u32,
    ) -> Result<Vec<TurnRecord>> {
        let sql = format!("SELECT {TURN_COLUMNS} FROM turns WHERE session_id = $1 ORDER BY created_at, id LIMIT $2");
        let rows: Vec<TurnRow> = sqlx::query_as(&sql)
            .bind(session_id)
            .bind(i64::from(limit))
            .fetch_all(executor)
            .await
            .map_err(error::backend)?;
        rows.into_iter().map(codec::turn).collect()
    }

    pub async fn running_turns<'c>(&self, executor: impl Executor<'c, Database = DB>) -> Result<Vec<TurnRecord>> {
        let sql = format!("SELECT {TURN_COLUMNS} FROM turns WHERE status = 'running' ORDER BY created_at, id");
        let rows: Vec<TurnRow> = sqlx::query_as(&sql).fetch_all(executor).await.map_err(error::backend)?;
        rows.into_iter().map(codec::turn).collect()
    }

    /// Up to `limit` stream events of a turn after the sequence number `after`.
    pub async fn read_stream<'c>(
        &self,
        executor: impl Executor<'c, Database = DB>,
        turn_id: &str,
        after: u64,
        limit: u32,
    ) -> Result<Vec<StreamEvent>> {
        let rows: Vec<(i64, String)> = sqlx::query_as(
            "SELECT sequence, data FROM stream_events WHERE turn_id = $1 AND sequence > $2 ORDER BY sequence LIMIT $3",
        )
        .bind(turn_id)
        .bind(clamp_i64(after))
        .bind(i64::from(limit))
        .fetch_all(executor)
        .await
        .map_err(error::backend)?;
        rows.into_iter().map(codec::stream_event).collect()
    }

    /// The highest sequence number in a turn's stream, 0 for none.
    pub async fn last_sequence<'c>(&self, executor: impl Executor<'c, Database = DB>, turn_id: &str) -> Result<u64> {
        let last: Option<(i64,)> =
            sqlx::query_as("SELECT sequence FROM stream_events WHERE turn_id = $1 ORDER BY sequence DESC LIMIT 1")
                .bind(turn_id)
                .fetch_optional(executor)
                .await
                .map_err(error::backend)?;
        last.map_or(Ok(0), |(sequence,)| to_u64(sequence, "sequence number"))
    }

    /// One page of a turn's content events, as a [`ContentQuery`] selects.
    pub async fn read_content<'c>(
        &self,
        executor: impl Executor<'c, Database = DB>,
        turn_id: &str,
        query: &ContentQuery,
    ) -> Result<Vec<ContentEvent>> {
        let (beyond, order) = if query.descending { ("<", "DESC") } else { (">", "ASC") };
        let only_content = match query.kinds {
            ContentKinds::All => "",
            ContentKinds::TurnContent => "AND kind NOT IN ('turn.created', 'turn.done')",
            ContentKinds::Threads => "AND kind IN ('thread.created', 'thread.done')",
        };
        let sql = format!(
            "SELECT sequence, kind, data FROM content_events WHERE turn_id = $1 AND sequence {beyond} $2 \
             {only_content} ORDER BY sequence {order} LIMIT $3"
        );
        // Without a cursor, the bound lies beyond every sequence number in the direction read.
        let bound = match (query.after, query.descending) {
            (Some(after), _) => clamp_i64(after),
            (None, false) => -1,
            (None, true) => i64::MAX,
        };
        let rows: Vec<(i64, String, String)> = sqlx::query_as(&sql)
            .bind(turn_id)
            .bind(bound)
            .bind(i64::from(query.limit))
            .fetch_all(executor)
            .await
            .map_err(error::backend)?;
        rows.into_iter().map(codec::content_event).collect()
    }

    // Leases: one row per turn in `turn_leases`, its expiry in milliseconds on the database's
    // clock. Each statement is a compare-and-set in its `WHERE` clause.

    /// Takes over an expired lease (see `CoordinationStore::claim_turn`). A running turn without
    /// a lease row (left running before leases existed) counts as expired at claim 0. The
    /// takeover also sets `taken_by`, which only takeovers change (see migration 0008).
    pub async fn claim_turn<'c>(
        &self,
        executor: impl Executor<'c, Database = DB>,
        turn_id: &str,
        owner: &str,
        ttl: Duration,
        expected_claims: u64,
    ) -> Result<Option<TurnLease>> {
        let now_ms = self.now_ms;
        let sql = format!(
            "INSERT INTO turn_leases AS lease (turn_id, owner, expires_at, claims, taken_by) \
             SELECT id, $2, {now_ms} + $3, $4 + 1, $2 || '/' || ($4 + 1) FROM turns WHERE id = $1 AND status = 'running' \
             ON CONFLICT (turn_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at, \
             claims = excluded.claims, taken_by = excluded.taken_by \
             WHERE lease.claims = $4 AND lease.expires_at <= {now_ms} \
             RETURNING claims"
        );
        let claimed: Option<(i64,)> = sqlx::query_as(&sql)
            .bind(turn_id)
            .bind(owner)
            .bind(lease_millis(ttl))
            .bind(clamp_i64(expected_claims))
            .fetch_optional(executor)
            .await
            .map_err(error::backend)?;
        claimed.map(|(claims,)| codec::held_lease(turn_id, claims)).transpose()
    }

    /// Ends a lease `owner` holds now, leaving it at its claim for a takeover. Returns whether
    /// it was held.
    pub async fn release_lease<'c>(
        &self,
        executor: impl Executor<'c, Database = DB>,
        owner: &str,
        lease: &TurnLease,
    ) -> Result<bool> {
        let sql = format!(
            "UPDATE turn_leases AS lease SET owner = $1, claims = $3, expires_at = 0 WHERE lease.turn_id = $2 AND {} \
             RETURNING turn_id",
            lease_held(1, "$3")
        );
        let released: Option<(String,)> = sqlx::query_as(&sql)
            .bind(owner)
            .bind(lease.turn_id.as_str())
            .bind(clamp_i64(lease.claims))
            .fetch_optional(executor)
            .await
            .map_err(error::backend)?;
        Ok(released.is_some())
    }

    /// Up to `limit` running turns whose lease has expired, or that have none.
    pub async fn expired_leases<'c>(&self, executor: impl Executor<'c, Database = DB>, limit: u32) -> Result<Vec<ExpiredLease>> {
        let sql = format!(
            "SELECT turns.session_id, turns.id, lease.owner, coalesce(lease.claims, 0) \
             FROM turns LEFT JOIN turn_leases AS lease ON lease.turn_id = turns.id \
             WHERE turns.status = 'running' AND (lease.expires_at IS NULL OR lease.expires_at <= {}) \
             ORDER BY lease.expires_at NULLS FIRST, turns.id LIMIT $1",
            self.now_ms
        );
        let rows: Vec<(String, String, Option<String>, i64)> =
            sqlx::query_as(&sql).bind(i64::from(limit)).fetch_all(executor).await.map_err(error::backend)?;
        rows.into_iter().map(codec::expired_lease).collect()
    }

    // Settings.

    /// The value of one setting, if it exists.
    pub async fn get_setting<'c>(&self, executor: impl Executor<'c, Database = DB>, kind: &str, name: &str) -> Result<Option<String>> {
        let row: Option<(String,)> = sqlx::query_as("SELECT value FROM settings WHERE kind = $1 AND name = $2")
            .bind(kind)
            .bind(name)
            .fetch_optional(executor)
            .await
            .map_err(error::backend)?;
        Ok(row.map(|(value,)| value))
    }

    /// The settings of one kind, `(name, value)` by name.
    pub async fn list_settings<'c>(&self, executor: impl Executor<'c, Database = DB>, kind: &str) -> Result<Vec<(String, String)>> {
        sqlx::query_as("SELECT name, value FROM settings WHERE kind = $1 ORDER BY name")
            .bind(kind)
            .fetch_all(executor)
            .await
            .map_err(error::backend)
    }

    // Queued messages.

    /// Queues a message unless `max` of its kind are queued in its session already.
    pub async fn queue_message<'c>(
        &self,
        executor: impl Executor<'c, Database = DB>,
        message: &QueuedMessage,
        max: u32,
    ) -> Result<bool> {
        let content = to_json(&message.content, "queued message content")?;
        let created_by = to_json(&message.created_by, "queued message created_by")?;
        let inserted: Option<(String,)> = sqlx::query_as(
            "INSERT INTO queued_messages (session_id, id, kind, content, created_by, created_at, credential) \
             SELECT $1, $2, $3, $4, $5, $6, $8 \
             WHERE (SELECT count(*) FROM queued_messages WHERE session_id = $1 AND kind = $3) < $7 \
             RETURNING id",
        )
        .bind(message.session_id.as_str())
        .bind(message.id.as_str())
        .bind(message.kind.as_str())
        .bind(content)
        .bind(created_by)
        .bind(message.created_at.as_str())
        .bind(i64::from(max))
        .bind(message.credential.as_deref())
        .fetch_optional(executor)
        .await
        .map_err(error::on("session"))?;
        Ok(inserted.is_some())
    }

    /// A session's queued messages of `kind`, oldest first.
    pub async fn queued_messages<'c>(
        &self,
        executor: impl Executor<'c, Database = DB>,
        session_id: &str,
        kind: QueueKind,
    ) -> Result<Vec<QueuedMessage>> {
        let rows: Vec<(String, String, String, String, Option<String>)> = sqlx::query_as(
            "SELECT id, content, created_by, created_at, credential FROM queued_messages \
             WHERE session_id = $1 AND kind = $2 ORDER BY created_at, id",
        )
        .bind(session_id)
        .bind(kind.as_str())
        .fetch_all(executor)
        .await
        .map_err(error::backend)?;
        rows.into_iter()
            .map(|(id, content, created_by, created_at, credential)| {
                Ok(QueuedMessage {
                    session_id: session_id.to_owned(),
                    id,
                    kind,
                    content: codec::from_json(&content, "queued message content")?,
                    created_by: codec::from_json(&created_by, "queued message created_by")?,
                    created_at,
                    credential,
                })
            })
            .collect()
    }

    /// Up to `limit` sessions with any message queued, by id.
    pub async fn queued_sessions<'c>(&self, executor: impl Executor<'c, Database = DB>, limit: u32) -> Result<Vec<String>> {
        let rows: Vec<(String,)> = sqlx::query_as("SELECT DISTINCT session_id FROM queued_messages ORDER BY session_id LIMIT $1")
            .bind(i64::from(limit))
            .fetch_all(executor)
            .await
            .map_err(error::backend)?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }

    /// Removes a queued message; whether it was there.
    pub async fn remove_queued<'c>(&self, executor: impl Executor<'c, Database = DB>, session_id: &str, id: &str) -> Result<bool> {
        let removed: Option<(String,)> =
            sqlx::query_as("DELETE FROM queued_messages WHERE session_id = $1 AND id = $2 RETURNING id")
                .bind(session_id)
                .bind(id)
                .fetch_optional(executor)
                .await
                .map_err(error::backend)?;
        Ok(removed.is_some())
    }

    async fn delete_where<'c>(&self, executor: impl Executor<'c, Database = DB>, sql: &str, key: &str) -> Result<bool> {
        let deleted: Option<(String,)> =
            sqlx::query_as(sql).bind(key).fetch_optional(executor).await.map_err(error::backend)?;
        Ok(deleted.is_some())
    }
}
