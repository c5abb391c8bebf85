//! Spending budgets: a session's (the agent spec's `config.budget`, over all the session's
//! turns) and a tenant's (the operator's, over a window of time), checked by the engine before
//! every model call through [`TurnBudget`], a [`SpendLimit`].
//!
//! A budget counts tokens as `total_tokens` does (input plus output) and cost in US dollars
//! for models with known prices (a model without prices spends no cost budget). A turn that
//! finds a budget spent ends, before its next model call, in `error` with a message naming
//! the budget; the events it recorded before stay. A budget may be overrun by the one model
//! call that crossed it, and for a tenant's, by what other replicas spent in the time their
//! spend takes to be seen (below).
//!
//! A session's spend is read from its history (the `turn.done` metrics of the turns it chains
//! to), so every replica sees it. A tenant's spend is summed in the store per window
//! ([`UsageStore::add_tenant_spend`]), which every replica adds to:
//! - each turn reports what it has spent at every check (before each model call) and when it
//!   ends; this replica counts that at once, and adds it to the store in the background, one
//!   statement at a time per tenant (never one per event);
//! - a turn's spend is in the store before its `turn.done` is written (the runner awaits
//!   [`TenantLedger::flush_tenant`]), so a turn planned anywhere after a client has seen that
//!   `turn.done` counts it;
//! - planning a turn reads the tenant's total from the store (one statement per turn), and the
//!   checks during a turn use this replica's copy, read again in the background whenever it is
//!   older than [`REFRESH`]. So another replica's spend reaches a running turn's checks at most
//!   [`REFRESH`] plus one statement late, and a new turn's at once.
//!
//! Windows are numbered by this replica's clock; spend reported around a window's end counts in
//! the window it reaches the store in.
//!
//! Concurrent model calls (sub-agents, a tenant's several turns) reserve their worst case in
//! tokens before they start ([`teamster_engine::Reservations`]): a session budget's are the
//! turn's own, a tenant budget's are shared by all the tenant's turns on this replica. So on one
//! replica a token budget is overrun by at most one call's worth (a call that spends more than
//! it reserved aside). Cost budgets are checked against what was spent: concurrent calls may
//! each take the last of a cost budget.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use teamster_engine::{Reservations, SpendLimit};
use teamster_protocol::agent::Budget;
use teamster_protocol::{Event, Subject, TurnMetrics, TurnState};
use teamster_store::{Spend, UsageStore};

/// How old this replica's copy of a tenant's total may get before a check reads it again (in
/// the background: a check never waits on the store).
const REFRESH: Duration = Duration::from_secs(1);

/// The operator's budget per tenant.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TenantBudget {
    pub budget: Budget,
    /// How long a window of spending lasts. Windows are aligned on the Unix epoch (a day's
    /// window starts at midnight UTC); spending starts again at zero in each.
    pub window: Duration,
}

/// Each tenant's spend in its current window: the store's total as last read, plus what this
/// replica's turns spent since.
pub struct TenantLedger {
    budget: Option<TenantBudget>,
    store: Arc<dyn UsageStore>,
    /// Tenant to this replica's view of it (bounded by the tenants with turns here).
    tenants: Mutex<HashMap<String, Arc<TenantView>>>,
}

impl std::fmt::Debug for TenantLedger {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("TenantLedger").field("budget", &self.budget).finish_non_exhaustive()
    }
}

/// One tenant's spend as this replica sees it.
#[derive(Debug)]
struct TenantView {
    tenant: String,
    state: Mutex<ViewState>,
    /// Held while adding to the store, so this tenant's additions go one at a time.
    adding: tokio::sync::Mutex<()>,
    /// Whether a background addition is queued or running.
    queued: AtomicBool,
    /// What the tenant's model calls in flight on this replica reserved.
    reservations: Arc<Reservations>,
}

#[derive(Debug, Default)]
struct ViewState {
    /// The window `stored` belongs to.
    window: u64,
    /// The window's total as the store last answered it (this replica's added spend included).
    stored: Spend,
    /// When `stored` was read; `None` before the first read of the window.
    read_at: Option<Instant>,
    /// What this replica's turns spent that the store has not answered for yet.
    unstored: Spend,
}

fn plus(left: Spend, right: Spend) -> Spend {
    Spend { tokens: left.tokens.saturating_add(right.tokens), cost_usd: left.cost_usd + right.cost_usd }
}

fn minus(left: Spend, right: Spend) -> Spend {
    Spend { tokens: left.tokens.saturating_sub(right.tokens), cost_usd: (left.cost_usd - right.cost_usd).max(0.0) }
}

fn spend_of(metrics: &TurnMetrics) -> Spend {
    Spend { tokens: metrics.total_tokens, cost_usd: metrics.total_cost_in_usd.unwrap_or_default() }
}

