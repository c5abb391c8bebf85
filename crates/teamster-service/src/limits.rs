//! Operator limits on what subjects use: how many turns one subject may have running at once
//! ([`TurnQuota`]), and the tenant budget (see `budgets`).
//!
//! The quota counts the turns running in this process: with several replicas each holds a
//! subject to it on its own. A turn that replaces the session's running turn (a new `auto`
//! turn cancels it) does not count that one. A turn being created holds a reservation from the
//! check until it runs, so turns created at the same instant cannot all pass.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use crate::budgets::TenantBudget;
use crate::runtime::TurnLog;

/// What the operator limits.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Limits {
    /// The most turns one subject may have running at once; `None` for no limit.
    pub max_concurrent_turns_per_subject: Option<u32>,
    /// What each tenant may spend on model calls per window; `None` for no budget.
    pub tenant_budget: Option<TenantBudget>,
}

/// A new turn refused by the quota.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{running} turns of this caller are running, the most allowed at once is {max}; retry once one has ended")]
pub struct QuotaExceeded {
    pub running: usize,
    pub max: u32,
}

impl From<QuotaExceeded> for crate::ServiceError {
    fn from(refused: QuotaExceeded) -> crate::ServiceError {
        crate::ServiceError::TooMany(refused.to_string())
    }
}

/// The running turns of each subject, in this process.
#[derive(Debug, Default)]
pub(crate) struct TurnQuota {
    max: Option<u32>,
    /// Subject id to its turns' logs and the reservations of turns being created; a turn
    /// counts until its end is decided. Weak: the runtime owns the logs, and a dropped one is
    /// pruned here.
    running: Mutex<HashMap<String, SubjectTurns>>,
}

/// One subject's entries.
#[derive(Debug, Default)]
struct SubjectTurns {
    logs: Vec<Weak<TurnLog>>,
    /// Turns being created (checked, not yet running).
    reserved: usize,
}

/// A place in the quota for a turn being created: it becomes the turn's with
/// [`Reservation::started`], and is given back when dropped.
#[derive(Debug)]
pub(crate) struct Reservation<'a> {
    /// `None` when the quota has no limit.
    quota: Option<&'a TurnQuota>,
    subject: String,
}

impl Reservation<'_> {
    /// Counts the started turn in place of the reservation, until its end is decided.
    pub(crate) fn started(mut self, log: &Arc<TurnLog>) {
        let Some(quota) = self.quota.take() else { return };
        let mut running = quota.running.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = running.entry(self.subject.clone()).or_default();
        entry.reserved = entry.reserved.saturating_sub(1);
        entry.logs.push(Arc::downgrade(log));
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let Some(quota) = self.quota else { return };
        let mut running = quota.running.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(entry) = running.get_mut(&self.subject) {
            entry.reserved = entry.reserved.saturating_sub(1);
            if entry.reserved == 0 && entry.logs.is_empty() {
                running.remove(&self.subject);
            }
        }
    }
}

impl TurnQuota {
    pub(crate) fn new(max: Option<u32>) -> TurnQuota {
        TurnQuota { max, running: Mutex::default() }
    }

    /// Reserves a place for a new turn of `subject`, or refuses it; `replacing` is the
    /// session whose running turn the new one ends, which does not count.
    pub(crate) fn reserve(&self, subject: &str, replacing: &str) -> Result<Reservation<'_>, QuotaExceeded> {
        let Some(max) = self.max else { return Ok(Reservation { quota: None, subject: String::new() }) };
        let mut running = self.running.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Bounded: subjects with nothing running or reserved are dropped whenever one reserves.
        running.retain(|_, entry| {
            entry.logs.retain(|log| log.upgrade().is_some_and(|log| still_running(&log)));
            !entry.logs.is_empty() || entry.reserved > 0
        });
        let entry = running.entry(subject.to_owned()).or_default();
        let counted = entry.logs.iter().filter_map(Weak::upgrade).filter(|log| log.session_id != replacing).count() + entry.reserved;
        if counted >= max as usize {
            if entry.logs.is_empty() && entry.reserved == 0 {
                running.remove(subject);
            }
            return Err(QuotaExceeded { running: counted, max });
        }
        entry.reserved += 1;
        Ok(Reservation { quota: Some(self), subject: subject.to_owned() })
    }
}

fn still_running(log: &TurnLog) -> bool {
    log.final_state().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use teamster_protocol::TurnState;

    fn done() -> TurnState {
        TurnState::Error { message: String::new(), completed_at: String::new(), metrics: None }
    }

    #[test]
    fn counts_a_subjects_running_and_reserved_turns() {
        let quota = TurnQuota::new(Some(2));
        let first = TurnLog::new("turn_1", "session_a", Vec::new());
        let second = TurnLog::new("turn_2", "session_b", Vec::new());
        quota.reserve("ann", "session_x").unwrap().started(&first);
        // A turn being created counts until it runs or gives its place back.
        let pending = quota.reserve("ann", "session_x").unwrap();
        assert_eq!(quota.reserve("ann", "session_x").unwrap_err(), QuotaExceeded { running: 2, max: 2 });
        drop(pending);
        quota.reserve("ann", "session_x").unwrap().started(&second);
        assert_eq!(quota.reserve("ann", "session_x").unwrap_err(), QuotaExceeded { running: 2, max: 2 });
        // Another subject, and a turn replacing one of the two, pass.
        drop(quota.reserve("bob", "session_x").unwrap());
        drop(quota.reserve("ann", "session_a").unwrap());
        first.set_final_state(done());
        drop(quota.reserve("ann", "session_x").unwrap());
        second.set_final_state(done());
        drop(quota.reserve("ann", "session_x").unwrap());
        assert!(quota.running.lock().unwrap().is_empty());
    }

    #[test]
    fn no_limit_tracks_nothing() {
        let quota = TurnQuota::new(None);
        let log = TurnLog::new("turn_1", "session_a", Vec::new());
        for _ in 0..3 {
            quota.reserve("ann", "session_x").unwrap().started(&log);
        }
        assert!(quota.running.lock().unwrap().is_empty());
    }
}
