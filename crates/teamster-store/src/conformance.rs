//! The backend-neutral conformance suite for [`Store`]: every backend runs exactly these
//! checks, through [`conformance_tests!`](crate::conformance_tests).
//!
//! Each check is a `pub async fn` that takes a fresh, empty store (`store: Arc<dyn Store>`)
//! and panics on the first behaviour that differs from the contract documented on [`Store`].
//! Checks compare whole records rather than single fields, so a backend that drops or mangles
//! a field fails loudly, and the cases with many combinations (session listing, content reads)
//! are tables checked against a small reference model. Timestamps are fixed strings, never the
//! clock, so every run sees the same data.
//!
//! Contract details that the trait's documentation leaves implicit, and that these checks pin:
//! - Reading the log of an unknown turn is empty (`read_stream`, `read_content`) or 0
//!   (`last_sequence`), not an error.
//! - Log writes are idempotent and never fail on data: a stream write to an existing (turn,
//!   sequence) keeps the stored event, and writes to a turn that does not exist (its session
//!   was deleted while the batch queued) are skipped. A group-commit writer that retries a
//!   batch, or that races a delete, therefore never wedges on it.
//! - `update_session` never touches `last_turn_id`, `created_by` or `created_at`, and never
//!   changes the pinned agent of a saved session.
//! - Deleting an agent deletes its versions but not the sessions that pinned one.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use teamster_protocol::control::SessionControl;
use teamster_protocol::session::SessionKind;
use teamster_protocol::turn::CancelReason;
use teamster_protocol::{AgentSpec, Subject, TurnInput, TurnState};

use crate::{
    AgentRecord, Change, ChangeFeed, ContentEvent, ContentKinds, ContentQuery, Error, LogWrite, Result, SessionAgentRecord,
    SessionFile, SessionOrder, SessionQuery, SessionRecord, Store, StreamEvent, TurnRecord,
};
use crate::{ExpiredLease, QueueKind, QueuedMessage, TurnLease};

/// Expands to one `#[tokio::test]` per conformance check, each on a fresh store.
///
/// The argument is an expression, evaluated anew for every test, that yields a future of a
/// [`Fixture`]: an `Arc<dyn Store>` holding no data, or a value that also owns what the store
/// needs (a scratch database, say) and is dropped when the test ends, even when it fails:
///
/// ```ignore
/// teamster_store::conformance_tests!(async {
///     let store = SqliteStore::connect("sqlite::memory:").await.expect("an in-memory store");
///     std::sync::Arc::new(store) as std::sync::Arc<dyn teamster_store::Store>
/// });
/// ```
///
/// The calling crate needs `tokio` with the `macros` and `rt-multi-thread` features. The tests
/// run on a two-worker runtime so that the race checks really race.
#[macro_export]
macro_rules! conformance_tests {
    (@names) => {
        $crate::conformance_tests!(@each names;)
    };
    (@each $mode:ident $($factory:expr)?;) => {
        $crate::conformance_tests! { @$mode $($factory)?;
            agent_create_and_get,
            agent_owner_is_kept_by_every_version,
            agent_name_and_id_are_unique,
            agent_versions_are_immutable_and_increment,
            agent_list_is_sorted_by_name_at_latest_version,
            agent_delete_removes_every_version,
            session_create_and_get,
            session_update_replaces_mutable_fields_only,
            session_delete_cascades_to_turns_and_events,
            session_files_are_stored_once_and_go_with_their_session,
            queued_messages_keep_their_order_bound_and_session,
            list_sessions_filters,
            list_sessions_orders,
            list_sessions_keyset_pages_visit_every_session_once,
            sessions_are_listed_by_resource_and_resources_by_creator,
            turn_create_and_get,
            turn_create_compares_and_sets_the_last_turn,
            turn_create_applies_initial_writes_atomically,
            turn_create_race_has_exactly_one_winner,
            get_turn_is_scoped_to_its_session,
            running_turns_are_oldest_first,
            oldest_turns_are_a_sessions_first,
            stream_events_read_back_byte_identical,
            content_events_replace_and_filter,
            turn_state_writes_update_turn_and_session,
            write_batches_are_idempotent_and_skip_vanished_turns,
            large_batch_in_one_write,
            leases_are_renewed_released_and_taken_over,
            lease_takeover_race_has_exactly_one_winner,
            fenced_writes_land_only_under_a_held_lease,
            expired_streams_are_deleted_in_bounded_batches,
            settings_put_list_and_delete,
            cancel_requests_are_recorded_for_running_turns,
            change_feed_announces_commits,
            request_buckets_take_refill_and_forget,
            turn_places_count_reservations_and_running_turns,
            tenant_spend_adds_up_per_window,
            model_uses_are_counted_per_tenant,
        }
    };
    (@names; $($check:ident),* $(,)?) => {
        &[$(stringify!($check)),*]
    };
    (@tests $factory:expr; $($check:ident),* $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                let fixture = $factory.await;
                let store = $crate::conformance::Fixture::store(&fixture);
                $crate::conformance::$check(store).await;
                drop(fixture);
            }
        )*
    };
    ($factory:expr $(,)?) => {
        $crate::conformance_tests!(@each tests $factory;);
    };
}

/// What a [`conformance_tests!`](crate::conformance_tests) factory yields: the store under
/// test, and anything that must live exactly as long as the test (dropped after the check,
/// also when it panics).
pub trait Fixture {
    /// The store under test.
    fn store(&self) -> Arc<dyn Store>;
}

impl Fixture for Arc<dyn Store> {
    fn store(&self) -> Arc<dyn Store> {
        Arc::clone(self)
    }
}

// Agents.

/// An agent reads back whole by id, by name and by version; unknown ones are `NotFound`.
pub async fn agent_create_and_get(store: Arc<dyn Store>) {
    let agent = agent_record("agt_1", "support-bot", rich_spec(), &at(0));
    store.create_agent(&agent).await.expect("create_agent");

    assert_eq!(store.get_agent("agt_1").await.expect("get_agent"), agent);
    assert_eq!(store.get_agent_by_name("acme", "support-bot").await.expect("get_agent_by_name"), agent);
    assert_eq!(store.get_agent_version("agt_1", 1).await.expect("get_agent_version"), agent);

    expect_not_found(store.get_agent("agt_missing").await, "get_agent of an unknown id");
    expect_not_found(store.get_agent("agt").await, "get_agent of an id prefix");
    expect_not_found(store.get_agent_by_name("acme", "missing").await, "get_agent_by_name of an unknown name");
    expect_not_found(store.get_agent_by_name("acme", "support").await, "get_agent_by_name of a name prefix");
    expect_not_found(store.get_agent_by_name("acme", "Support-Bot").await, "get_agent_by_name in another case");
    expect_not_found(store.get_agent_version("agt_1", 2).await, "get_agent_version of a future version");
    expect_not_found(store.get_agent_version("agt_1", 0).await, "get_agent_version 0");
    expect_not_found(store.get_agent_version("agt_missing", 1).await, "get_agent_version of an unknown agent");
}

/// An agent's tenant and creator read back as written, and every version keeps them; an agent
/// may have no recorded creator.
pub async fn agent_owner_is_kept_by_every_version(store: Arc<dyn Store>) {
    let creator = Subject { subject_id: "acme:ann".into(), subject_type: "user".into(), subject_slug: "ann".into() };
    let owned = AgentRecord { tenant: "acme".into(), created_by: Some(creator), ..agent_record("agt_1", "owned", simple_spec("one"), &at(0)) };
    store.create_agent(&owned).await.expect("create_agent");
    let unowned = AgentRecord { tenant: "local".into(), created_by: None, ..agent_record("agt_2", "unowned", simple_spec("two"), &at(1)) };
    store.create_agent(&unowned).await.expect("create_agent without a creator");

    let v2 = store.add_agent_version("agt_1", &simple_spec("one again"), &at(2)).await.expect("add_agent_version");
    assert_eq!(v2, AgentRecord { version: 2, spec: simple_spec("one again"), updated_at: at(2), ..owned.clone() });
    assert_eq!(store.get_agent("agt_1").await.expect("get_agent"), v2);
    assert_eq!(store.get_agent_version("agt_1", 1).await.expect("get_agent_version"), owned);
    assert_eq!(store.get_agent_by_name("local", "unowned").await.expect("get_agent_by_name"), unowned);
    assert_eq!(store.list_agents().await.expect("list_agents"), vec![v2, unowned]);
}

/// Names are unique per tenant, ids across the store; a rejected create changes nothing.
pub async fn agent_name_and_id_are_unique(store: Arc<dyn Store>) {
    let first = agent_record("agt_1", "support-bot", simple_spec("first"), &at(0));
    store.create_agent(&first).await.expect("create_agent");
    // Another tenant may have an agent of the same name; each name finds its own tenant's.
    let elsewhere = AgentRecord { tenant: "globex".into(), ..agent_record("agt_9", "support-bot", simple_spec("theirs"), &at(1)) };
    store.create_agent(&elsewhere).await.expect("create_agent of a name another tenant has");
    assert_eq!(store.get_agent_by_name("globex", "support-bot").await.expect("get_agent_by_name"), elsewhere);
    expect_not_found(store.get_agent_by_name("initech", "support-bot").await, "get_agent_by_name in a tenant without it");

    let same_name = agent_record("agt_2", "support-bot", simple_spec("second"), &at(5));
    expect_conflict(store.create_agent(&same_name).await, "create_agent with a taken name");
    let same_id = agent_record("agt_1", "other-bot", simple_spec("third"), &at(6));
    expect_conflict(store.create_agent(&same_id).await, "create_agent with a taken id");

    assert_eq!(store.get_agent_by_name("acme", "support-bot").await.expect("get_agent_by_name"), first);
    assert_eq!(store.get_agent("agt_1").await.expect("get_agent"), first);
    expect_not_found(store.get_agent("agt_2").await, "get_agent of a rejected agent");
    expect_not_found(store.get_agent_by_name("acme", "other-bot").await, "get_agent_by_name of a rejected agent");
    assert_eq!(store.list_agents().await.expect("list_agents"), vec![first, elsewhere]);
}

/// Every update stores a new version numbered one higher; old versions never change.
pub async fn agent_versions_are_immutable_and_increment(store: Arc<dyn Store>) {
    let v1 = agent_record("agt_1", "support-bot", simple_spec("version one"), &at(0));
    store.create_agent(&v1).await.expect("create_agent");

    let v2 = store
        .add_agent_version("agt_1", &simple_spec("version two"), &at(60))
        .await
        .expect("add_agent_version 2");
    assert_eq!(
        v2,
        AgentRecord { version: 2, spec: simple_spec("version two"), updated_at: at(60), ..v1.clone() }
    );
    let v3 = store.add_agent_version("agt_1", &rich_spec(), &at(120)).await.expect("add_agent_version 3");
    assert_eq!(v3, AgentRecord { version: 3, spec: rich_spec(), updated_at: at(120), ..v1.clone() });

    assert_eq!(store.get_agent("agt_1").await.expect("get_agent"), v3);
    assert_eq!(store.get_agent_by_name("acme", "support-bot").await.expect("get_agent_by_name"), v3);
    for (version, expected) in [(1, &v1), (2, &v2), (3, &v3)] {
        let stored = store.get_agent_version("agt_1", version).await.expect("get_agent_version");
        assert_eq!(&stored, expected, "version {version}");
    }
    expect_not_found(store.get_agent_version("agt_1", 4).await, "get_agent_version of a future version");
    expect_not_found(
        store.add_agent_version("agt_missing", &simple_spec("x"), &at(130)).await,
        "add_agent_version of an unknown agent",
    );
    assert_eq!(store.list_agents().await.expect("list_agents"), vec![v3]);
}

/// `list_agents` returns every agent once, at its latest version, sorted by name.
pub async fn agent_list_is_sorted_by_name_at_latest_version(store: Arc<dyn Store>) {
    assert_eq!(store.list_agents().await.expect("list_agents of an empty store"), vec![]);

    // Ids sort in another order than names, so sorting by id or by insertion fails.
    let mango = agent_record("agt_1", "mango", simple_spec("m"), &at(10));
    let apple = agent_record("agt_2", "apple", simple_spec("a"), &at(20));
    let zebra = agent_record("agt_3", "zebra", simple_spec("z"), &at(30));
    let kiwi = agent_record("agt_4", "kiwi", simple_spec("k1"), &at(40));
    for agent in [&mango, &apple, &zebra, &kiwi] {
        store.create_agent(agent).await.expect("create_agent");
    }
    let kiwi_v2 = store.add_agent_version("agt_4", &simple_spec("k2"), &at(50)).await.expect("add_agent_version");

    assert_eq!(store.list_agents().await.expect("list_agents"), vec![apple, kiwi_v2, mango, zebra]);
}

/// Deleting an agent removes it and all its versions, frees its name, and leaves the sessions
/// that pinned it readable.
pub async fn agent_delete_removes_every_version(store: Arc<dyn Store>) {
    let v1 = agent_record("agt_1", "support-bot", simple_spec("v1"), &at(0));
    let other = agent_record("agt_2", "other-bot", simple_spec("o"), &at(1));
    store.create_agent(&v1).await.expect("create_agent");
    store.create_agent(&other).await.expect("create_agent");
    let v2 = store.add_agent_version("agt_1", &simple_spec("v2"), &at(10)).await.expect("add_agent_version");
    let pinned = saved_session("ses_1", &v2, "alice", &at(20));
    store.create_session(&pinned).await.expect("create_session");

    assert!(store.delete_agent("agt_1").await.expect("delete_agent"), "the agent existed");
    assert!(!store.delete_agent("agt_1").await.expect("delete_agent again"), "the agent is gone");
    assert!(!store.delete_agent("agt_missing").await.expect("delete_agent of an unknown agent"));

    expect_not_found(store.get_agent("agt_1").await, "get_agent of a deleted agent");
    expect_not_found(store.get_agent_by_name("acme", "support-bot").await, "get_agent_by_name of a deleted agent");
    for version in [1, 2] {
        expect_not_found(store.get_agent_version("agt_1", version).await, "get_agent_version of a deleted agent");
    }
    expect_not_found(
        store.add_agent_version("agt_1", &simple_spec("v3"), &at(30)).await,
        "add_agent_version of a deleted agent",
    );
    assert_eq!(store.list_agents().await.expect("list_agents"), vec![other.clone()]);

    assert_eq!(store.get_session("ses_1").await.expect("get_session of a pinned session"), pinned);
    let by_agent = SessionQuery { agent_id: Some("agt_1".into()), limit: 10, ..SessionQuery::default() };
    assert_eq!(store.list_sessions(&by_agent).await.expect("list_sessions"), vec![pinned]);

    // The name is free again, for a new agent that starts over at version 1.
    let reborn = agent_record("agt_3", "support-bot", simple_spec("reborn"), &at(40));
    store.create_agent(&reborn).await.expect("create_agent with a freed name");
    assert_eq!(store.get_agent_by_name("acme", "support-bot").await.expect("get_agent_by_name"), reborn);
    expect_not_found(store.get_agent_version("agt_1", 1).await, "get_agent_version of the old agent");
    assert_eq!(store.list_agents().await.expect("list_agents"), vec![other, reborn]);
}

// Sessions.

