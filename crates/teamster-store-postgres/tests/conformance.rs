//! Runs the store conformance suite against PostgreSQL, each test in a scratch schema of its
//! own, and checks what only a shared server has: two stores (two replicas) racing for a
//! session, a second connect finding the schema migrated, writers, turn creation and deletes on
//! the same sessions never deadlocking, and the change feed (one store's writes wake the other,
//! a killed listening connection is replaced, schemas do not hear each other).
//!
//! The server comes from `TEAMSTER_TEST_POSTGRES_URL`; `scripts/test` starts a throwaway one
//! with `scripts/postgres` and sets it. Without it, every test here fails: a storage backend
//! that silently skips its tests is untested.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sqlx::{Connection, Executor, PgConnection};
use teamster_protocol::turn::CancelReason;
use teamster_protocol::{AgentSpec, Subject, TurnState};
use teamster_store::prelude::*;
use teamster_store::conformance::{Fixture, next_change};
use teamster_store::{
    AgentRecord, Change, Error, LogWrite, SessionAgentRecord, SessionRecord, Store, TurnRecord,
};
use teamster_store::{ExpiredLease, TurnLease};
use teamster_store_postgres::PostgresStore;

/// The variable that names the test server.
const SERVER_URL: &str = "TEAMSTER_TEST_POSTGRES_URL";

/// A schema of its own in the test server's database, with a store whose connections use it.
/// Dropping it drops the schema and everything in it.
struct ScratchSchema {
    store: Arc<PostgresStore>,
    /// The schema's name, unique per test.
    name: String,
    server_url: String,
}

impl ScratchSchema {
    async fn new() -> ScratchSchema {
        let server_url = std::env::var(SERVER_URL)
            .unwrap_or_else(|_| panic!("set {SERVER_URL} or run scripts/test, which starts PostgreSQL"));
        let name = format!("test_{}_{:016x}", std::process::id(), fastrand::u64(..));
        let mut admin = PgConnection::connect(&server_url)
            .await
            .unwrap_or_else(|error| panic!("connecting to {SERVER_URL}: {error}"));
        admin.execute(format!("CREATE SCHEMA {name}").as_str()).await.expect("create a scratch schema");
        let _ = admin.close().await;
        let store =
            PostgresStore::connect(&in_schema(&server_url, &name)).await.expect("connect to the scratch schema");
        ScratchSchema { store: Arc::new(store), name, server_url }
    }

    /// Another store on the same schema, as a second replica would have.
    async fn second_store(&self) -> PostgresStore {
        PostgresStore::connect(&in_schema(&self.server_url, &self.name)).await.expect("connect a second store")
    }

    /// Another store on the same schema, with more URL query parameters (`pool_size=1`).
    async fn store_with(&self, parameters: &str) -> PostgresStore {
        let url = format!("{}&{parameters}", in_schema(&self.server_url, &self.name));
        PostgresStore::connect(&url).await.expect("connect a store with parameters")
    }
}

impl Fixture for ScratchSchema {
    fn store(&self) -> Arc<dyn Store> {
        Arc::clone(&self.store) as Arc<dyn Store>
    }
}

impl Drop for ScratchSchema {
    /// Drops the schema from a thread of its own, since `Drop` cannot await and the test's
    /// runtime is busy running this drop. Idle pooled connections hold no locks, so the drop
    /// does not wait for the pool to close. Failures are reported, never panicked on: this may
    /// run while a failed test unwinds.
    fn drop(&mut self) {
        let (server_url, name) = (self.server_url.clone(), self.name.clone());
        let dropped = std::thread::spawn(move || -> Result<(), String> {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|error| error.to_string())?;
            runtime.block_on(async {
                let mut admin = PgConnection::connect(&server_url).await.map_err(|error| error.to_string())?;
                admin
                    .execute(format!("DROP SCHEMA {name} CASCADE").as_str())
                    .await
                    .map_err(|error| error.to_string())?;
                admin.close().await.map_err(|error| error.to_string())
            })
        })
        .join();
        match dropped {
            Ok(Ok(())) => {}
            Ok(Err(error)) => eprintln!("dropping the scratch schema {}: {error}", self.name),
            Err(_) => eprintln!("dropping the scratch schema {} panicked", self.name),
        }
    }
}

