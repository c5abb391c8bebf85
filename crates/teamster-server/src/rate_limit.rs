//! Per-subject request rate limiting: a token bucket per authenticated subject, in this process.
//!
//! Each subject may send `per_minute` requests in a burst, and one more every `60 / per_minute`
//! seconds after that; a request beyond it is a 429 in the spec's error shape with
//! `Retry-After` (whole seconds until a token is back). Requests to the public paths (health
//! checks, OAuth pages, the API's documents) are not counted. The limit is per replica: behind a load
//! balancer over `n` replicas a subject may reach `n` times it.
//!
//! The state is bounded: a bucket that has refilled completely says nothing a new bucket would
//! not, so buckets idle that long are dropped by a sweep at most once per refill period.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use teamster_service::Caller;

use crate::AppState;
use crate::error::ApiError;

/// The token buckets of every subject seen lately.
#[derive(Debug)]
pub struct RateLimiter {
    /// Requests per minute per subject, and the burst a rested subject may send at once.
    per_minute: u32,
    state: Mutex<Buckets>,
}

#[derive(Debug)]
struct Buckets {
    /// Subject id to its bucket.
    by_subject: HashMap<String, Bucket>,
    /// When idle buckets were last dropped.
    last_sweep: Instant,
}

#[derive(Clone, Copy, Debug)]
struct Bucket {
    /// Requests the subject may still send now (fractions accrue between requests).
    tokens: f64,
    /// When `tokens` was last brought up to date.
    at: Instant,
}

/// A request refused by the limiter.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("too many requests: the limit is {per_minute} per minute; retry in {retry_after_secs} s")]
pub struct RateLimited {
    pub per_minute: u32,
    /// Whole seconds until the next request is accepted.
    pub retry_after_secs: u64,
}

impl RateLimiter {
    /// A limiter of `per_minute` requests per minute per subject (at least 1).
    pub fn new(per_minute: u32) -> RateLimiter {
        RateLimiter {
            per_minute: per_minute.max(1),
            state: Mutex::new(Buckets { by_subject: HashMap::new(), last_sweep: Instant::now() }),
        }
    }

    /// Takes a token of `subject`'s bucket at `now`, or says how long to wait for one.
    pub fn check(&self, subject: &str, now: Instant) -> Result<(), RateLimited> {
        let capacity = f64::from(self.per_minute);
        let per_second = capacity / 60.0;
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let refill = self.refill_period();
        if now.saturating_duration_since(state.last_sweep) >= refill {
            state.by_subject.retain(|_, bucket| now.saturating_duration_since(bucket.at) < refill);
            state.last_sweep = now;
        }
        let bucket = state.by_subject.entry(subject.to_owned()).or_insert(Bucket { tokens: capacity, at: now });
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * per_second).min(capacity);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Ok(());
        }
        let wait = (1.0 - bucket.tokens) / per_second;
        Err(RateLimited { per_minute: self.per_minute, retry_after_secs: (wait.ceil() as u64).max(1) })
    }

    /// How long an empty bucket takes to fill.
    fn refill_period(&self) -> Duration {
        Duration::from_secs(60)
    }

    /// How many subjects have a bucket now (for tests).
    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner).by_subject.len()
    }
}

/// The middleware, inside authentication: counts the caller's request, or answers 429.
pub async fn limit(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let (Some(limiter), Some(caller)) = (state.rate_limiter.as_deref(), request.extensions().get::<Caller>()) else {
        return next.run(request).await;
    };
    if crate::auth::is_public(request.uri().path()) {
        return next.run(request).await;
    }
    match limiter.check(&caller.subject.subject_id, Instant::now()) {
        Ok(()) => next.run(request).await,
        Err(limited) => too_many(&limited),
    }
}

/// The 429 answer: the spec's error shape and `Retry-After`.
fn too_many(limited: &RateLimited) -> Response {
    let mut response = ApiError::new(StatusCode::TOO_MANY_REQUESTS, "rate_limited", limited.to_string()).into_response();
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(limited.retry_after_secs));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_one_request_per_period() {
        let limiter = RateLimiter::new(6);
        let start = Instant::now();
        for _ in 0..6 {
            limiter.check("a", start).unwrap();
        }
        assert_eq!(limiter.check("a", start), Err(RateLimited { per_minute: 6, retry_after_secs: 10 }));
        // Another subject has its own bucket.
        limiter.check("b", start).unwrap();
        assert_eq!(limiter.check("a", start + Duration::from_secs(4)).unwrap_err().retry_after_secs, 6);
        limiter.check("a", start + Duration::from_secs(10)).unwrap();
        assert!(limiter.check("a", start + Duration::from_secs(10)).is_err());
    }

    #[test]
    fn idle_buckets_are_dropped() {
        let limiter = RateLimiter::new(60);
        let start = Instant::now();
        for subject in ["a", "b", "c"] {
            limiter.check(subject, start).unwrap();
        }
        assert_eq!(limiter.tracked(), 3);
        limiter.check("a", start + Duration::from_secs(30)).unwrap();
        limiter.check("d", start + Duration::from_secs(61)).unwrap();
        // "b" and "c" rested a whole period and were dropped; "a" was seen 31 s ago.
        assert_eq!(limiter.tracked(), 2);
    }
}
