//! Who a request comes from. Without authentication (a server on loopback), every request is
//! the local user's. With API keys, every request but the health checks and the MCP OAuth
//! pages a browser opens (which carry sealed tickets of their own) needs
//! `Authorization: Bearer <key>`; the middleware finds the caller and handlers take it as the
//! [`Authenticated`] extractor. Settings, API keys and the metrics (every tenant's activity
//! added up) are for admins only (403 for others).

use axum::extract::{FromRequestParts, OptionalFromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use teamster_service::Caller;

use crate::AppState;
use crate::error::ApiError;

/// How the server authenticates requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AuthMode {
    /// Every request is the local user's (only for a server on loopback, or when the operator
    /// insists).
    #[default]
    None,
    /// Requests carry an API key.
    ApiKeys,
}

/// The caller of a request, for handlers.
#[derive(Clone, Debug)]
pub struct Authenticated(pub Caller);

impl<S: Send + Sync> FromRequestParts<S> for Authenticated {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Authenticated, Response> {
        parts.extensions.get::<Caller>().cloned().map(Authenticated).ok_or_else(|| unauthorized("an API key is required"))
    }
}

/// Paths any client may reach without a key (a key, when sent, is still checked).
pub(crate) fn is_public(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz" | "/api/v1/mcp-servers/oauth/callback" | "/api/v1/openapi.json" | "/api/v1/docs")
        || path
            .strip_prefix("/api/v1/mcp-servers/")
            .and_then(|rest| rest.strip_suffix("/authorize"))
            .is_some_and(|name| !name.is_empty() && !name.contains('/'))
}

impl<S: Send + Sync> OptionalFromRequestParts<S> for Authenticated {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Option<Authenticated>, Self::Rejection> {
        Ok(parts.extensions.get::<Caller>().cloned().map(Authenticated))
    }
}

/// Paths only admins reach: settings (providers and their keys, MCP servers, skills), API keys
/// and the metrics.
pub(crate) fn is_admin_only(path: &str) -> bool {
    path == "/metrics" || ["/api/v1/settings/", "/api/v1/keys"].iter().any(|prefix| path.starts_with(prefix))
}

/// A 401 in the spec's error shape, saying which scheme to use.
pub(crate) fn unauthorized(message: &str) -> Response {
    let mut response = ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message).into_response();
    response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// The middleware: puts the request's [`Caller`] in its extensions, or answers 401.
pub async fn authenticate(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let caller = match state.config.auth {
        AuthMode::None => Caller::local(),
        AuthMode::ApiKeys => {
            let bearer = request
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|value| value.to_str().ok())
                .and_then(|value| value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("bearer ")))
                .map(str::trim)
                .filter(|key| !key.is_empty());
            let Some(key) = bearer else {
                if is_public(request.uri().path()) {
                    return next.run(request).await;
                }
                return unauthorized("an API key is required: send Authorization: Bearer <key>");
            };
            match state.service.authenticate(key).await {
                Ok(Some(caller)) => caller,
                Ok(None) => return unauthorized("the API key is not valid (unknown, malformed or revoked)"),
                Err(error) => return ApiError::from(error).into_response(),
            }
        }
    };
    if is_admin_only(request.uri().path())
        && let Err(refused) = caller.require_admin()
    {
        return ApiError::from(refused).into_response();
    }
    request.extensions_mut().insert(caller);
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_health_checks_and_the_oauth_pages_are_public() {
        for path in ["/healthz", "/readyz", "/api/v1/mcp-servers/oauth/callback", "/api/v1/mcp-servers/github/authorize", "/api/v1/openapi.json", "/api/v1/docs"] {
            assert!(is_public(path), "{path}");
        }
        for path in ["/api/v1/sessions", "/api/v1/mcp-servers/a/b/authorize", "/api/v1/mcp-servers//authorize", "/v1/agents/sessions"] {
            assert!(!is_public(path), "{path}");
        }
    }
}
