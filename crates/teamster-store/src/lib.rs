//! Storage traits for Teamster: agents with immutable versions, sessions, turns, and the
//! event log of every turn.
//!
//! Backends (`teamster-store-sqlite`, `teamster-store-postgres`) implement [`Store`] and
//! must pass the backend-neutral conformance suite in `conformance` (behind the `testkit`
//! feature) unchanged. Nothing here knows SQL or HTTP.
//!
//! `codec` holds the backend-neutral conversions between records and the flat values backends
//! store (JSON text, 64-bit integers, row tuples, the row sets of a log batch).
//!
//! `feed` is the seam for several replicas on one store: a store that other processes share
//! announces what it committed on a [`ChangeFeed`], and records cancel requests for the replica
//! that runs a turn ([`CoordinationStore::request_cancel`]).
//!
//! [`Store`] is the sum of six parts, each a trait of its own, so a caller can ask for only the
//! part it needs: [`AgentStore`], [`SessionStore`], [`EventLog`], [`CoordinationStore`],
//! [`SettingsStore`] and [`UsageStore`] (the counters of the operator's limits). [`StoreParts`]
//! holds one store as those six parts, for callers that hand each room only what it uses.
//!
//! The event log has two parts:
//! - the *stream*: every event of a turn, deltas included, as the exact JSON bytes that were
//!   sent, keyed by the per-turn sequence number (1, 2, 3 ...). Replays read it.
//! - the *content*: the folded, list-visible events (`turn.created`, complete `model.message`s,
//!   `tool.response`, ..., `turn.done`), keyed by the sequence number of the event they fold.
//!   The list endpoints read it.

pub mod codec;
#[cfg(feature = "testkit")]
pub mod conformance;
mod error;
mod feed;
mod parts;
mod records;
mod usage;

use async_trait::async_trait;
pub use teamster_protocol::control::SessionControl;

pub use error::Error;
pub use feed::{Change, ChangeFeed, ChangeSender};
pub use parts::StoreParts;
pub use records::*;
pub use usage::{RequestTaken, Spend, TurnPlace, UsageStore};

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The store's traits, for callers of a `dyn Store`: `use teamster_store::prelude::*;` brings
/// every part's methods into scope.
pub mod prelude {
    pub use crate::{AgentStore, CoordinationStore, EventLog, SessionStore, SettingsStore, Store, UsageStore};
}

/// Saved agents and their immutable versions.
#[async_trait]
pub trait AgentStore: Send + Sync {
    /// Creates an agent with its first version. `Conflict` if its tenant has an agent of that
    /// name (names are unique per tenant) or the id is taken.
    async fn create_agent(&self, agent: &AgentRecord) -> Result<()>;

    /// Stores a new immutable version of an agent and makes it the latest. `NotFound` if the
    /// agent does not exist. Returns the agent at its new version.
    async fn add_agent_version(
        &self,
        agent_id: &str,
        spec: &teamster_protocol::AgentSpec,
        at: &str,
    ) -> Result<AgentRecord>;

    /// The latest version of an agent by id.
    async fn get_agent(&self, agent_id: &str) -> Result<AgentRecord>;

    /// The latest version of the agent named `name` in `tenant`.
    async fn get_agent_by_name(&self, tenant: &str, name: &str) -> Result<AgentRecord>;

    /// One immutable version of an agent.
    async fn get_agent_version(&self, agent_id: &str, version: u64) -> Result<AgentRecord>;

    /// Every agent at its latest version, by name (then tenant).
    async fn list_agents(&self) -> Result<Vec<AgentRecord>>;

    /// Deletes an agent and all its versions; `Ok(false)` if it did not exist. Sessions that
    /// pinned a version keep working.
    async fn delete_agent(&self, agent_id: &str) -> Result<bool>;
}

/// Sessions, and the files a session keeps.
#[async_trait]
pub trait SessionStore: Send + Sync {
    /// `Conflict` if the id exists.
    async fn create_session(&self, session: &SessionRecord) -> Result<()>;

    async fn get_session(&self, session_id: &str) -> Result<SessionRecord>;

    /// Replaces the mutable fields of a session: `agent` (drafts only), `title`, `updated_at`;
    /// never its control (see [`SessionStore::update_session_control`]), so a title written from
    /// a copy read earlier cannot revert a mode or permissions changed meanwhile.
    async fn update_session(&self, session: &SessionRecord) -> Result<()>;

    /// Replaces a session's control (mode, model, permissions, grants, state) and sets its
    /// `updated_at`, and nothing else: what a turn or a tool changes of a session never
    /// reverts a title or a spec changed meanwhile. `NotFound` for an unknown session.
    async fn update_session_control(&self, session_id: &str, control: &SessionControl, at: &str) -> Result<()>;