/// The server URL with every connection's `search_path` set to `schema`.
fn in_schema(server_url: &str, schema: &str) -> String {
    let separator = if server_url.contains('?') { '&' } else { '?' };
    format!("{server_url}{separator}options[search_path]={schema}")
}

teamster_store::conformance_tests!(ScratchSchema::new());

fn subject() -> Subject {
    Subject { subject_id: "alice".into(), subject_type: "user".into(), subject_slug: "alice".into() }
}

fn spec() -> AgentSpec {
    serde_json::from_value(serde_json::json!({"model": {"name": "openai-main/gpt-4o"}})).expect("a valid spec")
}

fn draft_session(id: &str) -> SessionRecord {
    SessionRecord {
        id: id.into(),
        agent: SessionAgentRecord::Draft { spec: spec(), agent_name: None },
        title: None,
        created_by: subject(),
        created_at: "2025-01-01T00:00:00.000Z".into(),
        updated_at: "2025-01-01T00:00:00.000Z".into(),
        last_turn_id: None,
        control: Default::default(),
        resource_id: None,
    }
}

fn turn(id: &str, session_id: &str, previous: Option<&str>) -> TurnRecord {
    TurnRecord {
        id: id.into(),
        session_id: session_id.into(),
        previous_turn_id: previous.map(str::to_owned),
        input: vec![],
        state: TurnState::Running,
        created_by: subject(),
        created_at: "2025-01-01T00:00:01.000Z".into(),
        control: Default::default(),
        request_context: None,
    }
}

fn stream(turn_id: &str, sequence: u64, data: &str) -> LogWrite {
    LogWrite::Stream { turn_id: turn_id.into(), sequence, data: data.into() }
}

