//! [`SessionSignals`]: a replica's bus of session changes, raised by the operations that change
//! a session (created, updated, renamed, deleted; a turn started; a follow-up queued) and read
//! by the live channels (`live/`), which re-read what changed. A wake-up, never the data.

use std::sync::Arc;

use tokio::sync::broadcast;

/// How many signals the bus keeps for a reader that has not read them; one further behind
/// is told it lagged (and re-reads everything it shows).
const SIGNALS: usize = 1024;

/// One session changed: its id, and its creator when the change shows in session lists
/// (created, renamed, deleted).
#[derive(Clone, Debug)]
pub(crate) struct Signal {
    /// The session.
    pub(crate) session_id: Arc<str>,
    /// Its creator, when the change shows in its session lists.
    pub(crate) listed_for: Option<Arc<str>>,
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
        let _ = self.sender.send(Signal { session_id: session_id.into(), listed_for: None });
    }

    /// Wakes the channels of `session_id` and its creator's (`subject_id`) caller channels: a
    /// change its session lists show.
    pub(crate) fn notify_listed(&self, session_id: &str, subject_id: &str) {
        let _ = self.sender.send(Signal { session_id: session_id.into(), listed_for: Some(subject_id.into()) });
    }

    /// A reader of every signal from now on.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Signal> {
        self.sender.subscribe()
    }
}
