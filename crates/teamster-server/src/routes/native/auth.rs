//! `/api/v1/auth/*`: OIDC login for the browser (see `crate::oidc`).
//!
//! `login` sends the browser to the identity provider with a pending login in a cookie;
//! `callback` finishes it and sets the `id_token` session cookie (`__Host-id_token` on https),
//! then sends the browser to the `return_to` given at login (a same-origin path) or the app's
//! root. A failed login (the provider's `error`, an unknown or expired `state`, a failed code
//! exchange, a token that does not verify) sends the browser to the app's root with `?error=<code>` (the spec's `/?error=`),
//! which the web UI shows; the reason is logged. `logout` clears the cookie; `me` says who the
//! request is. Without OIDC, `login` and `callback` send the browser straight back into the app,
//! `logout` does nothing and `me` answers the caller (the local user without authentication).

use axum::Json;
use axum::extract::{Extension, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use teamster_service::Role;
use teamster_service::oidc::{Callback, LOGIN_TIMEOUT, safe_return_to};
use crate::routes::routes;

use crate::AppState;
use crate::auth::{Authenticated, Credential};
use crate::error::{ApiError, ApiResult};
use crate::oidc::pending_from;
use crate::params::Params;
use crate::routes::ApiRouter;

/// The longest callback query string read; authorization responses are far smaller.
const MAX_CALLBACK_QUERY_BYTES: usize = 16 * 1024;

pub fn routes() -> ApiRouter {
    ApiRouter::new().routes(routes!(login)).routes(routes!(callback)).routes(routes!(logout)).routes(routes!(me))
}

/// Session type and identity for the current request.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct GetMeResponse {
    /// Session kind: `default` when no valid OIDC session; `oidc-connected` after a successful
    /// browser login (or with a bearer ID token).
    #[serde(rename = "type")]
    #[schema(inline)]
    kind: SessionType,
    /// User email from the ID token when connected; `"default"` when anonymous (an API key's
    /// subject name for a key).
    email: String,
    /// Caller role: `operator`, `admin` (of its own tenant) or `member`.
    role: String,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
enum SessionType {
    Default,
    OidcConnected,
}

/// A 302 to `location` that sets `cookies`, never cached.
fn redirect(location: &str, cookies: impl IntoIterator<Item = Option<HeaderValue>>) -> Response {
    let mut response = (StatusCode::FOUND, [(header::CACHE_CONTROL, "no-store")]).into_response();
    if let Ok(location) = HeaderValue::from_str(location) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    for cookie in cookies.into_iter().flatten() {
        response.headers_mut().append(header::SET_COOKIE, cookie);
    }
    response
}

#[utoipa::path(get, path = "/auth/login", operation_id = "login", tag = "Auth", summary = "Start the login flow",
    description = "Redirects the browser to the configured identity provider. In local/single-binary mode, redirects straight back into the app — there is nothing to log into.",
    params(("return_to" = Option<String>, Query, description = "Path to return to after login. Must be a same-origin relative path; anything else falls back to \"/\".")),
    responses((status = 302, description = "Redirect to the IdP authorization endpoint.")))]
async fn login(State(state): State<AppState>, params: Params) -> Response {
    let return_to = params.string("return_to");
    let Some(oidc) = &state.config.oidc else {
        return redirect(&safe_return_to(return_to.as_deref()).unwrap_or_else(|| "/".to_owned()), []);
    };
    match oidc.relying_party.begin(return_to.as_deref()).await {
        Ok(start) => redirect(&start.authorize_url, [oidc.pending_cookie(&start.state, &start.pending, LOGIN_TIMEOUT.as_secs())]),
        Err(error) => {
            tracing::warn!(%error, "cannot begin an OIDC login");
            redirect(&oidc.app_error(&error.code()), [])
        }
    }
}