fn done(turn_id: &str, at: &str) -> LogWrite {
    let state = TurnState::Done { output: None, required_actions: vec![], completed_at: at.into(), metrics: None };
    LogWrite::TurnState { turn_id: turn_id.into(), state, at: at.into() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_racing_for_a_session_have_one_winner() {
    let schema = ScratchSchema::new().await;
    let replicas: [Arc<dyn Store>; 2] = [schema.store(), Arc::new(schema.second_store().await)];
    replicas[0].create_session(&draft_session("ses_1")).await.expect("create_session");

    let mut expected: Option<String> = None;
    for round in 0..5 {
        let tasks: Vec<_> = (0..8)
            .map(|racer| {
                let store = Arc::clone(&replicas[racer % 2]);
                let expected = expected.clone();
                let turn_id = format!("turn_{round}_{racer}");
                tokio::spawn(async move {
                    let created = turn(&turn_id, "ses_1", expected.as_deref());
                    let writes = [stream(&turn_id, 1, "created")];
                    (turn_id, store.create_turn(&created, expected.as_deref(), &writes).await)
                })
            })
            .collect();
        let mut winners = Vec::new();
        for task in tasks {
            match task.await.expect("a racer panicked") {
                (turn_id, Ok(())) => winners.push(turn_id),
                (_, Err(Error::Conflict(_))) => {}
                (_, Err(other)) => panic!("a losing create_turn must be a Conflict, got {other:?}"),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
        for replica in &replicas {
            let session = replica.get_session("ses_1").await.expect("get_session");
            assert_eq!(session.last_turn_id, Some(winners[0].clone()), "both replicas see the winner");
        }
        expected = winners.pop();
    }
}

#[tokio::test]
async fn a_second_connect_finds_the_schema_migrated_and_the_data_there() {
    let schema = ScratchSchema::new().await;
    let first = schema.store();
    first.create_session(&draft_session("ses_1")).await.expect("create_session");
    first
        .put_setting("model-provider", "openai", r#"{"k": 1}"#, "2025-01-01T00:00:00.000Z")
        .await
        .expect("put_setting");

    let second = schema.second_store().await;
    assert_eq!(second.get_session("ses_1").await.expect("get_session"), draft_session("ses_1"));
    assert_eq!(
        second.list_settings("model-provider").await.expect("list_settings"),
        vec![("openai".to_owned(), r#"{"k": 1}"#.to_owned())]
    );
    second.close().await;
    assert!(matches!(second.get_session("ses_1").await, Err(Error::Backend(_))), "a closed store fails its calls");
}

#[tokio::test]
async fn conflicts_name_the_record_not_the_database_constraint() {
    let schema = ScratchSchema::new().await;
    let store = schema.store();
    let agent = AgentRecord {
        id: "agt_1".into(),
        name: "bot".into(),
        version: 1,
        spec: spec(),
        created_at: "2025-01-01T00:00:00.000Z".into(),
        updated_at: "2025-01-01T00:00:00.000Z".into(),
        tenant: "local".into(),
        created_by: None,
    };
    store.create_agent(&agent).await.expect("create_agent");
    store.create_session(&draft_session("ses_1")).await.expect("create_session");
    store.create_turn(&turn("turn_1", "ses_1", None), None, &[]).await.expect("create_turn");

    let messages = [
        store.create_agent(&AgentRecord { id: "agt_2".into(), ..agent }).await,
        store.create_session(&draft_session("ses_1")).await,
        store.create_turn(&turn("turn_1", "ses_1", Some("turn_1")), Some("turn_1"), &[]).await,
    ]
    .map(|result| match result {
        Err(Error::Conflict(message)) => message,
        other => panic!("expected a Conflict, got {other:?}"),
    });
    assert_eq!(messages, ["agent already exists", "session already exists", "turn already exists"]);
}

/// Turn creation (which cancels the previous turn), log batches with turn states spanning
/// sessions, and session deletes, all at once on the same sessions: every call succeeds, so
/// none of them ever deadlocks with another (PostgreSQL would abort one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_turn_creation_and_deletes_never_deadlock() {
    const ROUNDS: usize = 40;
    let schema = ScratchSchema::new().await;
    let replicas: [Arc<dyn Store>; 2] = [schema.store(), Arc::new(schema.second_store().await)];
    for session in ["ses_a", "ses_b"] {
        replicas[0].create_session(&draft_session(session)).await.expect("create_session");
    }
    let sequence = Arc::new(AtomicU64::new(10));
    let next = move || sequence.fetch_add(1, Ordering::Relaxed);

    let mut tasks = Vec::new();
    // One turn creator per session, each turn cancelling the one before it.
    for (index, session) in ["ses_a", "ses_b"].into_iter().enumerate() {
        let store = Arc::clone(&replicas[index]);
        tasks.push(tokio::spawn(async move {
            let mut previous: Option<String> = None;
            for round in 0..ROUNDS {
                let turn_id = format!("{session}_turn_{round}");
                let mut writes = vec![stream(&turn_id, 1, "created")];
                if let Some(previous) = &previous {
                    let cancelled = TurnState::Cancelled {
                        reason: CancelReason::CancelledForNextTurn,
                        completed_at: "2025-01-01T00:00:02.000Z".into(),
                        metrics: None,
                    };
                    writes.push(LogWrite::TurnState {
                        turn_id: previous.as_str().into(),
                        state: cancelled,
                        at: "2025-01-01T00:00:02.000Z".into(),
                    });
                    writes.push(stream(previous, 1_000_000, "cancelled"));
                }
                store
                    .create_turn(&turn(&turn_id, session, previous.as_deref()), previous.as_deref(), &writes)
                    .await
                    .map_err(|error| format!("create_turn {turn_id}: {error}"))?;
                previous = Some(turn_id);
            }
            Ok::<(), String>(())
        }));
    }
    // A group-commit writer adding to the current turn of every session in each batch, in
    // alternating order, every other batch finishing the turns too.
    {
        let store = Arc::clone(&replicas[1]);
        let next = next.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..ROUNDS * 4 {
                let mut batch = Vec::new();
                let sessions = if round % 2 == 0 { ["ses_a", "ses_b", "ses_c"] } else { ["ses_c", "ses_b", "ses_a"] };
                for session in sessions {
                    let last = store.get_session(session).await.ok().and_then(|session| session.last_turn_id);
                    if let Some(turn_id) = last {
                        batch.push(stream(&turn_id, next(), "delta"));
                        if round % 4 < 2 {
                            batch.push(done(&turn_id, "2025-01-01T00:00:03.000Z"));
                        }
                    }
                }
                store.write(&batch).await.map_err(|error| format!("write: {error}"))?;
            }
            Ok(())
        }));
    }
    // A session that is created, written to and deleted over and over.
    {
        let store = Arc::clone(&replicas[0]);
        tasks.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                let turn_id = format!("ses_c_turn_{round}");
                store
                    .create_session(&draft_session("ses_c"))
                    .await
                    .map_err(|error| format!("create_session: {error}"))?;
                store
                    .create_turn(&turn(&turn_id, "ses_c", None), None, &[])
                    .await
                    .map_err(|error| format!("create_turn: {error}"))?;
                store
                    .write(&[stream(&turn_id, next(), "delta"), done(&turn_id, "2025-01-01T00:00:04.000Z")])
                    .await
                    .map_err(|error| format!("write: {error}"))?;
                store.delete_session("ses_c").await.map_err(|error| format!("delete_session: {error}"))?;
            }
            Ok(())
        }));
    }
    for task in tasks {
        task.await.expect("a task panicked").expect("every call succeeds");
    }
    let last_a = replicas[0].get_session("ses_a").await.expect("get_session").last_turn_id;
    assert_eq!(last_a.as_deref(), Some(format!("ses_a_turn_{}", ROUNDS - 1).as_str()));
}

