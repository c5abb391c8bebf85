//! What a turn may still spend: a check the caller hands the engine, asked before every model
//! call of every thread with the turn's spend so far, so a turn over a budget ends at a clean
//! boundary (the last call's events all recorded, nothing half-written) rather than running on.
//!
//! Calls run concurrently (sub-agents, several turns of a tenant), so a check of what was
//! spent alone would let N calls each see the same remaining budget. Each model call therefore
//! reserves its worst case ([`Reservations`]: its estimated input plus its output allowance)
//! before it starts and gives it back once its real spend is counted. A call starts only if the
//! spend so far plus every reservation in flight plus its own fits the budget, or if no other
//! call is in flight (then it runs alone, and a budget is overrun by at most that one call);
//! otherwise it waits for calls in flight to end. So a budget is never exceeded by more than one
//! call's worth, as long as calls spend no more than they reserved.

use std::sync::{Arc, Mutex, PoisonError};

use teamster_protocol::TurnMetrics;
use tokio_util::sync::CancellationToken;

/// A spending limit on a turn, kept by the caller (a session's or a tenant's budget).
pub trait SpendLimit: Send + Sync {
    /// Before a model call: `Some(message)`, naming the budget in words a user can act on,
    /// when `spent` (this turn's usage so far, every thread's) leaves nothing for another call.
    fn exhausted(&self, spent: &TurnMetrics) -> Option<String>;

    /// Whether a call may start beside others: `spent` plus `reserved` tokens (what calls in
    /// flight and this one may still spend) stay within the budget. By default, the reserved
    /// tokens are counted as spent.
    fn fits(&self, spent: &TurnMetrics, reserved: u64) -> bool {
        let mut with_reserved = spent.clone();
        with_reserved.total_tokens = with_reserved.total_tokens.saturating_add(reserved);
        self.exhausted(&with_reserved).is_none()
    }

    /// The reservations every turn spending from this budget shares (a tenant's budget spans
    /// turns); `None` for the turn's own.
    fn reservations(&self) -> Option<Arc<Reservations>> {
        None
    }

    /// Once the turn has ended (its loop, not its recording): what it spent in all.
    fn settle(&self, _spent: &TurnMetrics) {}
}

/// The tokens reserved by model calls in flight against one budget.
#[derive(Debug, Default)]
pub struct Reservations {
    held: Mutex<Held>,
    released: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct Held {
    tokens: u64,
    calls: u32,
}

/// A call's reservation, given back when dropped (after its real spend was counted).
#[derive(Debug)]
pub(crate) struct Reserved {
    pool: Arc<Reservations>,
    tokens: u64,
}

impl Drop for Reserved {
    fn drop(&mut self) {
        {
            let mut held = self
                .pool
                .held
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            held.tokens = held.tokens.saturating_sub(self.tokens);
            held.calls = held.calls.saturating_sub(1);
        }
        self.pool.released.notify_waiters();
    }
}

/// Whether a model call may start.
pub(crate) enum Admission {
    Granted(Reserved),
    /// The budget is spent; the message says which.
    Refused(String),
    Cancelled,
}

impl Reservations {
    /// Waits until a call reserving `tokens` may start under `limit`, `spent` giving the turn's
    /// spend so far each time it is asked.
    pub(crate) async fn admit(
        self: &Arc<Self>,
        limit: &dyn SpendLimit,
        spent: impl Fn() -> TurnMetrics,
        tokens: u64,
        cancel: &CancellationToken,
    ) -> Admission {
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            {
                let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
                let spent = spent();
                if let Some(message) = limit.exhausted(&spent) {
                    return Admission::Refused(message);
                }
                if held.calls == 0 || limit.fits(&spent, held.tokens.saturating_add(tokens)) {
                    held.tokens = held.tokens.saturating_add(tokens);
                    held.calls += 1;
                    return Admission::Granted(Reserved {
                        pool: self.clone(),
                        tokens,
                    });
                }
            }
            tokio::select! {
                biased;
                () = cancel.cancelled() => return Admission::Cancelled,
                () = released => {}
            }
        }
    }
}
