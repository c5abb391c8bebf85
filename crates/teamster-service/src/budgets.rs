//! Spending budgets: a session's (the agent spec's `config.budget`, over all the session's
//! turns) and a tenant's (the operator's, over a window of time), checked by the engine before
//! every model call through [`TurnBudget`], a [`SpendLimit`].
//!
//! A budget counts tokens as `total_tokens` does (input plus output) and cost in US dollars
//! for models with known prices (a model without prices spends no cost budget). A turn that
//! finds a budget spent ends, before its next model call, in `error` with a message naming
//! the budget; the events it recorded before stay. A budget may be overrun by the one model
//! call that crossed it, never by more.
//!
//! A session's spend is read from its history (the `turn.done` metrics of the turns it chains
//! to), so every replica sees it. A tenant's spend is kept in this process: the turns that
//! ended here in the current window, plus what the tenant's running turns here have spent so
//! far (as of their last check); each replica counts its own turns.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use teamster_engine::SpendLimit;
use teamster_protocol::agent::Budget;
use teamster_protocol::{Event, Subject, TurnMetrics, TurnState};

/// The operator's budget per tenant.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TenantBudget {
    pub budget: Budget,
    /// How long a window of spending lasts. Windows are aligned on the Unix epoch (a day's
    /// window starts at midnight UTC); spending starts again at zero in each.
    pub window: Duration,
}

/// What each tenant spent in its current window, in this process.
#[derive(Debug, Default)]
pub(crate) struct TenantLedger {
    budget: Option<TenantBudget>,
    /// Tenant to its window's number and the spend of its turns that ended.
    spent: Mutex<HashMap<String, (u64, Spend)>>,
    /// The running turns' spend so far, by their budget's number.
    running: Mutex<HashMap<u64, (String, Spend)>>,
    /// The number of the next turn's budget.
    next_turn: AtomicU64,
}

/// Tokens and cost spent.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Spend {
    tokens: u64,
    cost_usd: f64,
}

impl Spend {
    fn of(metrics: &TurnMetrics) -> Spend {
        Spend { tokens: metrics.total_tokens, cost_usd: metrics.total_cost_in_usd.unwrap_or_default() }
    }

    fn plus(self, other: Spend) -> Spend {
        Spend { tokens: self.tokens.saturating_add(other.tokens), cost_usd: self.cost_usd + other.cost_usd }
    }

    /// Which part of `budget` this spend has used up, in words, if any.
    fn exhausted(self, budget: &Budget, whose: &str) -> Option<String> {
        if let Some(max) = budget.max_tokens.filter(|max| self.tokens >= *max) {
            return Some(format!(
                "The {whose} token budget of {max} tokens is spent ({} tokens used); the turn ended before its next model call.",
                self.tokens
            ));
        }
        if let Some(max) = budget.max_cost_usd.filter(|max| self.cost_usd >= *max) {
            return Some(format!(
                "The {whose} cost budget of ${max} is spent (${:.6} used); the turn ended before its next model call.",
                self.cost_usd
            ));
        }
        None
    }
}

impl TenantLedger {
    pub(crate) fn new(budget: Option<TenantBudget>) -> TenantLedger {
        TenantLedger {
            budget: budget.filter(|budget| !budget.window.is_zero()),
            spent: Mutex::default(),
            running: Mutex::default(),
            next_turn: AtomicU64::new(0),
        }
    }

    /// The number of the window `now` falls in.
    fn window_at(&self, window: Duration, now: SystemTime) -> u64 {
        let since_epoch = now.duration_since(UNIX_EPOCH).unwrap_or_default();
        (since_epoch.as_secs_f64() / window.as_secs_f64()) as u64
    }

    /// What `tenant`'s turns that ended spent in the current window.
    fn spent(&self, tenant: &str, now: SystemTime) -> Spend {
        let Some(budget) = &self.budget else { return Spend::default() };
        let current = self.window_at(budget.window, now);
        let spent = self.spent.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        spent.get(tenant).filter(|(window, _)| *window == current).map(|(_, spend)| *spend).unwrap_or_default()
    }