/// What a second replica hears of the first one's writes: each session change, each log write
/// (per turn, with its last sequence number), each cancel request and each setting write.
#[tokio::test]
async fn a_write_on_one_store_wakes_the_other() {
    let schema = ScratchSchema::new().await;
    let writer = schema.store();
    let reader = schema.second_store().await;
    let mut feed = reader.changes().await.expect("changes").expect("PostgreSQL has a change feed");

    let session = draft_session("ses_1");
    writer.create_session(&session).await.expect("create_session");
    let creator = Some(session.created_by.subject_id.as_str().into());
    assert_eq!(next_change(&mut feed).await, Change::Session { session_id: "ses_1".into(), listed_for: creator });
    writer
        .create_turn(&turn("turn_1", "ses_1", None), None, &[stream("turn_1", 1, "created")])
        .await
        .expect("create_turn");
    // One statement announces both, in whichever order it evaluates them.
    let mut announced = vec![next_change(&mut feed).await, next_change(&mut feed).await];
    announced.sort_by_key(|change| format!("{change:?}"));
    assert_eq!(
        announced,
        vec![
            Change::Session { session_id: "ses_1".into(), listed_for: None },
            Change::Turn { turn_id: "turn_1".into(), last_sequence: 1 },
        ]
    );

    writer.write(&[stream("turn_1", 2, "delta"), stream("turn_1", 3, "delta")]).await.expect("write");
    assert_eq!(next_change(&mut feed).await, Change::Turn { turn_id: "turn_1".into(), last_sequence: 3 });

    assert!(writer.request_cancel("turn_1", CancelReason::ClientCancelled).await.expect("request_cancel"));
    assert_eq!(
        next_change(&mut feed).await,
        Change::CancelRequested { turn_id: "turn_1".into(), reason: CancelReason::ClientCancelled }
    );
    assert_eq!(
        reader.cancel_requests(&["turn_1"]).await.expect("cancel_requests"),
        vec![("turn_1".to_owned(), CancelReason::ClientCancelled)],
        "the request is durable for the replica that missed the announcement"
    );

    writer.write(&[stream("turn_1", 4, "done"), done("turn_1", "2025-01-01T00:00:05.000Z")]).await.expect("write");
    assert_eq!(next_change(&mut feed).await, Change::Turn { turn_id: "turn_1".into(), last_sequence: 4 });

    writer.put_setting("model-provider", "fake", "{}", "2025-01-01T00:00:06.000Z").await.expect("put_setting");
    assert_eq!(next_change(&mut feed).await, Change::Setting { kind: "model-provider".to_owned() });
}

