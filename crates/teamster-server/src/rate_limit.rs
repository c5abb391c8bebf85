//! Per-subject request rate limiting: a token bucket per authenticated subject, kept in the
//! store ([`teamster_service::RequestRate`]), so replicas sharing a store hold a subject to one
//! rate together.
//!
//! Each subject may send `per_minute` requests in a burst, and one more every `60 / per_minute`
//! seconds after that; a request beyond it is a 429 in the spec's error shape with
//! `Retry-After` (whole seconds until a token is back). Requests to the public paths (health
//! checks, OAuth pages, the API's documents) are not counted. A request costs one statement;
//! when the store fails, the request is served (the limit protects the server, it must not
//! take it down with the store) and the failure logged.

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use teamster_service::{Caller, RateLimited, RequestRate, Service};

use crate::AppState;
use crate::error::ApiError;

/// Each subject's request rate.
#[derive(Debug)]
pub struct RateLimiter {
    rate: RequestRate,
}

impl RateLimiter {
    /// A limiter of `per_minute` requests per minute per subject (at least 1), counted in the
    /// service's store.
    pub fn new(service: &Service, per_minute: u32) -> RateLimiter {
        RateLimiter { rate: service.request_rate(per_minute) }
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
    match limiter.rate.check(&caller.subject.subject_id).await {
        Ok(Ok(())) => next.run(request).await,
        Ok(Err(limited)) => too_many(&limited),
        Err(error) => {
            tracing::warn!(%error, "the request rate could not be counted; serving the request");
            next.run(request).await
        }
    }
}

/// The 429 answer: the spec's error shape and `Retry-After`.
fn too_many(limited: &RateLimited) -> Response {
    let mut response = ApiError::new(StatusCode::TOO_MANY_REQUESTS, "rate_limited", limited.to_string()).into_response();
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(limited.retry_after_secs));
    response
}