/// Saved and draft sessions read back whole; ids are unique.
pub async fn session_create_and_get(store: Arc<dyn Store>) {
    let agent = agent_record("agt_1", "support-bot", simple_spec("a"), &at(0));
    store.create_agent(&agent).await.expect("create_agent");

    let saved = SessionRecord {
        title: Some("Quarterly report ✍️".into()),
        control: SessionControl { mode: Some("build".into()), ..SessionControl::default() },
        ..saved_session("ses_saved", &agent, "alice", &at(10))
    };
    let named_draft = SessionRecord {
        title: Some("Draft".into()),
        updated_at: at(15),
        ..draft_session("ses_draft", rich_spec(), Some("support-bot"), "bob", &at(11))
    };
    let anonymous_draft = draft_session("ses_anon", simple_spec("inline"), None, "carol", &at(12));
    for session in [&saved, &named_draft, &anonymous_draft] {
        store.create_session(session).await.expect("create_session");
    }

    for session in [&saved, &named_draft, &anonymous_draft] {
        assert_eq!(&store.get_session(&session.id).await.expect("get_session"), session);
    }
    let kinds: Vec<SessionKind> = [&saved, &named_draft, &anonymous_draft]
        .iter()
        .map(|session| session.kind())
        .collect();
    assert_eq!(kinds, [SessionKind::Saved, SessionKind::Draft, SessionKind::Draft]);

    let impostor = SessionRecord { title: Some("impostor".into()), ..anonymous_draft.clone() };
    expect_conflict(store.create_session(&impostor).await, "create_session with a taken id");
    assert_eq!(store.get_session("ses_anon").await.expect("get_session"), anonymous_draft);
    expect_not_found(store.get_session("ses_missing").await, "get_session of an unknown id");
}

/// `update_session` replaces title, `updated_at` and a draft's agent, and nothing else.
pub async fn session_update_replaces_mutable_fields_only(store: Arc<dyn Store>) {
    let agent = agent_record("agt_1", "support-bot", simple_spec("v1"), &at(0));
    store.create_agent(&agent).await.expect("create_agent");
    let saved = saved_session("ses_saved", &agent, "alice", &at(10));
    let draft = draft_session("ses_draft", simple_spec("draft v1"), Some("support-bot"), "bob", &at(11));
    store.create_session(&saved).await.expect("create_session");
    store.create_session(&draft).await.expect("create_session");

    // A turn starts after the caller read the session: an update from that stale copy must
    // not lose the session's last turn.
    let stale_draft = draft.clone();
    create_plain_turn(&store, "ses_draft", "turn_1", None, &at(20)).await;

    let renamed = SessionRecord {
        agent: SessionAgentRecord::Draft { spec: rich_spec(), agent_name: Some("renamed-bot".into()) },
        title: Some("New title".into()),
        updated_at: at(30),
        control: SessionControl { mode: Some("plan".into()), model: Some("openai/gpt-4o".into()), ..SessionControl::default() },
        ..stale_draft.clone()
    };
    store.update_session(&renamed).await.expect("update_session");
    // The control is not written by update_session: the stored one stays.
    let expected = SessionRecord { last_turn_id: Some("turn_1".into()), control: stale_draft.control.clone(), ..renamed.clone() };
    assert_eq!(store.get_session("ses_draft").await.expect("get_session"), expected);

    // Creation fields are not mutable.
    let rewritten_history = SessionRecord {
        created_at: at(999),
        created_by: subject("mallory"),
        updated_at: at(40),
        ..renamed.clone()
    };
    store.update_session(&rewritten_history).await.expect("update_session");
    let expected = SessionRecord { updated_at: at(40), ..expected };
    assert_eq!(store.get_session("ses_draft").await.expect("get_session"), expected);

    // Optional fields can be cleared.
    let cleared = SessionRecord {
        agent: SessionAgentRecord::Draft { spec: simple_spec("draft v2"), agent_name: None },
        title: None,
        updated_at: at(50),
        control: SessionControl::default(),
        ..expected.clone()
    };
    store.update_session(&cleared).await.expect("update_session");
    assert_eq!(store.get_session("ses_draft").await.expect("get_session"), SessionRecord { control: stale_draft.control.clone(), ..cleared });

    // A saved session stays pinned to the version it started with.
    let v2 = store.add_agent_version("agt_1", &simple_spec("v2"), &at(60)).await.expect("add_agent_version");
    let repinned = SessionRecord {
        agent: SessionAgentRecord::Saved { agent_id: v2.id.clone(), agent_name: v2.name.clone(), version: 2 },
        title: Some("Pinned".into()),
        updated_at: at(70),
        ..saved.clone()
    };
    store.update_session(&repinned).await.expect("update_session");
    let expected_saved = SessionRecord { title: Some("Pinned".into()), updated_at: at(70), ..saved };
    assert_eq!(store.get_session("ses_saved").await.expect("get_session"), expected_saved);

    // The control alone: a title or spec written meanwhile stays.
    let control = SessionControl { mode: Some("review".into()), ..SessionControl::default() };
    store.update_session_control("ses_saved", &control, &at(75)).await.expect("update_session_control");
    let expected_saved = SessionRecord { control, updated_at: at(75), ..expected_saved };
    assert_eq!(store.get_session("ses_saved").await.expect("get_session"), expected_saved);
    expect_not_found(store.update_session_control("ses_missing", &SessionControl::default(), &at(76)).await, "update_session_control of an unknown session");

    let missing = draft_session("ses_missing", simple_spec("x"), None, "bob", &at(80));
    expect_not_found(store.update_session(&missing).await, "update_session of an unknown session");
    expect_not_found(store.get_session("ses_missing").await, "get_session after a failed update");
}

/// Deleting a session deletes its turns and their events, and nothing of other sessions.
pub async fn session_files_are_stored_once_and_go_with_their_session(store: Arc<dyn Store>) {
    create_draft_sessions(&store, &["ses_a", "ses_b"]).await;
    // Every byte value, and more than a megabyte, comes back exactly.
    let data: Vec<u8> = (0..(1usize << 20) + 3).map(|index| (index % 251) as u8).collect();
    let file = SessionFile {
        session_id: "ses_a".to_owned(),
        digest: "d1".to_owned(),
        media_type: "application/pdf".to_owned(),
        data: data.clone(),
        created_at: at(1),
    };
    store.put_file(&file).await.expect("put_file");
    assert_eq!(store.get_file("ses_a", "d1").await.expect("get_file"), file);
    // The same digest again keeps the first copy.
    let again = SessionFile { media_type: "text/plain".to_owned(), created_at: at(2), ..file.clone() };
    store.put_file(&again).await.expect("put_file of a stored digest");
    assert_eq!(store.get_file("ses_a", "d1").await.expect("get_file"), file);
    // Files belong to one session.
    expect_not_found(store.get_file("ses_b", "d1").await, "get_file in another session");
    expect_not_found(store.get_file("ses_a", "d2").await, "get_file of an unknown digest");
    let other = SessionFile { session_id: "ses_b".to_owned(), data: b"".to_vec(), ..file.clone() };
    store.put_file(&other).await.expect("put_file of an empty file in another session");
    assert_eq!(store.get_file("ses_b", "d1").await.expect("get_file"), other);
    expect_not_found(
        store.put_file(&SessionFile { session_id: "ses_missing".to_owned(), ..file.clone() }).await,
        "put_file in an unknown session",
    );
    // Deleting a session deletes its files, and only its files.
    assert!(store.delete_session("ses_a").await.expect("delete_session"));
    expect_not_found(store.get_file("ses_a", "d1").await, "get_file of a deleted session");
    assert_eq!(store.get_file("ses_b", "d1").await.expect("get_file"), other);
}

/// Queued messages read back in order per kind, stop at the bound, are removed exactly once,
/// need their session and go with it.
pub async fn queued_messages_keep_their_order_bound_and_session(store: Arc<dyn Store>) {
    create_draft_sessions(&store, &["ses_a", "ses_b"]).await;
    let message = |session: &str, id: &str, kind: QueueKind, at_ms: u32| QueuedMessage {
        session_id: session.to_owned(),
        id: id.to_owned(),
        kind,
        content: serde_json::from_value(json!([{"type": "text", "text": format!("message {id} ✍️")}])).expect("content"),
        created_by: subject("alice"),
        created_at: at(at_ms),
        credential: (kind == QueueKind::FollowUp).then(|| format!("key_{id}")),
    };
    let queued = [
        message("ses_a", "q_2", QueueKind::FollowUp, 10),
        message("ses_a", "q_1", QueueKind::FollowUp, 10),
        message("ses_a", "q_0", QueueKind::FollowUp, 20),
        message("ses_a", "s_1", QueueKind::Steer, 5),
        message("ses_b", "q_9", QueueKind::FollowUp, 1),
    ];
    for item in &queued {
        assert!(store.queue_message(item, 3).await.expect("queue_message"), "queued {}", item.id);
    }
    let ids = |messages: Vec<QueuedMessage>| messages.into_iter().map(|message| message.id).collect::<Vec<_>>();
    let follow_ups = store.queued_messages("ses_a", QueueKind::FollowUp).await.expect("queued_messages");
    assert_eq!(follow_ups[0], queued[1], "read back whole, with its credential");
    assert_eq!(ids(follow_ups), ["q_1", "q_2", "q_0"], "oldest first, ties by id");
    assert_eq!(ids(store.queued_messages("ses_a", QueueKind::Steer).await.expect("queued_messages")), ["s_1"]);
    let mut with_steers = store.sessions_with_queued(&["ses_b", "ses_a", "ses_missing"], QueueKind::Steer).await.expect("sessions_with_queued");
    with_steers.sort();
    assert_eq!(with_steers, ["ses_a"]);
    let mut with_follow_ups = store.sessions_with_queued(&["ses_a", "ses_b"], QueueKind::FollowUp).await.expect("sessions_with_queued");
    with_follow_ups.sort();
    assert_eq!(with_follow_ups, ["ses_a", "ses_b"]);
    assert!(store.sessions_with_queued(&[], QueueKind::FollowUp).await.expect("sessions_with_queued").is_empty());
    assert_eq!(store.queued_sessions(10).await.expect("queued_sessions"), ["ses_a", "ses_b"]);
    assert_eq!(store.queued_sessions(1).await.expect("queued_sessions"), ["ses_a"]);

    // The bound is per session and kind.
    let over = message("ses_a", "q_3", QueueKind::FollowUp, 30);
    assert!(!store.queue_message(&over, 3).await.expect("queue_message"), "a fourth follow-up is over the bound");
    assert!(store.queue_message(&message("ses_a", "s_2", QueueKind::Steer, 30), 3).await.expect("queue_message"));
    expect_conflict(store.queue_message(&queued[0], 10).await, "queue_message with a taken id");
    expect_not_found(store.queue_message(&message("ses_missing", "q_x", QueueKind::Steer, 1), 3).await, "queue_message in an unknown session");

    assert!(store.remove_queued("ses_a", "q_1").await.expect("remove_queued"));
    assert!(!store.remove_queued("ses_a", "q_1").await.expect("remove_queued"), "removed once");
    assert!(!store.remove_queued("ses_b", "q_2").await.expect("remove_queued"), "scoped to its session");
    assert!(store.queue_message(&over, 3).await.expect("queue_message"), "room again");
    assert_eq!(ids(store.queued_messages("ses_a", QueueKind::FollowUp).await.expect("queued_messages")), ["q_2", "q_0", "q_3"]);

    assert!(store.delete_session("ses_a").await.expect("delete_session"));
    assert!(store.queued_messages("ses_a", QueueKind::FollowUp).await.expect("queued_messages").is_empty());
    assert_eq!(ids(store.queued_messages("ses_b", QueueKind::FollowUp).await.expect("queued_messages")), ["q_9"]);
}