/// When the feed's connection is killed, the feed says it may have missed changes, listens
/// again on a new connection, and goes on hearing writes.
#[tokio::test]
async fn the_feed_listens_again_after_its_connection_is_killed() {
    let schema = ScratchSchema::new().await;
    let writer = schema.store();
    let reader = schema.second_store().await;
    let mut feed = reader.changes().await.expect("changes").expect("PostgreSQL has a change feed");

    let mut admin = PgConnection::connect(&schema.server_url).await.expect("connect");
    let killed: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE application_name = 'teamster-feed' AND query = $1",
    )
    .bind(format!("LISTEN \"{}\"", reader.change_channel()))
    .fetch_all(&mut admin)
    .await
    .expect("terminate the listening connection");
    let _ = admin.close().await;
    assert_eq!(killed, vec![true], "exactly one connection listens on the schema's channel");

    let missed = tokio::time::timeout(Duration::from_secs(20), feed.next()).await.expect("a change within 20 s");
    assert_eq!(missed, Some(Change::Missed), "a dropped connection is announced as a miss");

    writer.put_setting("mcp-server", "x", "{}", "2025-01-01T00:00:00.000Z").await.expect("put_setting");
    assert_eq!(next_change(&mut feed).await, Change::Setting { kind: "mcp-server".to_owned() });
}

/// Stores in two schemas of one database have channels of their own: neither hears the other.
#[tokio::test]
async fn stores_in_other_schemas_are_not_heard() {
    let mine = ScratchSchema::new().await;
    let other = ScratchSchema::new().await;
    assert_ne!(mine.store.change_channel(), other.store.change_channel());
    let mut feed = mine.store.changes().await.expect("changes").expect("PostgreSQL has a change feed");

    // Notifications reach listeners in commit order, so had the other schema's write been
    // heard here, it would come first.
    other.store().put_setting("model-provider", "theirs", "{}", "2025-01-01T00:00:00.000Z").await.expect("put");
    mine.store().put_setting("mcp-server", "mine", "{}", "2025-01-01T00:00:00.000Z").await.expect("put");
    assert_eq!(next_change(&mut feed).await, Change::Setting { kind: "mcp-server".to_owned() });
}

/// A turn left running before leases existed has no lease row (migration 0004 adds none): it
/// counts as expired at claim 0, one takeover gives it a lease, and it is then held like any.
#[tokio::test]
async fn a_running_turn_without_a_lease_is_expired_and_taken_over_once() {
    let schema = ScratchSchema::new().await;
    let store = schema.store();
    store.create_session(&draft_session("ses_1")).await.expect("create_session");
    store.create_turn(&turn("turn_1", "ses_1", None), None, &[]).await.expect("create_turn");
    let mut admin = PgConnection::connect(&in_schema(&schema.server_url, &schema.name)).await.expect("connect");
    admin.execute("DELETE FROM turn_leases").await.expect("drop the lease row, as before 0004");
    let _ = admin.close().await;

    let expired = store.expired_leases(10).await.expect("expired_leases");
    assert_eq!(
        expired,
        vec![ExpiredLease { session_id: "ses_1".into(), turn_id: "turn_1".into(), owner: None, claims: 0 }]
    );
    let second: Arc<dyn Store> = Arc::new(schema.second_store().await);
    let ttl = Duration::from_secs(600);
    let (first, other) = tokio::join!(store.claim_turn("turn_1", "r1", ttl, 0), second.claim_turn("turn_1", "r2", ttl, 0));
    let won: Vec<TurnLease> = [first, other].into_iter().filter_map(|claim| claim.expect("claim_turn")).collect();
    assert_eq!(won, vec![TurnLease { turn_id: "turn_1".into(), claims: 1 }], "one of two racing takeovers wins");
    assert_eq!(store.expired_leases(10).await.expect("expired_leases"), vec![]);
}

