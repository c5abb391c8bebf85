//! Retries of failed model calls, with exponential back-off and full jitter: [`RetryPolicy`]
//! and [`RetryingClient`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::{StreamExt, stream};

use crate::error::GiveUpReason;
use crate::{Error, ModelClient, ModelEvent, ModelRequest, ModelStream};

/// Retries of model calls by every [`RetryingClient`] of this process, for its metrics.
static RETRIES: AtomicU64 = AtomicU64::new(0);

/// How many times model calls have been retried in this process (all providers together).
pub fn retries() -> u64 {
    RETRIES.load(Ordering::Relaxed)
}

/// How often and how patiently a failed model call is tried again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// How many attempts a call gets in all, the first included; 0 and 1 both mean no retry.
    pub max_attempts: u32,
    /// The longest wait before the first retry; each later retry may wait twice as long.
    pub base_delay: Duration,
    /// The longest wait before any retry, and the longest `Retry-After` a provider may ask for.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    /// Five attempts, waits from up to 500 ms growing to at most 30 s.
    fn default() -> Self {
        RetryPolicy { max_attempts: 5, base_delay: Duration::from_millis(500), max_delay: Duration::from_secs(30) }
    }
}

impl RetryPolicy {
    /// The longest wait after `failures` failed attempts: `base_delay · 2^(failures − 1)`, capped
    /// at `max_delay`.
    pub fn max_backoff(&self, failures: u32) -> Duration {
        let factor = 1u32.checked_shl(failures.saturating_sub(1)).unwrap_or(u32::MAX);
        self.base_delay.saturating_mul(factor).min(self.max_delay)
    }

    /// The wait after `failures` failed attempts: uniformly random between zero and
    /// [`RetryPolicy::max_backoff`] ("full jitter"), so that clients that failed together do
    /// not retry together.
    pub fn backoff(&self, failures: u32, rng: &mut fastrand::Rng) -> Duration {
        let ceiling = u64::try_from(self.max_backoff(failures).as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(rng.u64(0..=ceiling))
    }

    /// What follows attempt number `attempt` (counting from 1) failing with `error`.
    fn after_failure(&self, error: Error, attempt: u32, rng: &mut fastrand::Rng) -> AfterFailure {
        if !error.is_transient() || self.max_attempts <= 1 {
            return AfterFailure::Stop(error);
        }
        if attempt >= self.max_attempts {
            let reason = GiveUpReason::AttemptsExhausted(attempt);
            return AfterFailure::Stop(Error::GaveUp { last: Box::new(error), reason });
        }
        let delay = match error {
            Error::RateLimited { retry_after: Some(wait), .. } if wait > self.max_delay => {
                let reason = GiveUpReason::WaitTooLong(self.max_delay);
                return AfterFailure::Stop(Error::GaveUp { last: Box::new(error), reason });
            }
            Error::RateLimited { retry_after: Some(wait), .. } => wait,
            _ => self.backoff(attempt, rng),
        };
        AfterFailure::Retry { delay, error }
    }
}

/// What follows a failed attempt.
#[derive(Debug)]
enum AfterFailure {
    /// Wait `delay`, then try again; `error` is the failure, for the log.
    Retry { delay: Duration, error: Error },
    /// Return this error.
    Stop(Error),
}

/// A client that tries a call again when it fails transiently before producing anything.
///
/// - A transient failure ([`Error::is_transient`]: broken connections, 408, 409, 429, 5xx)
///   that arrives before the stream's first event is retried, after the provider's
///   `Retry-After` when it gave one and otherwise after [`RetryPolicy::backoff`]. A provider
///   that asks for a longer wait than [`RetryPolicy::max_delay`] is not retried: the call fails
///   at once with [`Error::GaveUp`] saying so.
/// - Once an event has been yielded, errors pass through untouched: whoever consumes the stream
///   may already have shown those events, and starting over would repeat or garble them. So a
///   retried call is invisible to its consumer, which sees one clean answer.
/// - Permanent errors (401, 400, 404, 413, a too-long context, [`Error::Decode`]) are returned at
///   once. When every attempt failed, the last error is returned inside [`Error::GaveUp`], whose
///   message is the provider's answer followed by `(after N attempts)`.
/// - Dropping the stream during a wait stops it at once. A failed attempt's stream, and with it
///   its connection and any concurrency permit, is dropped before the wait begins.
/// - Each retry is logged at `info`, each give-up at `warn`, with the provider's name.
#[derive(Debug)]
pub struct RetryingClient<C> {
    inner: Arc<C>,
    policy: RetryPolicy,
    /// The provider's name, for the log.
    provider: Arc<str>,
}

impl<C: ModelClient + 'static> RetryingClient<C> {
    /// Wraps `inner`, the client of the provider named `provider`.
    pub fn new(inner: C, policy: RetryPolicy, provider: impl Into<Arc<str>>) -> Self {
        RetryingClient { inner: Arc::new(inner), policy, provider: provider.into() }
    }
}

