//! The change feed on LISTEN/NOTIFY.
//!
//! Writes announce themselves in the statement that makes them (`pg_notify`), so an
//! announcement is delivered exactly when its write commits, and never for a write that rolled
//! back. All of a schema's announcements go to one channel, `teamster_<schema oid>`: two
//! deployments in two schemas of one database do not hear each other. Payloads are small
//! (well under PostgreSQL's 8000-byte limit):
//!
//! - `t:<last sequence>:<turn id>`: a write to a turn's stream or state ([`Change::Turn`]);
//! - `c:<reason>:<turn id>`: a cancel request ([`Change::CancelRequested`]);
//! - `s:<kind>`: a setting written or deleted ([`Change::Setting`]);
//! - `u:<session id>` and `l:<session id>:<creator's subject id>`: a session changed, the
//!   second when its creator's session lists show the change ([`Change::Session`]). A turn's
//!   creation announces its session in its own statement; the session statements shared with
//!   SQLite are announced by one of their own right after the write commits (see
//!   [`session_payload`]).
//!
//! One task per store holds a dedicated connection (outside the pool, so it never takes a
//! connection from the store's queries) listening on the channel, and broadcasts what it hears
//! to every [`ChangeFeed`]. When the connection drops, fails, or stops answering a health check,
//! the task listens again on a new one (with back-off) and then announces [`Change::Missed`]:
//! readers re-check what they wait for, so nothing committed while it was deaf is lost.

use std::sync::Arc;
use std::time::Duration;

use sqlx::Executor;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use teamster_store::{Change, ChangeFeed, ChangeSender, Error, Result, codec};
use tokio::task::JoinHandle;

use teamster_store_sql::error;

/// How many changes a reader may fall behind before it is told it missed some.
const FEED_CAPACITY: usize = 4096;
/// After this long without a notification, the listening connection is checked with a query.
const HEALTH_CHECK_AFTER: Duration = Duration::from_secs(30);
/// How long the health check and each connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The first and the longest wait between attempts to listen again.
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// The channel of the schema the connections use, from its oid: unique per schema and short
/// enough for a channel name (63 bytes) whatever the schema is called.
pub(crate) const CHANNEL_QUERY: &str =
    "SELECT 'teamster_' || oid::text FROM pg_namespace WHERE nspname = current_schema()";

/// Parses a notification's payload; `None` for one this version does not know.
pub(crate) fn parse(payload: &str) -> Option<Change> {
    let (tag, rest) = payload.split_once(':')?;
    match tag {
        "t" => {
            let (sequence, turn_id) = rest.split_once(':')?;
            Some(Change::Turn { turn_id: turn_id.into(), last_sequence: sequence.parse().ok()? })
        }
        "c" => {
            let (reason, turn_id) = rest.split_once(':')?;
            Some(Change::CancelRequested { turn_id: turn_id.into(), reason: codec::cancel_reason(reason).ok()? })
        }
        "s" => Some(Change::Setting { kind: rest.to_owned() }),
        "u" => Some(Change::Session { session_id: rest.into(), listed_for: None }),
        "l" => {
            let (session_id, subject_id) = rest.split_once(':')?;
            Some(Change::Session { session_id: session_id.into(), listed_for: Some(subject_id.into()) })
        }
        _ => None,
    }
}

/// The longest payload PostgreSQL accepts is 8000 bytes; a session change whose creator's id
/// would take it past this is announced without it (its lists then learn of it on their
/// re-read).
const MAX_SESSION_PAYLOAD: usize = 7900;

/// The payload announcing a change to `session_id`, shown in `listed_for`'s session lists.
pub(crate) fn session_payload(session_id: &str, listed_for: Option<&str>) -> String {
    match listed_for {
        Some(subject_id) if session_id.len() + subject_id.len() + 3 <= MAX_SESSION_PAYLOAD => {
            format!("l:{session_id}:{subject_id}")
        }
        _ => format!("u:{session_id}"),
    }
}

/// The store's feed, started by the first reader and stopped with the store.
pub(crate) struct FeedSlot {
    options: PgConnectOptions,
    channel: Arc<str>,
    running: tokio::sync::Mutex<Option<Running>>,
}

