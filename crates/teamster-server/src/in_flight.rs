//! Requests in flight: a cap per subject and a cap on all of them, below the connection cap,
//! and the deadline of a request's body.
//!
//! A request holds a slot from the moment its caller is known until its answer has been sent
//! (an event stream holds it as long as it streams), so a subject that opens connections and
//! trickles a body into each holds at most `per_subject` of them: beyond that it is answered
//! at once, 429 `too_many_requests_in_flight` with `Retry-After`, and the connection is closed.
//! All requests but the public ones (health checks, the API's documents, the login and OAuth
//! pages) together hold at most `total`, which is the connection cap less a reserve
//! ([`reserve`]); beyond it 503 `server_busy`. So however many subjects trickle bodies, the
//! reserve of connections stays free for the health checks, which never wait for a slot.
//! Without authentication there is one caller, the local operator, and only the total applies.
//!
//! The body's deadline: a request's whole body must arrive within the body timeout of the
//! request's head (see `extract`); a slower one is a 408 `request_timeout`, and its connection
//! is closed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use teamster_service::Caller;

use crate::error::ApiError;
use crate::{AppState, AuthMode};

/// The most connections kept for the health checks: a tenth of the cap, at least 2, at most 100.
pub(crate) fn reserve(max_connections: usize) -> usize {
    (max_connections / 10).clamp(2, 100)
}

/// When a request's body must have arrived whole, put in its extensions as it comes in.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BodyDeadline {
    pub at: tokio::time::Instant,
    pub timeout: std::time::Duration,
}

/// The middleware, outermost: stamps the request with its body's deadline.
pub async fn stamp_deadline(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let timeout = state.config.body_timeout;
    request.extensions_mut().insert(BodyDeadline { at: tokio::time::Instant::now() + timeout, timeout });
    next.run(request).await
}

/// The requests in flight, by subject and all together.
#[derive(Debug)]
pub struct InFlight {
    per_subject: usize,
    total: usize,
    counts: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    all: usize,
    by_subject: HashMap<String, usize>,
}

/// Why a request got no slot.
enum Refused {
    Subject,
    Total,
}

/// A request's slot, given back when dropped.
struct Slot {
    in_flight: Arc<InFlight>,
    subject: Option<String>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut counts = self.in_flight.counts.lock().unwrap_or_else(PoisonError::into_inner);
        counts.all = counts.all.saturating_sub(1);
        if let Some(subject) = &self.subject
            && let Some(count) = counts.by_subject.get_mut(subject)
        {
            *count = count.saturating_sub(1);
            if *count == 0 {
                counts.by_subject.remove(subject);
            }
        }
    }
}

impl InFlight {
    /// Caps for a server of `max_connections`: all non-public requests at the cap less its
    /// [`reserve`], each subject's at `per_subject` but never more than half of that.
    pub fn new(max_connections: usize, per_subject: usize) -> InFlight {
        let total = max_connections.saturating_sub(reserve(max_connections)).max(1);
        InFlight { per_subject: per_subject.clamp(1, (total / 2).max(1)), total, counts: Mutex::default() }
    }

    /// The cap of each subject's requests in flight.
    pub fn per_subject(&self) -> usize {
        self.per_subject
    }

    fn acquire(self: &Arc<Self>, subject: Option<&str>) -> Result<Slot, Refused> {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        if counts.all >= self.total {
            return Err(Refused::Total);
        }
        if let Some(subject) = subject {
            let count = counts.by_subject.entry(subject.to_owned()).or_insert(0);
            if *count >= self.per_subject {
                return Err(Refused::Subject);
            }
            *count += 1;
        }
        counts.all += 1;
        Ok(Slot { in_flight: self.clone(), subject: subject.map(str::to_owned) })
    }
}

/// The middleware, inside authentication: holds a slot for the request and its answer's body,
/// or answers 429 (the subject's cap) or 503 (all requests' cap) at once.
pub async fn limit(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let Some(caller) = request.extensions().get::<Caller>() else { return next.run(request).await };
    if crate::auth::is_public(request.uri().path()) {
        return next.run(request).await;
    }
    let in_flight = &state.in_flight;
    // Without authentication every request is the one local caller's: only the total applies.
    let subject = (state.config.auth != AuthMode::None || state.config.oidc.is_some()).then_some(caller.subject.subject_id.as_str());
    let slot = match in_flight.acquire(subject) {
        Ok(slot) => slot,
        Err(refused) => {
            tracing::debug!(subject = subject.unwrap_or("local"), "a request was refused a slot");
            return busy(&refused, in_flight.per_subject);
        }
    };
    let response = next.run(request).await;
    // The slot goes with the answer's body: a stream holds it until it ends.
    response.map(|body| axum::body::Body::new(Held { body, _slot: slot }))
}

/// An answer's body holding its request's slot until it is dropped; its size and end are the
/// body's (so a JSON answer keeps its `Content-Length`).
struct Held {
    body: axum::body::Body,
    _slot: Slot,
}

impl hyper::body::Body for Held {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(context)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// The answer to a request refused a slot: the error shape, `Retry-After: 1`, and the
/// connection closed (its body is never read).
fn busy(refused: &Refused, per_subject: usize) -> Response {
    let error = match refused {
        Refused::Subject => ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_requests_in_flight",
            format!("this subject already has {per_subject} requests in flight (the most it may); retry when one has ended"),
        ),
        Refused::Total => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "server_busy", "the server has as many requests in flight as it takes; retry shortly"),
    };
    let mut response = error.into_response();
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_capped_per_subject_and_in_all_and_given_back() {
        let in_flight = Arc::new(InFlight::new(20, 64));
        // 20 connections keep 2 for the health checks; a subject gets at most half the rest.
        assert_eq!((in_flight.total, in_flight.per_subject()), (18, 9));
        let mine: Vec<Slot> = (0..9).map(|_| in_flight.acquire(Some("a")).ok().unwrap()).collect();
        assert!(matches!(in_flight.acquire(Some("a")), Err(Refused::Subject)));
        let theirs: Vec<Slot> = (0..9).map(|_| in_flight.acquire(Some("b")).ok().unwrap()).collect();
        assert!(matches!(in_flight.acquire(Some("c")), Err(Refused::Total)));
        assert!(matches!(in_flight.acquire(None), Err(Refused::Total)));
        drop(mine);
        assert!(in_flight.acquire(Some("a")).is_ok());
        drop(theirs);
        let counts = in_flight.counts.lock().unwrap();
        assert_eq!((counts.all, counts.by_subject.len()), (0, 0));
    }
}