fn is_nothing(spend: Spend) -> bool {
    spend.tokens == 0 && spend.cost_usd == 0.0
}

/// Which part of `budget` `spent` has used up, in words, if any.
fn exhausted(spent: Spend, budget: &Budget, whose: &str) -> Option<String> {
    if let Some(max) = budget.max_tokens.filter(|max| spent.tokens >= *max) {
        return Some(format!(
            "The {whose} token budget of {max} tokens is spent ({} tokens used); the turn ended before its next model call.",
            spent.tokens
        ));
    }
    if let Some(max) = budget.max_cost_usd.filter(|max| spent.cost_usd >= *max) {
        return Some(format!(
            "The {whose} cost budget of ${max} is spent (${:.6} used); the turn ended before its next model call.",
            spent.cost_usd
        ));
    }
    None
}

impl TenantLedger {
    pub fn new(budget: Option<TenantBudget>, store: Arc<dyn UsageStore>) -> TenantLedger {
        TenantLedger { budget: budget.filter(|budget| !budget.window.is_zero()), store, tenants: Mutex::default() }
    }

    /// The number of the window `now` falls in.
    fn window_at(&self, now: SystemTime) -> u64 {
        let Some(budget) = &self.budget else { return 0 };
        let since_epoch = now.duration_since(UNIX_EPOCH).unwrap_or_default();
        (since_epoch.as_secs_f64() / budget.window.as_secs_f64()) as u64
    }

    fn view(&self, tenant: &str) -> Arc<TenantView> {
        let mut tenants = self.tenants.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        tenants
            .entry(tenant.to_owned())
            .or_insert_with(|| {
                Arc::new(TenantView {
                    tenant: tenant.to_owned(),
                    state: Mutex::default(),
                    adding: tokio::sync::Mutex::new(()),
                    queued: AtomicBool::new(false),
                    reservations: Arc::default(),
                })
            })
            .clone()
    }

    /// What `view`'s tenant spent in the current window, as this replica knows it, and whether
    /// that should be brought up to date.
    fn total(&self, view: &TenantView) -> (Spend, bool) {
        let window = self.window_at(SystemTime::now());
        let mut state = view.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.window != window {
            state.window = window;
            state.stored = Spend::default();
            state.read_at = None;
        }
        let stale = state.read_at.is_none_or(|at| at.elapsed() >= REFRESH) || !is_nothing(state.unstored);
        (plus(state.stored, state.unstored), stale)
    }

    /// Adds what this replica's turns of `view`'s tenant spent to the store, and reads the
    /// window's total; waits for an addition under way first. A failure is logged, and the
    /// spend is added with the next one.
    async fn add(&self, view: &TenantView) {
        let _adding = view.adding.lock().await;
        self.add_now(view).await;
    }

    /// [`TenantLedger::add`], with the tenant's `adding` lock held by the caller.
    async fn add_now(&self, view: &TenantView) {
        let window = self.window_at(SystemTime::now());
        let added = {
            let state = view.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            state.unstored
        };
        match self.store.add_tenant_spend(&view.tenant, window, added).await {
            Ok(total) => {
                let mut state = view.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                state.unstored = minus(state.unstored, added);
                if state.window == window || state.read_at.is_none() {
                    state.window = window;
                    state.stored = total;
                    state.read_at = Some(Instant::now());
                }
            }
            Err(error) => tracing::warn!(tenant = %view.tenant, %error, "adding to the tenant's spend failed; retried with the next"),
        }
    }

    /// Adds in the background, unless an addition is queued already.
    fn add_soon(self: &Arc<Self>, view: &Arc<TenantView>) {
        if view.queued.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            view.queued.store(false, Ordering::Release);
            return;
        };
        let (ledger, view) = (self.clone(), view.clone());
        runtime.spawn(async move {
            view.queued.store(false, Ordering::Release);
            ledger.add(&view).await;
        });
    }

    /// Puts what this replica's turns of `tenant` spent into the store before returning (the
    /// runner calls it before writing a turn's `turn.done`).
    pub async fn flush_tenant(&self, tenant: &str) {
        if self.budget.is_none() {
            return;
        }
        let view = self.view(tenant);
        // Waits for an addition under way (it may carry this turn's spend), then adds the rest.
        let _adding = view.adding.lock().await;
        let pending = !is_nothing(view.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner).unstored);
        if pending {
            self.add_now(&view).await;
        }
    }
}

/// The tenant a subject belongs to: the part of its id before `:` (API keys' subjects are
/// `tenant:name`), else `local` (the one subject of a server without authentication).
pub fn tenant_of(subject: &Subject) -> &str {
    subject.subject_id.split_once(':').map_or("local", |(tenant, _)| tenant)
}

