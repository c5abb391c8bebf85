//! [`StartedTurn`]: a turn the service has just started, as it hands it out: the turn as
//! created, and its events on demand, live from the turn's log while this replica runs it and
//! from the store after. The live log itself stays inside the runtime.

use std::sync::Arc;

use teamster_protocol::Turn;

use super::live::TurnLog;
use super::subscribe::EventStream;
use super::TurnRuntime;

/// A turn that has started; it runs on its own task whether or not its events are read.
pub struct StartedTurn {
    /// The turn as created (`running`).
    pub turn: Turn,
    log: Arc<TurnLog>,
    runtime: TurnRuntime,
}

impl std::fmt::Debug for StartedTurn {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("StartedTurn").field("turn", &self.turn).finish_non_exhaustive()
    }
}

impl StartedTurn {
    pub(crate) fn new(turn: Turn, log: Arc<TurnLog>, runtime: TurnRuntime) -> StartedTurn {
        StartedTurn { turn, log, runtime }
    }

    /// The turn's events after sequence number `after` (0 for all of them), followed live
    /// until the turn ends.
    pub fn events(&self, after: u64) -> EventStream {
        self.runtime.follow(self.log.clone(), after)
    }
}
