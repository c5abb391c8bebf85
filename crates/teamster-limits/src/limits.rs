//! Operator limits on what subjects use: how many requests one subject may send a minute
//! ([`RequestRate`]), how many turns it may have running at once ([`TurnQuota`]), and the
//! tenant budget (see `budgets`).
//!
//! Every count lives in the store ([`UsageStore`]), so replicas sharing a store hold a subject
//! to one limit together, and one replica on SQLite runs the same code.
//!
//! - The request rate is a token bucket per subject in the store, taken by one statement per
//!   request: exact across replicas, at the price of that statement (only with a limit set).
//! - A running turn's model calls, on every thread (sub-agents), take places from the subject's
//!   [`ModelCallPlaces`], as many as its turn quota: so a quota of 3 turns means at most 3 model
//!   calls of the subject at once on a replica, however far its turns fan out. The places are
//!   this replica's (a turn runs on one replica; the turns themselves are counted in the store).
//! - The running-turn quota counts places in the store: a turn being created holds a
//!   reservation from the check until it runs (so turns created at the same instant cannot all
//!   pass), then the place is bound to the turn and counts while the turn runs under a live
//!   lease. A replica that stops without ending its turns holds their places only until their
//!   leases expire (or another replica takes the turns over, and they count again). A turn that
//!   replaces the session's running turn (a new `auto` turn cancels it) does not count that one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use teamster_engine::FanOut;
use teamster_protocol::ids;
use teamster_store::{TurnPlace, UsageStore};

use crate::budgets::TenantBudget;
use crate::error::{LimitError, QuotaExceeded, RateLimited, Result};

/// How long a reservation holds a place while its turn is being created, if the replica
/// creating it stops before the turn is stored (a turn stored in time holds it itself).
const RESERVATION_TTL: Duration = Duration::from_secs(30);

/// How long a subject's bucket stays in the store after its last request: by then it has
/// refilled completely, and a new bucket says the same.
const BUCKET_IDLE: Duration = Duration::from_secs(60);

/// What the operator limits.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Limits {
    /// The most turns one subject may have running at once; `None` for no limit.
    pub max_concurrent_turns_per_subject: Option<u32>,
    /// What each tenant may spend on model calls per window; `None` for no budget.
    pub tenant_budget: Option<TenantBudget>,
    /// How far one turn may fan out (the defaults; an agent spec may lower them).
    pub fan_out: FanOut,
}

/// Each subject's request rate, counted in the store.
pub struct RequestRate {
    /// Requests per minute per subject, and the burst a rested subject may send at once.
    per_minute: u32,
    store: Arc<dyn UsageStore>,
    /// When idle buckets were last forgotten, in seconds since the Unix epoch.
    last_sweep: AtomicU64,
}

impl std::fmt::Debug for RequestRate {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("RequestRate").field("per_minute", &self.per_minute).finish_non_exhaustive()
    }
}

impl RequestRate {
    /// A limit of `per_minute` requests a minute per subject (at least 1) over `store`.
    pub fn new(store: Arc<dyn UsageStore>, per_minute: u32) -> RequestRate {
        RequestRate { per_minute: per_minute.max(1), store, last_sweep: AtomicU64::new(now_secs()) }
    }

    /// Counts a request of `subject_id`, or says how long to wait (`Ok(Err(..))`); `Err` when
    /// the store fails.
    pub async fn check(&self, subject_id: &str) -> Result<std::result::Result<(), RateLimited>> {
        self.sweep_now_and_then();
        let taken = self.store.take_request(subject_id, self.per_minute).await?;
        if taken.granted {
            return Ok(Ok(()));
        }
        let per_second = f64::from(self.per_minute) / 60.0;
        let wait = (1.0 - taken.tokens_left).max(0.0) / per_second;
        Ok(Err(RateLimited { per_minute: self.per_minute, retry_after_secs: (wait.ceil() as u64).max(1) }))
    }

    /// Forgets idle buckets in the background, at most once a minute per replica.
    fn sweep_now_and_then(&self) {
        let now = now_secs();
        let last = self.last_sweep.load(Ordering::Relaxed);
        if now < last + BUCKET_IDLE.as_secs()
            || self.last_sweep.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_err()
        {
            return;
        }
        let store = self.store.clone();
        tokio::spawn(async move {
            if let Err(error) = store.forget_idle_requests(BUCKET_IDLE).await {
                tracing::warn!(%error, "forgetting idle request buckets failed");
            }
        });
    }
}

fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()
}

/// Each subject's running turns, counted in the store.
pub struct TurnQuota {
    max: Option<u32>,
    store: Arc<dyn UsageStore>,
}

impl std::fmt::Debug for TurnQuota {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("TurnQuota").field("max", &self.max).finish_non_exhaustive()
    }
}

/// A place in the quota for a turn being created: it becomes the turn's with
/// [`Reservation::started`], and is given back when dropped.
#[must_use]
pub struct Reservation {
    /// The store and the place's id; `None` when the quota has no limit.
    place: Option<(Arc<dyn UsageStore>, String)>,
}