/// A fenced write already in flight when its turn is taken over writes nothing: a write held
/// up (here by a session lock, as by a slow database) until the takeover has committed finds
/// the new lease when it goes on and leaves the turn out, with or without turn states; and a
/// takeover waits for a write that holds the lease row (its key-share lock), so that the new
/// holder reads whatever that write committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_write_in_flight_at_a_takeover_commits_before_it_or_not_at_all() {
    let schema = ScratchSchema::new().await;
    let old: Arc<dyn Store> = schema.store();
    let new: Arc<dyn Store> = Arc::new(schema.second_store().await);
    let url = in_schema(&schema.server_url, &schema.name);
    let held = |turn_id: &str, claims: u64| TurnLease { turn_id: turn_id.to_owned(), claims };
    for (index, with_state) in [false, true].into_iter().enumerate() {
        let (session_id, turn_id) = (format!("ses_{index}"), format!("turn_{index}"));
        old.create_session(&draft_session(&session_id)).await.expect("create_session");
        old.create_turn(&turn(&turn_id, &session_id, None), None, &[stream(&turn_id, 1, "created")]).await.expect("create_turn");
        let renewed = old.renew_leases("r1", &[held(&turn_id, 1)], Duration::from_millis(1)).await.expect("renew_leases");
        assert_eq!(renewed, [turn_id.as_str()]);
        tokio::time::sleep(Duration::from_millis(50)).await;

        let mut admin = PgConnection::connect(&url).await.expect("connect");
        admin.execute("BEGIN").await.expect("begin");
        sqlx::query("SELECT 1 FROM sessions WHERE id = $1 FOR UPDATE").bind(&session_id).execute(&mut admin).await.expect("lock");
        let mut batch = vec![stream(&turn_id, 2, "stale")];
        if with_state {
            batch.push(done(&turn_id, "2025-01-01T00:00:05.000Z"));
        }
        let writing = {
            let (old, lease) = (Arc::clone(&old), held(&turn_id, 1));
            tokio::spawn(async move { old.write_held("r1", &[lease], &batch).await })
        };
        wait_until_blocked_by(&mut admin).await;
        let taken = new.claim_turn(&turn_id, "r2", Duration::from_secs(600), 1).await.expect("claim_turn");
        assert_eq!(taken, Some(held(&turn_id, 2)));
        admin.execute("COMMIT").await.expect("commit");
        let left_out = writing.await.expect("the writing task").expect("write_held");
        assert_eq!(left_out, [turn_id.as_str()], "the write in flight is refused (with a state: {with_state})");
        assert_eq!(new.last_sequence(&turn_id).await.expect("last_sequence"), 1);
        assert_eq!(new.get_turn(&session_id, &turn_id).await.expect("get_turn").state, TurnState::Running);
    }

    // A takeover of a lease row that a write holds waits for the write to end.
    old.create_session(&draft_session("ses_w")).await.expect("create_session");
    old.create_turn(&turn("turn_w", "ses_w", None), None, &[]).await.expect("create_turn");
    old.renew_leases("r1", &[held("turn_w", 1)], Duration::from_millis(1)).await.expect("renew_leases");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut admin = PgConnection::connect(&url).await.expect("connect");
    admin.execute("BEGIN").await.expect("begin");
    admin.execute("SELECT 1 FROM turn_leases WHERE turn_id = 'turn_w' FOR KEY SHARE").await.expect("lock as a write does");
    let claiming = {
        let new = Arc::clone(&new);
        tokio::spawn(async move { new.claim_turn("turn_w", "r2", Duration::from_secs(600), 1).await })
    };
    wait_until_blocked_by(&mut admin).await;
    admin.execute("COMMIT").await.expect("commit");
    assert_eq!(claiming.await.expect("the claiming task").expect("claim_turn"), Some(held("turn_w", 2)));
}

