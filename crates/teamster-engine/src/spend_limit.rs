//! What a turn may still spend: a check the caller hands the engine, asked before every model
//! call of every thread with the turn's spend so far, so a turn over a budget ends at a clean
//! boundary (the last call's events all recorded, nothing half-written) rather than running on.

use teamster_protocol::TurnMetrics;

/// A spending limit on a turn, kept by the caller (a session's or a tenant's budget).
pub trait SpendLimit: Send + Sync {
    /// Before a model call: `Some(message)`, naming the budget in words a user can act on,
    /// when `spent` (this turn's usage so far, every thread's) leaves nothing for another call.
    fn exhausted(&self, spent: &TurnMetrics) -> Option<String>;

    /// Once the turn has ended (its loop, not its recording): what it spent in all.
    fn settle(&self, _spent: &TurnMetrics) {}
}
