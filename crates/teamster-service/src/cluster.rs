//! Several replicas on one store: what this process learns from the store's change feed.
//!
//! A replica keeps only its own running turns in memory. When the store is shared (it has a
//! [`ChangeFeed`]), one task relays the feed's announcements:
//! - a write to a turn wakes this replica's readers of that turn ([`TurnWatch`]): subscribers
//!   following a turn that runs elsewhere, and waits for such a turn to end;
//! - a cancel request stops the turn if it runs here;
//! - a setting written anywhere reloads that kind of settings here;
//! - [`Change::Missed`] does all of that for everything, since anything may have changed.
//!
//! The feed is a wake-up, never the data, and readers also re-check on a slow timer, so a lost
//! announcement only delays them: subscribers re-read the store every [`FALLBACK_POLL`], and
//! a second task looks up cancel requests for this replica's running turns every
//! [`CANCEL_CHECK`]. A store with no feed (SQLite, one process) uses none of this.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use teamster_protocol::CancelReason;
use teamster_store::{Change, ChangeFeed};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::Result;
use crate::live::TurnLog;
use crate::{Inner, Service};

/// How long a reader woken by nothing re-reads the store anyway.
pub(crate) const FALLBACK_POLL: Duration = Duration::from_secs(1);
/// How often a replica looks up cancel requests for the turns it runs.
const CANCEL_CHECK: Duration = Duration::from_secs(1);
/// The settings kinds a replica keeps in memory, and so reloads when any replica writes them.
const RELOADED_KINDS: [&str; 2] = [crate::catalog::SETTING_KIND, crate::mcp::SETTING_KIND];
/// How often a reader of a store with no feed re-reads it (a turn of another process sharing
/// a SQLite file, which only happens around a restart).
const STORE_POLL: Duration = Duration::from_millis(250);

/// The registry of readers waiting for announcements about turns.
#[derive(Default)]
pub(crate) struct Cluster {
    /// One sender per watched turn; each reader holds a receiver. The value is the highest
    /// sequence number announced for the turn.
    watchers: Mutex<HashMap<Arc<str>, watch::Sender<u64>>>,
    /// Serialises settings reloads, so the last one applied is the last one read.
    reloads: tokio::sync::Mutex<()>,
}

/// A reader's registration for wake-ups about one turn. Register before reading the store:
/// any write committed after the read is then announced to it. It leaves the registry when
/// dropped.
pub(crate) struct TurnWatch {
    cluster: Arc<Cluster>,
    turn_id: Arc<str>,
    receiver: Option<watch::Receiver<u64>>,
}

impl TurnWatch {
    /// Waits until the feed announces a write to the turn (`true`), or at most `limit`
    /// (`false`).
    pub(crate) async fn changed(&mut self, limit: Duration) -> bool {
        let Some(receiver) = self.receiver.as_mut() else { return false };
        matches!(tokio::time::timeout(limit, receiver.changed()).await, Ok(Ok(())))
    }
}

impl Drop for TurnWatch {
    fn drop(&mut self) {
        drop(self.receiver.take());
        let mut watchers = lock(&self.cluster.watchers);
        if watchers.get(&self.turn_id).is_some_and(|sender| sender.receiver_count() == 0) {
            watchers.remove(&self.turn_id);
        }
    }
}

impl Cluster {
    fn watch(self: &Arc<Cluster>, turn_id: &str) -> TurnWatch {
        let mut watchers = lock(&self.watchers);
        let receiver = match watchers.get(turn_id) {
            Some(sender) => sender.subscribe(),
            None => {
                let (sender, receiver) = watch::channel(0);
                watchers.insert(turn_id.into(), sender);
                receiver
            }
        };
        TurnWatch { cluster: Arc::clone(self), turn_id: turn_id.into(), receiver: Some(receiver) }
    }

    /// Wakes the readers of a turn.
    fn wake(&self, turn_id: &str, last_sequence: u64) {
        if let Some(sender) = lock(&self.watchers).get(turn_id) {
            sender.send_modify(|announced| *announced = (*announced).max(last_sequence));
        }
    }