    /// Notes what running turn `turn` of `tenant` has spent so far; answers what the tenant's
    /// running turns have spent together, this one included.
    fn running(&self, turn: u64, tenant: &str, spend: Spend) -> Spend {
        let mut running = self.running.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        running.insert(turn, (tenant.to_owned(), spend));
        running.values().filter(|(of, _)| of == tenant).fold(Spend::default(), |total, (_, spend)| total.plus(*spend))
    }

    /// Forgets a running turn (it ended, or its budget was dropped).
    fn stopped(&self, turn: u64) {
        self.running.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&turn);
    }

    /// Adds a finished turn's spend to `tenant`'s window; other tenants' past windows go.
    fn record(&self, tenant: &str, spend: Spend, now: SystemTime) {
        let Some(budget) = &self.budget else { return };
        let current = self.window_at(budget.window, now);
        let mut spent = self.spent.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        spent.retain(|_, (window, _)| *window == current);
        let entry = spent.entry(tenant.to_owned()).or_insert((current, Spend::default()));
        entry.1 = entry.1.plus(spend);
    }
}

/// The tenant a subject belongs to: the part of its id before `:` (API keys' subjects are
/// `tenant:name`), else `local` (the one subject of a server without authentication).
pub(crate) fn tenant_of(subject: &Subject) -> &str {
    subject.subject_id.split_once(':').map_or("local", |(tenant, _)| tenant)
}

/// The budgets one turn spends from; `None` when it has none.
pub(crate) fn for_turn(
    ledger: &Arc<TenantLedger>,
    session_budget: Option<&Budget>,
    created_by: &Subject,
    history: &[Event],
) -> Option<Arc<dyn SpendLimit>> {
    let session_budget = session_budget.filter(|budget| budget.max_tokens.is_some() || budget.max_cost_usd.is_some());
    if session_budget.is_none() && ledger.budget.is_none() {
        return None;
    }
    let session_spent = history
        .iter()
        .filter_map(|event| match event {
            Event::TurnDone(done) => metrics_of(&done.state),
            _ => None,
        })
        .fold(Spend::default(), |total, metrics| total.plus(Spend::of(metrics)));
    Some(Arc::new(TurnBudget {
        turn: ledger.next_turn.fetch_add(1, Ordering::Relaxed),
        ledger: ledger.clone(),
        tenant: tenant_of(created_by).to_owned(),
        session_budget: session_budget.cloned(),
        session_spent,
    }))
}

fn metrics_of(state: &TurnState) -> Option<&TurnMetrics> {
    match state {
        TurnState::Done { metrics, .. } | TurnState::Cancelled { metrics, .. } | TurnState::Error { metrics, .. } => {
            metrics.as_ref()
        }
        _ => None,
    }
}

/// One turn's budgets: the session's and its tenant's.
struct TurnBudget {
    /// This turn's number in the ledger's running turns.
    turn: u64,
    ledger: Arc<TenantLedger>,
    tenant: String,
    session_budget: Option<Budget>,
    /// What the session's earlier turns spent.
    session_spent: Spend,
}

impl SpendLimit for TurnBudget {
    fn exhausted(&self, spent: &TurnMetrics) -> Option<String> {
        let this_turn = Spend::of(spent);
        if let Some(budget) = &self.session_budget
            && let Some(message) = self.session_spent.plus(this_turn).exhausted(budget, "session's")
        {
            return Some(message);
        }
        let tenant = self.ledger.budget.as_ref()?;
        let running = self.ledger.running(self.turn, &self.tenant, this_turn);
        let tenant_spent = self.ledger.spent(&self.tenant, SystemTime::now()).plus(running);
        tenant_spent.exhausted(&tenant.budget, &format!("tenant {:?}'s", self.tenant))
    }

