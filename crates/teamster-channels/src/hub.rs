//! [`Hubs`]: one follower per session whose events all the session's open channels share. The
//! first channel opened on a session makes its hub and starts its follower (`session.rs`), which reads, translates
//! and folds once, and publishes each event to every subscriber; the last channel to close ends
//! it. A channel opened later starts from the display state as of the last event published, so
//! that what it then receives continues it exactly.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use teamster_live::{DisplayState, LiveEvent, SharedEvent};
use tokio::sync::broadcast;

use super::BUFFER;

/// The followers running on this replica, by session (and whether they send turn events too).
#[derive(Default)]
pub(crate) struct Hubs {
    hubs: Mutex<HashMap<HubKey, Arc<Hub>>>,
}

impl std::fmt::Debug for Hubs {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Hubs").field("running", &lock(&self.hubs).len()).finish()
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct HubKey {
    session_id: String,
    turn_events: bool,
}

/// One session's follower, as its channels see it.
pub(super) struct Hub {
    key: HubKey,
    shared: Mutex<Published>,
}

/// What a follower has published: the display state as of its last event, and the way to its
/// subscribers.
pub(super) struct Published {
    /// Folded from every event published; the first snapshot once `opened`.
    pub(super) display: DisplayState,
    /// Whether the first snapshot went out: a channel joining later copies `display`.
    opened: bool,
    sender: broadcast::Sender<Arc<SharedEvent>>,
}

/// A channel's place on a hub: the snapshot it starts from (`None` when the first one is yet
/// to be published, to it too), and the events after it.
pub(super) struct Joined {
    pub(super) first: Option<DisplayState>,
    pub(super) receiver: broadcast::Receiver<Arc<SharedEvent>>,
    /// The hub, when joining made it: its follower is to be started.
    pub(super) started: Option<Arc<Hub>>,
}

impl Hubs {
    /// Joins the hub of `session_id`, making it when none runs (its follower is then for the
    /// caller to start).
    pub(super) fn join(&self, session_id: &str, turn_events: bool) -> Joined {
        let key = HubKey { session_id: session_id.to_owned(), turn_events };
        let mut hubs = lock(&self.hubs);
        if let Some(hub) = hubs.get(&key) {
            let published = hub.published();
            let (first, receiver) = (published.opened.then(|| published.display.clone()), published.sender.subscribe());
            return Joined { first, receiver, started: None };
        }
        let (sender, receiver) = broadcast::channel(BUFFER);
        let display = DisplayState { session_id: session_id.to_owned(), ..DisplayState::default() };
        let hub = Arc::new(Hub { key: key.clone(), shared: Mutex::new(Published { display, opened: false, sender }) });
        hubs.insert(key, hub.clone());
        Joined { first: None, receiver, started: Some(hub) }
    }

    /// Takes `hub` off the replica when no channel listens to it (the follower then ends);
    /// `false` when one joined meanwhile.
    pub(super) fn leave_if_unheard(&self, hub: &Arc<Hub>) -> bool {
        let mut hubs = lock(&self.hubs);
        if hub.published().sender.receiver_count() > 0 {
            return false;
        }
        remove(&mut hubs, hub);
        true
    }

    /// Takes `hub` off the replica: its follower ended.
    pub(super) fn leave(&self, hub: &Arc<Hub>) {
        remove(&mut lock(&self.hubs), hub);
    }
}

fn remove(hubs: &mut HashMap<HubKey, Arc<Hub>>, hub: &Arc<Hub>) {
    if hubs.get(&hub.key).is_some_and(|running| Arc::ptr_eq(running, hub)) {
        hubs.remove(&hub.key);
    }
}

impl Hub {
    /// Whether the follower sends each turn event as stored too (`LiveEvent::TurnEvent`).
    pub(super) fn turn_events(&self) -> bool {
        self.key.turn_events
    }

    pub(super) fn session_id(&self) -> &str {
        &self.key.session_id
    }

    /// What was published, held: events are published and channels join one at a time.
    pub(super) fn published(&self) -> MutexGuard<'_, Published> {
        lock(&self.shared)
    }

    /// The sender, whose `closed()` resolves once no channel listens.
    pub(super) fn sender(&self) -> broadcast::Sender<Arc<SharedEvent>> {
        self.published().sender.clone()
    }
}

impl Published {
    /// Folds `event` in and sends it to every channel (none listening is not an error).
    pub(super) fn publish(&mut self, event: LiveEvent) {
        event.fold_into(&mut self.display);
        let _ = self.sender.send(Arc::new(SharedEvent::new(event)));
    }

    /// Sends the display state as it is; the first makes the hub open to later channels.
    pub(super) fn publish_display(&mut self) {
        self.opened = true;
        let event = LiveEvent::DisplayStateChanged { display: Box::new(self.display.clone()) };
        let _ = self.sender.send(Arc::new(SharedEvent::new(event)));
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
