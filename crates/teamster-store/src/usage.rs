//! What the operator's limits count, kept in the store so that every replica sharing it counts
//! together: each subject's request rate, each subject's running turns, each tenant's spend.

use std::time::Duration;

use async_trait::async_trait;

use crate::Result;

/// The answer to [`UsageStore::take_request`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RequestTaken {
    /// Whether the request may go on (a token was taken).
    pub granted: bool,
    /// Requests the subject may still send now (fractions accrue between requests).
    pub tokens_left: f64,
}

/// A place in a subject's running-turn quota, as [`UsageStore::reserve_turn_place`] asks for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnPlace {
    /// The place's own id (unique).
    pub id: String,
    pub subject_id: String,
    /// The session the turn is for: a place held for another turn of this session does not
    /// count against this one (the new turn ends the session's running one).
    pub session_id: String,
}

/// A tenant's spend in one window.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Spend {
    pub tokens: u64,
    pub cost_usd: f64,
}

/// The usage counters of the operator's limits, shared by every replica of a store. Times are
/// the store's clock, so replicas whose clocks disagree still agree.
#[async_trait]
pub trait UsageStore: Send + Sync {
    /// Takes one request from `subject_id`'s token bucket, in one statement: the bucket holds
    /// at most `per_minute` tokens, gains `per_minute` a minute, and a new subject's is full.
    /// Refused (`granted: false`, nothing taken) when less than one token is left.
    async fn take_request(&self, subject_id: &str, per_minute: u32) -> Result<RequestTaken>;

    /// Forgets the buckets of subjects idle for `idle` or longer (a bucket idle for a whole
    /// minute is full, like a new one); returns how many.
    async fn forget_idle_requests(&self, idle: Duration) -> Result<u64>;

    /// Reserves a place for a new turn of `place.subject_id` if fewer than `max` of the
    /// subject's places count now: `None` when it was reserved, `Some(counted)` when refused.
    /// A place counts while it is an unbound reservation younger than `ttl`, or while the turn
    /// bound to it runs under a live lease, so a stopped replica's turns stop counting once
    /// their leases expire. Places of `place.session_id` do not count (the new turn ends the
    /// session's running one). Reservations of one subject are serialised, so concurrent ones
    /// cannot all pass. The subject's places that no longer count are deleted on the way.
    async fn reserve_turn_place(&self, place: &TurnPlace, max: u32, ttl: Duration) -> Result<Option<u32>>;

    /// Binds a reserved place to the turn it was reserved for, which now holds it while it
    /// runs. `Ok(false)` if there is no such place.
    async fn bind_turn_place(&self, place_id: &str, turn_id: &str) -> Result<bool>;

    /// Gives a place back (the turn was not created). `Ok(false)` if there is no such place.
    async fn release_turn_place(&self, place_id: &str) -> Result<bool>;

    /// Adds `added` to `tenant`'s spend in window `window` (any number that names a period of
    /// the caller's choosing; windows before it are forgotten) and answers the window's total,
    /// in one statement. Adding nothing reads the total.
    async fn add_tenant_spend(&self, tenant: &str, window: u64, added: Spend) -> Result<Spend>;

    /// Adds `uses` uses of `model` (`provider/model`) by `tenant` (a session switched to it, or
    /// a turn ran on it), in one statement: callers count in memory and add in batches.
    async fn add_model_uses(&self, tenant: &str, model: &str, uses: u64) -> Result<()>;

    /// How many times `tenant` used each model it used, by model name.
    async fn model_uses(&self, tenant: &str) -> Result<Vec<(String, u64)>>;
}