impl Reservation {
    /// Binds the place to the started turn, which holds it while it runs.
    pub async fn started(mut self, turn_id: &str) {
        let Some((store, place_id)) = self.place.take() else { return };
        match store.bind_turn_place(&place_id, turn_id).await {
            Ok(true) => {}
            // The reservation expired before the turn was stored (the store was that slow):
            // the turn runs uncounted rather than failing after it started.
            Ok(false) => tracing::warn!(turn_id, "the turn's quota reservation expired before it started"),
            Err(error) => tracing::warn!(turn_id, %error, "binding the turn's quota place failed; it counts until the reservation expires"),
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let Some((store, place_id)) = self.place.take() else { return };
        // Given back in the background; if that fails, the reservation expires on its own.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(error) = store.release_turn_place(&place_id).await {
                    tracing::warn!(%error, "giving back a quota reservation failed; it expires on its own");
                }
            });
        }
    }
}

impl TurnQuota {
    pub fn new(max: Option<u32>, store: Arc<dyn UsageStore>) -> TurnQuota {
        TurnQuota { max, store }
    }

    /// Reserves a place for a new turn of `subject` in session `session_id` (whose running
    /// turn the new one ends, so it does not count), or refuses it.
    pub async fn reserve(&self, subject: &str, session_id: &str) -> Result<Reservation> {
        let Some(max) = self.max else { return Ok(Reservation { place: None }) };
        let place = TurnPlace { id: ids::new_id("place"), subject_id: subject.to_owned(), session_id: session_id.to_owned() };
        match self.store.reserve_turn_place(&place, max, RESERVATION_TTL).await? {
            None => Ok(Reservation { place: Some((self.store.clone(), place.id)) }),
            Some(running) => Err(LimitError::Quota(QuotaExceeded { running, max })),
        }
    }
}

/// Each subject's places for model calls on this replica: as many as its turn quota.
pub struct ModelCallPlaces {
    per_subject: Option<u32>,
    /// Subject to its places, while a turn of it holds them (dead entries are swept).
    subjects: Mutex<HashMap<String, Weak<tokio::sync::Semaphore>>>,
}

impl ModelCallPlaces {
    pub fn new(per_subject: Option<u32>) -> ModelCallPlaces {
        ModelCallPlaces { per_subject, subjects: Mutex::default() }
    }

    /// The places `subject`'s turns share; `None` without a quota.
    pub fn of(&self, subject: &str) -> Option<Arc<tokio::sync::Semaphore>> {
        let places = self.per_subject?.max(1) as usize;
        let mut subjects = self.subjects.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(shared) = subjects.get(subject).and_then(Weak::upgrade) {
            return Some(shared);
        }
        // Subjects without a running turn are forgotten before one is added.
        subjects.retain(|_, shared| shared.strong_count() > 0);
        let shared = Arc::new(tokio::sync::Semaphore::new(places));
        subjects.insert(subject.to_owned(), Arc::downgrade(&shared));
        Some(shared)
    }
}

impl std::fmt::Debug for ModelCallPlaces {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("ModelCallPlaces").field("per_subject", &self.per_subject).finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn store() -> Arc<dyn teamster_store::Store> {
        Arc::new(teamster_store_sqlite::SqliteStore::connect("sqlite::memory:").await.expect("an in-memory store"))
    }

    #[tokio::test]
    async fn counts_a_subjects_reservations() {
        let quota = TurnQuota::new(Some(2), store().await);
        let first = quota.reserve("ann", "session_a").await.unwrap();
        let pending = quota.reserve("ann", "session_b").await.unwrap();
        let refused = quota.reserve("ann", "session_x").await.err().unwrap();
        assert_eq!(refused.to_string(), QuotaExceeded { running: 2, max: 2 }.to_string());
        // Another subject, and a turn replacing one of the two, pass.
        drop(quota.reserve("bob", "session_x").await.unwrap());
        drop(quota.reserve("ann", "session_a").await.unwrap());
        // A dropped reservation is given back (in the background).
        drop(pending);
        let mut again = None;
        for _ in 0..100 {
            if let Ok(reservation) = quota.reserve("ann", "session_x").await {
                again = Some(reservation);
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(again.is_some(), "the dropped reservation was never given back");
        drop(first);
    }

    #[test]
    fn a_subjects_turns_share_its_model_call_places() {
        let places = ModelCallPlaces::new(Some(3));
        let ann = places.of("ann").unwrap();
        assert!(Arc::ptr_eq(&ann, &places.of("ann").unwrap()), "one subject's turns share one set");
        assert_eq!(ann.available_permits(), 3);
        assert!(!Arc::ptr_eq(&ann, &places.of("bob").unwrap()), "another subject has its own");
        drop(ann);
        places.of("carol");
        assert!(!places.subjects.lock().unwrap().contains_key("ann"), "unused places are forgotten");
        assert!(ModelCallPlaces::new(None).of("ann").is_none());
    }

    #[tokio::test]
    async fn no_limit_reserves_nothing() {
        let quota = TurnQuota::new(None, store().await);
        for _ in 0..3 {
            assert!(quota.reserve("ann", "session_x").await.unwrap().place.is_none());
        }
    }

    #[tokio::test]
    async fn a_burst_then_one_request_per_period() {
        let rate = RequestRate::new(store().await, 6);
        for _ in 0..6 {
            rate.check("a").await.unwrap().unwrap();
        }
        let refused = rate.check("a").await.unwrap().unwrap_err();
        assert_eq!(refused.per_minute, 6);
        assert!((9..=10).contains(&refused.retry_after_secs), "{refused:?}");
        // Another subject has its own bucket.
        rate.check("b").await.unwrap().unwrap();
    }
}
