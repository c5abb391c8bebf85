//! Several replicas on one store: what this process learns from the store's change feed.
//!
//! A replica keeps only its own running turns in memory. When the store is shared (it has a
//! [`ChangeFeed`]), one task relays the feed's announcements:
//! - a write to a turn wakes this replica's readers of that turn ([`TurnWatch`]): subscribers
//!   following a turn that runs elsewhere, and waits for such a turn to end;
//! - a cancel request stops the turn if it runs here;
//! - a setting written anywhere reloads that kind of settings here, and an OAuth client or
//!   grant written anywhere drops what this replica keeps of it in memory;
//! - [`Change::Missed`] does all of that for everything, since anything may have changed.
//!
//! The feed is a wake-up, never the data, and readers also re-check on a slow timer, so a lost
//! announcement only delays them: readers re-read the store every second (see the runtime's
//! `replicas.rs`), and a second task looks up cancel requests and steering instructions for this
//! replica's running turns every [`CANCEL_CHECK`]. A store with no feed (SQLite, one process) uses none of this. What
//! each announcement does here is the [`ClusterMember`]'s business (the service's facade).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use teamster_protocol::CancelReason;
use teamster_store::{Change, ChangeFeed};
use tokio::sync::watch;

/// How often a replica looks up cancel requests for the turns it runs.
const CANCEL_CHECK: Duration = Duration::from_secs(1);

/// What a replica keeps in memory of one kind of settings, and so does when another replica
/// writes a setting of that kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeptSettings {
    /// Loaded at start: reloaded.
    Reloaded,
    /// OAuth clients or grants cached on use: forgotten.
    OAuth,
    /// Read from the store on every use: nothing to do.
    NotKept,
}

/// The registry of readers waiting for announcements about turns.
#[derive(Default)]
pub struct Cluster {
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
    pub(crate) fn watch(self: &Arc<Cluster>, turn_id: &str) -> TurnWatch {
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

/// What a replica does when the feed announces something for it; implemented by the service,
/// which knows where each kind of state lives.
#[async_trait]
pub trait ClusterMember: Send + Sync + 'static {
    /// What this replica keeps of the settings of `kind`.
    fn kept(&self, kind: &str) -> KeptSettings;
    /// Cancels a turn if it runs in this process.
    fn cancel_local(&self, turn_id: &str, reason: CancelReason);
    /// Cancels the turns running here that another replica asked to cancel, and tells those
    /// another replica queued steering instructions for.
    async fn apply_cancel_requests(&self);
    /// Reloads the settings of `kind` (every kind for `None`) that another replica may have
    /// changed; failures are logged, and the next change or miss reloads again.
    async fn reload_settings(&self, kind: Option<&str>);
    /// Forgets the OAuth clients and tokens this replica keeps in memory that another replica
    /// changed (settings of `kind`; every kind for `None`).
    async fn oauth_changed(&self, kind: Option<&str>);
    /// Wakes what follows `session_id` here (every session for `None`, after a miss);
    /// `listed_for` is the creator whose session lists show the change.
    fn session_changed(&self, session_id: Option<&str>, listed_for: Option<&str>);
}

impl Cluster {
    /// Reloads settings, one reload at a time, so the last one applied is the last one read.
    async fn reload(&self, member: &dyn ClusterMember, kind: Option<&str>) {
        let _serial = self.reloads.lock().await;
        member.reload_settings(kind).await;
    }
}

/// Starts relaying the feed to `member`, and the slow check for cancel requests. Both tasks
/// end once the member is gone.
pub fn start(cluster: Arc<Cluster>, feed: ChangeFeed, member: Weak<dyn ClusterMember>) {
    tokio::spawn(relay(cluster, member.clone(), feed));
    tokio::spawn(check_cancel_requests(member));
}

async fn relay(cluster: Arc<Cluster>, member: Weak<dyn ClusterMember>, mut feed: ChangeFeed) {
    while let Some(change) = feed.next().await {
        let Some(member) = member.upgrade() else { return };
        apply(&cluster, member, change);
    }
}

async fn check_cancel_requests(member: Weak<dyn ClusterMember>) {
    let mut ticks = tokio::time::interval(CANCEL_CHECK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(member) = member.upgrade() else { return };
        member.apply_cancel_requests().await;
    }
}

/// Acts on one announced change.
fn apply(cluster: &Arc<Cluster>, member: Arc<dyn ClusterMember>, change: Change) {
    match change {
        Change::Turn { turn_id, last_sequence } => cluster.wake(&turn_id, last_sequence),
        Change::CancelRequested { turn_id, reason } => member.cancel_local(&turn_id, reason),
        Change::Setting { kind } => match member.kept(&kind) {
            KeptSettings::Reloaded => {
                let cluster = cluster.clone();
                tokio::spawn(async move { cluster.reload(member.as_ref(), Some(&kind)).await });
            }
            KeptSettings::OAuth => {
                tokio::spawn(async move { member.oauth_changed(Some(&kind)).await });
            }
            KeptSettings::NotKept => {}
        },
        Change::Session { session_id, listed_for } => member.session_changed(Some(&session_id), listed_for.as_deref()),
        Change::Missed => {
            cluster.wake_all();
            member.session_changed(None, None);
            let cluster = cluster.clone();
            tokio::spawn(async move {
                member.apply_cancel_requests().await;
                cluster.reload(member.as_ref(), None).await;
                member.oauth_changed(None).await;
            });
        }
    }
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
