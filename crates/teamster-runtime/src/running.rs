//! [`RunningTurn`]: a turn running in this process, as the runtime's callers see it. It can be
//! asked to stop, told that steering instructions arrived, and waited for; its live log stays
//! inside the runtime.

use std::sync::Arc;
use std::time::Duration;

use teamster_protocol::{CancelReason, TurnState};
use tokio_util::sync::CancellationToken;

use crate::TurnRuntime;
use crate::live::TurnLog;

/// A handle on a turn running in this process; cheap to clone.
#[derive(Clone)]
pub struct RunningTurn {
    pub(crate) log: Arc<TurnLog>,
}

impl std::fmt::Debug for RunningTurn {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("RunningTurn").field("turn_id", &self.log.turn_id).finish_non_exhaustive()
    }
}

impl RunningTurn {
    pub(crate) fn new(log: Arc<TurnLog>) -> RunningTurn {
        RunningTurn { log }
    }

    pub fn turn_id(&self) -> &str {
        &self.log.turn_id
    }

    pub fn session_id(&self) -> &str {
        &self.log.session_id
    }

    /// Asks the turn to stop, for `reason`; it records its end on its own task.
    pub fn request_cancel(&self, reason: CancelReason) {
        self.log.request_cancel(reason);
    }

    /// Fires when the turn is asked to stop.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.log.cancel
    }

    /// The turn's final state once it has decided it (before the store has it).
    pub fn final_state(&self) -> Option<TurnState> {
        self.log.final_state()
    }

    /// Tells the turn that steering instructions were queued for it.
    pub fn mark_steered(&self) {
        self.log.mark_steered();
    }

    /// Whether steering instructions were queued since the last call (clearing the mark).
    pub fn take_steered(&self) -> bool {
        self.log.take_steered()
    }

    /// Waits until the turn has left this process: ended with every event durable, or
    /// fenced and stopped.
    pub async fn wait_finished(&self) {
        self.log.wait_finished().await;
    }
}

/// The turn a new turn waits for before it runs: the session's previous turn, being cancelled
/// for it.
pub enum EndingTurn {
    /// It runs in this process.
    Local(RunningTurn),
    /// It runs on another replica; its end is read from the store.
    Remote { session_id: String, turn_id: String },
}

impl EndingTurn {
    /// Waits, at most `limit`, until the turn has recorded its end.
    pub(crate) async fn wait(&self, runtime: &TurnRuntime, limit: Duration) {
        match self {
            EndingTurn::Local(turn) => {
                let _ = tokio::time::timeout(limit, turn.wait_finished()).await;
            }
            EndingTurn::Remote { session_id, turn_id } => {
                if let Err(error) = runtime.wait_stored_end(session_id, turn_id, limit).await {
                    tracing::warn!(%turn_id, %error, "could not wait for the previous turn to end");
                }
            }
        }
    }
}
