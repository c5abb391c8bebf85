//! [`SessionSignals`]: a replica's bus of session changes, raised by the operations that change
//! a session (created, updated, renamed, deleted; a turn started; a follow-up queued), and by
//! the store's change feed for those made on another replica, and read by the live channels
//! (`teamster-channels`), which re-read what changed. A wake-up, never the data.

use std::sync::Arc;

use tokio::sync::broadcast;

/// How many signals the bus keeps for a reader that has not read them; one further behind
/// is told it lagged (and re-reads everything it shows).
const SIGNALS: usize = 1024;

/// What changed: one session, or possibly every session (the store's change feed missed
/// announcements).
#[derive(Clone, Debug)]
pub enum Signal {
    /// One session changed.
    One {
        /// The session.
        session_id: Arc<str>,
        /// Its creator, when the change shows in its session lists.
        listed_for: Option<Arc<str>>,
    },
    /// Any session may have changed: every channel re-reads what it shows.
    Every,
}

/// Tells a replica's channels that a session changed (see the [module](self)).
#[derive(Debug)]
pub(crate) struct SessionSignals {
    sender: broadcast::Sender<Signal>,
}

impl Default for SessionSignals {
    fn default() -> SessionSignals {
        SessionSignals { sender: broadcast::Sender::new(SIGNALS) }
    }
}

impl SessionSignals {
    /// Wakes the channels of `session_id`.
    pub(crate) fn notify(&self, session_id: &str) {
        let _ = self.sender.send(Signal::One { session_id: session_id.into(), listed_for: None });
    }

    /// Wakes the channels of `session_id` and its creator's (`subject_id`) caller channels: a
    /// change its session lists show.
    pub(crate) fn notify_listed(&self, session_id: &str, subject_id: &str) {
        let _ = self.sender.send(Signal::One { session_id: session_id.into(), listed_for: Some(subject_id.into()) });
    }

    /// Wakes every channel: changes made on another replica may have gone unannounced.
    pub(crate) fn notify_all(&self) {
        let _ = self.sender.send(Signal::Every);
    }

    /// A reader of every signal from now on.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Signal> {
        self.sender.subscribe()
    }
}