    /// Deletes a session with its turns and events; `Ok(false)` if it did not exist.
    async fn delete_session(&self, session_id: &str) -> Result<bool>;

    /// Sessions matching a query, in the query's order, at most `limit`.
    async fn list_sessions(&self, query: &SessionQuery) -> Result<Vec<SessionRecord>>;

    /// The resources the sessions `created_by` made are about, the latest updated first, at
    /// most `limit`.
    async fn list_resources(&self, created_by: &str, limit: u32) -> Result<Vec<ResourceRecord>>;

    /// Stores a file of a session unless the session already has one with its digest (the
    /// same bytes: the first copy is kept). `NotFound` if the session does not exist.
    async fn put_file(&self, file: &SessionFile) -> Result<()>;

    /// A file of a session by digest; `NotFound` if the session has none with that digest.
    async fn get_file(&self, session_id: &str, digest: &str) -> Result<SessionFile>;

    /// Queues a message for its session unless `max` of its kind are queued there already
    /// (`Ok(false)`). `NotFound` for an unknown session. Deleted with its session.
    async fn queue_message(&self, message: &QueuedMessage, max: u32) -> Result<bool>;

    /// The session's queued messages of `kind`, oldest first (ties by id).
    async fn queued_messages(&self, session_id: &str, kind: QueueKind) -> Result<Vec<QueuedMessage>>;

    /// Removes a queued message; `Ok(false)` if it is not queued (used or removed meanwhile),
    /// so of several callers exactly one removes it.
    async fn remove_queued(&self, session_id: &str, id: &str) -> Result<bool>;

    /// Which of `session_ids` have messages of `kind` queued (for a replica's slow check of
    /// its running turns).
    async fn sessions_with_queued(&self, session_ids: &[&str], kind: QueueKind) -> Result<Vec<String>>;

    /// Up to `limit` sessions with any message queued, by id (for a server starting up: their
    /// follow-ups go on).
    async fn queued_sessions(&self, limit: u32) -> Result<Vec<String>>;
}

/// Turns and their event logs: the stream (every event, as sent) and the content (the folded,
/// list-visible events), and the retention of finished streams.
#[async_trait]
pub trait EventLog: Send + Sync {
    /// Creates a turn and makes it the session's last turn, atomically with its first log
    /// writes (usually `turn.created`), if and only if the session's last turn is still
    /// `expected_last_turn_id`. `Conflict` otherwise: another turn won the race.
    async fn create_turn(
        &self,
        turn: &TurnRecord,
        expected_last_turn_id: Option<&str>,
        initial_writes: &[LogWrite],
    ) -> Result<()>;

    /// A turn of a session; `NotFound` if either is unknown or the turn is in another session.
    async fn get_turn(&self, session_id: &str, turn_id: &str) -> Result<TurnRecord>;

    /// Turns whose state is still `running`, oldest first (for recovery after a restart).
    async fn running_turns(&self) -> Result<Vec<TurnRecord>>;

    /// A session's first turns by creation, oldest first, at most `limit` (for the previews
    /// of session listings: the first user message).
    async fn oldest_turns(&self, session_id: &str, limit: u32) -> Result<Vec<TurnRecord>>;

    /// Applies a batch of log writes in one transaction, in order (group commit).
    ///
    /// Writes are idempotent, so a retried batch is harmless: a stream event already stored at
    /// a (turn, sequence) is kept. Writes to a turn that does not exist (its session was deleted
    /// while the batch queued) are skipped rather than failing the other turns' writes.
    async fn write(&self, batch: &[LogWrite]) -> Result<()>;

    /// Applies a batch like [`EventLog::write`], fenced by turn leases: the writes of a turn
    /// land only if `owner` holds its lease at the claim `leases` names for it (as
    /// [`CoordinationStore::renew_leases`] means it, but expired or not, running or not),
    /// checked by the statement that writes them. So once a takeover has committed, the
    /// previous holder's writes change nothing, even a write already in flight. Returns the
    /// ids of the turns whose writes were refused (the lease is another's, or the turn is not
    /// in `leases`, or is gone), in no particular order; the other turns' writes land.
    async fn write_held(&self, owner: &str, leases: &[TurnLease], batch: &[LogWrite]) -> Result<Vec<String>>;

    /// Stream events of a turn with sequence number greater than `after`, ascending, at most
    /// `limit`.
    async fn read_stream(&self, turn_id: &str, after: u64, limit: u32) -> Result<Vec<StreamEvent>>;

    /// The last sequence number written to a turn's stream (0 if none).
    async fn last_sequence(&self, turn_id: &str) -> Result<u64>;

    /// Content events of a turn, filtered and paged by [`ContentQuery`].
    async fn read_content(&self, turn_id: &str, query: &ContentQuery) -> Result<Vec<ContentEvent>>;