/// A listening task and the sender it broadcasts on.
struct Running {
    sender: ChangeSender,
    task: JoinHandle<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FeedSlot {
    pub(crate) fn new(options: PgConnectOptions, channel: Arc<str>) -> FeedSlot {
        FeedSlot { options, channel, running: tokio::sync::Mutex::new(None) }
    }

    /// A new reader. The first call connects and listens before it returns, so every commit
    /// after it is announced; a failure to connect is the caller's error.
    pub(crate) async fn subscribe(&self) -> Result<ChangeFeed> {
        let mut running = self.running.lock().await;
        if let Some(feed) = running.as_ref().filter(|feed| !feed.task.is_finished()) {
            return Ok(feed.sender.subscribe());
        }
        let listener = listen(&self.options, &self.channel).await?;
        let sender = ChangeSender::new(FEED_CAPACITY);
        let reader = sender.subscribe();
        let task = tokio::spawn(relay(listener, self.options.clone(), self.channel.clone(), sender.clone()));
        *running = Some(Running { sender, task });
        Ok(reader)
    }

    /// Stops listening; readers see the feed end.
    pub(crate) async fn stop(&self) {
        self.running.lock().await.take();
    }
}

/// A listener on `channel` over a connection of its own.
async fn listen(options: &PgConnectOptions, channel: &str) -> Result<PgListener> {
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(CONNECT_TIMEOUT)
        .idle_timeout(None)
        .max_lifetime(None)
        .connect_lazy_with(options.clone().application_name("teamster-feed"));
    let mut listener = PgListener::connect_with(&pool).await.map_err(error::backend)?;
    listener.listen(channel).await.map_err(error::backend)?;
    Ok(listener)
}

/// Broadcasts what the listener hears until the feed is stopped, listening again whenever
/// the connection fails.
async fn relay(mut listener: PgListener, options: PgConnectOptions, channel: Arc<str>, sender: ChangeSender) {
    loop {
        let heard = tokio::select! {
            heard = listener.try_recv() => heard.map_err(error::backend),
            () = tokio::time::sleep(HEALTH_CHECK_AFTER) => match health_check(&mut listener).await {
                Ok(()) => continue,
                Err(error) => Err(error),
            },
        };
        match heard {
            Ok(Some(notification)) => match parse(notification.payload()) {
                Some(change) => sender.send(change),
                None => tracing::debug!(payload = notification.payload(), "unknown change notification ignored"),
            },
            // The connection dropped, and sqlx has connected and listened again.
            Ok(None) => {
                tracing::warn!("the change feed's connection dropped; listening again");
                sender.send(Change::Missed);
            }
            Err(error) => {
                tracing::warn!(%error, "the change feed's connection failed; listening again");
                listener = listen_again(&options, &channel).await;
                sender.send(Change::Missed);
            }
        }
    }
}

/// Checks that the listening connection still answers.
async fn health_check(listener: &mut PgListener) -> Result<()> {
    match tokio::time::timeout(CONNECT_TIMEOUT, listener.execute("SELECT 1")).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(error)) => Err(error::backend(error)),
        Err(_) => Err(Error::Backend("the change feed's connection did not answer a health check".to_owned())),
    }
}

/// Listens on a new connection, retrying with back-off until it works.
async fn listen_again(options: &PgConnectOptions, channel: &str) -> PgListener {
    let mut delay = RETRY_FIRST;
    loop {
        tokio::time::sleep(delay).await;
        match tokio::time::timeout(CONNECT_TIMEOUT, listen(options, channel)).await {
            Ok(Ok(listener)) => return listener,
            Ok(Err(error)) => tracing::warn!(%error, "the change feed could not listen again; retrying"),
            Err(_) => tracing::warn!("the change feed timed out listening again; retrying"),
        }
        delay = (delay * 2).min(RETRY_MAX);
    }
}

#[cfg(test)]
mod tests {
    use teamster_protocol::CancelReason;

    use super::*;

    #[test]
    fn payloads_parse_into_changes_and_unknown_ones_are_ignored() {
        assert_eq!(parse("t:42:turn_01:x"), Some(Change::Turn { turn_id: "turn_01:x".into(), last_sequence: 42 }));
        assert_eq!(
            parse("c:client-cancelled:turn_01"),
            Some(Change::CancelRequested { turn_id: "turn_01".into(), reason: CancelReason::ClientCancelled })
        );
        assert_eq!(parse("s:model-provider"), Some(Change::Setting { kind: "model-provider".to_owned() }));
        let session = |listed_for: Option<&str>| Change::Session { session_id: "ses_1".into(), listed_for: listed_for.map(Into::into) };
        assert_eq!(parse(&session_payload("ses_1", None)), Some(session(None)));
        assert_eq!(parse(&session_payload("ses_1", Some("user:a@b"))), Some(session(Some("user:a@b"))));
        let long = "x".repeat(MAX_SESSION_PAYLOAD);
        assert_eq!(parse(&session_payload("ses_1", Some(&long))), Some(session(None)), "too long for a payload");
        for unknown in ["", "t", "t:x:turn", "t:-1:turn", "c:bored:turn", "x:1:turn", "c:client-cancelled", "l:ses_1"] {
            assert_eq!(parse(unknown), None, "{unknown:?}");
        }
    }
}
