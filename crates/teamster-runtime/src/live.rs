//! Running turns in memory: each one's events, durability watermark and cancellation.
//!
//! A [`TurnLog`] holds every event of a running turn as the JSON the store keeps (one shared
//! buffer per event for the log, the writer and every subscriber), so live subscribers never
//! touch the store. Frames become visible only once the writer has committed them (the `durable`
//! watermark): whatever a client was sent survives a crash. When the turn has ended and its
//! last frame is durable, the log leaves the registry and its memory is freed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use teamster_protocol::{CancelReason, TurnState};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The live state of one running turn.
pub struct TurnLog {
    pub turn_id: Arc<str>,
    pub session_id: String,
    events: Mutex<Events>,
    /// The highest sequence number the store has committed.
    durable: watch::Sender<u64>,
    /// Fires to stop the turn; `cancel_reason` says why.
    pub cancel: CancellationToken,
    cancel_reason: Mutex<Option<CancelReason>>,
    /// Becomes true when the turn leaves this process: it has ended and every frame is
    /// durable, or it was fenced and has stopped.
    finished: watch::Sender<bool>,
    /// The turn's final state, set just before `turn.done` is emitted, so readers see it even
    /// before the store has it.
    final_state: Mutex<Option<TurnState>>,
    /// Set once this process no longer owns the turn (its lease was lost, or handed over on
    /// shutdown): nothing more of it is written here, and it records no end here.
    fenced: AtomicBool,
    /// Until when this process owns the turn, in milliseconds of `clock::clock`: past it, the
    /// turn counts as fenced even before anyone has noticed (a process that was paused, say).
    owned_until: AtomicU64,
    /// The claim of the turn's lease this process holds (0 before it holds one): its writes are
    /// fenced by it in the store.
    claims: AtomicU64,
    /// Set when steering instructions were queued for the turn, until it takes them.
    steered: AtomicBool,
}

struct Events {
    /// Event `i` has sequence number `i + 1`.
    events: Vec<Arc<str>>,
    /// The sequence number of `turn.done`, once emitted.
    done_at: Option<u64>,
}

/// One event of a turn's stream: its sequence number and its JSON, as stored and sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamedEvent {
    pub sequence: u64,
    pub json: Arc<str>,
}

impl TurnLog {
    /// A log whose `events` (its first ones) are already durable.
    pub fn new(turn_id: &str, session_id: &str, events: Vec<Arc<str>>) -> Arc<TurnLog> {
        let committed = events.len() as u64;
        Arc::new(TurnLog {
            turn_id: turn_id.into(),
            session_id: session_id.to_owned(),
            events: Mutex::new(Events { events, done_at: None }),
            durable: watch::Sender::new(committed),
            cancel: CancellationToken::new(),
            cancel_reason: Mutex::new(None),
            finished: watch::Sender::new(false),
            final_state: Mutex::new(None),
            fenced: AtomicBool::new(false),
            owned_until: AtomicU64::new(u64::MAX),
            claims: AtomicU64::new(0),
            steered: AtomicBool::new(false),
        })
    }

    /// Notes that steering instructions were queued for the turn.
    pub fn mark_steered(&self) {
        self.steered.store(true, Ordering::Release);
    }

    /// Whether steering instructions were queued since the last call.
    pub fn take_steered(&self) -> bool {
        self.steered.swap(false, Ordering::AcqRel)
    }

    /// Appends an event under the log's lock and calls `then` with its sequence number while
    /// still holding it, so the order of writes sent to the writer is the sequence order.
    pub fn append(&self, json: &Arc<str>, is_done: bool, then: impl FnOnce(u64)) -> u64 {
        let mut events = lock(&self.events);
        let sequence = events.events.len() as u64 + 1;
        events.events.push(json.clone());
        if is_done {
            events.done_at = Some(sequence);
        }
        then(sequence);
        sequence
    }

    /// Marks frames up to `sequence` as durable and wakes subscribers.
    pub fn mark_durable(&self, sequence: u64) {
        self.durable.send_if_modified(|current| {
            let advance = sequence > *current;
            if advance {
                *current = sequence;
            }
            advance
        });
    }

