//! Runs the store conformance suite against a fresh in-memory SQLite store per test and a fresh
//! file database per test, and checks what only SQLite has: a file database keeps everything
//! across closing and reopening, and a call cancelled mid-transaction does not wedge the writer.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::task::{Context, Waker};

use teamster_protocol::{Subject, TurnState};
use teamster_store::prelude::*;
use teamster_store::{
    AgentRecord, ContentEvent, ContentKinds, ContentQuery, Error, LogWrite, SessionAgentRecord, SessionRecord, Store, StreamEvent,
    TurnRecord,
};
use teamster_store_sqlite::SqliteStore;

async fn fresh_store() -> Arc<dyn Store> {
    Arc::new(SqliteStore::connect("sqlite::memory:").await.expect("an in-memory store"))
}

teamster_store::conformance_tests!(fresh_store());

/// The same suite on file databases, which read through their own read connections (an
/// in-memory database reads through its one connection).
mod file_database {
    use super::*;

    /// A store on a new file under cargo's directory for test files (left there: the store
    /// outlives this function).
    async fn fresh_file_store() -> Arc<dyn Store> {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|elapsed| elapsed.as_nanos()).unwrap_or_default();
        let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("sqlite-conformance/{}-{nanos}/db.sqlite", std::process::id()));
        Arc::new(SqliteStore::connect(&path.display().to_string()).await.expect("a file store"))
    }

    teamster_store::conformance_tests!(fresh_file_store());
}

/// A directory under the system temp directory that is removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.as_nanos())
            .unwrap_or_default();
        TempDir(std::env::temp_dir().join(format!("teamster-{name}-{}-{nanos}", std::process::id())))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The database holds every session and the sealed secrets: another user of the machine reads