/// Waits until another backend waits for a lock that `admin`'s transaction holds.
async fn wait_until_blocked_by(admin: &mut PgConnection) {
    for _ in 0..500 {
        let waiting: i64 =
            sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE pg_backend_pid() = ANY(pg_blocking_pids(pid))")
                .fetch_one(&mut *admin)
                .await
                .expect("pg_stat_activity");
        if waiting > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("nothing waited for the lock within 5 s");
}

/// When the server ends every pooled connection (a restart, an operator's
/// `pg_terminate_backend`), at most one call fails, with a backend error; the idle connections
/// are checked before their next use and replaced, so the calls after it succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_connections_fail_at_most_one_call_and_are_replaced() {
    let schema = ScratchSchema::new().await;
    let application = format!("{}_pool", schema.name);
    let store = Arc::new(schema.store_with(&format!("pool_size=4&application_name={application}")).await);
    let mut admin = PgConnection::connect(&in_schema(&schema.server_url, &schema.name)).await.expect("connect");
    // Outside `admin`'s transaction, which would see one snapshot of `pg_stat_activity`.
    let mut watcher = PgConnection::connect(&schema.server_url).await.expect("connect");

    // Four calls waiting on a locked table hold four connections, which go back to the pool.
    admin.execute("BEGIN").await.expect("begin");
    admin.execute("LOCK TABLE settings IN ACCESS EXCLUSIVE MODE").await.expect("lock the settings");
    let calls: Vec<_> = (0..4)
        .map(|_| {
            let store = Arc::clone(&store);
            tokio::spawn(async move { store.get_setting("mcp-server", "x").await })
        })
        .collect();
    wait_for_backends(&mut watcher, &application, "wait_event_type = 'Lock'", 4).await;
    admin.execute("COMMIT").await.expect("commit");
    for call in calls {
        assert_eq!(call.await.expect("the calling task").expect("get_setting"), None);
    }

    let killed: Vec<bool> =
        sqlx::query_scalar("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1")
            .bind(&application)
            .fetch_all(&mut admin)
            .await
            .expect("terminate the store's connections");
    assert_eq!(killed, [true; 4], "the pool kept the four connections");
    wait_for_backends(&mut watcher, &application, "TRUE", 0).await;

    match store.get_setting("mcp-server", "x").await {
        Ok(None) | Err(Error::Backend(_)) => {}
        other => panic!("expected nothing or a backend error, got {other:?}"),
    }
    for _ in 0..4 {
        assert_eq!(store.get_setting("mcp-server", "x").await.expect("a call after the first one"), None);
    }
    store.put_setting("mcp-server", "x", "{}", "2025-01-01T00:00:00.000Z").await.expect("put_setting");
    assert_eq!(store.get_setting("mcp-server", "x").await.expect("get_setting").as_deref(), Some("{}"));
}

/// A call cancelled mid-transaction (its future dropped while a statement waits for a lock)
/// gives its connection up at once, and leaves nothing open: its transaction is rolled back,
/// and the next calls, on the pool's one connection, neither wait for it nor see its writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cancelled_mid_transaction_neither_holds_up_nor_breaks_the_next() {
    let schema = ScratchSchema::new().await;
    let store = Arc::new(schema.store_with("pool_size=1").await);
    store.create_session(&draft_session("ses_1")).await.expect("create_session");

    let mut admin = PgConnection::connect(&in_schema(&schema.server_url, &schema.name)).await.expect("connect");
    admin.execute("BEGIN").await.expect("begin");
    admin.execute("SELECT 1 FROM sessions WHERE id = 'ses_1' FOR UPDATE").await.expect("lock the session");
    let creating = {
        let store = Arc::clone(&store);
        // A first write with a turn state: `create_turn` opens a transaction.
        let writes = [stream("turn_1", 1, "created"), done("turn_1", "2025-01-01T00:00:02.000Z")];
        tokio::spawn(async move { store.create_turn(&turn("turn_1", "ses_1", None), None, &writes).await })
    };
    wait_until_blocked_by(&mut admin).await;
    creating.abort();
    assert!(creating.await.expect_err("the call was cancelled").is_cancelled());

    // The cancelled statement still waits for the lock; the pool's connection is free all the same.
    assert_eq!(store.get_session("ses_1").await.expect("get_session").last_turn_id, None);
    admin.execute("COMMIT").await.expect("commit");

    store
        .create_turn(&turn("turn_2", "ses_1", None), None, &[stream("turn_2", 1, "created")])
        .await
        .expect("the session's last turn is still none");
    assert!(matches!(store.get_turn("ses_1", "turn_1").await, Err(Error::NotFound(_))), "the cancelled turn was rolled back");
    assert_eq!(store.get_session("ses_1").await.expect("get_session").last_turn_id.as_deref(), Some("turn_2"));
}