pub async fn session_delete_cascades_to_turns_and_events(store: Arc<dyn Store>) {
    create_draft_sessions(&store, &["ses_a", "ses_b"]).await;
    let turn_a1 = create_plain_turn(&store, "ses_a", "turn_a1", None, &at(10)).await;
    let turn_a2 = create_plain_turn(&store, "ses_a", "turn_a2", Some("turn_a1"), &at(20)).await;
    let turn_b1 = create_plain_turn(&store, "ses_b", "turn_b1", None, &at(15)).await;
    let mut batch = Vec::new();
    for turn_id in ["turn_a1", "turn_a2", "turn_b1"] {
        batch.push(stream(turn_id, 1, &format!(r#"{{"type":"turn.created","turn_id":"{turn_id}"}}"#)));
        batch.push(stream(turn_id, 2, r#"{"type":"model.message"}"#));
        batch.push(content(turn_id, 1, "turn.created", r#"{"type":"turn.created"}"#));
        batch.push(content(turn_id, 2, "model.message", r#"{"type":"model.message"}"#));
    }
    store.write(&batch).await.expect("write");
    let session_b = store.get_session("ses_b").await.expect("get_session");
    let stream_b = store.read_stream("turn_b1", 0, 100).await.expect("read_stream");
    let content_b = store.read_content("turn_b1", &all_content()).await.expect("read_content");
    assert_eq!(stream_b.len(), 2);
    assert_eq!(content_b.len(), 2);

    assert!(store.delete_session("ses_a").await.expect("delete_session"), "the session existed");
    expect_not_found(store.get_session("ses_a").await, "get_session of a deleted session");
    for turn in [&turn_a1, &turn_a2] {
        expect_not_found(store.get_turn("ses_a", &turn.id).await, "get_turn of a deleted session");
        assert_eq!(store.read_stream(&turn.id, 0, 100).await.expect("read_stream"), vec![]);
        assert_eq!(store.last_sequence(&turn.id).await.expect("last_sequence"), 0);
        assert_eq!(store.read_content(&turn.id, &all_content()).await.expect("read_content"), vec![]);
    }
    assert_eq!(store.running_turns().await.expect("running_turns"), vec![turn_b1.clone()]);
    assert!(!store.delete_session("ses_a").await.expect("delete_session again"), "the session is gone");
    assert!(!store.delete_session("ses_missing").await.expect("delete_session of an unknown id"));

    assert_eq!(store.get_session("ses_b").await.expect("get_session"), session_b);
    assert_eq!(store.get_turn("ses_b", "turn_b1").await.expect("get_turn"), turn_b1);
    assert_eq!(store.read_stream("turn_b1", 0, 100).await.expect("read_stream"), stream_b);
    assert_eq!(store.read_content("turn_b1", &all_content()).await.expect("read_content"), content_b);

    // The ids are free again, and nothing of the old log comes back with them.
    store
        .create_session(&draft_session("ses_a", simple_spec("y"), None, "alice", &at(30)))
        .await
        .expect("create_session with a freed id");
    create_plain_turn(&store, "ses_a", "turn_a1", None, &at(40)).await;
    assert_eq!(store.read_stream("turn_a1", 0, 100).await.expect("read_stream"), vec![]);
    assert_eq!(store.read_content("turn_a1", &all_content()).await.expect("read_content"), vec![]);
}

/// Every filter of [`SessionQuery`], alone and combined, in the default order.
pub async fn list_sessions_filters(store: Arc<dyn Store>) {
    let sessions = seed_listing(&store).await;
    let cases: Vec<(SessionQuery, Vec<&str>)> = vec![
        (query(|_| {}), vec!["s02", "s03", "s07", "s11", "s01", "s05", "s09", "s10", "s04", "s08"]),
        (query(|q| q.created_by = Some("alice".into())), vec!["s02", "s07", "s11", "s01", "s08"]),
        (query(|q| q.created_by = Some("bob".into())), vec!["s03", "s05", "s10"]),
        (query(|q| q.created_by = Some("alice@example.com".into())), vec![]),
        (query(|q| q.created_by = Some("nobody".into())), vec![]),
        (
            query(|q| {
                q.visible_to = Some("alice".into());
                q.or_of_agents = vec!["agt_b".into()];
            }),
            vec!["s02", "s07", "s11", "s01", "s10", "s08"],
        ),
        (
            query(|q| {
                q.visible_to = Some("alice".into());
                q.or_of_agents = vec!["agt_a".into(), "agt_b".into()];
            }),
            vec!["s02", "s03", "s07", "s11", "s01", "s10", "s04", "s08"],
        ),
        (
            query(|q| {
                q.visible_to = Some("bob".into());
                q.or_of_agents = vec!["agt_a".into()];
                q.kind = Some(SessionKind::Saved);
            }),
            vec!["s02", "s03", "s07", "s10", "s04"],
        ),
        (query(|q| q.or_of_agents = vec!["agt_b".into()]), vec!["s02", "s03", "s07", "s11", "s01", "s05", "s09", "s10", "s04", "s08"]),
        (query(|q| q.visible_to = Some("bob".into())), vec!["s03", "s05", "s10"]),
        (
            query(|q| {
                q.visible_to = Some("carol".into());
                q.or_created_by_prefix = Some("al".into());
            }),
            vec!["s02", "s07", "s11", "s01", "s09", "s04", "s08"],
        ),
        // The prefix is text, not a pattern.
        (
            query(|q| {
                q.visible_to = Some("carol".into());
                q.or_created_by_prefix = Some("_lice".into());
            }),
            vec!["s09", "s04"],
        ),
        (
            query(|q| {
                q.visible_to = Some("carol".into());
                q.or_created_by_prefix = Some("b".into());
                q.kind = Some(SessionKind::Draft);
            }),
            vec!["s05", "s09"],
        ),
        (
            query(|q| {
                q.visible_to = Some("bob".into());
                q.or_of_agents = vec!["agt_a".into()];
                q.created_by = Some("alice".into());
            }),
            vec!["s02", "s07"],
        ),
        (query(|q| q.agent_name = Some("alpha".into())), vec!["s02", "s03", "s07", "s11", "s04"]),
        (query(|q| q.agent_name = Some("beta".into())), vec!["s01", "s05", "s10"]),
        (query(|q| q.agent_name = Some("gamma".into())), vec!["s08"]),
        (query(|q| q.agent_name = Some("alph".into())), vec![]),
        (query(|q| q.agent_id = Some("agt_a".into())), vec!["s02", "s03", "s07", "s04"]),
        (query(|q| q.agent_id = Some("agt_b".into())), vec!["s01", "s10"]),
        (query(|q| q.kind = Some(SessionKind::Draft)), vec!["s11", "s05", "s09", "s08"]),
        (query(|q| q.kind = Some(SessionKind::Saved)), vec!["s02", "s03", "s07", "s01", "s10", "s04"]),
        (query(|q| q.session_id = Some("ses_s05".into())), vec!["s05"]),
        (query(|q| q.session_id = Some("ses_s99".into())), vec![]),
        (
            query(|q| q.created_from = Some(at(100))),
            vec!["s03", "s07", "s11", "s01", "s05", "s09", "s10", "s04", "s08"],
        ),
        (query(|q| q.created_to = Some(at(100))), vec!["s02", "s03", "s07", "s11"]),
        (
            query(|q| {
                q.created_from = Some(at(300));
                q.created_to = Some(at(400));
            }),
            vec!["s05", "s09", "s10"],
        ),
        (
            query(|q| {
                q.created_from = Some(at(100));
                q.created_to = Some(at(100));
            }),
            vec!["s03", "s07", "s11"],
        ),
        (
            query(|q| {
                q.created_from = Some(at(101));
                q.created_to = Some(at(199));
            }),
            vec![],
        ),
        (
            query(|q| {
                q.created_by = Some("alice".into());
                q.kind = Some(SessionKind::Draft);
            }),
            vec!["s11", "s08"],
        ),
        (
            query(|q| {
                q.agent_name = Some("alpha".into());
                q.created_by = Some("bob".into());
            }),
            vec!["s03"],
        ),
        (
            query(|q| {
                q.agent_name = Some("alpha".into());
                q.agent_id = Some("agt_b".into());
            }),
            vec![],
        ),
        (
            query(|q| {
                q.agent_id = Some("agt_a".into());
                q.created_from = Some(at(100));
                q.created_to = Some(at(500));
                q.created_by = Some("carol".into());
            }),
            vec!["s04"],
        ),
        (query(|q| q.limit = 3), vec!["s02", "s03", "s07"]),
        (query(|q| q.limit = 1), vec!["s02"]),
    ];
    for (query, expected) in cases {
        check_listing(&store, &sessions, &query, &expected).await;
    }
}

/// Both order keys in both directions, with ties on the key broken by id, and keyset cursors
/// that land on a tie.
pub async fn sessions_are_listed_by_resource_and_resources_by_creator(store: Arc<dyn Store>) {
    let about = |id: &str, creator: &str, resource: Option<&str>, minute: u32| SessionRecord {
        resource_id: resource.map(str::to_owned),
        updated_at: at(minute),
        ..draft_session(id, simple_spec("inline"), None, creator, &at(1))
    };
    let sessions = [
        about("ses_r1", "alice", Some("repo/a"), 10),
        about("ses_r2", "alice", Some("repo/a"), 30),
        about("ses_r3", "alice", Some("ticket 7 ✓"), 20),
        about("ses_r4", "alice", None, 40),
        about("ses_r5", "bob", Some("repo/a"), 50),
    ];
    for session in &sessions {
        store.create_session(session).await.expect("create_session");
    }
    assert_eq!(store.get_session("ses_r3").await.expect("get_session").resource_id.as_deref(), Some("ticket 7 ✓"));
    let of = |resource: &str| SessionQuery {
        created_by: Some("alice".into()),
        resource_id: Some(resource.to_owned()),
        order_by: SessionOrder::UpdatedAt,
        descending: true,
        limit: 10,
        ..SessionQuery::default()
    };
    let ids = |records: Vec<SessionRecord>| records.into_iter().map(|record| record.id).collect::<Vec<_>>();
    assert_eq!(ids(store.list_sessions(&of("repo/a")).await.expect("list")), ["ses_r2", "ses_r1"]);
    assert_eq!(ids(store.list_sessions(&of("repo")).await.expect("list")), Vec::<String>::new());
    let resources = store.list_resources("alice", 10).await.expect("list_resources");
    let shown: Vec<(&str, u64, &str)> = resources.iter().map(|r| (r.resource_id.as_str(), r.sessions, r.updated_at.as_str())).collect();
    assert_eq!(shown, [("repo/a", 2, at(30).as_str()), ("ticket 7 ✓", 1, at(20).as_str())]);
    assert_eq!(store.list_resources("alice", 1).await.expect("list_resources").len(), 1);
    assert!(store.list_resources("carol", 10).await.expect("list_resources").is_empty());
    // An update sets and removes it.
    let moved = SessionRecord { resource_id: Some("repo/b".into()), ..store.get_session("ses_r1").await.expect("get") };
    store.update_session(&moved).await.expect("update_session");
    assert_eq!(store.get_session("ses_r1").await.expect("get").resource_id.as_deref(), Some("repo/b"));
    let cleared = SessionRecord { resource_id: None, ..moved };
    store.update_session(&cleared).await.expect("update_session");
    assert_eq!(store.get_session("ses_r1").await.expect("get").resource_id, None);
}

pub async fn list_sessions_orders(store: Arc<dyn Store>) {
    let sessions = seed_listing(&store).await;
    let ordered = |order_by, descending| {
        query(move |q| {
            q.order_by = order_by;
            q.descending = descending;
        })
    };
    let after = |order_by, descending, key: String, id: &str, limit| {
        let id = format!("ses_{id}");
        query(move |q| {
            q.order_by = order_by;
            q.descending = descending;
            q.after = Some((key, id));
            q.limit = limit;
        })
    };
    use SessionOrder::{CreatedAt, UpdatedAt};
    let cases: Vec<(SessionQuery, Vec<&str>)> = vec![
        (ordered(CreatedAt, false), vec!["s02", "s03", "s07", "s11", "s01", "s05", "s09", "s10", "s04", "s08"]),
        (ordered(CreatedAt, true), vec!["s08", "s04", "s10", "s09", "s05", "s01", "s11", "s07", "s03", "s02"]),
        (ordered(UpdatedAt, false), vec!["s07", "s11", "s01", "s09", "s03", "s05", "s04", "s02", "s08", "s10"]),
        (ordered(UpdatedAt, true), vec!["s10", "s08", "s02", "s04", "s05", "s03", "s09", "s01", "s11", "s07"]),
        (after(CreatedAt, false, at(100), "s03", 2), vec!["s07", "s11"]),
        (after(CreatedAt, false, at(100), "s11", 2), vec!["s01", "s05"]),
        (after(CreatedAt, true, at(100), "s07", 5), vec!["s03", "s02"]),
        (after(CreatedAt, true, at(100), "s11", 1), vec!["s07"]),
        (after(UpdatedAt, false, at(400), "s03", 2), vec!["s05", "s04"]),
        (after(UpdatedAt, true, at(600), "s08", 2), vec!["s02", "s04"]),
        (after(UpdatedAt, true, at(100), "s07", 10), vec![]),
        (after(CreatedAt, false, at(600), "s08", 10), vec![]),
        // A cursor need not name a stored session: it is a position, not a lookup.
        (after(CreatedAt, false, at(100), "s05", 10), vec!["s07", "s11", "s01", "s05", "s09", "s10", "s04", "s08"]),
        (after(CreatedAt, false, at(250), "zzz", 2), vec!["s05", "s09"]),
        (after(UpdatedAt, true, at(450), "", 3), vec!["s05", "s03", "s09"]),
    ];
    for (query, expected) in cases {
        check_listing(&store, &sessions, &query, &expected).await;
    }
}

/// Paging with `after` through every filter, order and page size yields every matching
/// session exactly once, in order, even across equal timestamps.
pub async fn list_sessions_keyset_pages_visit_every_session_once(store: Arc<dyn Store>) {
    let sessions = seed_listing(&store).await;
    let filters: Vec<SessionQuery> = vec![
        query(|_| {}),
        query(|q| q.created_by = Some("alice".into())),
        query(|q| q.agent_name = Some("alpha".into())),
        query(|q| q.agent_id = Some("agt_a".into())),
        query(|q| q.kind = Some(SessionKind::Draft)),
        query(|q| q.session_id = Some("ses_s03".into())),
        query(|q| {
            q.created_from = Some(at(100));
            q.created_to = Some(at(400));
        }),
        query(|q| {
            q.created_by = Some("bob".into());
            q.created_from = Some(at(100));
        }),
        query(|q| {
            q.visible_to = Some("bob".into());
            q.or_of_agents = vec!["agt_a".into()];
        }),
        query(|q| {
            q.visible_to = Some("carol".into());
            q.or_of_agents = vec!["agt_b".into()];
            q.or_created_by_prefix = Some("al".into());
        }),
    ];
    for filter in &filters {
        for order_by in [SessionOrder::CreatedAt, SessionOrder::UpdatedAt] {
            for descending in [false, true] {
                let full = SessionQuery { order_by, descending, limit: 1000, ..filter.clone() };
                let expected = reference_listing(&sessions, &full);
                for page_size in [1, 2, 3, 4, 100] {
                    let mut seen: Vec<SessionRecord> = Vec::new();
                    let mut after = None;
                    loop {
                        let page_query = SessionQuery { after: after.clone(), limit: page_size, ..full.clone() };
                        let page = store.list_sessions(&page_query).await.expect("list_sessions");
                        assert_eq!(page, reference_listing(&sessions, &page_query), "page of {page_query:?}");
                        let full_page = page.len() == page_size as usize;
                        if let Some(last) = page.last() {
                            after = Some((order_key(last, order_by).to_owned(), last.id.clone()));
                        }
                        seen.extend(page);
                        assert!(seen.len() <= expected.len(), "paging repeats sessions for {full:?}");
                        if !full_page {
                            break;
                        }
                    }
                    assert_eq!(seen, expected, "pages of {page_size} for {full:?}");
                }
            }
        }
    }
}

// Turns.

/// A turn reads back whole (its request context too, with or without a mode) and becomes its
/// session's last turn; ids are unique.
pub async fn turn_create_and_get(store: Arc<dyn Store>) {
    let session = draft_session("ses_1", simple_spec("x"), None, "alice", &at(0));
    store.create_session(&session).await.expect("create_session");

    let first = TurnRecord {
        input: rich_input(),
        created_by: subject("bob"),
        control: SessionControl { mode: Some("plan".into()), model: Some("anthropic/claude".into()), ..SessionControl::default() },
        request_context: Some(serde_json::from_value(json!({"tenant": "acme", "flags": ["beta"], "depth": {"n": 1}})).expect("an object")),
        ..turn_record("turn_1", "ses_1", None, &at(10))
    };
    store.create_turn(&first, None, &[]).await.expect("create_turn");
    assert_eq!(store.get_turn("ses_1", "turn_1").await.expect("get_turn"), first);
    assert_eq!(
        store.get_session("ses_1").await.expect("get_session"),
        SessionRecord { last_turn_id: Some("turn_1".into()), ..session.clone() }
    );

    let second = TurnRecord {
        request_context: Some(serde_json::from_value(json!({"mode": "not a control field"})).expect("an object")),
        ..turn_record("turn_2", "ses_1", Some("turn_1"), &at(20))
    };
    store.create_turn(&second, Some("turn_1"), &[]).await.expect("create_turn");
    assert_eq!(store.get_turn("ses_1", "turn_1").await.expect("get_turn"), first);
    assert_eq!(store.get_turn("ses_1", "turn_2").await.expect("get_turn"), second);
    let stored = store.get_session("ses_1").await.expect("get_session");
    assert_eq!(stored.last_turn_id.as_deref(), Some("turn_2"));

    // A taken id fails even when the compare-and-set holds, and leaves the session as it was.
    let duplicate = turn_record("turn_1", "ses_1", Some("turn_2"), &at(30));
    expect_conflict(store.create_turn(&duplicate, Some("turn_2"), &[]).await, "create_turn with a taken id");
    assert_eq!(store.get_turn("ses_1", "turn_1").await.expect("get_turn"), first);
    assert_eq!(store.get_session("ses_1").await.expect("get_session"), stored);

    let orphan = turn_record("turn_9", "ses_missing", None, &at(40));
    expect_not_found(store.create_turn(&orphan, None, &[]).await, "create_turn in an unknown session");
    expect_not_found(store.get_turn("ses_missing", "turn_9").await, "get_turn of a rejected turn");
}

/// `create_turn` succeeds only while the session's last turn is the expected one.
pub async fn turn_create_compares_and_sets_the_last_turn(store: Arc<dyn Store>) {
    create_draft_sessions(&store, &["ses_1", "ses_2"]).await;
    create_plain_turn(&store, "ses_1", "turn_1", None, &at(10)).await;

    let second = turn_record("turn_2", "ses_1", Some("turn_1"), &at(20));
    expect_conflict(store.create_turn(&second, None, &[]).await, "create_turn expecting no turn");
    expect_conflict(store.create_turn(&second, Some("turn_0"), &[]).await, "create_turn expecting an unknown turn");
    expect_not_found(store.get_turn("ses_1", "turn_2").await, "get_turn of a rejected turn");
    store.create_turn(&second, Some("turn_1"), &[]).await.expect("create_turn expecting the last turn");

    let third = turn_record("turn_3", "ses_1", Some("turn_1"), &at(30));
    expect_conflict(store.create_turn(&third, Some("turn_1"), &[]).await, "create_turn expecting a stale turn");
    expect_not_found(store.get_turn("ses_1", "turn_3").await, "get_turn of a rejected turn");
    let session = store.get_session("ses_1").await.expect("get_session");
    assert_eq!(session.last_turn_id.as_deref(), Some("turn_2"));

    // Sessions are independent: another session's last turn is not this one's.
    let elsewhere = turn_record("turn_4", "ses_2", Some("turn_2"), &at(40));
    expect_conflict(
        store.create_turn(&elsewhere, Some("turn_2"), &[]).await,
        "create_turn expecting another session's last turn",
    );
    let elsewhere = turn_record("turn_4", "ses_2", None, &at(40));
    store.create_turn(&elsewhere, None, &[]).await.expect("create_turn in a fresh session");
    let session_2 = store.get_session("ses_2").await.expect("get_session");
    assert_eq!(session_2.last_turn_id.as_deref(), Some("turn_4"));
    let session = store.get_session("ses_1").await.expect("get_session");
    assert_eq!(session.last_turn_id.as_deref(), Some("turn_2"));
}

/// The initial writes of `create_turn` land with the turn, or not at all.
pub async fn turn_create_applies_initial_writes_atomically(store: Arc<dyn Store>) {
    store
        .create_session(&draft_session("ses_1", simple_spec("x"), None, "alice", &at(0)))
        .await
        .expect("create_session");
    let created_1 = r#"{"type":"turn.created","turn_id":"turn_1","state":{"status":"running"}}"#;
    let first = turn_record("turn_1", "ses_1", None, &at(10));
    let first_writes = [stream("turn_1", 1, created_1), content("turn_1", 1, "turn.created", created_1)];
    store.create_turn(&first, None, &first_writes).await.expect("create_turn");
    assert_eq!(store.read_stream("turn_1", 0, 10).await.expect("read_stream"), vec![stream_event(1, created_1)]);
    assert_eq!(
        store.read_content("turn_1", &all_content()).await.expect("read_content"),
        vec![content_event(1, "turn.created", created_1)]
    );
    let session_before = store.get_session("ses_1").await.expect("get_session");

    // The next turn cancels the running one in the same transaction, as `auto` chaining does.
    let cancelled = TurnState::Cancelled {
        reason: CancelReason::CancelledForNextTurn,
        completed_at: at(20),
        metrics: None,
    };
    let done_1 = r#"{"type":"turn.done","state":{"status":"cancelled","reason":"cancelled-for-next-turn"}}"#;
    let created_2 = r#"{"type":"turn.created","turn_id":"turn_2"}"#;
    let writes_for = |turn_id: &str| {
        vec![
            LogWrite::TurnState { turn_id: "turn_1".into(), state: cancelled.clone(), at: at(20) },
            stream("turn_1", 2, done_1),
            content("turn_1", 2, "turn.done", done_1),
            stream(turn_id, 1, created_2),
            content(turn_id, 1, "turn.created", created_2),
        ]
    };

    // A stale compare-and-set writes none of it.
    let loser = turn_record("turn_loser", "ses_1", None, &at(20));
    expect_conflict(
        store.create_turn(&loser, None, &writes_for("turn_loser")).await,
        "create_turn with a stale last turn",
    );
    // A turn that cannot be stored (its id is taken) undoes the compare-and-set and the writes.
    let taken = turn_record("turn_1", "ses_1", Some("turn_1"), &at(20));
    expect_conflict(
        store.create_turn(&taken, Some("turn_1"), &writes_for("turn_1")).await,
        "create_turn with a taken id",
    );
    expect_not_found(store.get_turn("ses_1", "turn_loser").await, "get_turn of a rejected turn");
    assert_eq!(store.read_stream("turn_loser", 0, 10).await.expect("read_stream"), vec![]);
    assert_eq!(store.read_content("turn_loser", &all_content()).await.expect("read_content"), vec![]);
    assert_eq!(store.get_turn("ses_1", "turn_1").await.expect("get_turn"), first);
    assert_eq!(store.read_stream("turn_1", 0, 10).await.expect("read_stream"), vec![stream_event(1, created_1)]);
    assert_eq!(
        store.read_content("turn_1", &all_content()).await.expect("read_content"),
        vec![content_event(1, "turn.created", created_1)]
    );
    assert_eq!(store.get_session("ses_1").await.expect("get_session"), session_before);

    let second = turn_record("turn_2", "ses_1", Some("turn_1"), &at(20));
    store.create_turn(&second, Some("turn_1"), &writes_for("turn_2")).await.expect("create_turn");
    assert_eq!(
        store.get_turn("ses_1", "turn_1").await.expect("get_turn"),
        TurnRecord { state: cancelled, ..first }
    );
    assert_eq!(store.get_turn("ses_1", "turn_2").await.expect("get_turn"), second);
    assert_eq!(
        store.read_stream("turn_1", 0, 10).await.expect("read_stream"),
        vec![stream_event(1, created_1), stream_event(2, done_1)]
    );
    assert_eq!(store.read_stream("turn_2", 0, 10).await.expect("read_stream"), vec![stream_event(1, created_2)]);
    assert_eq!(
        store.get_session("ses_1").await.expect("get_session"),
        SessionRecord { last_turn_id: Some("turn_2".into()), updated_at: at(20), ..session_before }
    );
    assert_eq!(store.running_turns().await.expect("running_turns"), vec![second]);
}

/// Concurrent `create_turn`s expecting the same last turn: exactly one wins, the others get
/// `Conflict` and leave no trace.
pub async fn turn_create_race_has_exactly_one_winner(store: Arc<dyn Store>) {
    const RACERS: usize = 8;
    store
        .create_session(&draft_session("ses_1", simple_spec("x"), None, "alice", &at(0)))
        .await
        .expect("create_session");
    let mut expected_last: Option<String> = None;
    for round in 0..3u32 {
        let mut tasks = Vec::new();
        for racer in 0..RACERS {
            let store = Arc::clone(&store);
            let expected = expected_last.clone();
            let turn_id = format!("turn_{round}_{racer}");
            let turn = turn_record(&turn_id, "ses_1", expected.as_deref(), &at(10 + round));
            let writes = vec![stream(&turn_id, 1, &format!(r#"{{"type":"turn.created","turn_id":"{turn_id}"}}"#))];
            tasks.push(tokio::spawn(async move {
                let result = store.create_turn(&turn, expected.as_deref(), &writes).await;
                (turn_id, result)
            }));
        }
        let mut winners = Vec::new();
        let mut losers = Vec::new();
        for task in tasks {
            let (turn_id, result) = task.await.expect("a racing task panicked");
            match result {
                Ok(()) => winners.push(turn_id),
                Err(Error::Conflict(_)) => losers.push(turn_id),
                Err(other) => panic!("a losing create_turn must be a Conflict, got {other:?}"),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: exactly one winner, got {winners:?}");
        let winner = winners.remove(0);
        let session = store.get_session("ses_1").await.expect("get_session");
        assert_eq!(session.last_turn_id.as_deref(), Some(winner.as_str()));
        assert_eq!(store.last_sequence(&winner).await.expect("last_sequence"), 1);
        for loser in &losers {
            expect_not_found(store.get_turn("ses_1", loser).await, "get_turn of a losing turn");
            assert_eq!(store.read_stream(loser, 0, 10).await.expect("read_stream"), vec![]);
        }
        expected_last = Some(winner);
    }
    assert_eq!(store.running_turns().await.expect("running_turns").len(), 3);
}

/// `get_turn` finds a turn only through its own session.
pub async fn get_turn_is_scoped_to_its_session(store: Arc<dyn Store>) {
    create_draft_sessions(&store, &["ses_1", "ses_2"]).await;
    let turn_1 = create_plain_turn(&store, "ses_1", "turn_1", None, &at(10)).await;
    let turn_2 = create_plain_turn(&store, "ses_2", "turn_2", None, &at(10)).await;

    assert_eq!(store.get_turn("ses_1", "turn_1").await.expect("get_turn"), turn_1);
    assert_eq!(store.get_turn("ses_2", "turn_2").await.expect("get_turn"), turn_2);
    expect_not_found(store.get_turn("ses_2", "turn_1").await, "get_turn through another session");
    expect_not_found(store.get_turn("ses_1", "turn_2").await, "get_turn through another session");
    expect_not_found(store.get_turn("ses_missing", "turn_1").await, "get_turn through an unknown session");
    expect_not_found(store.get_turn("ses_1", "turn_missing").await, "get_turn of an unknown turn");
}

/// `running_turns` lists exactly the running turns of every session, oldest first, ties by id.
pub async fn running_turns_are_oldest_first(store: Arc<dyn Store>) {
    assert_eq!(store.running_turns().await.expect("running_turns of an empty store"), vec![]);
    create_draft_sessions(&store, &["ses_1", "ses_2", "ses_3", "ses_4"]).await;
    // Ids sort in another order than creation times.
    let turn_b = create_plain_turn(&store, "ses_1", "turn_b", None, &at(20)).await;
    let turn_c = create_plain_turn(&store, "ses_1", "turn_c", Some("turn_b"), &at(40)).await;
    let turn_a = create_plain_turn(&store, "ses_2", "turn_a", None, &at(30)).await;
    let turn_d = create_plain_turn(&store, "ses_3", "turn_d", None, &at(20)).await;
    create_plain_turn(&store, "ses_4", "turn_e", None, &at(10)).await;
    store
        .write(&[LogWrite::TurnState { turn_id: "turn_e".into(), state: done_state(&at(15)), at: at(15) }])
        .await
        .expect("write");

    assert_eq!(
        store.running_turns().await.expect("running_turns"),
        vec![turn_b.clone(), turn_d.clone(), turn_a.clone(), turn_c]
    );

    let failed = TurnState::Error { message: "model unreachable".into(), completed_at: at(50), metrics: None };
    store
        .write(&[LogWrite::TurnState { turn_id: "turn_c".into(), state: failed, at: at(50) }])
        .await
        .expect("write");
    assert_eq!(store.running_turns().await.expect("running_turns"), vec![turn_b, turn_d, turn_a]);
}

/// `oldest_turns` gives a session's own turns by creation time, oldest first, ties by id, at
/// most `limit`.
pub async fn oldest_turns_are_a_sessions_first(store: Arc<dyn Store>) {
    create_draft_sessions(&store, &["ses_1", "ses_2"]).await;
    assert_eq!(store.oldest_turns("ses_1", 5).await.expect("oldest_turns of a session without turns"), vec![]);
    let turn_b = create_plain_turn(&store, "ses_1", "turn_b", None, &at(20)).await;
    let turn_c = create_plain_turn(&store, "ses_1", "turn_c", Some("turn_b"), &at(30)).await;
    create_plain_turn(&store, "ses_2", "turn_a", None, &at(10)).await;
    let turn_d = create_plain_turn(&store, "ses_1", "turn_d", Some("turn_c"), &at(30)).await;
    assert_eq!(store.oldest_turns("ses_1", 5).await.expect("oldest_turns"), vec![turn_b.clone(), turn_c.clone(), turn_d]);
    assert_eq!(store.oldest_turns("ses_1", 2).await.expect("oldest_turns"), vec![turn_b, turn_c]);
    assert_eq!(store.oldest_turns("ses_missing", 2).await.expect("oldest_turns of an unknown session"), vec![]);
}

// The event log.

/// Stream events come back exactly as written, per turn, in sequence order, paged by `after`
/// and `limit`.
pub async fn stream_events_read_back_byte_identical(store: Arc<dyn Store>) {
    store
        .create_session(&draft_session("ses_1", simple_spec("x"), None, "alice", &at(0)))
        .await
        .expect("create_session");
    create_plain_turn(&store, "ses_1", "turn_1", None, &at(10)).await;
    create_plain_turn(&store, "ses_1", "turn_2", Some("turn_1"), &at(20)).await;
    create_plain_turn(&store, "ses_1", "turn_3", Some("turn_2"), &at(30)).await;

    let big = format!(r#"{{"type":"tool.response","content":"{}"}}"#, "0123456789abcdef".repeat(8192));
    let turn_1_data: Vec<String> = vec![
        r#"{"type":"turn.created","id":"ev_1"}"#.into(),
        "{ \"type\" : \"model.message\",\n  \"content\":\"h\u{e9}llo \\u00e9 \\\"quoted\\\" \\\\ back\\nslash\" }".into(),
        "{\"type\":\"model.message.delta\",\"content\":\"🙂 emoji, 中文, and a no-break space:\u{a0}\"}".into(),
        big,
        r#"{"z":1,"a":2,"m":{"b":[1,2.50,3e10,-0.0,1E-7]},"n":null}"#.into(),
        "  {\"leading\":\"and trailing whitespace\"}\r\n\t".into(),
    ];
    let turn_2_data = [r#"{"turn":2,"seq":1}"#, r#"{"turn":2,"seq":2}"#];
    // Two batches, with the second turn's events interleaved into the first turn's.
    store
        .write(&[
            stream("turn_1", 1, &turn_1_data[0]),
            stream("turn_2", 1, turn_2_data[0]),
            stream("turn_1", 2, &turn_1_data[1]),
            stream("turn_1", 3, &turn_1_data[2]),
            stream("turn_2", 2, turn_2_data[1]),
        ])
        .await
        .expect("write");
    store
        .write(&[
            stream("turn_1", 4, &turn_1_data[3]),
            stream("turn_1", 5, &turn_1_data[4]),
            stream("turn_1", 6, &turn_1_data[5]),
        ])
        .await
        .expect("write");

    let expected: Vec<StreamEvent> =
        turn_1_data.iter().enumerate().map(|(index, data)| stream_event(index as u64 + 1, data)).collect();
    let read = store.read_stream("turn_1", 0, 100).await.expect("read_stream");
    assert_eq!(read.len(), expected.len());
    for (stored, written) in read.iter().zip(&expected) {
        assert_eq!(stored.sequence, written.sequence);
        assert!(stored.data.as_bytes() == written.data.as_bytes(), "event {} is not byte-identical", written.sequence);
    }
    let cases: [(u64, u32, &[StreamEvent]); 7] = [
        (0, 1, &expected[..1]),
        (2, 2, &expected[2..4]),
        (3, 100, &expected[3..]),
        (5, 1, &expected[5..]),
        (6, 10, &[]),
        (1000, 10, &[]),
        (0, 6, &expected[..]),
    ];
    for (after, limit, want) in cases {
        let read = store.read_stream("turn_1", after, limit).await.expect("read_stream");
        assert_eq!(read, want, "read_stream after {after} limit {limit}");
    }
    assert_eq!(
        store.read_stream("turn_2", 0, 100).await.expect("read_stream"),
        vec![stream_event(1, turn_2_data[0]), stream_event(2, turn_2_data[1])]
    );
    assert_eq!(store.last_sequence("turn_1").await.expect("last_sequence"), 6);
    assert_eq!(store.last_sequence("turn_2").await.expect("last_sequence"), 2);
    assert_eq!(store.last_sequence("turn_3").await.expect("last_sequence"), 0);
    assert_eq!(store.read_stream("turn_3", 0, 100).await.expect("read_stream"), vec![]);
    assert_eq!(store.last_sequence("turn_missing").await.expect("last_sequence of an unknown turn"), 0);
    assert_eq!(store.read_stream("turn_missing", 0, 100).await.expect("read_stream of an unknown turn"), vec![]);

    // Sequence numbers need not be dense: `after` is a bound, not a position.
    store
        .write(&[stream("turn_3", 10, "ten"), stream("turn_3", 20, "twenty"), stream("turn_3", 30, "thirty")])
        .await
        .expect("write");
    assert_eq!(
        store.read_stream("turn_3", 15, 100).await.expect("read_stream"),
        vec![stream_event(20, "twenty"), stream_event(30, "thirty")]
    );
    assert_eq!(store.last_sequence("turn_3").await.expect("last_sequence"), 30);
}

/// Content events replace on the same (turn, sequence) and read back filtered, in either
/// direction, paged by `after` and `limit`.
pub async fn content_events_replace_and_filter(store: Arc<dyn Store>) {
    store
        .create_session(&draft_session("ses_1", simple_spec("x"), None, "alice", &at(0)))
        .await
        .expect("create_session");
    create_plain_turn(&store, "ses_1", "turn_1", None, &at(10)).await;
    create_plain_turn(&store, "ses_1", "turn_2", Some("turn_1"), &at(20)).await;

    store
        .write(&[
            content("turn_1", 1, "turn.created", r#"{"type":"turn.created"}"#),
            content("turn_1", 3, "model.message", r#"{"type":"model.message","content":null}"#),
            content("turn_1", 4, "tool.response", r#"{"type":"tool.response","content":"42"}"#),
            content("turn_2", 3, "model.message", r#"{"turn":2}"#),
        ])
        .await
        .expect("write");
    store
        .write(&[
            content("turn_1", 3, "model.message", r#"{"type":"model.message","content":"Hel"}"#),
            content("turn_1", 6, "model.message", r#"{"type":"model.message","content":"Bye"}"#),
            // The same (turn, sequence) twice in one batch: the later write wins.
            content("turn_1", 3, "model.message", r#"{"type":"model.message","content":"Hello"}"#),
            content("turn_1", 7, "turn.done", r#"{"type":"turn.done"}"#),
        ])
        .await
        .expect("write");

    let events: BTreeMap<u64, ContentEvent> = [
        content_event(1, "turn.created", r#"{"type":"turn.created"}"#),
        content_event(3, "model.message", r#"{"type":"model.message","content":"Hello"}"#),
        content_event(4, "tool.response", r#"{"type":"tool.response","content":"42"}"#),
        content_event(6, "model.message", r#"{"type":"model.message","content":"Bye"}"#),
        content_event(7, "turn.done", r#"{"type":"turn.done"}"#),
    ]
    .into_iter()
    .map(|event| (event.sequence, event))
    .collect();
    let content_query = |kinds, descending, after, limit| ContentQuery { kinds, descending, after, limit };
    let cases: Vec<(ContentQuery, Vec<u64>)> = vec![
        (content_query(ContentKinds::All, false, None, 100), vec![1, 3, 4, 6, 7]),
        (content_query(ContentKinds::All, true, None, 100), vec![7, 6, 4, 3, 1]),
        (content_query(ContentKinds::TurnContent, false, None, 100), vec![3, 4, 6]),
        (content_query(ContentKinds::TurnContent, true, None, 100), vec![6, 4, 3]),
        (content_query(ContentKinds::All, false, Some(3), 100), vec![4, 6, 7]),
        (content_query(ContentKinds::All, false, Some(2), 100), vec![3, 4, 6, 7]),
        (content_query(ContentKinds::All, true, Some(6), 100), vec![4, 3, 1]),
        (content_query(ContentKinds::TurnContent, false, Some(1), 2), vec![3, 4]),
        (content_query(ContentKinds::TurnContent, true, Some(7), 1), vec![6]),
        (content_query(ContentKinds::TurnContent, true, Some(3), 10), vec![]),
        (content_query(ContentKinds::All, false, None, 2), vec![1, 3]),
        (content_query(ContentKinds::All, true, None, 1), vec![7]),
        (content_query(ContentKinds::All, true, Some(1), 10), vec![]),
        (content_query(ContentKinds::All, false, Some(7), 10), vec![]),
        (content_query(ContentKinds::All, false, Some(0), 10), vec![1, 3, 4, 6, 7]),
    ];
    for (query, sequences) in cases {
        let expected: Vec<ContentEvent> = sequences.iter().map(|sequence| events[sequence].clone()).collect();
        let read = store.read_content("turn_1", &query).await.expect("read_content");
        assert_eq!(read, expected, "read_content {query:?}");
    }
    assert_eq!(
        store.read_content("turn_2", &all_content()).await.expect("read_content"),
        vec![content_event(3, "model.message", r#"{"turn":2}"#)]
    );
    assert_eq!(store.read_content("turn_missing", &all_content()).await.expect("read_content"), vec![]);
    // Thread listings read a turn's `thread.created` and `thread.done` alone.
    store
        .write(&[
            content("turn_1", 8, "thread.created", r#"{"type":"thread.created"}"#),
            content("turn_1", 9, "model.message", r#"{"type":"model.message","thread_id":"thread_1"}"#),
            content("turn_1", 10, "thread.done", r#"{"type":"thread.done"}"#),
        ])
        .await
        .expect("write");
    let threads = store
        .read_content("turn_1", &ContentQuery { kinds: ContentKinds::Threads, descending: false, after: None, limit: 10 })
        .await
        .expect("read_content");
    assert_eq!(threads.iter().map(|event| event.sequence).collect::<Vec<_>>(), vec![8, 10]);
    // The content and the stream are separate logs.
    assert_eq!(store.read_stream("turn_1", 0, 100).await.expect("read_stream"), vec![]);
    assert_eq!(store.last_sequence("turn_1").await.expect("last_sequence"), 0);
}

/// A `TurnState` write sets the turn's state and bumps its session's `updated_at`.
pub async fn turn_state_writes_update_turn_and_session(store: Arc<dyn Store>) {
    create_draft_sessions(&store, &["ses_1", "ses_2"]).await;
    let turn_1 = create_plain_turn(&store, "ses_1", "turn_1", None, &at(10)).await;
    let turn_2 = create_plain_turn(&store, "ses_1", "turn_2", Some("turn_1"), &at(20)).await;
    let turn_3 = create_plain_turn(&store, "ses_2", "turn_3", None, &at(30)).await;
    let session_1 = store.get_session("ses_1").await.expect("get_session");
    let session_2 = store.get_session("ses_2").await.expect("get_session");

    let done = rich_done_state(&at(90));
    store
        .write(&[stream("turn_2", 1, r#"{"type":"turn.done"}"#), LogWrite::TurnState {
            turn_id: "turn_2".into(),
            state: done.clone(),
            at: at(90),
        }])
        .await
        .expect("write");
    assert_eq!(
        store.get_turn("ses_1", "turn_2").await.expect("get_turn"),
        TurnRecord { state: done.clone(), ..turn_2 }
    );
    assert_eq!(
        store.get_session("ses_1").await.expect("get_session"),
        SessionRecord { updated_at: at(90), ..session_1.clone() }
    );
    assert_eq!(store.get_session("ses_2").await.expect("get_session"), session_2);
    assert_eq!(store.get_turn("ses_1", "turn_1").await.expect("get_turn"), turn_1);

    // Several state writes in one batch apply in order: the last one wins.
    let failed = TurnState::Error { message: "boom".into(), completed_at: at(100), metrics: None };
    let cancelled = TurnState::Cancelled {
        reason: CancelReason::ClientCancelled,
        completed_at: at(110),
        metrics: Some(serde_json::from_value(json!({"total_input_tokens": 3, "total_output_tokens": 4, "total_tokens": 7})).expect("metrics")),
    };
    store
        .write(&[
            LogWrite::TurnState { turn_id: "turn_3".into(), state: failed.clone(), at: at(100) },
            LogWrite::TurnState { turn_id: "turn_1".into(), state: failed, at: at(100) },
            LogWrite::TurnState { turn_id: "turn_3".into(), state: cancelled.clone(), at: at(110) },
        ])
        .await
        .expect("write");
    assert_eq!(
        store.get_turn("ses_2", "turn_3").await.expect("get_turn"),
        TurnRecord { state: cancelled, ..turn_3 }
    );
    assert_eq!(
        store.get_session("ses_2").await.expect("get_session"),
        SessionRecord { updated_at: at(110), ..session_2 }
    );
    assert_eq!(
        store.get_session("ses_1").await.expect("get_session"),
        SessionRecord { updated_at: at(100), ..session_1 }
    );
    assert_eq!(store.running_turns().await.expect("running_turns"), vec![]);

    // Two turns of one session in one batch: the session takes the later state's time.
    store
        .write(&[
            LogWrite::TurnState { turn_id: "turn_1".into(), state: done_state(&at(120)), at: at(120) },
            LogWrite::TurnState { turn_id: "turn_2".into(), state: done_state(&at(130)), at: at(130) },
        ])
        .await
        .expect("write");
    assert_eq!(store.get_session("ses_1").await.expect("get_session").updated_at, at(130));
    assert_eq!(store.get_turn("ses_1", "turn_1").await.expect("get_turn").state, done_state(&at(120)));
    assert_eq!(store.get_turn("ses_1", "turn_2").await.expect("get_turn").state, done_state(&at(130)));

    let by_update = SessionQuery { order_by: SessionOrder::UpdatedAt, descending: true, limit: 10, ..SessionQuery::default() };
    let order: Vec<String> =
        store.list_sessions(&by_update).await.expect("list_sessions").into_iter().map(|session| session.id).collect();
    assert_eq!(order, ["ses_1", "ses_2"]);
}

/// Writing a batch again changes nothing, a stored stream event is never replaced, and writes
/// to turns that do not exist are skipped without failing the rest of the batch.
pub async fn write_batches_are_idempotent_and_skip_vanished_turns(store: Arc<dyn Store>) {
    create_draft_sessions(&store, &["ses_1", "ses_2"]).await;
    let turn_1 = create_plain_turn(&store, "ses_1", "turn_1", None, &at(10)).await;
    create_plain_turn(&store, "ses_2", "turn_2", None, &at(10)).await;
    store.write(&[]).await.expect("write of an empty batch");

    let first = vec![
        stream("turn_1", 1, "one"),
        stream("turn_1", 2, "two"),
        content("turn_1", 2, "model.message", "two"),
    ];
    store.write(&first).await.expect("write");
    store.write(&first).await.expect("write of the same batch again");
    // A repeated sequence number, in a later batch or in the same one, keeps the first event.
    store
        .write(&[
            stream("turn_1", 2, "two, again"),
            stream("turn_1", 3, "three"),
            stream("turn_1", 3, "three, again"),
        ])
        .await
        .expect("write of repeated sequence numbers");
    let expected_stream = vec![stream_event(1, "one"), stream_event(2, "two"), stream_event(3, "three")];
    assert_eq!(store.read_stream("turn_1", 0, 100).await.expect("read_stream"), expected_stream);
    assert_eq!(store.last_sequence("turn_1").await.expect("last_sequence"), 3);
    assert_eq!(
        store.read_content("turn_1", &all_content()).await.expect("read_content"),
        vec![content_event(2, "model.message", "two")]
    );

    // Writes of every kind to an unknown turn are skipped; the rest of the batch lands.
    let done = done_state(&at(20));
    store
        .write(&[
            stream("turn_missing", 1, "lost"),
            stream("turn_1", 4, "four"),
            content("turn_missing", 1, "model.message", "lost"),
            LogWrite::TurnState { turn_id: "turn_missing".into(), state: done.clone(), at: at(99) },
            LogWrite::TurnState { turn_id: "turn_1".into(), state: done.clone(), at: at(20) },
        ])
        .await
        .expect("write with an unknown turn");
    assert_eq!(store.read_stream("turn_missing", 0, 100).await.expect("read_stream"), vec![]);
    assert_eq!(store.read_content("turn_missing", &all_content()).await.expect("read_content"), vec![]);
    assert_eq!(store.last_sequence("turn_1").await.expect("last_sequence"), 4);
    assert_eq!(
        store.get_turn("ses_1", "turn_1").await.expect("get_turn"),
        TurnRecord { state: done.clone(), ..turn_1 }
    );
    let session_1 = store.get_session("ses_1").await.expect("get_session");
    assert_eq!(session_1.updated_at, at(20));

    // A batch that was queued before its session was deleted: the deleted turn's writes vanish
    // with it, the other turn's land.
    assert!(store.delete_session("ses_2").await.expect("delete_session"));
    store
        .write(&[
            stream("turn_2", 1, "late"),
            content("turn_2", 1, "model.message", "late"),
            LogWrite::TurnState { turn_id: "turn_2".into(), state: done.clone(), at: at(30) },
            stream("turn_1", 5, "five"),
        ])
        .await
        .expect("write racing a delete");
    assert_eq!(store.last_sequence("turn_1").await.expect("last_sequence"), 5);
    assert_eq!(store.read_stream("turn_2", 0, 100).await.expect("read_stream"), vec![]);
    expect_not_found(store.get_session("ses_2").await, "get_session of a deleted session");
    expect_not_found(store.get_turn("ses_2", "turn_2").await, "get_turn of a deleted session");
    assert_eq!(store.get_session("ses_1").await.expect("get_session"), session_1);
}

/// One batch of 5,000 stream events (and their content) is written whole.
pub async fn large_batch_in_one_write(store: Arc<dyn Store>) {
    const EVENTS: u64 = 5_000;
    store
        .create_session(&draft_session("ses_1", simple_spec("x"), None, "alice", &at(0)))
        .await
        .expect("create_session");
    create_plain_turn(&store, "ses_1", "turn_1", None, &at(10)).await;

    let data = |sequence: u64| {
        format!(r#"{{"type":"model.message.delta","id":"msg_1","thread_id":"main","content":"token {sequence} ✓"}}"#)
    };
    let mut batch: Vec<LogWrite> = (1..=EVENTS).map(|sequence| stream("turn_1", sequence, &data(sequence))).collect();
    for sequence in (100..=EVENTS).step_by(100) {
        batch.push(content("turn_1", sequence, "model.message", &data(sequence)));
    }
    batch.push(LogWrite::TurnState { turn_id: "turn_1".into(), state: done_state(&at(20)), at: at(20) });
    store.write(&batch).await.expect("write of a large batch");

    assert_eq!(store.last_sequence("turn_1").await.expect("last_sequence"), EVENTS);
    let mut read = Vec::new();
    let mut after = 0;
    loop {
        let page = store.read_stream("turn_1", after, 1_000).await.expect("read_stream");
        let Some(last) = page.last() else { break };
        assert!(last.sequence > after, "read_stream after {after} returned sequence {}", last.sequence);
        after = last.sequence;
        read.extend(page);
        assert!(read.len() <= EVENTS as usize, "paging through read_stream repeats events");
    }
    let expected: Vec<StreamEvent> = (1..=EVENTS).map(|sequence| stream_event(sequence, &data(sequence))).collect();
    assert!(read == expected, "the large batch does not read back as written");
    assert_eq!(store.read_stream("turn_1", EVENTS - 10, 100).await.expect("read_stream").len(), 10);

    let content_read = store.read_content("turn_1", &all_content()).await.expect("read_content");
    assert_eq!(content_read.len(), 50);
    assert_eq!(content_read.last(), Some(&content_event(EVENTS, "model.message", &data(EVENTS))));
    assert_eq!(store.running_turns().await.expect("running_turns"), vec![]);
}

// Leases and retention.

/// The life of a lease: a new turn's unclaimed lease is protected until its creator's first
/// renewal claims it; only the holder renews or releases it; once expired or released, one
/// takeover at the claim the listing reported wins, and the previous holder's renewals fail
/// from then on. Finished turns have no lease to renew, list or claim.
pub async fn leases_are_renewed_released_and_taken_over(store: Arc<dyn Store>) {
    const LONG: Duration = Duration::from_secs(600);
    create_draft_sessions(&store, &["ses_1", "ses_2", "ses_3"]).await;
    create_plain_turn(&store, "ses_1", "turn_1", None, &at(1)).await;
    let lease = |turn_id: &str, claims: u64| TurnLease { turn_id: turn_id.to_owned(), claims };
    let renew = |owner: &'static str, leases: Vec<TurnLease>, ttl: Duration| {
        let store = Arc::clone(&store);
        async move {
            let mut renewed = store.renew_leases(owner, &leases, ttl).await.expect("renew_leases");
            renewed.sort();
            renewed
        }
    };

    assert_eq!(store.expired_leases(10).await.expect("expired_leases"), vec![], "a new turn is protected");
    assert_eq!(store.claim_turn("turn_1", "r2", LONG, 0).await.expect("claim_turn"), None, "no takeover of a new turn");
    assert_eq!(renew("r1", vec![lease("turn_1", 1)], LONG).await, ["turn_1"], "the first renewal claims it");
    assert_eq!(renew("r2", vec![lease("turn_1", 1)], LONG).await, Vec::<String>::new(), "another owner cannot renew");
    assert_eq!(renew("r1", vec![lease("turn_1", 1)], LONG).await, ["turn_1"]);
    assert_eq!(renew("r1", vec![], LONG).await, Vec::<String>::new());
    assert_eq!(store.claim_turn("turn_1", "r2", LONG, 1).await.expect("claim_turn"), None, "a live lease is kept");

    assert!(!store.release_lease("r2", &lease("turn_1", 1)).await.expect("release_lease"), "only the holder releases");
    assert!(store.release_lease("r1", &lease("turn_1", 1)).await.expect("release_lease"));
    let expired = ExpiredLease { session_id: "ses_1".into(), turn_id: "turn_1".into(), owner: Some("r1".into()), claims: 1 };
    assert_eq!(store.expired_leases(10).await.expect("expired_leases"), vec![expired]);
    assert_eq!(store.claim_turn("turn_1", "r2", LONG, 0).await.expect("claim_turn"), None, "a stale claim count fails");
    assert_eq!(store.claim_turn("turn_1", "r2", LONG, 1).await.expect("claim_turn"), Some(lease("turn_1", 2)));
    assert_eq!(store.claim_turn("turn_1", "r3", LONG, 1).await.expect("claim_turn"), None, "taken over once");
    assert_eq!(store.claim_turn("turn_1", "r3", LONG, 2).await.expect("claim_turn"), None, "the new lease is live");
    assert_eq!(renew("r1", vec![lease("turn_1", 1)], LONG).await, Vec::<String>::new(), "the old holder lost it");
    assert_eq!(renew("r2", vec![lease("turn_1", 2)], LONG).await, ["turn_1"]);
    assert_eq!(store.expired_leases(10).await.expect("expired_leases"), vec![]);
    assert_eq!(store.claim_turn("turn_unknown", "r2", LONG, 0).await.expect("claim_turn"), None);

    // One renewal covers many turns, and leaves out those the owner does not hold.
    create_plain_turn(&store, "ses_2", "turn_2", None, &at(2)).await;
    create_plain_turn(&store, "ses_3", "turn_3", None, &at(3)).await;
    let all = vec![lease("turn_1", 2), lease("turn_2", 1), lease("turn_3", 1), lease("turn_unknown", 1)];
    assert_eq!(renew("r1", all, LONG).await, ["turn_2", "turn_3"]);

    // A lease that is not renewed expires on its own.
    assert_eq!(renew("r1", vec![lease("turn_2", 1)], Duration::from_millis(1)).await, ["turn_2"]);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let expired = ExpiredLease { session_id: "ses_2".into(), turn_id: "turn_2".into(), owner: Some("r1".into()), claims: 1 };
    assert_eq!(store.expired_leases(10).await.expect("expired_leases"), vec![expired]);
    assert_eq!(store.claim_turn("turn_2", "r2", LONG, 1).await.expect("claim_turn"), Some(lease("turn_2", 2)));

    // A finished turn's lease is neither renewed, listed nor claimed.
    let done = LogWrite::TurnState { turn_id: "turn_3".into(), state: done_state(&at(10)), at: at(10) };
    store.write(&[done]).await.expect("write");
    assert_eq!(renew("r1", vec![lease("turn_3", 1)], Duration::from_millis(1)).await, Vec::<String>::new());
    assert!(!store.release_lease("r1", &lease("turn_3", 1)).await.expect("release_lease"));
    assert_eq!(store.expired_leases(10).await.expect("expired_leases"), vec![]);
    assert_eq!(store.claim_turn("turn_3", "r2", LONG, 1).await.expect("claim_turn"), None);
}

/// Concurrent takeovers of one expired lease: exactly one wins.
pub async fn lease_takeover_race_has_exactly_one_winner(store: Arc<dyn Store>) {
    create_draft_sessions(&store, &["ses_1"]).await;
    create_plain_turn(&store, "ses_1", "turn_1", None, &at(1)).await;
    let first = TurnLease { turn_id: "turn_1".into(), claims: 1 };
    store.renew_leases("r0", std::slice::from_ref(&first), Duration::from_millis(1)).await.expect("renew_leases");
    tokio::time::sleep(Duration::from_millis(50)).await;

    let racers: Vec<_> = (0..8)
        .map(|racer| {
            let store = Arc::clone(&store);
            tokio::spawn(async move { store.claim_turn("turn_1", &format!("r{racer}"), Duration::from_secs(600), 1).await })
        })
        .collect();
    let mut winners = Vec::new();
    for racer in racers {
        if let Some(lease) = racer.await.expect("a racer task").expect("claim_turn") {
            winners.push(lease);
        }
    }
    assert_eq!(winners, [TurnLease { turn_id: "turn_1".into(), claims: 2 }], "exactly one takeover wins");
    assert_eq!(store.expired_leases(10).await.expect("expired_leases"), vec![]);
}

/// Log writes under a lease land only while their owner holds it: its creator writes under the
/// unclaimed lease and once it has claimed it, but after a takeover the old holder's writes
/// (stream, content and state) change nothing and name the turn, while the new holder's land.
/// In a batch of several turns, only the held ones are written.
pub async fn fenced_writes_land_only_under_a_held_lease(store: Arc<dyn Store>) {
    create_draft_sessions(&store, &["ses_1", "ses_2"]).await;
    create_plain_turn(&store, "ses_1", "turn_1", None, &at(1)).await;
    create_plain_turn(&store, "ses_2", "turn_2", None, &at(2)).await;
    let lease = |turn_id: &str, claims: u64| TurnLease { turn_id: turn_id.to_owned(), claims };
    let write_held = |owner: &'static str, leases: Vec<TurnLease>, batch: Vec<LogWrite>| {
        let store = Arc::clone(&store);
        async move {
            let mut left_out = store.write_held(owner, &leases, &batch).await.expect("write_held");
            left_out.sort();
            left_out
        }
    };
    let none = Vec::<String>::new();

    assert_eq!(write_held("r1", vec![lease("turn_1", 1)], vec![stream("turn_1", 1, "one")]).await, none, "unclaimed");
    let claimed = store.renew_leases("r1", &[lease("turn_1", 1)], Duration::from_millis(1)).await.expect("renew_leases");
    assert_eq!(claimed, ["turn_1"]);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(write_held("r1", vec![lease("turn_1", 1)], vec![stream("turn_1", 2, "two")]).await, none, "expired");
    let taken = store.claim_turn("turn_1", "r2", Duration::from_secs(600), 1).await.expect("claim_turn");
    assert_eq!(taken, Some(lease("turn_1", 2)));

    let updated_at = store.get_session("ses_1").await.expect("get_session").updated_at;
    let done = LogWrite::TurnState { turn_id: "turn_1".into(), state: done_state(&at(9)), at: at(9) };
    let stale = vec![stream("turn_1", 3, "stale"), content("turn_1", 3, "model.message", "stale"), done.clone()];
    assert_eq!(write_held("r1", vec![lease("turn_1", 1)], stale.clone()).await, ["turn_1"], "taken over");
    assert_eq!(write_held("r1", vec![lease("turn_1", 2)], stale.clone()).await, ["turn_1"], "another's claim");
    assert_eq!(write_held("r2", vec![], stale).await, ["turn_1"], "no lease given");
    let mixed = vec![stream("turn_1", 3, "stale"), stream("turn_2", 1, "held"), content("turn_2", 1, "model.message", "held")];
    assert_eq!(write_held("r1", vec![lease("turn_1", 1), lease("turn_2", 1)], mixed).await, ["turn_1"]);
    assert_eq!(
        store.read_stream("turn_1", 0, 10).await.expect("read_stream"),
        [stream_event(1, "one"), stream_event(2, "two")],
        "nothing of the old holder's lands after the takeover"
    );
    assert_eq!(store.read_content("turn_1", &all_content()).await.expect("read_content"), []);
    assert_eq!(store.get_turn("ses_1", "turn_1").await.expect("get_turn").state, TurnState::Running);
    assert_eq!(store.get_session("ses_1").await.expect("get_session").updated_at, updated_at);
    assert_eq!(store.read_stream("turn_2", 0, 10).await.expect("read_stream"), [stream_event(1, "held")]);

    let resumed = vec![stream("turn_1", 3, "three"), content("turn_1", 3, "model.message", "three"), done];
    assert_eq!(write_held("r2", vec![lease("turn_1", 2)], resumed).await, none, "the new holder writes");
    assert_eq!(store.read_stream("turn_1", 2, 10).await.expect("read_stream"), [stream_event(3, "three")]);
    assert_eq!(store.read_content("turn_1", &all_content()).await.expect("read_content"), [content_event(3, "model.message", "three")]);
    assert_eq!(store.get_turn("ses_1", "turn_1").await.expect("get_turn").state, done_state(&at(9)));
}

/// Finished turns lose their stream, longest finished first and at most `max_turns` per call,
/// once they finished before the cutoff; their content, their record and running turns stay.
pub async fn expired_streams_are_deleted_in_bounded_batches(store: Arc<dyn Store>) {
    create_draft_sessions(&store, &["ses_1", "ses_2", "ses_3", "ses_4"]).await;
    // Finished at 300, 100 and 200 seconds (turns and finishes in different orders); one runs.
    let finished = [("ses_1", "turn_1", 300), ("ses_2", "turn_2", 100), ("ses_3", "turn_3", 200)];
    let mut records = BTreeMap::new();
    for (session_id, turn_id, _) in finished.iter().copied().chain([("ses_4", "turn_4", 0)]) {
        create_plain_turn(&store, session_id, turn_id, None, &at(1)).await;
        let writes: Vec<LogWrite> = (1..=3)
            .flat_map(|sequence| {
                [stream(turn_id, sequence, &format!("{{\"n\":{sequence}}}")), content(turn_id, sequence, "model.message", "{}")]
            })
            .collect();
        store.write(&writes).await.expect("write");
    }
    for (session_id, turn_id, seconds) in finished {
        let state = LogWrite::TurnState { turn_id: turn_id.into(), state: done_state(&at(seconds)), at: at(seconds) };
        store.write(&[state]).await.expect("write");
        records.insert(turn_id, store.get_turn(session_id, turn_id).await.expect("get_turn"));
    }
    let stream_lengths = || {
        let store = Arc::clone(&store);
        async move {
            let mut lengths = Vec::new();
            for turn_id in ["turn_1", "turn_2", "turn_3", "turn_4"] {
                lengths.push(store.read_stream(turn_id, 0, 100).await.expect("read_stream").len());
            }
            lengths
        }
    };

    assert_eq!(store.delete_expired_streams(&at(250), 1).await.expect("delete_expired_streams"), 1);
    assert_eq!(stream_lengths().await, [3, 0, 3, 3], "the turn that finished first goes first");
    assert_eq!(store.delete_expired_streams(&at(250), 10).await.expect("delete_expired_streams"), 1);
    assert_eq!(stream_lengths().await, [3, 0, 0, 3]);
    assert_eq!(store.delete_expired_streams(&at(250), 10).await.expect("delete_expired_streams"), 0, "none left");
    assert_eq!(store.delete_expired_streams(&at(300), 10).await.expect("delete_expired_streams"), 0, "the cutoff is exclusive");
    assert_eq!(store.delete_expired_streams(&at(3600), 10).await.expect("delete_expired_streams"), 1);
    assert_eq!(stream_lengths().await, [0, 0, 0, 3], "a running turn keeps its stream");

    for (session_id, turn_id, _) in finished {
        assert_eq!(store.last_sequence(turn_id).await.expect("last_sequence"), 0);
        assert_eq!(store.read_content(turn_id, &all_content()).await.expect("read_content").len(), 3, "content stays");
        assert_eq!(&store.get_turn(session_id, turn_id).await.expect("get_turn"), &records[turn_id]);
    }
    assert!(store.delete_session("ses_2").await.expect("delete_session"), "a session without streams deletes");
}

// Settings.

/// Settings are upserted by (kind, name), listed per kind by name, and deleted one by one.
pub async fn settings_put_list_and_delete(store: Arc<dyn Store>) {
    assert_eq!(store.list_settings("model-provider").await.expect("list_settings"), vec![]);
    let openai = r#"{"base_url": "https://api.openai.com/v1", "note": "ünïcode ✓"}"#;
    store.put_setting("model-provider", "openai", openai, &at(0)).await.expect("put_setting");
    store.put_setting("model-provider", "anthropic", r#"{"v":1}"#, &at(1)).await.expect("put_setting");
    store.put_setting("mcp-server", "openai", r#"{"other":"kind"}"#, &at(2)).await.expect("put_setting");
    let listed = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs.iter().map(|&(name, value)| (name.to_owned(), value.to_owned())).collect()
    };
    assert_eq!(
        store.list_settings("model-provider").await.expect("list_settings"),
        listed(&[("anthropic", r#"{"v":1}"#), ("openai", openai)])
    );

    assert_eq!(store.get_setting("model-provider", "openai").await.expect("get_setting").as_deref(), Some(openai));
    assert_eq!(store.get_setting("mcp-server", "anthropic").await.expect("get_setting of another kind"), None);

    // Putting an existing name replaces its value.
    store.put_setting("model-provider", "anthropic", r#"{"v":2}"#, &at(3)).await.expect("put_setting again");
    assert_eq!(store.get_setting("model-provider", "anthropic").await.expect("get_setting").as_deref(), Some(r#"{"v":2}"#));
    assert_eq!(
        store.list_settings("model-provider").await.expect("list_settings"),
        listed(&[("anthropic", r#"{"v":2}"#), ("openai", openai)])
    );

    assert!(store.delete_setting("model-provider", "openai").await.expect("delete_setting"));
    assert!(!store.delete_setting("model-provider", "openai").await.expect("delete_setting again"));
    assert!(!store.delete_setting("unknown-kind", "anthropic").await.expect("delete_setting of another kind"));
    assert_eq!(
        store.list_settings("model-provider").await.expect("list_settings"),
        listed(&[("anthropic", r#"{"v":2}"#)])
    );
    assert_eq!(
        store.list_settings("mcp-server").await.expect("list_settings"),
        listed(&[("openai", r#"{"other":"kind"}"#)])
    );
}

// Several replicas.

/// A cancel request is recorded only for a running turn, keeps its first reason, leaves the
/// turn's record alone, and is listed only while the turn runs.
pub async fn cancel_requests_are_recorded_for_running_turns(store: Arc<dyn Store>) {
    create_draft_sessions(&store, &["ses_1", "ses_2"]).await;
    let first = create_plain_turn(&store, "ses_1", "turn_1", None, &at(1)).await;
    create_plain_turn(&store, "ses_2", "turn_2", None, &at(2)).await;
    let requests = |ids: &'static [&'static str]| {
        let store = Arc::clone(&store);
        async move {
            let mut found = store.cancel_requests(ids).await.expect("cancel_requests");
            found.sort_by(|a, b| a.0.cmp(&b.0));
            found
        }
    };
    assert_eq!(requests(&["turn_1", "turn_2"]).await, vec![]);

    assert!(store.request_cancel("turn_1", CancelReason::ClientCancelled).await.expect("request_cancel"));
    assert!(
        store.request_cancel("turn_1", CancelReason::CancelledForNextTurn).await.expect("request_cancel again"),
        "a second request for a running turn succeeds"
    );
    assert!(!store.request_cancel("turn_unknown", CancelReason::ClientCancelled).await.expect("unknown turn"));
    assert_eq!(
        requests(&["turn_1", "turn_2", "turn_unknown"]).await,
        vec![("turn_1".to_owned(), CancelReason::ClientCancelled)],
        "the first reason wins"
    );
    assert_eq!(requests(&[]).await, vec![]);
    assert_eq!(store.get_turn("ses_1", "turn_1").await.expect("get_turn"), first, "the turn is unchanged");

    store.request_cancel("turn_2", CancelReason::Abandoned).await.expect("request_cancel");
    assert_eq!(
        requests(&["turn_1", "turn_2"]).await,
        vec![
            ("turn_1".to_owned(), CancelReason::ClientCancelled),
            ("turn_2".to_owned(), CancelReason::Abandoned)
        ]
    );

    // Once a turn has ended, its request is no longer listed and new ones are refused.
    let cancelled = TurnState::Cancelled { reason: CancelReason::ClientCancelled, completed_at: at(3), metrics: None };
    store
        .write(&[LogWrite::TurnState { turn_id: "turn_1".into(), state: cancelled, at: at(3) }])
        .await
        .expect("write");
    assert!(!store.request_cancel("turn_1", CancelReason::ClientCancelled).await.expect("ended turn"));
    assert_eq!(requests(&["turn_1", "turn_2"]).await, vec![("turn_2".to_owned(), CancelReason::Abandoned)]);
}

/// A store other processes share announces on its change feed, once committed and in commit
/// order: every write to turns' streams or states (once per turn and write, with the highest
/// sequence number it stored), every recorded cancel request, every setting written or
/// deleted, and every change to a session (its row, its control, its turns, its queued
/// messages; with its creator when session lists show it). A store no other process shares has
/// no feed.
pub async fn change_feed_announces_commits(store: Arc<dyn Store>) {
    let Some(mut feed) = store.changes().await.expect("changes") else { return };
    let session = |session_id: &str, listed: bool| Change::Session {
        session_id: session_id.into(),
        listed_for: listed.then(|| "alice".into()),
    };
    create_draft_sessions(&store, &["ses_1", "ses_2"]).await;
    assert_eq!(next_change(&mut feed).await, session("ses_1", true), "a new session shows in its creator's lists");
    assert_eq!(next_change(&mut feed).await, session("ses_2", true));
    create_plain_turn(&store, "ses_1", "turn_1", None, &at(1)).await;
    create_plain_turn(&store, "ses_2", "turn_2", None, &at(2)).await;
    assert_eq!(next_change(&mut feed).await, session("ses_1", false), "a turn started");
    assert_eq!(next_change(&mut feed).await, session("ses_2", false));
    let turn = |turn_id: &str, last_sequence: u64| Change::Turn { turn_id: turn_id.into(), last_sequence };

    store
        .write(&[
            stream("turn_1", 1, "a"),
            stream("turn_1", 2, "b"),
            content("turn_1", 2, "model.message", "b"),
            stream("turn_2", 1, "c"),
        ])
        .await
        .expect("write");
    let mut announced = vec![next_change(&mut feed).await, next_change(&mut feed).await];
    announced.sort_by_key(|change| format!("{change:?}"));
    assert_eq!(announced, vec![turn("turn_1", 2), turn("turn_2", 1)]);

    let done = TurnState::Done { output: None, required_actions: vec![], completed_at: at(3), metrics: None };
    store.write(&[LogWrite::TurnState { turn_id: "turn_2".into(), state: done, at: at(3) }]).await.expect("write");
    assert_eq!(next_change(&mut feed).await, turn("turn_2", 0), "a state write without stream events");

    assert!(store.request_cancel("turn_1", CancelReason::ClientCancelled).await.expect("request_cancel"));
    assert!(!store.request_cancel("turn_2", CancelReason::ClientCancelled).await.expect("request_cancel"));
    assert_eq!(
        next_change(&mut feed).await,
        Change::CancelRequested { turn_id: "turn_1".into(), reason: CancelReason::ClientCancelled }
    );

    store.put_setting("model-provider", "openai", "{}", &at(4)).await.expect("put_setting");
    assert_eq!(
        next_change(&mut feed).await,
        Change::Setting { kind: "model-provider".to_owned() },
        "the refused cancel request of an ended turn announces nothing"
    );
    assert!(!store.delete_setting("mcp-server", "unknown").await.expect("delete_setting"));
    assert!(store.delete_setting("model-provider", "openai").await.expect("delete_setting"));
    assert_eq!(
        next_change(&mut feed).await,
        Change::Setting { kind: "model-provider".to_owned() },
        "deleting nothing announces nothing"
    );

    let mut renamed = store.get_session("ses_1").await.expect("get_session");
    renamed.title = Some("Renamed".to_owned());
    store.update_session(&renamed).await.expect("update_session");
    assert_eq!(next_change(&mut feed).await, session("ses_1", true), "a rename shows in lists");
    let control = SessionControl { mode: Some("plan".to_owned()), ..SessionControl::default() };
    store.update_session_control("ses_2", &control, &at(5)).await.expect("update_session_control");
    assert_eq!(next_change(&mut feed).await, session("ses_2", false));
    let follow_up = QueuedMessage {
        session_id: "ses_1".to_owned(),
        id: "q_1".to_owned(),
        kind: QueueKind::FollowUp,
        content: serde_json::from_value(json!([{"type": "text", "text": "next"}])).expect("content"),
        created_by: subject("alice"),
        created_at: at(6),
        credential: Some("key_q_1".to_owned()),
    };
    assert!(store.queue_message(&follow_up, 1).await.expect("queue_message"));
    assert!(!store.queue_message(&QueuedMessage { id: "q_2".to_owned(), ..follow_up.clone() }, 1).await.expect("full"));
    assert!(!store.remove_queued("ses_1", "q_unknown").await.expect("remove_queued"));
    assert!(store.remove_queued("ses_1", "q_1").await.expect("remove_queued"));
    assert_eq!(next_change(&mut feed).await, session("ses_1", false), "queued");
    assert_eq!(
        next_change(&mut feed).await,
        session("ses_1", false),
        "a refused queueing and removing nothing announce nothing; the removal does"
    );
    assert!(!store.delete_session("ses_unknown").await.expect("delete_session"));
    assert!(store.delete_session("ses_2").await.expect("delete_session"));
    assert_eq!(next_change(&mut feed).await, session("ses_2", true), "a deletion shows in lists");
}

/// The next change on a feed other than [`Change::Missed`], waiting at most ten seconds
/// (backends' own feed tests use it too).
pub async fn next_change(feed: &mut ChangeFeed) -> Change {
    let wait = async {
        loop {
            match feed.next().await {
                Some(Change::Missed) => continue,
                Some(change) => return change,
                None => panic!("the change feed stopped"),
            }
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), wait).await.expect("a change within ten seconds")
}

// Usage counters.

/// A subject's bucket holds `per_minute` requests, refuses the next without taking anything,
/// refills with time, and is forgotten once idle; subjects have buckets of their own, and
/// concurrent requests take exactly what the bucket holds.
pub async fn request_buckets_take_refill_and_forget(store: Arc<dyn Store>) {
    for _ in 0..3 {
        assert!(store.take_request("ann", 3).await.expect("take_request").granted);
    }
    let refused = store.take_request("ann", 3).await.expect("take_request");
    assert!(!refused.granted && refused.tokens_left < 1.0, "{refused:?}");
    assert!(store.take_request("bob", 3).await.expect("take_request").granted, "another subject has its own bucket");
    // At 600,000 a minute a millisecond brings ten requests back.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let refilled = store.take_request("ann", 600_000).await.expect("take_request");
    assert!(refilled.granted && refilled.tokens_left >= 1.0, "{refilled:?}");

    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(store.forget_idle_requests(Duration::from_millis(10)).await.expect("forget_idle_requests"), 2);
    assert_eq!(store.forget_idle_requests(Duration::from_millis(10)).await.expect("forget_idle_requests"), 0);
    let fresh = store.take_request("ann", 3).await.expect("take_request");
    assert_eq!(fresh, crate::RequestTaken { granted: true, tokens_left: 2.0 }, "a forgotten bucket starts full");

    let takes = (0..12).map(|_| {
        let store = Arc::clone(&store);
        tokio::spawn(async move { store.take_request("carol", 5).await.expect("take_request").granted })
    });
    let mut granted = 0;
    for take in takes.collect::<Vec<_>>() {
        granted += usize::from(take.await.expect("a take"));
    }
    assert_eq!(granted, 5, "concurrent requests take exactly the bucket");
}

/// A subject's places count while reserved or while their turn runs under a live lease; a
/// session's own places do not count against its new turn; reservations are serialised.
pub async fn turn_places_count_reservations_and_running_turns(store: Arc<dyn Store>) {
    const LONG: Duration = Duration::from_secs(600);
    let place = |id: &str, subject: &str, session: &str| crate::TurnPlace {
        id: id.to_owned(),
        subject_id: subject.to_owned(),
        session_id: session.to_owned(),
    };
    let reserve = |place: crate::TurnPlace, max: u32, ttl: Duration| {
        let store = Arc::clone(&store);
        async move { store.reserve_turn_place(&place, max, ttl).await.expect("reserve_turn_place") }
    };
    create_draft_sessions(&store, &["ses_1", "ses_2", "ses_3", "ses_4"]).await;

    assert_eq!(reserve(place("p1", "ann", "ses_1"), 2, LONG).await, None);
    assert_eq!(reserve(place("p2", "ann", "ses_2"), 2, LONG).await, None);
    assert_eq!(reserve(place("p3", "ann", "ses_3"), 2, LONG).await, Some(2), "two places count");
    assert_eq!(reserve(place("q1", "bob", "ses_3"), 2, LONG).await, None, "another subject has its own");
    assert_eq!(reserve(place("p3", "ann", "ses_1"), 2, LONG).await, None, "the session's own place does not count");
    assert!(store.release_turn_place("p3").await.expect("release_turn_place"));
    assert!(!store.release_turn_place("p3").await.expect("release_turn_place"), "given back once");

    // A bound place counts while its turn runs, and no more once it has ended.
    create_plain_turn(&store, "ses_1", "turn_1", None, &at(1)).await;
    assert!(store.bind_turn_place("p1", "turn_1").await.expect("bind_turn_place"));
    assert!(!store.bind_turn_place("p_unknown", "turn_1").await.expect("bind_turn_place"));
    assert_eq!(reserve(place("p5", "ann", "ses_3"), 2, LONG).await, Some(2), "a running turn counts");
    let done = LogWrite::TurnState { turn_id: "turn_1".into(), state: done_state(&at(2)), at: at(2) };
    store.write(&[done]).await.expect("write");
    assert_eq!(reserve(place("p5", "ann", "ses_3"), 2, LONG).await, None, "an ended turn does not");
    assert!(!store.bind_turn_place("p1", "turn_1").await.expect("bind_turn_place"), "and its place was deleted");

    // A running turn whose lease expired (its replica stopped) counts no more.
    create_plain_turn(&store, "ses_2", "turn_2", None, &at(3)).await;
    assert!(store.bind_turn_place("p2", "turn_2").await.expect("bind_turn_place"));
    assert_eq!(reserve(place("p6", "ann", "ses_4"), 2, LONG).await, Some(2));
    let lease = TurnLease { turn_id: "turn_2".into(), claims: 1 };
    store.renew_leases("r1", &[lease], Duration::from_millis(1)).await.expect("renew_leases");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(reserve(place("p6", "ann", "ses_4"), 2, LONG).await, None, "an expired lease frees the place");
    assert_eq!(reserve(place("p7", "ann", "ses_1"), 2, LONG).await, Some(2));

    // A reservation that was never bound expires.
    assert_eq!(reserve(place("r1", "carol", "ses_1"), 1, Duration::from_millis(1)).await, None);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(reserve(place("r2", "carol", "ses_2"), 1, LONG).await, None, "an expired reservation frees the place");

    // Concurrent reservations of one subject: exactly as many as allowed pass.
    let racing = (0..8).map(|n| tokio::spawn(reserve(place(&format!("d{n}"), "dave", &format!("ses_race_{n}")), 3, LONG)));
    let mut reserved = 0;
    for outcome in racing.collect::<Vec<_>>() {
        reserved += usize::from(outcome.await.expect("a reservation").is_none());
    }
    assert_eq!(reserved, 3);
}

/// A tenant's spend adds up within its window, concurrent additions included; windows before
/// the one added to are forgotten, and tenants are apart.
pub async fn tenant_spend_adds_up_per_window(store: Arc<dyn Store>) {
    let spend = |tokens: u64, cost_usd: f64| crate::Spend { tokens, cost_usd };
    let add = |tenant: &'static str, window: u64, added: crate::Spend| {
        let store = Arc::clone(&store);
        async move { store.add_tenant_spend(tenant, window, added).await.expect("add_tenant_spend") }
    };
    assert_eq!(add("acme", 5, spend(10, 0.5)).await, spend(10, 0.5));
    assert_eq!(add("acme", 5, spend(5, 0.25)).await, spend(15, 0.75));
    assert_eq!(add("acme", 5, spend(0, 0.0)).await, spend(15, 0.75), "adding nothing reads the total");
    assert_eq!(add("beta", 5, spend(1, 0.0)).await, spend(1, 0.0));
    assert_eq!(add("acme", 6, spend(2, 0.0)).await, spend(2, 0.0), "a new window starts at zero");
    assert_eq!(add("acme", 5, spend(0, 0.0)).await, spend(0, 0.0), "the window before was forgotten");
    assert_eq!(add("beta", 5, spend(0, 0.0)).await, spend(1, 0.0), "another tenant's is kept");

    let adding = (0..16).map(|_| tokio::spawn(add("gamma", 1, spend(1, 0.5))));
    for added in adding.collect::<Vec<_>>() {
        added.await.expect("an addition");
    }
    assert_eq!(add("gamma", 1, spend(0, 0.0)).await, spend(16, 8.0));
}

// Fixtures.

/// A fixed timestamp `seconds` seconds after 2025-01-01T00:00:00Z, in the canonical form.
fn at(seconds: u32) -> String {
    format!("2025-01-01T{:02}:{:02}:{:02}.000Z", seconds / 3600, seconds / 60 % 60, seconds % 60)
}

fn subject(id: &str) -> Subject {
    Subject { subject_id: id.to_owned(), subject_type: "user".to_owned(), subject_slug: format!("{id}@example.com") }
}

fn simple_spec(instructions: &str) -> AgentSpec {
    serde_json::from_value(json!({"model": {"name": "openai-main/gpt-4o"}, "instructions": instructions}))
        .expect("a valid spec")
}

/// A spec that uses every part of the schema, so a lossy encoding shows.
fn rich_spec() -> AgentSpec {
    serde_json::from_value(json!({
        "model": {"name": "anthropic-main/claude-sonnet", "params": {
            "max_tokens": 512, "temperature": 0.25, "top_p": 0.5, "top_k": 40,
            "parallel_tool_calls": true, "reasoning_effort": "high",
            "cache_control": {"type": "ephemeral"}, "seed": 7, "stop": ["\n\n"]
        }},
        "instructions": "Réponds en français 🙂 to {{user}}",
        "messages": [{"type": "user.message", "content": "hello {{user}}"}],
        "mcp_servers": [
            {"type": "truefoundry-mcp-registry", "name": "github", "enable_tools": ["@read-only"],
             "require_approval_for_tools": ["@write"], "preload": false},
            {"type": "inline", "name": "x", "url": "https://mcp.example.com/mcp"}
        ],
        "response_format": {"type": "json_schema", "json_schema": {"name": "out", "schema": {"type": "object"}, "strict": true}},
        "skills": [
            {"type": "git", "url": "https://github.com/a/b", "name": "b", "ref": "main"},
            {"type": "truefoundry-skills-registry", "fqn": "skill:t/x:1", "preload": false},
            {"name": "configured-skill"}
        ],
        "config": {
            "iteration_limit": 100,
            "sandbox": {"enabled": true, "file_downloads": true, "network_policy": {"auth_inject": [
                {"type": "git", "match": {"hosts": ["github.com"]}, "auth_data": {"type": "basic", "username": "u", "password": "p"}}
            ]}},
            "dynamic_sub_agents": {"enabled": true},
            "context_management": {"compaction": {"enabled": true, "compaction_threshold_tokens": 50000}, "large_tool_response": {"enabled": false}},
            "generative_ui": {"enabled": true},
            "ask_user_questions": {"enabled": false}
        },
        "variables": {"user": "Zoë"}
    }))
    .expect("a valid spec")
}

/// Turn input of every kind.
fn rich_input() -> Vec<TurnInput> {
    serde_json::from_value(json!([
        {"type": "user.message", "content": "hi ✌️"},
        {"type": "user.message", "content": [{"type": "text", "text": "see"}, {"type": "file", "name": "f.txt", "data": "data:text/plain;base64,aGk="}]},
        {"type": "user.tool_approval", "thread_id": "main", "tool_call_id": "c1", "approval": {"status": "deny", "reason": "no"}},
        {"type": "user.tool_approval", "thread_id": "thr_2", "tool_call_id": "c2", "approval": {"status": "allow"}},
        {"type": "user.tool_response", "thread_id": "main", "tool_call_id": "c3", "content": "42"}
    ]))
    .expect("valid input")
}

fn done_state(completed_at: &str) -> TurnState {
    TurnState::Done { output: None, required_actions: vec![], completed_at: completed_at.to_owned(), metrics: None }
}

/// A finished state with an output, a pending action and metrics.
fn rich_done_state(completed_at: &str) -> TurnState {
    serde_json::from_value(json!({
        "status": "done",
        "output": {"id": "msg_9", "thread_id": "main", "created_at": completed_at, "content": "Done ✅",
                   "finish_reason": "tool_calls",
                   "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "search", "arguments": "{\"q\": \"x\"}"},
                                   "tool_info": {"type": "mcp", "server_id": "srv_1", "server_name": "github", "name": "search"}}],
                   "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_tokens": 2,
                             "input_tokens_breakdown": {"harness": 1, "skills": 0, "instructions": 2, "tool_definitions": 3, "messages": 4}}},
        "required_actions": [{"type": "tool.approval_required", "id": "ev_7", "created_at": completed_at, "thread_id": "main",
                              "tool_calls": [{"id": "call_1", "source_event_id": "msg_9"}]}],
        "completed_at": completed_at,
        "metrics": {"total_input_tokens": 10, "total_output_tokens": 5, "total_tokens": 15, "total_cost_in_usd": 0.5}
    }))
    .expect("a valid state")
}

fn agent_record(id: &str, name: &str, spec: AgentSpec, created_at: &str) -> AgentRecord {
    AgentRecord {
        id: id.to_owned(),
        name: name.to_owned(),
        version: 1,
        spec,
        created_at: created_at.to_owned(),
        updated_at: created_at.to_owned(),
        tenant: "acme".to_owned(),
        created_by: Some(Subject { subject_id: "acme:owner".into(), subject_type: "user".into(), subject_slug: "owner".into() }),
    }
}

fn saved_session(id: &str, agent: &AgentRecord, created_by: &str, created_at: &str) -> SessionRecord {
    SessionRecord {
        id: id.to_owned(),
        agent: SessionAgentRecord::Saved {
            agent_id: agent.id.clone(),
            agent_name: agent.name.clone(),
            version: agent.version,
        },
        title: None,
        created_by: subject(created_by),
        created_at: created_at.to_owned(),
        updated_at: created_at.to_owned(),
        last_turn_id: None,
        control: SessionControl::default(),
        resource_id: None,
    }
}

fn draft_session(
    id: &str,
    spec: AgentSpec,
    agent_name: Option<&str>,
    created_by: &str,
    created_at: &str,
) -> SessionRecord {
    SessionRecord {
        id: id.to_owned(),
        agent: SessionAgentRecord::Draft { spec, agent_name: agent_name.map(str::to_owned) },
        title: None,
        created_by: subject(created_by),
        created_at: created_at.to_owned(),
        updated_at: created_at.to_owned(),
        last_turn_id: None,
        control: SessionControl::default(),
        resource_id: None,
    }
}

fn turn_record(id: &str, session_id: &str, previous_turn_id: Option<&str>, created_at: &str) -> TurnRecord {
    TurnRecord {
        id: id.to_owned(),
        session_id: session_id.to_owned(),
        previous_turn_id: previous_turn_id.map(str::to_owned),
        input: serde_json::from_value(json!([{"type": "user.message", "content": format!("message of {id}")}]))
            .expect("valid input"),
        state: TurnState::Running,
        created_by: subject("alice"),
        created_at: created_at.to_owned(),
        control: SessionControl::default(),
        request_context: None,
    }
}

/// Creates a running turn that chains to `previous` (also the expected last turn).
/// Creates empty draft sessions owned by `alice`, created at `at(0)`.
async fn create_draft_sessions(store: &Arc<dyn Store>, ids: &[&str]) {
    for id in ids {
        store
            .create_session(&draft_session(id, simple_spec("x"), None, "alice", &at(0)))
            .await
            .expect("create_session");
    }
}

async fn create_plain_turn(
    store: &Arc<dyn Store>,
    session_id: &str,
    turn_id: &str,
    previous: Option<&str>,
    created_at: &str,
) -> TurnRecord {
    let turn = turn_record(turn_id, session_id, previous, created_at);
    store.create_turn(&turn, previous, &[]).await.expect("create_turn");
    turn
}

fn stream(turn_id: &str, sequence: u64, data: &str) -> LogWrite {
    LogWrite::Stream { turn_id: turn_id.into(), sequence, data: data.into() }
}

fn content(turn_id: &str, sequence: u64, kind: &'static str, data: &str) -> LogWrite {
    LogWrite::Content { turn_id: turn_id.into(), sequence, kind, data: data.into() }
}

fn stream_event(sequence: u64, data: &str) -> StreamEvent {
    StreamEvent { sequence, data: data.to_owned() }
}

fn content_event(sequence: u64, kind: &str, data: &str) -> ContentEvent {
    ContentEvent { sequence, kind: kind.to_owned(), data: data.to_owned() }
}

fn all_content() -> ContentQuery {
    ContentQuery { kinds: ContentKinds::All, descending: false, after: None, limit: 1_000 }
}

/// A query with a limit of 100 and whatever `change` sets.
fn query(change: impl FnOnce(&mut SessionQuery)) -> SessionQuery {
    let mut query = SessionQuery { limit: 100, ..SessionQuery::default() };
    change(&mut query);
    query
}

/// Stores the sessions the listing checks read, and returns them as stored.
///
/// | id  | agent                 | by    | created | updated |
/// |-----|-----------------------|-------|---------|---------|
/// | s01 | saved beta            | alice | 200     | 250     |
/// | s02 | saved alpha           | alice | 50      | 600     |
/// | s03 | saved alpha           | bob   | 100     | 400     |
/// | s04 | saved alpha           | carol | 500     | 500     |
/// | s05 | draft named beta      | bob   | 300     | 400     |
/// | s07 | saved alpha           | alice | 100     | 100     |
/// | s08 | draft named gamma     | alice | 600     | 600     |
/// | s09 | draft without a name  | carol | 300     | 300     |
/// | s10 | saved beta            | bob   | 400     | 700 (by a turn's state) |
/// | s11 | draft named alpha     | alice | 100     | 150     |
async fn seed_listing(store: &Arc<dyn Store>) -> Vec<SessionRecord> {
    let alpha = agent_record("agt_a", "alpha", simple_spec("a"), &at(0));
    let beta = agent_record("agt_b", "beta", simple_spec("b"), &at(0));
    store.create_agent(&alpha).await.expect("create_agent");
    store.create_agent(&beta).await.expect("create_agent");
    let saved = |id: &str, agent: &AgentRecord, by: &str, created: u32, updated: u32| SessionRecord {
        updated_at: at(updated),
        ..saved_session(&format!("ses_{id}"), agent, by, &at(created))
    };
    let draft = |id: &str, name: Option<&str>, by: &str, created: u32, updated: u32| SessionRecord {
        updated_at: at(updated),
        title: Some(format!("Draft {id}")),
        ..draft_session(&format!("ses_{id}"), simple_spec(id), name, by, &at(created))
    };
    let mut sessions = vec![
        saved("s01", &beta, "alice", 200, 250),
        saved("s02", &alpha, "alice", 50, 600),
        saved("s03", &alpha, "bob", 100, 400),
        saved("s04", &alpha, "carol", 500, 500),
        draft("s05", Some("beta"), "bob", 300, 400),
        saved("s07", &alpha, "alice", 100, 100),
        draft("s08", Some("gamma"), "alice", 600, 600),
        draft("s09", None, "carol", 300, 300),
        saved("s10", &beta, "bob", 400, 400),
        draft("s11", Some("alpha"), "alice", 100, 150),
    ];
    // Insertion order differs from every listing order.
    for index in [4, 9, 0, 7, 2, 5, 8, 1, 6, 3] {
        store.create_session(&sessions[index]).await.expect("create_session");
    }
    create_plain_turn(store, "ses_s10", "turn_s10", None, &at(450)).await;
    store
        .write(&[LogWrite::TurnState { turn_id: "turn_s10".into(), state: done_state(&at(700)), at: at(700) }])
        .await
        .expect("write");
    let s10 = &mut sessions[8];
    s10.updated_at = at(700);
    s10.last_turn_id = Some("turn_s10".into());
    sessions
}

/// Checks one listing against hand-written ids and against the reference model.
async fn check_listing(store: &Arc<dyn Store>, sessions: &[SessionRecord], query: &SessionQuery, expected: &[&str]) {
    let listed = store.list_sessions(query).await.expect("list_sessions");
    let ids: Vec<&str> = listed.iter().map(|session| session.id.trim_start_matches("ses_")).collect();
    assert_eq!(ids, expected, "list_sessions {query:?}");
    assert_eq!(listed, reference_listing(sessions, query), "list_sessions {query:?} returns whole records");
}

/// The saved agent a session is bound to, if any.
fn agent_id(session: &SessionRecord) -> Option<&str> {
    match &session.agent {
        SessionAgentRecord::Saved { agent_id, .. } => Some(agent_id),
        SessionAgentRecord::Draft { .. } => None,
    }
}

/// The agent name a session is listed under: the saved agent's, or a draft's optional link.
fn agent_name(session: &SessionRecord) -> Option<&str> {
    match &session.agent {
        SessionAgentRecord::Saved { agent_name, .. } => Some(agent_name),
        SessionAgentRecord::Draft { agent_name, .. } => agent_name.as_deref(),
    }
}

fn order_key(session: &SessionRecord, order_by: SessionOrder) -> &str {
    match order_by {
        SessionOrder::CreatedAt => &session.created_at,
        SessionOrder::UpdatedAt => &session.updated_at,
    }
}

/// What `list_sessions` must return, computed the slow, obvious way.
fn reference_listing(sessions: &[SessionRecord], query: &SessionQuery) -> Vec<SessionRecord> {
    let mut matching: Vec<SessionRecord> = sessions
        .iter()
        .filter(|session| {
            query.created_by.as_deref().is_none_or(|by| session.created_by.subject_id == by)
                && query.visible_to.as_deref().is_none_or(|viewer| {
                    session.created_by.subject_id == viewer
                        || agent_id(session).is_some_and(|id| query.or_of_agents.iter().any(|agent| agent == id))
                        || query.or_created_by_prefix.as_deref().is_some_and(|prefix| session.created_by.subject_id.starts_with(prefix))
                })
                && query.agent_name.as_deref().is_none_or(|name| agent_name(session) == Some(name))
                && query.agent_id.as_deref().is_none_or(|id| agent_id(session) == Some(id))
                && query.kind.is_none_or(|kind| session.kind() == kind)
                && query.session_id.as_deref().is_none_or(|id| session.id == id)
                && query.created_from.as_deref().is_none_or(|from| session.created_at.as_str() >= from)
                && query.created_to.as_deref().is_none_or(|to| session.created_at.as_str() <= to)
        })
        .filter(|session| {
            query.after.as_ref().is_none_or(|(key, id)| {
                let position = (order_key(session, query.order_by), session.id.as_str());
                let cursor = (key.as_str(), id.as_str());
                if query.descending { position < cursor } else { position > cursor }
            })
        })
        .cloned()
        .collect();
    matching.sort_by(|a, b| {
        let ordering = (order_key(a, query.order_by), &a.id).cmp(&(order_key(b, query.order_by), &b.id));
        if query.descending { ordering.reverse() } else { ordering }
    });
    matching.truncate(query.limit as usize);
    matching
}

#[track_caller]
fn expect_not_found<T: Debug>(result: Result<T>, what: &str) {
    match result {
        Err(Error::NotFound(_)) => {}
        other => panic!("{what}: expected NotFound, got {other:?}"),
    }
}

#[track_caller]
fn expect_conflict<T: Debug>(result: Result<T>, what: &str) {
    match result {
        Err(Error::Conflict(_)) => {}
        other => panic!("{what}: expected Conflict, got {other:?}"),
    }
}

/// `add_model_uses` adds per tenant and model; `model_uses` lists a tenant's, by model.
pub async fn model_uses_are_counted_per_tenant(store: Arc<dyn Store>) {
    assert_eq!(store.model_uses("acme").await.expect("model_uses of a new tenant"), vec![]);
    let added = [("acme", "openai/gpt", 1), ("acme", "fake/fake-model", 3), ("acme", "openai/gpt", 40), ("other", "openai/gpt", 1)];
    for (tenant, model, uses) in added {
        store.add_model_uses(tenant, model, uses).await.expect("add_model_uses");
    }
    assert_eq!(
        store.model_uses("acme").await.expect("model_uses"),
        vec![("fake/fake-model".to_owned(), 3), ("openai/gpt".to_owned(), 41)]
    );
    assert_eq!(store.model_uses("other").await.expect("model_uses"), vec![("openai/gpt".to_owned(), 1)]);
}

#[cfg(test)]
mod tests {
    /// Every check in this file runs from [`conformance_tests!`](crate::conformance_tests), so a
    /// backend cannot pass the suite while skipping one.
    #[test]
    fn the_macro_runs_every_check() {
        let listed: &[&str] = crate::conformance_tests!(@names);
        let mut listed: Vec<&str> = listed.to_vec();
        let mut defined: Vec<&str> = include_str!("conformance.rs")
            .lines()
            .filter_map(|line| line.strip_prefix("pub async fn "))
            .filter_map(|rest| rest.strip_suffix("(store: Arc<dyn Store>) {"))
            .collect();
        listed.sort_unstable();
        defined.sort_unstable();
        assert_eq!(listed, defined);
    }
}
