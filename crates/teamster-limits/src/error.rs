//! The limits' errors: a refusal, or the store that counts failing.

/// What a limit's check fails with.
#[derive(Debug, thiserror::Error)]
pub enum LimitError {
    /// The caller has as many turns running as the quota allows.
    #[error(transparent)]
    Quota(#[from] QuotaExceeded),
    /// The store that keeps the counts failed.
    #[error(transparent)]
    Store(#[from] teamster_store::Error),
}

pub type Result<T, E = LimitError> = std::result::Result<T, E>;

/// A new turn refused by the quota.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{running} turns of this caller are running, the most allowed at once is {max}; retry once one has ended")]
pub struct QuotaExceeded {
    pub running: u32,
    pub max: u32,
}

/// A request refused by the rate limit.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("too many requests: the limit is {per_minute} per minute; retry in {retry_after_secs} s")]
pub struct RateLimited {
    pub per_minute: u32,
    /// Whole seconds until the next request is accepted.
    pub retry_after_secs: u64,
}