    pub fn subscribe_durable(&self) -> watch::Receiver<u64> {
        self.durable.subscribe()
    }

    /// Durable events after `after`, and whether the last of them is `turn.done`.
    pub fn durable_events(&self, after: u64, durable: u64) -> (Vec<StreamedEvent>, bool) {
        let events = lock(&self.events);
        let end = (durable as usize).min(events.events.len());
        let start = (after as usize).min(end);
        let batch = events.events[start..end]
            .iter()
            .enumerate()
            .map(|(offset, json)| StreamedEvent { sequence: (start + offset) as u64 + 1, json: json.clone() })
            .collect();
        let complete = events.done_at.is_some_and(|done| done <= durable);
        (batch, complete)
    }

    /// Asks the turn to stop. The first reason given wins.
    pub fn request_cancel(&self, reason: CancelReason) {
        lock(&self.cancel_reason).get_or_insert(reason);
        self.cancel.cancel();
    }

    pub fn cancel_reason(&self) -> Option<CancelReason> {
        *lock(&self.cancel_reason)
    }

    pub fn set_final_state(&self, state: TurnState) {
        *lock(&self.final_state) = Some(state);
    }

    pub fn final_state(&self) -> Option<TurnState> {
        lock(&self.final_state).clone()
    }

    /// Marks the turn as no longer owned by this process (see `leases`).
    pub fn fence(&self) {
        self.fenced.store(true, Ordering::Release);
    }

    /// Whether this process no longer owns the turn: it was fenced, or its ownership ran out.
    pub fn is_fenced(&self) -> bool {
        self.fenced.load(Ordering::Acquire) || super::clock::clock() >= self.owned_until.load(Ordering::Acquire)
    }

    /// Until when this process owns the turn (see `leases`).
    pub(crate) fn owned_until(&self) -> u64 {
        self.owned_until.load(Ordering::Acquire)
    }

    /// Sets until when this process owns the turn; `extend` only ever moves it later.
    pub(crate) fn set_owned_until(&self, until: u64, extend: bool) {
        if extend {
            self.owned_until.fetch_max(until, Ordering::AcqRel);
        } else {
            self.owned_until.store(until, Ordering::Release);
        }
    }

    /// The claim of the turn's lease this process holds, under which its writes are fenced.
    pub(crate) fn claims(&self) -> u64 {
        self.claims.load(Ordering::Acquire)
    }

    /// Records the claim of the lease this process holds on the turn (see `leases`).
    pub(crate) fn set_claims(&self, claims: u64) {
        self.claims.store(claims, Ordering::Release);
    }

    /// Whether the turn has left this process (see [`TurnLog::wait_finished`]), as a watch.
    pub fn subscribe_finished(&self) -> watch::Receiver<bool> {
        self.finished.subscribe()
    }

    pub fn mark_finished(&self) {
        self.finished.send_replace(true);
    }

    /// Waits until the turn has ended and its last frame is durable.
    pub async fn wait_finished(&self) {
        let mut finished = self.finished.subscribe();
        let _ = finished.wait_for(|done| *done).await;
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Every running turn of this process, by turn id.
#[derive(Default)]
pub struct LiveTurns {
    turns: Mutex<HashMap<Arc<str>, Arc<TurnLog>>>,
}

impl LiveTurns {
    pub fn insert(&self, log: Arc<TurnLog>) {
        lock(&self.turns).insert(log.turn_id.clone(), log);
    }

    pub fn remove(&self, turn_id: &str) {
        lock(&self.turns).remove(turn_id);
    }

    pub fn get(&self, turn_id: &str) -> Option<Arc<TurnLog>> {
        lock(&self.turns).get(turn_id).cloned()
    }

    /// The running turn of a session, if any. A fenced turn is not running here: it may run
    /// on another replica now.
    pub fn running_in_session(&self, session_id: &str) -> Option<Arc<TurnLog>> {
        lock(&self.turns).values().find(|log| log.session_id == session_id && !log.is_fenced()).cloned()
    }

    pub fn all(&self) -> Vec<Arc<TurnLog>> {
        lock(&self.turns).values().cloned().collect()
    }

    pub fn len(&self) -> usize {
        lock(&self.turns).len()
    }
}