impl<C: ModelClient + 'static> ModelClient for RetryingClient<C> {
    fn stream(&self, request: ModelRequest) -> ModelStream {
        let attempts = Attempts {
            inner: self.inner.clone(),
            policy: self.policy,
            provider: self.provider.clone(),
            request,
        };
        Box::pin(stream::unfold(State::Starting(Box::new(attempts)), |state| async move {
            match state {
                State::Starting(attempts) => match attempts.first_event().await {
                    Ok(Some((event, rest))) => Some((Ok(event), State::Streaming(rest))),
                    Ok(None) => None,
                    Err(error) => Some((Err(error), State::Done)),
                },
                State::Streaming(mut events) => {
                    let item = events.next().await?;
                    Some((item, State::Streaming(events)))
                }
                State::Done => None,
            }
        }))
    }
}

/// Where a retried stream is.
enum State<C> {
    /// No event yet: failures may still be retried.
    Starting(Box<Attempts<C>>),
    /// An event was yielded: the rest of that attempt passes through.
    Streaming(ModelStream),
    /// The call failed for good.
    Done,
}

/// Everything needed to try a call again.
struct Attempts<C> {
    inner: Arc<C>,
    policy: RetryPolicy,
    provider: Arc<str>,
    request: ModelRequest,
}

impl<C: ModelClient> Attempts<C> {
    /// Tries the call until an attempt yields its first event (returned with the rest of that
    /// attempt's stream) or ends without any, or until it fails in a way not to retry.
    async fn first_event(mut self: Box<Self>) -> Result<Option<(ModelEvent, ModelStream)>, Error> {
        let mut attempt = 1;
        loop {
            // The last allowed attempt takes the request instead of a copy.
            let request = if attempt < self.policy.max_attempts {
                self.request.clone()
            } else {
                std::mem::take(&mut self.request)
            };
            let mut events = self.inner.stream(request);
            let error = match events.next().await {
                Some(Ok(event)) => return Ok(Some((event, events))),
                None => return Ok(None),
                Some(Err(error)) => error,
            };
            // Invariant: nothing of a failed attempt (connection, permit) outlives the failure.
            drop(events);
            match self.policy.after_failure(error, attempt, &mut fastrand::Rng::new()) {
                AfterFailure::Retry { delay, error } => {
                    RETRIES.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(
                        provider = %self.provider,
                        status = error.status(),
                        attempt,
                        ?delay,
                        %error,
                        "model call failed; retrying"
                    );
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
                AfterFailure::Stop(error) => {
                    if matches!(error, Error::GaveUp { .. }) {
                        tracing::warn!(
                            provider = %self.provider,
                            status = error.status(),
                            attempt,
                            %error,
                            "model call failed; giving up"
                        );
                    }
                    return Err(error);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy { max_attempts: 4, base_delay: Duration::from_millis(100), max_delay: Duration::from_millis(500) }
    }

    fn provider_error(status: u16) -> Error {
        Error::Provider { status, message: format!("fake error {status}") }
    }

    fn rate_limited(seconds: u64) -> Error {
        Error::RateLimited { retry_after: Some(Duration::from_secs(seconds)), message: "slow down".into() }
    }

    #[test]
    fn the_ceiling_doubles_from_the_base_up_to_the_cap() {
        let ceilings: Vec<u128> = (1..=6).map(|failures| policy().max_backoff(failures).as_millis()).collect();
        assert_eq!(ceilings, [100, 200, 400, 500, 500, 500]);
        assert_eq!(RetryPolicy::default().max_backoff(1), Duration::from_millis(500));
        assert_eq!(RetryPolicy::default().max_backoff(u32::MAX), Duration::from_secs(30));
    }

    #[test]
    fn jitter_stays_within_bounds_and_spreads_over_them() {
        let mut rng = fastrand::Rng::with_seed(7);
        for failures in 1..=5 {
            let ceiling = policy().max_backoff(failures);
            let samples: Vec<Duration> = (0..2_000).map(|_| policy().backoff(failures, &mut rng)).collect();
            assert!(samples.iter().all(|delay| *delay <= ceiling), "a delay above {ceiling:?}");
            let below_a_quarter = samples.iter().filter(|delay| **delay < ceiling / 4).count();
            let above_three_quarters = samples.iter().filter(|delay| **delay > ceiling * 3 / 4).count();
            // Uniform jitter puts about 500 of 2,000 samples in each outer quarter.
            assert!((350..650).contains(&below_a_quarter), "{below_a_quarter} in the lowest quarter");
            assert!((350..650).contains(&above_three_quarters), "{above_three_quarters} in the highest quarter");
        }
    }

    #[test]
    fn transient_failures_are_retried_after_a_jittered_backoff() {
        let mut rng = fastrand::Rng::with_seed(1);
        for error in [provider_error(503), provider_error(529), provider_error(408), Error::Transport("reset".into())] {
            match policy().after_failure(error, 2, &mut rng) {
                AfterFailure::Retry { delay, .. } => assert!(delay <= Duration::from_millis(200), "{delay:?}"),
                other => panic!("expected a retry, got {other:?}"),
            }
        }
    }

    #[test]
    fn permanent_failures_stop_unchanged() {
        let mut rng = fastrand::Rng::with_seed(1);
        for status in [400, 401, 404, 413] {
            match policy().after_failure(provider_error(status), 1, &mut rng) {
                AfterFailure::Stop(Error::Provider { status: stopped, .. }) => assert_eq!(stopped, status),
                other => panic!("expected {status} to stop unchanged, got {other:?}"),
            }
        }
        let decode = policy().after_failure(Error::Decode("bad".into()), 1, &mut rng);
        assert!(matches!(decode, AfterFailure::Stop(Error::Decode(_))), "{decode:?}");
    }

    #[test]
    fn the_providers_wait_is_used_unless_it_is_longer_than_the_cap() {
        let mut rng = fastrand::Rng::with_seed(1);
        let patient = RetryPolicy { max_delay: Duration::from_secs(2), ..policy() };
        match patient.after_failure(rate_limited(2), 1, &mut rng) {
            AfterFailure::Retry { delay, .. } => assert_eq!(delay, Duration::from_secs(2)),
            other => panic!("expected a retry, got {other:?}"),
        }
        match patient.after_failure(rate_limited(3), 1, &mut rng) {
            AfterFailure::Stop(error @ Error::GaveUp { reason: GiveUpReason::WaitTooLong(_), .. }) => {
                assert_eq!(
                    error.to_string(),
                    "rate limited by the provider (retry after 3s): slow down \
                     (not retried: the provider's wait is longer than the 2s limit)"
                );
                assert!(error.is_transient());
                assert_eq!(error.status(), Some(429));
            }
            other => panic!("expected to give up, got {other:?}"),
        }
    }

    #[test]
    fn the_last_attempt_gives_up_with_the_providers_answer() {
        let mut rng = fastrand::Rng::with_seed(1);
        match policy().after_failure(provider_error(503), 4, &mut rng) {
            AfterFailure::Stop(error) => {
                assert_eq!(error.to_string(), "provider answered 503: fake error 503 (after 4 attempts)");
                assert_eq!(error.status(), Some(503));
            }
            other => panic!("expected to give up, got {other:?}"),
        }
        let single = RetryPolicy { max_attempts: 1, ..policy() };
        let stopped = single.after_failure(provider_error(503), 1, &mut rng);
        assert!(matches!(stopped, AfterFailure::Stop(Error::Provider { status: 503, .. })), "{stopped:?}");
    }
}