    /// Deletes the stream events (and the spent lease) of at most `max_turns` turns that
    /// finished before `finished_before` (a timestamp), longest finished first; their content
    /// events stay. Returns how many turns lost their stream, so 0 means none is left.
    async fn delete_expired_streams(&self, finished_before: &str, max_turns: u32) -> Result<u32>;
}

/// What replicas sharing a store coordinate through: turn leases, cancel requests and the change
/// feed.
///
/// The replica that runs a turn holds the turn's lease and renews it; a running turn whose lease
/// has expired is taken over by another replica. Expiry is measured on the store's clock, so
/// replicas whose clocks disagree still agree on it. `create_turn` gives a new turn an unclaimed
/// lease that expires after [`codec::UNCLAIMED_LEASE_GRACE_MS`]; the creator's first renewal
/// (claim 1) claims it.
#[async_trait]
pub trait CoordinationStore: Send + Sync {
    /// Takes over a running turn whose lease has expired (or was released) for `owner` until
    /// `ttl` from now, if the lease is still at its `expected_claims`-th claim (as
    /// [`CoordinationStore::expired_leases`] reported it). `None` when the takeover fails: the turn is not
    /// running, its lease is live, or someone took it over first. Of concurrent takeovers of
    /// one turn, at most one wins.
    async fn claim_turn(
        &self,
        turn_id: &str,
        owner: &str,
        ttl: std::time::Duration,
        expected_claims: u64,
    ) -> Result<Option<TurnLease>>;

    /// Extends to `ttl` from now, in one call, each of `leases` that `owner` holds: the turn is
    /// still running and its lease is that claim by `owner`, or is still unclaimed and the
    /// claim is the first (the creator's first renewal claims it). Returns the ids of the turns
    /// extended; the others' leases were lost.
    async fn renew_leases(&self, owner: &str, leases: &[TurnLease], ttl: std::time::Duration) -> Result<Vec<String>>;

    /// Ends a lease that `owner` holds (as [`CoordinationStore::renew_leases`] means it) now, so that any
    /// replica may take the turn over at once. `Ok(false)` if `owner` no longer held it.
    async fn release_lease(&self, owner: &str, lease: &TurnLease) -> Result<bool>;

    /// Running turns whose lease has expired or was released, longest expired first, at most
    /// `limit`.
    async fn expired_leases(&self, limit: u32) -> Result<Vec<ExpiredLease>>;

    /// Records a request to cancel a running turn, for the replica that runs it, and announces
    /// it on the change feed. The first reason recorded wins. `Ok(false)` if the turn is not
    /// running (unknown, or ended already): nothing is recorded.
    async fn request_cancel(&self, turn_id: &str, reason: teamster_protocol::CancelReason) -> Result<bool>;

    /// The turns among `turn_ids` that are still running and have a cancel request, with its
    /// first reason, in no particular order. Unknown ids are left out.
    async fn cancel_requests(&self, turn_ids: &[&str]) -> Result<Vec<(String, teamster_protocol::CancelReason)>>;

    /// A reader of the changes committed from now on by any process sharing this store
    /// (every stream and state write, cancel request and setting write announces itself once
    /// committed), or `None` for a store no other process shares: then this process sees every
    /// change itself. Once this returns, no later commit goes unannounced.
    async fn changes(&self) -> Result<Option<ChangeFeed>>;
}

/// Settings: named JSON documents by kind (e.g. `model-provider`), shared by every replica.
#[async_trait]
pub trait SettingsStore: Send + Sync {
    /// Creates or replaces the setting `name` of `kind`.
    async fn put_setting(&self, kind: &str, name: &str, value: &str, at: &str) -> Result<()>;

    /// The setting `name` of `kind`, if there is one.
    async fn get_setting(&self, kind: &str, name: &str) -> Result<Option<String>>;

    /// Every setting of `kind` as `(name, value)`, by name.
    async fn list_settings(&self, kind: &str) -> Result<Vec<(String, String)>>;

    /// Deletes a setting; `Ok(false)` if it did not exist.
    async fn delete_setting(&self, kind: &str, name: &str) -> Result<bool>;

    /// Makes the values settings had before they were overwritten unreadable in the
    /// database's files, where the backend can (after secrets stored in plain text were
    /// sealed). The default does nothing.
    async fn scrub_overwritten_settings(&self) -> Result<()> {
        Ok(())
    }
}

/// Everything Teamster persists: every part above, as one object that is cheap to share
/// (`Arc<dyn Store>`). Implement the parts; `Store` follows. Callers that need one part can
/// take just that part.
pub trait Store: AgentStore + SessionStore + EventLog + CoordinationStore + SettingsStore + UsageStore + 'static {}

impl<T: AgentStore + SessionStore + EventLog + CoordinationStore + SettingsStore + UsageStore + 'static> Store for T {}
