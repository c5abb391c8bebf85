//! [`StartedTurn`]: a turn just started, as the service hands it out: the turn as created,
//! and its events on demand, live from the turn's log while this replica runs it and from the
//! store after.

use teamster_protocol::Turn;

use super::TurnRuntime;
use super::running::RunningTurn;
use super::subscribe::EventStream;

/// A turn that has started; it runs on its own task whether or not its events are read.
pub struct StartedTurn {
    /// The turn as created (`running`).
    pub turn: Turn,
    running: RunningTurn,
    runtime: TurnRuntime,
}

impl std::fmt::Debug for StartedTurn {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("StartedTurn").field("turn", &self.turn).finish_non_exhaustive()
    }
}

impl StartedTurn {
    /// `turn` as its caller shows it, running as `running` on `runtime`.
    pub fn new(turn: Turn, running: RunningTurn, runtime: TurnRuntime) -> StartedTurn {
        StartedTurn { turn, running, runtime }
    }

    /// The turn's events after sequence number `after` (0 for all of them), followed live
    /// until the turn ends.
    pub fn events(&self, after: u64) -> EventStream {
        self.runtime.follow(self.running.log.clone(), after)
    }
}