/// Waits until exactly `count` backends named `application` match `condition` (SQL over
/// `pg_stat_activity`).
async fn wait_for_backends(watcher: &mut PgConnection, application: &str, condition: &str, count: i64) {
    let sql = format!("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND {condition}");
    for _ in 0..500 {
        let matching: i64 = sqlx::query_scalar(&sql).bind(application).fetch_one(&mut *watcher).await.expect("pg_stat_activity");
        if matching == count {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{count} backends of {application} did not match {condition} within 5 s");
}

/// An agent stored before migration 0009 gave agents owners belongs to the tenant `local` (the
/// local user's, an admin, on a server without authentication) and has no creator.
#[tokio::test]
async fn agents_stored_before_owners_belong_to_the_local_tenant() {
    let server_url = std::env::var(SERVER_URL).unwrap_or_else(|_| panic!("set {SERVER_URL} or run scripts/test, which starts PostgreSQL"));
    let name = format!("test_{}_{:016x}", std::process::id(), fastrand::u64(..));
    let mut admin = PgConnection::connect(&server_url).await.expect("connect");
    admin.execute(format!("CREATE SCHEMA {name}").as_str()).await.expect("create a scratch schema");
    let _ = admin.close().await;
    let mut old = PgConnection::connect(&in_schema(&server_url, &name)).await.expect("connect to the scratch schema");
    let mut before = sqlx::migrate!("./migrations");
    before.migrations = before.migrations.iter().filter(|migration| migration.version < 9).cloned().collect::<Vec<_>>().into();
    before.run(&mut old).await.expect("the migrations before 0009");
    old.execute(
        "INSERT INTO agents (id, name, latest_version, created_at) VALUES ('agt_old', 'old-bot', 1, '2025-01-01T00:00:00.000Z'); \
         INSERT INTO agent_versions (agent_id, version, spec, created_at) \
         VALUES ('agt_old', 1, '{\"model\":{\"name\":\"p/m\"}}', '2025-01-01T00:00:00.000Z')",
    )
    .await
    .expect("an agent of the old schema");
    let _ = old.close().await;

    let store = PostgresStore::connect(&in_schema(&server_url, &name)).await.expect("the store migrates the schema");
    let schema = ScratchSchema { store: Arc::new(store), name, server_url };
    let agent = schema.store.get_agent("agt_old").await.expect("the old agent");
    assert_eq!((agent.tenant.as_str(), agent.created_by.clone(), agent.name.as_str()), ("local", None, "old-bot"));
    // After migration 0012 the name is unique in its tenant only; the versions stay its own.
    let store = &schema.store;
    assert_eq!(store.get_agent_by_name("local", "old-bot").await.expect("the old agent by name"), agent);
    let theirs = teamster_store::AgentRecord { id: "agt_new".into(), tenant: "acme".into(), ..agent.clone() };
    store.create_agent(&theirs).await.expect("another tenant takes the name");
    let mine = teamster_store::AgentRecord { id: "agt_dup".into(), ..agent.clone() };
    assert!(matches!(store.create_agent(&mine).await, Err(teamster_store::Error::Conflict(_))), "the name is still taken in its tenant");
    assert!(store.delete_agent("agt_old").await.expect("delete_agent"));
    assert!(matches!(store.get_agent_version("agt_old", 1).await, Err(teamster_store::Error::NotFound(_))));
    assert_eq!(store.get_agent_by_name("acme", "old-bot").await.expect("the other tenant's agent"), theirs);
}
