//! Who a request comes from. Without authentication (a server on loopback), every request is
//! the local user's. With API keys or OIDC, every request but the health checks, the docs, the
//! login pages and the MCP OAuth pages a browser opens (which carry sealed tickets of their own)
//! needs a credential: `Authorization: Bearer <key>` (a bearer starting with `tsk_` is an API
//! key), `Authorization: Bearer <ID token>` of the OIDC provider, or the `id_token` cookie
//! (`__Host-id_token` on https) of a browser login (see `oidc`; with unsafe methods only from
//! this server's own pages). The middleware finds the caller and handlers take it as the
//! [`Authenticated`] extractor.
//! Settings (model providers, MCP servers, skills) and the metrics (every tenant's activity added
//! up) are the operator's alone; API keys are for admins, each tenant admin its own tenant's (403
//! for others).

use axum::extract::{FromRequestParts, OptionalFromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use teamster_service::Caller;

use crate::AppState;
use crate::error::ApiError;
use crate::oidc::{OidcLogin, cookie};

/// What an API key starts with; any other bearer is an ID token.
const API_KEY_PREFIX: &str = "tsk_";

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

/// How a request's caller was found, for `GET /api/v1/auth/me`.
#[derive(Clone, Debug)]
pub(crate) enum Credential {
    /// No authentication: the local user.
    Local,
    ApiKey,
    /// An ID token of the OIDC provider (cookie or bearer).
    IdToken { email: String },
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
    matches!(
        path,
        "/healthz" | "/readyz" | "/api/v1/mcp-servers/oauth/callback" | "/api/v1/openapi.json" | "/api/v1/docs"
            | "/api/v1/schemas/agent-manifest.json"
            | "/api/v1/auth/login" | "/api/v1/auth/callback" | "/api/v1/auth/logout"
    )
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

/// Paths only admins (tenant admins and the operator) reach: API keys.
pub(crate) fn is_admin_only(path: &str) -> bool {
    path == "/api/v1/keys" || path.starts_with("/api/v1/keys/")
}

/// Paths only the operator reaches: what is server-wide, settings (providers and their keys,
/// MCP servers, skills) and the metrics.
pub(crate) fn is_operator_only(path: &str) -> bool {
    path == "/metrics" || path == "/api/v1/settings" || path.starts_with("/api/v1/settings/")
}

/// A 401 in the spec's error shape, saying which scheme to use.
pub(crate) fn unauthorized(message: &str) -> Response {
    let mut response = ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message).into_response();
    response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// The bearer token of `Authorization`, if any.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("bearer ")))
        .map(str::trim)
        .filter(|token| !token.is_empty())
}

/// What the server asks for when a request has no valid credential.
fn wanted(state: &AppState) -> &'static str {
    match (state.config.auth, &state.config.oidc) {
        (AuthMode::ApiKeys, Some(_)) => "sign in, or send Authorization: Bearer <API key or ID token>",
        (AuthMode::None, Some(_)) => "sign in, or send Authorization: Bearer <ID token>",
        _ => "an API key is required: send Authorization: Bearer <key>",
    }
}

/// A 401 for a request without a valid credential; with OIDC it says so (`Teamster-Login:
/// oidc`, for the web UI's Sign in button) and removes a session cookie that no longer works.
fn refused(state: &AppState, message: &str, clear_cookie: bool) -> Response {
    let mut response = unauthorized(message);
    if let Some(oidc) = &state.config.oidc {
        response.headers_mut().insert("teamster-login", HeaderValue::from_static("oidc"));
        if clear_cookie && let Some(clear) = oidc.clear_session() {
            response.headers_mut().append(header::SET_COOKIE, clear);
        }
    }
    response
}