    fn settle(&self, spent: &TurnMetrics) {
        self.ledger.stopped(self.turn);
        self.ledger.record(&self.tenant, Spend::of(spent), SystemTime::now());
    }
}

impl Drop for TurnBudget {
    fn drop(&mut self) {
        self.ledger.stopped(self.turn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics(tokens: u64, cost: Option<f64>) -> TurnMetrics {
        TurnMetrics { total_tokens: tokens, total_cost_in_usd: cost, ..TurnMetrics::default() }
    }

    #[test]
    fn a_session_budget_counts_earlier_turns_and_this_one() {
        let ledger = Arc::new(TenantLedger::new(None));
        let budget = Budget { max_tokens: Some(100), max_cost_usd: None };
        let done = |tokens| {
            Event::TurnDone(teamster_protocol::event::TurnDone {
                id: "evt".into(),
                state: TurnState::Error { message: String::new(), completed_at: String::new(), metrics: Some(metrics(tokens, None)) },
                created_at: String::new(),
                thread_id: None,
            })
        };
        let limit = for_turn(&ledger, Some(&budget), &Subject::local(), &[done(40), done(30)]).unwrap();
        assert_eq!(limit.exhausted(&metrics(29, None)), None);
        let message = limit.exhausted(&metrics(30, None)).unwrap();
        assert!(message.contains("session's token budget of 100 tokens"), "{message}");
        assert!(for_turn(&ledger, None, &Subject::local(), &[]).is_none());
    }

    #[test]
    fn a_tenant_budget_counts_finished_turns_of_its_window() {
        let ledger = Arc::new(TenantLedger::new(Some(TenantBudget {
            budget: Budget { max_tokens: None, max_cost_usd: Some(1.0) },
            window: Duration::from_secs(3600),
        })));
        let subject = Subject { subject_id: "acme:ann".into(), subject_type: "user".into(), subject_slug: "ann".into() };
        let first = for_turn(&ledger, None, &subject, &[]).unwrap();
        assert_eq!(first.exhausted(&metrics(10, Some(0.6))), None);
        first.settle(&metrics(10, Some(0.6)));
        let second = for_turn(&ledger, None, &subject, &[]).unwrap();
        let message = second.exhausted(&metrics(10, Some(0.4))).unwrap();
        assert!(message.contains("tenant \"acme\"'s cost budget"), "{message}");
        // Another tenant has its own.
        let other = Subject { subject_id: "beta:bob".into(), ..subject };
        assert_eq!(for_turn(&ledger, None, &other, &[]).unwrap().exhausted(&metrics(0, None)), None);
        // The next window starts again at zero.
        let later = SystemTime::now() + Duration::from_secs(3600);
        assert_eq!(ledger.spent("acme", later), Spend::default());
    }

    #[test]
    fn a_tenants_running_turns_count_together() {
        let ledger = Arc::new(TenantLedger::new(Some(TenantBudget {
            budget: Budget { max_tokens: Some(100), max_cost_usd: None },
            window: Duration::from_secs(3600),
        })));
        let subject = Subject { subject_id: "acme:ann".into(), subject_type: "user".into(), subject_slug: "ann".into() };
        let (first, second) = (for_turn(&ledger, None, &subject, &[]).unwrap(), for_turn(&ledger, None, &subject, &[]).unwrap());
        assert_eq!(first.exhausted(&metrics(60, None)), None);
        // Each as of its last check: 60 + 40.
        assert!(second.exhausted(&metrics(40, None)).is_some());
        // A turn that ended without settling (dropped) no longer counts.
        drop(first);
        assert_eq!(second.exhausted(&metrics(40, None)), None);
        second.settle(&metrics(40, None));
        assert_eq!(ledger.spent("acme", SystemTime::now()).tokens, 40);
        assert!(ledger.running.lock().unwrap().is_empty());
    }
}