#[utoipa::path(get, path = "/auth/callback", operation_id = "authCallback", tag = "Auth", summary = "Login callback",
    description = "Browser-redirect target hit by the identity provider after login, never called directly by SDK consumers. In local/single-binary mode, redirects straight back into the app.",
    params(("code" = Option<String>, Query, description = "Authorization code, present when the user granted consent."),
        ("state" = String, Query, description = "Opaque token; correlates this callback to its pending login. Always present, success or error."),
        ("error" = Option<String>, Query, description = "Error code from the identity provider, present instead of `code` if the user denied consent."),
        ("error_description" = Option<String>, Query, description = "Human-readable error detail from the identity provider when `error` is set."),
        ("iss" = Option<String>, Query, description = "The identity provider's issuer (RFC 9207), checked when present.")),
    responses((status = 302, description = "Redirect back into the app on success, or to /?error=<reason> on failure.")))]
async fn callback(State(state): State<AppState>, headers: HeaderMap, RawQuery(query): RawQuery) -> ApiResult<Response> {
    let Some(oidc) = &state.config.oidc else {
        return Ok(redirect("/", []));
    };
    let query = query.unwrap_or_default();
    if query.len() > MAX_CALLBACK_QUERY_BYTES {
        return Err(ApiError::bad_request("invalid_request", "the callback's query string is too long").with_param("state"));
    }
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(&query)
        .map_err(|error| ApiError::bad_request("invalid_request", format!("invalid query string: {error}")))?;
    let mut answer = Callback::default();
    for (name, value) in pairs {
        let slot = match name.as_str() {
            "state" => &mut answer.state,
            "code" => &mut answer.code,
            "iss" => &mut answer.issuer,
            "error" => &mut answer.error,
            "error_description" => &mut answer.error_description,
            _ => continue,
        };
        slot.get_or_insert(value);
    }
    let state_value = answer.state.clone().unwrap_or_default();
    let pending = pending_from(&headers, &state_value);
    let clear_pending = pending.as_ref().and_then(|_| oidc.pending_cookie(&state_value, "", 0));
    match oidc.relying_party.finish(answer, pending.as_deref()).await {
        Ok(login) => {
            let identity = &login.identity;
            tracing::info!(subject = %identity.caller.subject.subject_id, tenant = %identity.caller.tenant, role = ?identity.caller.role, "signed in with OIDC");
            let location = login.return_to.unwrap_or_else(|| oidc.app_root());
            let session = oidc.session_cookie(&login.id_token, identity.lifetime().as_secs());
            Ok(redirect(&location, [session, clear_pending]))
        }
        Err(error) => {
            tracing::warn!(%error, "an OIDC login failed");
            Ok(redirect(&oidc.app_error(&error.code()), [clear_pending]))
        }
    }
}

#[utoipa::path(post, path = "/auth/logout", operation_id = "logout", tag = "Auth", summary = "Clear the local session",
    description = "Ends the local harness session only — does not hit the IdP end-session endpoint. A no-op in local/single-binary mode, since there is no real session to clear.",
    responses((status = 204, description = "Session cookie cleared.")))]
async fn logout(State(state): State<AppState>) -> Response {
    let mut response = StatusCode::NO_CONTENT.into_response();
    if let Some(clear) = state.config.oidc.as_ref().and_then(|oidc| oidc.clear_session()) {
        response.headers_mut().insert(header::SET_COOKIE, clear);
    }
    response
}

#[utoipa::path(get, path = "/auth/me", operation_id = "getMe", tag = "Auth", summary = "Current session",
    description = "Returns the authenticated caller identity. When auth is enabled this requires a valid `id_token` cookie or `Authorization: Bearer` ID token (401 otherwise; an API key answers as its subject). When auth is disabled, returns the default identity.",
    responses((status = 200, description = "Session type and identity for the current request.", body = GetMeResponse),
        (status = 401, description = "Auth is enabled and the request has no valid cookie or Bearer ID token.", body = teamster_protocol::api::ErrorResponse)))]
async fn me(Authenticated(caller): Authenticated, credential: Option<Extension<Credential>>) -> Json<GetMeResponse> {
    let role = match caller.role {
        Role::Operator => "operator",
        Role::Admin => "admin",
        Role::Member => "member",
    };
    let (kind, email) = match credential.map(|Extension(credential)| credential) {
        Some(Credential::IdToken { email }) => (SessionType::OidcConnected, email),
        Some(Credential::ApiKey) => (SessionType::Default, caller.subject.subject_slug.clone()),
        Some(Credential::Local) | None => (SessionType::Default, "default".to_owned()),
    };
    Json(GetMeResponse { kind, email, role: role.to_owned() })
}