/// The budgets one turn spends from; `None` when it has none. With a tenant budget, reads the
/// tenant's total from the store first.
pub async fn for_turn(
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
        .fold(Spend::default(), |total, metrics| plus(total, spend_of(metrics)));
    let tenant = tenant_of(created_by);
    let view = match ledger.budget {
        Some(_) => {
            let view = ledger.view(tenant);
            ledger.add(&view).await;
            Some(view)
        }
        None => None,
    };
    Some(Arc::new(TurnBudget {
        ledger: ledger.clone(),
        view,
        session_budget: session_budget.cloned(),
        session_spent,
        reported: Mutex::default(),
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
    ledger: Arc<TenantLedger>,
    /// The tenant's view, with a tenant budget.
    view: Option<Arc<TenantView>>,
    session_budget: Option<Budget>,
    /// What the session's earlier turns spent.
    session_spent: Spend,
    /// What this turn has reported to its tenant's view so far.
    reported: Mutex<Spend>,
}

impl TurnBudget {
    /// Counts what the turn spent since it last reported toward its tenant.
    fn report(&self, view: &TenantView, spent: Spend) {
        let mut reported = self.reported.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let added = minus(spent, *reported);
        *reported = Spend { tokens: reported.tokens.max(spent.tokens), cost_usd: reported.cost_usd.max(spent.cost_usd) };
        if !is_nothing(added) {
            let mut state = view.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            state.unstored = plus(state.unstored, added);
        }
    }
}

impl SpendLimit for TurnBudget {
    fn exhausted(&self, spent: &TurnMetrics) -> Option<String> {
        let this_turn = spend_of(spent);
        if let Some(budget) = &self.session_budget
            && let Some(message) = exhausted(plus(self.session_spent, this_turn), budget, "session's")
        {
            return Some(message);
        }
        let (tenant, view) = (self.ledger.budget.as_ref()?, self.view.as_ref()?);
        self.report(view, this_turn);
        let (total, stale) = self.ledger.total(view);
        if stale {
            self.ledger.add_soon(view);
        }
        exhausted(total, &tenant.budget, &format!("tenant {:?}'s", view.tenant))
    }

    fn fits(&self, spent: &TurnMetrics, reserved: u64) -> bool {
        let this_turn = spend_of(spent);
        let reserved = Spend { tokens: reserved, cost_usd: 0.0 };
        if let Some(budget) = &self.session_budget
            && exhausted(plus(plus(self.session_spent, this_turn), reserved), budget, "session's").is_some()
        {
            return false;
        }
        let (Some(tenant), Some(view)) = (self.ledger.budget.as_ref(), self.view.as_ref()) else { return true };
        // `exhausted` has just reported this turn's spend; reservations are never reported.
        let (total, _) = self.ledger.total(view);
        exhausted(plus(total, reserved), &tenant.budget, "tenant's").is_none()
    }

    fn reservations(&self) -> Option<Arc<Reservations>> {
        self.view.as_ref().map(|view| view.reservations.clone())
    }

    fn settle(&self, spent: &TurnMetrics) {
        if let Some(view) = &self.view {
            self.report(view, spend_of(spent));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics(tokens: u64, cost: Option<f64>) -> TurnMetrics {
        TurnMetrics { total_tokens: tokens, total_cost_in_usd: cost, ..TurnMetrics::default() }
    }

    async fn store() -> Arc<dyn teamster_store::Store> {
        Arc::new(teamster_store_sqlite::SqliteStore::connect("sqlite::memory:").await.expect("an in-memory store"))
    }

    fn acme() -> Subject {
        Subject { subject_id: "acme:ann".into(), subject_type: "user".into(), subject_slug: "ann".into() }
    }

    fn hourly(budget: Budget) -> Option<TenantBudget> {
        Some(TenantBudget { budget, window: Duration::from_secs(3600) })
    }

    #[tokio::test]
    async fn a_session_budget_counts_earlier_turns_and_this_one() {
        let ledger = Arc::new(TenantLedger::new(None, store().await));
        let budget = Budget { max_tokens: Some(100), max_cost_usd: None };
        let done = |tokens| {
            Event::TurnDone(teamster_protocol::event::TurnDone {
                id: "evt".into(),
                state: TurnState::Error { message: String::new(), completed_at: String::new(), metrics: Some(metrics(tokens, None)) },
                created_at: String::new(),
                thread_id: None,
            })
        };
        let limit = for_turn(&ledger, Some(&budget), &Subject::local(), &[done(40), done(30)]).await.unwrap();
        assert_eq!(limit.exhausted(&metrics(29, None)), None);
        let message = limit.exhausted(&metrics(30, None)).unwrap();
        assert!(message.contains("session's token budget of 100 tokens"), "{message}");
        assert!(for_turn(&ledger, None, &Subject::local(), &[]).await.is_none());
    }

    #[tokio::test]
    async fn a_tenant_budget_counts_its_turns_of_the_window_in_the_store() {
        let store = store().await;
        let ledger = Arc::new(TenantLedger::new(hourly(Budget { max_tokens: None, max_cost_usd: Some(1.0) }), store.clone()));
        let first = for_turn(&ledger, None, &acme(), &[]).await.unwrap();
        assert_eq!(first.exhausted(&metrics(10, Some(0.6))), None);
        first.settle(&metrics(10, Some(0.6)));
        ledger.flush_tenant("acme").await;
        let window = ledger.window_at(SystemTime::now());
        let stored = store.add_tenant_spend("acme", window, Spend::default()).await.unwrap();
        assert_eq!(stored, Spend { tokens: 10, cost_usd: 0.6 }, "the turn's spend is in the store once flushed");
        let second = for_turn(&ledger, None, &acme(), &[]).await.unwrap();
        let message = second.exhausted(&metrics(10, Some(0.4))).unwrap();
        assert!(message.contains("tenant \"acme\"'s cost budget"), "{message}");
        // Another tenant has its own.
        let other = Subject { subject_id: "beta:bob".into(), ..acme() };
        assert_eq!(for_turn(&ledger, None, &other, &[]).await.unwrap().exhausted(&metrics(0, None)), None);
    }

    #[tokio::test]
    async fn another_replicas_spend_counts_from_the_next_turn() {
        let store = store().await;
        let budget = hourly(Budget { max_tokens: Some(100), max_cost_usd: None });
        let (here, there) = (Arc::new(TenantLedger::new(budget.clone(), store.clone())), Arc::new(TenantLedger::new(budget, store)));
        let running_here = for_turn(&here, None, &acme(), &[]).await.unwrap();
        assert_eq!(running_here.exhausted(&metrics(30, None)), None);
        let spender = for_turn(&there, None, &acme(), &[]).await.unwrap();
        spender.settle(&metrics(80, None));
        there.flush_tenant("acme").await;
        // A turn planned now reads the store: 80 there and 30 here that reached the store.
        here.flush_tenant("acme").await;
        let next = for_turn(&here, None, &acme(), &[]).await.unwrap();
        let message = next.exhausted(&metrics(0, None)).unwrap();
        assert!(message.contains("token budget of 100 tokens is spent (110 tokens used)"), "{message}");
    }

    #[tokio::test]
    async fn reservations_count_in_the_check_and_are_never_reported_as_spend() {
        let ledger = Arc::new(TenantLedger::new(hourly(Budget { max_tokens: Some(100), max_cost_usd: None }), store().await));
        let session = Budget { max_tokens: Some(50), max_cost_usd: None };
        let (first, second) = (for_turn(&ledger, None, &acme(), &[]).await.unwrap(), for_turn(&ledger, None, &acme(), &[]).await.unwrap());
        let shared = first.reservations().expect("a tenant budget's reservations");
        assert!(Arc::ptr_eq(&shared, &second.reservations().unwrap()), "a tenant's turns share their reservations");
        assert_eq!(first.exhausted(&metrics(30, None)), None);
        assert!(first.fits(&metrics(30, None), 69));
        assert!(!first.fits(&metrics(30, None), 70), "spent and reserved together reach the tenant's budget");
        assert_eq!(ledger.total(&ledger.view("acme")).0.tokens, 30, "what was reserved was not reported as spent");
        // A session budget counts the reservations too; without a tenant budget they are the turn's own.
        let alone = Arc::new(TenantLedger::new(None, store().await));
        let capped = for_turn(&alone, Some(&session), &acme(), &[]).await.unwrap();
        assert!(capped.reservations().is_none());
        assert!(capped.fits(&metrics(10, None), 39) && !capped.fits(&metrics(10, None), 40));
    }

    #[tokio::test]
    async fn a_tenants_running_turns_count_together_and_once() {
        let store = store().await;
        let ledger = Arc::new(TenantLedger::new(hourly(Budget { max_tokens: Some(100), max_cost_usd: None }), store));
        let (first, second) = (for_turn(&ledger, None, &acme(), &[]).await.unwrap(), for_turn(&ledger, None, &acme(), &[]).await.unwrap());
        assert_eq!(first.exhausted(&metrics(60, None)), None);
        // The same spend reported again is not counted twice.
        assert_eq!(first.exhausted(&metrics(60, None)), None);
        // Each as of its last check: 60 + 40.
        assert!(second.exhausted(&metrics(40, None)).is_some());
        second.settle(&metrics(40, None));
        first.settle(&metrics(60, None));
        ledger.flush_tenant("acme").await;
        let view = ledger.view("acme");
        assert_eq!(ledger.total(&view).0.tokens, 100);
        assert!(is_nothing(view.state.lock().unwrap().unstored));
    }
}