    /// Wakes every reader of every turn.
    fn wake_all(&self) {
        for sender in lock(&self.watchers).values() {
            sender.send_modify(|_| {});
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The turn a new turn waits for before it runs: the session's previous turn, being cancelled
/// for it.
pub(crate) enum EndingTurn {
    /// It runs in this process.
    Local(Arc<TurnLog>),
    /// It runs on another replica; its end is read from the store.
    Remote { session_id: String, turn_id: String },
}

impl EndingTurn {
    /// Waits, at most `limit`, until the turn has recorded its end.
    pub(crate) async fn wait(&self, service: &Service, limit: Duration) {
        match self {
            EndingTurn::Local(log) => {
                let _ = tokio::time::timeout(limit, log.wait_finished()).await;
            }
            EndingTurn::Remote { session_id, turn_id } => {
                if let Err(error) = service.wait_stored_end(session_id, turn_id, limit).await {
                    tracing::warn!(%turn_id, %error, "could not wait for the previous turn to end");
                }
            }
        }
    }
}

/// Starts relaying the feed to the service, and the slow check for cancel requests. Both
/// tasks end once the service is gone.
pub(crate) fn start(service: &Service, feed: ChangeFeed) {
    let inner = Arc::downgrade(&service.inner);
    tokio::spawn(relay(inner.clone(), feed));
    tokio::spawn(check_cancel_requests(inner));
}

async fn relay(inner: Weak<Inner>, mut feed: ChangeFeed) {
    while let Some(change) = feed.next().await {
        let Some(inner) = inner.upgrade() else { return };
        Service { inner }.apply(change);
    }
}

async fn check_cancel_requests(inner: Weak<Inner>) {
    let mut ticks = tokio::time::interval(CANCEL_CHECK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(inner) = inner.upgrade() else { return };
        Service { inner }.apply_cancel_requests().await;
    }
}

impl Service {
    /// Registers for wake-ups about a turn; `None` when the store has no feed.
    pub(crate) fn watch_turn(&self, turn_id: &str) -> Option<TurnWatch> {
        self.inner.cluster.as_ref().map(|cluster| cluster.watch(turn_id))
    }

    /// Whether other processes may share the store (it has a change feed).
    pub(crate) fn is_clustered(&self) -> bool {
        self.inner.cluster.is_some()
    }

    /// Acts on one announced change.
    fn apply(&self, change: Change) {
        let Some(cluster) = &self.inner.cluster else { return };
        match change {
            Change::Turn { turn_id, last_sequence } => cluster.wake(&turn_id, last_sequence),
            Change::CancelRequested { turn_id, reason } => self.cancel_local(&turn_id, reason),
            Change::Setting { kind } if RELOADED_KINDS.contains(&kind.as_str()) => {
                let service = self.clone();
                tokio::spawn(async move { service.reload_settings(Some(&kind)).await });
            }
            // Other kinds are read from the store on every use.
            Change::Setting { .. } => {}
            Change::Missed => {
                cluster.wake_all();
                let service = self.clone();
                tokio::spawn(async move {
                    service.apply_cancel_requests().await;
                    service.reload_settings(None).await;
                });
            }
        }
    }

    /// Cancels a turn if it runs in this process.
    fn cancel_local(&self, turn_id: &str, reason: CancelReason) {
        if let Some(log) = self.inner.live.get(turn_id) {
            tracing::debug!(%turn_id, ?reason, "cancelling a turn at another replica's request");
            log.request_cancel(reason);
        }
    }

    /// Cancels the turns running here that another replica asked to cancel.
    async fn apply_cancel_requests(&self) {
        let running: Vec<Arc<TurnLog>> =
            self.inner.live.all().into_iter().filter(|log| log.cancel_reason().is_none()).collect();
        if running.is_empty() {
            return;
        }
        let turn_ids: Vec<&str> = running.iter().map(|log| &*log.turn_id).collect();
        match self.store().cancel_requests(&turn_ids).await {
            Ok(requests) => {
                for (turn_id, reason) in requests {
                    self.cancel_local(&turn_id, reason);
                }
            }
            Err(error) => tracing::warn!(%error, "could not look up cancel requests"),
        }
    }

    /// Reloads the settings of `kind` (every kind for `None`) that another replica may have
    /// changed. Failures are logged; the next change or miss reloads again.
    async fn reload_settings(&self, kind: Option<&str>) {
        let Some(cluster) = &self.inner.cluster else { return };
        let _serial = cluster.reloads.lock().await;
        let wanted = |setting_kind: &str| kind.is_none_or(|kind| kind == setting_kind);
        if wanted(crate::catalog::SETTING_KIND)
            && let Err(error) = self.catalog().reload_model_providers().await
        {
            tracing::warn!(%error, "could not reload model providers");
        }
        if wanted(crate::mcp::SETTING_KIND)
            && let Err(error) = self.inner.mcp.reload().await
        {
            tracing::warn!(%error, "could not reload MCP servers");
        }
    }

    /// Waits, at most `limit`, until a turn's stored state is terminal; `Ok(false)` if it is
    /// still running then. Woken by the feed, and re-reads on a slow timer in any case.
    pub(crate) async fn wait_stored_end(&self, session_id: &str, turn_id: &str, limit: Duration) -> Result<bool> {
        let deadline = Instant::now() + limit;
        let mut watch = self.watch_turn(turn_id);
        loop {
            if self.store().get_turn(session_id, turn_id).await?.state.is_terminal() {
                return Ok(true);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            match watch.as_mut() {
                Some(watch) => {
                    watch.changed(left.min(FALLBACK_POLL)).await;
                }
                None => tokio::time::sleep(left.min(STORE_POLL)).await,
            }
        }
    }

    /// The session's last turn, if the store has it running and it does not run in this
    /// process (or was fenced here): a turn another replica runs. Only asked when the store
    /// has a feed.
    pub(crate) async fn remote_running_turn(&self, session: &teamster_store::SessionRecord) -> Result<Option<String>> {
        let Some(last) = &session.last_turn_id else { return Ok(None) };
        if self.inner.live.get(last).is_some_and(|log| !log.is_fenced()) {
            return Ok(None);
        }
        let record = self.store().get_turn(&session.id, last).await?;
        Ok((record.state == teamster_protocol::TurnState::Running).then(|| last.clone()))
    }

    /// Asks the replica running a turn to cancel it, and waits, at most `limit`, until the turn
    /// has recorded its end; `Ok(false)` if it has not.
    pub(crate) async fn cancel_remote(
        &self,
        session_id: &str,
        turn_id: &str,
        reason: CancelReason,
        limit: Duration,
    ) -> Result<bool> {
        self.store().request_cancel(turn_id, reason).await?;
        self.wait_stored_end(session_id, turn_id, limit).await
    }
}

/// How often a subscriber following a turn through the store re-reads it when nothing woke it.
pub(crate) fn store_poll(clustered: bool) -> Duration {
    if clustered { FALLBACK_POLL } else { STORE_POLL }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn watches_wake_on_their_turn_and_leave_the_registry_when_dropped() {
        let cluster = Arc::new(Cluster::default());
        let mut first = cluster.watch("turn_a");
        let mut second = cluster.watch("turn_a");
        let mut other = cluster.watch("turn_b");
        cluster.wake("turn_a", 7);
        assert!(first.changed(Duration::from_secs(5)).await);
        assert!(second.changed(Duration::from_secs(5)).await);
        assert!(!other.changed(Duration::from_millis(10)).await, "another turn's write wakes nobody here");

        cluster.wake_all();
        assert!(other.changed(Duration::from_secs(5)).await, "a miss wakes every reader");

        drop(first);
        assert_eq!(lock(&cluster.watchers).len(), 2, "turn_a still has a reader");
        drop(second);
        drop(other);
        assert!(lock(&cluster.watchers).is_empty());
        cluster.wake("turn_a", 8);
    }
}