/// none of it, whatever the process's umask (the common 022 would leave it world-readable).
#[tokio::test]
async fn a_new_database_and_its_files_are_private_to_their_owner() {
    use std::os::unix::fs::PermissionsExt;
    let directory = TempDir::new("sqlite-private");
    let path = directory.0.join("data").join("teamster.db");
    let store = SqliteStore::connect(&format!("sqlite://{}", path.display())).await.expect("connect to a new file");
    // A write, so the log and its index exist too.
    store.put_setting("test", "x", r#"{"secret":"s3cr3t"}"#, "2025-01-01T00:00:00.000Z").await.expect("a setting");
    let mode = |path: &std::path::Path| std::fs::metadata(path).map(|meta| meta.permissions().mode() & 0o777);
    let file = |suffix: &str| PathBuf::from(format!("{}{suffix}", path.display()));
    for suffix in ["", "-wal", "-shm", ".lock"] {
        assert_eq!(mode(&file(suffix)).expect("the file exists"), 0o600, "teamster.db{suffix}");
    }
    store.close().await;
}

#[tokio::test]
async fn a_file_database_survives_reopening() {
    let directory = TempDir::new("sqlite-reopen");
    // The parent directories do not exist yet: connect creates them.
    let path = directory.0.join("nested").join("teamster.db");
    let url = format!("sqlite://{}", path.display());

    let agent = AgentRecord {
        id: "agt_1".into(),
        name: "support-bot".into(),
        version: 1,
        spec: serde_json::from_value(serde_json::json!({"model": {"name": "openai-main/gpt-4o"}, "instructions": "Be brief."}))
            .expect("a valid spec"),
        created_at: "2025-01-01T00:00:00.000Z".into(),
        updated_at: "2025-01-01T00:00:00.000Z".into(),
        tenant: "local".into(),
        created_by: None,
    };
    let subject = Subject { subject_id: "alice".into(), subject_type: "user".into(), subject_slug: "alice".into() };
    let session = SessionRecord {
        id: "ses_1".into(),
        agent: SessionAgentRecord::Saved { agent_id: "agt_1".into(), agent_name: "support-bot".into(), version: 1 },
        title: Some("Kept".into()),
        created_by: subject.clone(),
        created_at: "2025-01-01T00:00:01.000Z".into(),
        updated_at: "2025-01-01T00:00:01.000Z".into(),
        last_turn_id: None,
        control: Default::default(),
        resource_id: None,
    };
    let turn = TurnRecord {
        id: "turn_1".into(),
        session_id: "ses_1".into(),
        previous_turn_id: None,
        input: serde_json::from_value(serde_json::json!([{"type": "user.message", "content": "hi"}])).expect("input"),
        state: TurnState::Running,
        created_by: subject,
        created_at: "2025-01-01T00:00:02.000Z".into(),
        control: Default::default(),
        request_context: None,
    };
    let created = r#"{"type":"turn.created","turn_id":"turn_1"}"#;

    let store = SqliteStore::connect(&url).await.expect("connect to a new file");
    store.create_agent(&agent).await.expect("create_agent");
    store.create_session(&session).await.expect("create_session");
    let writes = [
        LogWrite::Stream { turn_id: "turn_1".into(), sequence: 1, data: created.into() },
        LogWrite::Content { turn_id: "turn_1".into(), sequence: 1, kind: "turn.created", data: created.into() },
    ];
    store.create_turn(&turn, None, &writes).await.expect("create_turn");
    assert!(path.exists(), "the database file is created");
    assert!(directory.0.join("nested").join("teamster.db-wal").exists(), "the database is in WAL mode");
    store.close().await;

    // Reopen by bare path this time; migrations run again and must be a no-op.
    for target in [path.display().to_string(), url] {
        let store = SqliteStore::connect(&target).await.expect("reopen");
        assert_eq!(store.get_agent("agt_1").await.expect("get_agent"), agent);
        assert_eq!(
            store.get_session("ses_1").await.expect("get_session"),
            SessionRecord { last_turn_id: Some("turn_1".into()), ..session.clone() }
        );
        assert_eq!(store.get_turn("ses_1", "turn_1").await.expect("get_turn"), turn);
        assert_eq!(
            store.read_stream("turn_1", 0, 10).await.expect("read_stream"),
            vec![StreamEvent { sequence: 1, data: created.into() }]
        );
        let all = ContentQuery { kinds: ContentKinds::All, descending: false, after: None, limit: 10 };
        assert_eq!(
            store.read_content("turn_1", &all).await.expect("read_content"),
            vec![ContentEvent { sequence: 1, kind: "turn.created".into(), data: created.into() }]
        );
        assert_eq!(store.running_turns().await.expect("running_turns"), vec![turn.clone()]);
        store.close().await;
    }
}

#[tokio::test]
async fn a_database_file_belongs_to_one_store_at_a_time() {
    let directory = TempDir::new("sqlite-lock");
    let path = directory.0.join("teamster.db");
    let first = SqliteStore::connect(&path.display().to_string()).await.expect("the first store opens the file");
    let refused = SqliteStore::connect(&format!("sqlite://{}", path.display())).await.expect_err("a second store is refused");
    assert!(refused.to_string().contains("in use by another process"), "{refused}");
    first.close().await;
    let again = SqliteStore::connect(&path.display().to_string()).await.expect("a closed store lets go of the file");
    drop(again);
    SqliteStore::connect(&path.display().to_string()).await.expect("a dropped store lets go of the file");
}

#[tokio::test]
async fn a_call_cancelled_mid_transaction_does_not_wedge_the_writer() {
    let store = SqliteStore::connect("sqlite::memory:").await.expect("an in-memory store");
    let subject = Subject { subject_id: "alice".into(), subject_type: "user".into(), subject_slug: "alice".into() };
    let session = SessionRecord {
        id: "ses_1".into(),
        agent: SessionAgentRecord::Draft {
            spec: serde_json::from_value(serde_json::json!({"model": {"name": "openai-main/gpt-4o"}})).expect("spec"),
            agent_name: None,
        },
        title: None,
        created_by: subject.clone(),
        created_at: "2025-01-01T00:00:00.000Z".into(),
        updated_at: "2025-01-01T00:00:00.000Z".into(),
        last_turn_id: None,
        control: Default::default(),
        resource_id: None,
    };
    let turn = |id: &str, previous: Option<&str>| TurnRecord {
        id: id.into(),
        session_id: "ses_1".into(),
        previous_turn_id: previous.map(str::to_owned),
        input: vec![],
        state: TurnState::Running,
        created_by: subject.clone(),
        created_at: "2025-01-01T00:00:01.000Z".into(),
        control: Default::default(),
        request_context: None,
    };
    let agent = AgentRecord {
        id: "agt_1".into(),
        name: "support-bot".into(),
        version: 1,
        spec: serde_json::from_value(serde_json::json!({"model": {"name": "openai-main/gpt-4o"}})).expect("spec"),
        created_at: "2025-01-01T00:00:00.000Z".into(),
        updated_at: "2025-01-01T00:00:00.000Z".into(),
        tenant: "local".into(),
        created_by: None,
    };
    store.create_agent(&agent).await.expect("create_agent");
    store.create_session(&session).await.expect("create_session");
    store.create_turn(&turn("turn_1", None), None, &[]).await.expect("create_turn");

    // Creating the agent again fails inside its transaction (its id is taken), and its caller
    // is gone before it can roll back: the first poll sends the command to the connection's
    // worker, then the call is dropped. The worker may answer before that poll returns (the
    // call then just fails), so this is tried until a call was dropped in flight.
    let dropped_in_flight = (0..100).any(|_| {
        let mut call = Box::pin(store.create_agent(&agent));
        let pending = call.as_mut().poll(&mut Context::from_waker(Waker::noop())).is_pending();
        drop(call);
        pending
    });
    assert!(dropped_in_flight, "no call was still in flight after its first poll");

    // The statements of the turn path, on their own connection, find the writer free.
    store.create_turn(&turn("turn_2", Some("turn_1")), Some("turn_1"), &[]).await.expect("create_turn after a cancelled call");
    let event = LogWrite::Stream { turn_id: "turn_2".into(), sequence: 1, data: "{}".into() };
    store.write(&[event]).await.expect("write after a cancelled call");
    assert_eq!(store.get_session("ses_1").await.expect("get_session").last_turn_id.as_deref(), Some("turn_2"));
    assert_eq!(store.last_sequence("turn_2").await.expect("last_sequence"), 1);
    let stale = store.create_turn(&turn("turn_stale", None), None, &[]).await.expect_err("a stale compare-and-set");
    assert!(matches!(stale, Error::Conflict(_)), "{stale}");
    assert!(store.get_turn("ses_1", "turn_stale").await.is_err(), "the stale turn was not created");
    // Its transaction was rolled back: the writer takes the next one.
    let event = LogWrite::Stream { turn_id: "turn_2".into(), sequence: 2, data: "{}".into() };
    store.write(&[event]).await.expect("write after a failed compare-and-set");
    assert_eq!(store.last_sequence("turn_2").await.expect("last_sequence"), 2);
    assert_eq!(store.get_agent("agt_1").await.expect("get_agent").version, 1);
}

/// An agent stored before migration 0009 gave agents owners belongs to the tenant `local` (the
/// local user's, an admin, on a server without authentication) and has no creator.
#[tokio::test]
async fn agents_stored_before_owners_belong_to_the_local_tenant() {
    let directory = TempDir::new("sqlite-owners");
    std::fs::create_dir_all(&directory.0).expect("a scratch directory");
    let url = format!("sqlite://{}", directory.0.join("old.db").display());
    let options = <sqlx::sqlite::SqliteConnectOptions as std::str::FromStr>::from_str(&url).expect("a URL").create_if_missing(true);
    let pool = sqlx::SqlitePool::connect_with(options).await.expect("an old database");
    let mut before = sqlx::migrate!("./migrations");
    before.migrations = before.migrations.iter().filter(|migration| migration.version < 9).cloned().collect::<Vec<_>>().into();
    before.run(&pool).await.expect("the migrations before 0009");
    for statement in [
        "INSERT INTO agents (id, name, latest_version, created_at) VALUES ('agt_old', 'old-bot', 1, '2025-01-01T00:00:00.000Z')",
        "INSERT INTO agent_versions (agent_id, version, spec, created_at) VALUES ('agt_old', 1, '{\"model\":{\"name\":\"p/m\"}}', '2025-01-01T00:00:00.000Z')",
    ] {
        sqlx::query(statement).execute(&pool).await.expect("an agent of the old schema");
    }
    pool.close().await;

    let store = SqliteStore::connect(&url).await.expect("the store migrates the database");
    let agent = store.get_agent("agt_old").await.expect("the old agent");
    assert_eq!((agent.tenant.as_str(), agent.created_by.clone(), agent.name.as_str()), ("local", None, "old-bot"));
    names_are_unique_per_tenant_after_the_migrations(&store, agent).await;
}

/// After migration 0012 an agent of the old schema keeps its versions and name, which another
/// tenant may now take too, while its own tenant still may not.
async fn names_are_unique_per_tenant_after_the_migrations(store: &SqliteStore, old: teamster_store::AgentRecord) {
    assert_eq!(store.get_agent_by_name("local", "old-bot").await.expect("the old agent by name"), old);
    assert_eq!(store.get_agent_version("agt_old", 1).await.expect("its first version"), old);
    let theirs = teamster_store::AgentRecord { id: "agt_new".into(), tenant: "acme".into(), ..old.clone() };
    store.create_agent(&theirs).await.expect("another tenant takes the name");
    let mine = teamster_store::AgentRecord { id: "agt_dup".into(), ..old.clone() };
    assert!(matches!(store.create_agent(&mine).await, Err(teamster_store::Error::Conflict(_))), "the name is still taken in its tenant");
    // The versions still go with their agent.
    assert!(store.delete_agent("agt_old").await.expect("delete_agent"));
    assert!(matches!(store.get_agent_version("agt_old", 1).await, Err(teamster_store::Error::NotFound(_))));
    assert_eq!(store.get_agent_by_name("acme", "old-bot").await.expect("the other tenant's agent"), theirs);
}
