//! Operator limits on what subjects use: how many turns one subject may have running at once
//! ([`TurnQuota`]), and the tenant budget (see `budgets`).
//!
//! The quota counts the turns running in this process: with several replicas each holds a
//! subject to it on its own. A turn that replaces the session's running turn (a new `auto`
//! turn cancels it) does not count that one. Two turns started at the same instant may both
//! pass the check; the quota is a bound on steady use, not a lock.

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
    /// Subject id to its turns' logs; a turn counts until its end is decided. Weak: the
    /// runtime owns the logs, and a dropped one is pruned here.
    running: Mutex<HashMap<String, Vec<Weak<TurnLog>>>>,
}

impl TurnQuota {
    pub(crate) fn new(max: Option<u32>) -> TurnQuota {
        TurnQuota { max, running: Mutex::default() }
    }

    /// Whether `subject` may start another turn; `replacing` is the session whose running
    /// turn the new one ends, which does not count.
    pub(crate) fn check(&self, subject: &str, replacing: &str) -> Result<(), QuotaExceeded> {
        let Some(max) = self.max else { return Ok(()) };
        let mut running = self.running.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(logs) = running.get_mut(subject) else { return Ok(()) };
        logs.retain(|log| log.upgrade().is_some_and(|log| still_running(&log)));
        let counted = logs.iter().filter_map(Weak::upgrade).filter(|log| log.session_id != replacing).count();
        if logs.is_empty() {
            running.remove(subject);
        }
        if counted >= max as usize {
            return Err(QuotaExceeded { running: counted, max });
        }
        Ok(())
    }

    /// Counts a turn that has started for `subject` until its end is decided.
    pub(crate) fn started(&self, subject: &str, log: &Arc<TurnLog>) {
        if self.max.is_none() {
            return;
        }
        let mut running = self.running.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Bounded: subjects none of whose turns still run are dropped whenever one starts.
        running.retain(|_, logs| {
            logs.retain(|log| log.upgrade().is_some_and(|log| still_running(&log)));
            !logs.is_empty()
        });
        running.entry(subject.to_owned()).or_default().push(Arc::downgrade(log));
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
    fn counts_a_subjects_running_turns() {
        let quota = TurnQuota::new(Some(2));
        let first = TurnLog::new("turn_1", "session_a", Vec::new());
        let second = TurnLog::new("turn_2", "session_b", Vec::new());
        quota.started("ann", &first);
        quota.check("ann", "session_x").unwrap();
        quota.started("ann", &second);
        assert_eq!(quota.check("ann", "session_x"), Err(QuotaExceeded { running: 2, max: 2 }));
        // Another subject, and a turn replacing one of the two, pass.
        quota.check("bob", "session_x").unwrap();
        quota.check("ann", "session_a").unwrap();
        first.set_final_state(done());
        quota.check("ann", "session_x").unwrap();
        drop(second);
        quota.check("ann", "session_x").unwrap();
        assert!(quota.running.lock().unwrap().is_empty());
    }
}