/// The caller of an ID token, or the 401 (503 when the provider cannot be reached).
async fn by_id_token(state: &AppState, oidc: &OidcLogin, token: &str, from_cookie: bool) -> Result<(Caller, Credential), Response> {
    use teamster_service::oidc::OidcError;
    match oidc.relying_party.authenticate(token).await {
        Ok(identity) => Ok((identity.caller, Credential::IdToken { email: identity.email })),
        Err(OidcError::Unavailable(reason)) => {
            tracing::warn!(%reason, "cannot verify an ID token: the identity provider is unavailable");
            Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "idp_unavailable", "the identity provider cannot be reached to verify the ID token; try again shortly").into_response())
        }
        Err(error) => {
            let what = if from_cookie { "the session (id_token cookie) is not valid; sign in again" } else { "the bearer ID token is not valid" };
            Err(refused(state, &format!("{what}: {error}"), from_cookie))
        }
    }
}

/// The caller of a request's credential: `Ok(None)` when it carries none.
async fn caller_of(state: &AppState, method: &Method, headers: &HeaderMap) -> Result<Option<(Caller, Credential)>, Response> {
    let oidc = state.config.oidc.as_deref();
    if let Some(token) = bearer(headers) {
        if let Some(oidc) = oidc
            && !token.starts_with(API_KEY_PREFIX)
        {
            return by_id_token(state, oidc, token, false).await.map(Some);
        }
        if state.config.auth != AuthMode::ApiKeys {
            return Err(refused(state, "this server takes no API keys; sign in, or send an ID token", false));
        }
        return match state.service.authenticate(token).await {
            Ok(Some(caller)) => Ok(Some((caller, Credential::ApiKey))),
            Ok(None) => Err(refused(state, "the API key is not valid (unknown, malformed or revoked)", false)),
            Err(error) => Err(ApiError::from(error).into_response()),
        };
    }
    let Some(oidc) = oidc else { return Ok(None) };
    let Some(token) = cookie(headers, oidc.session_cookie_name()) else { return Ok(None) };
    if !oidc.allows_cookie_request(method, headers) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "csrf_refused",
            "a request with the session cookie that changes something must come from this server's own pages (Origin or Referer)",
        )
        .into_response());
    }
    by_id_token(state, oidc, &token, true).await.map(Some)
}

/// The middleware: puts the request's [`Caller`] in its extensions, or answers 401.
pub async fn authenticate(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let (caller, credential) = if state.config.auth == AuthMode::None && state.config.oidc.is_none() {
        (Caller::local(), Credential::Local)
    } else {
        let public = is_public(request.uri().path());
        match caller_of(&state, request.method(), request.headers()).await {
            Ok(Some(found)) => found,
            // A public page works without a caller, and with a session cookie that no longer
            // does (a bearer sent to it is still checked).
            Ok(None) => if public { return next.run(request).await } else { return refused(&state, wanted(&state), false) },
            Err(_) if public && bearer(request.headers()).is_none() => return next.run(request).await,
            Err(response) => return response,
        }
    };
    let path = request.uri().path();
    let allowed = if is_operator_only(path) {
        caller.require_operator()
    } else if is_admin_only(path) {
        caller.require_admin()
    } else {
        Ok(())
    };
    if let Err(refused) = allowed {
        return ApiError::from(refused).into_response();
    }
    request.extensions_mut().insert(caller);
    request.extensions_mut().insert(credential);
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_health_checks_and_the_oauth_pages_are_public() {
        for path in ["/healthz", "/readyz", "/api/v1/mcp-servers/oauth/callback", "/api/v1/mcp-servers/github/authorize", "/api/v1/openapi.json", "/api/v1/docs", "/api/v1/auth/login", "/api/v1/auth/callback", "/api/v1/auth/logout"] {
            assert!(is_public(path), "{path}");
        }
        for path in ["/api/v1/sessions", "/api/v1/auth/me", "/api/v1/mcp-servers/a/b/authorize", "/api/v1/mcp-servers//authorize", "/v1/agents/sessions"] {
            assert!(!is_public(path), "{path}");
        }
    }
}
