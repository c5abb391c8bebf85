//! Who may talk to this server from a browser: the `Host` allow-list (against DNS rebinding),
//! the `Origin` check with its CORS policy (against cross-site requests), and preflights.
//!
//! A web page on another site can make a browser send requests here, and DNS rebinding can
//! make it send them to a name that resolves to this server. So:
//! - a request whose `Host` is not one of the allowed names is refused (421);
//! - a request whose `Origin` is neither this server's own origin nor an allowed one is
//!   refused (403), and so is one that a browser marks `Sec-Fetch-Site: cross-site` or
//!   `same-site` without such an origin (an `<img>` or a form without `Origin`), except the
//!   top-level navigations the MCP OAuth flow needs (its authorize and callback pages);
//! - allowed origins get CORS answers: preflights, and `Access-Control-Allow-Origin` on
//!   responses.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::AppState;
use crate::error::ApiError;

/// Which `Host` names and cross-origin callers this server accepts.
#[derive(Clone, Debug, Default)]
pub struct BrowserPolicy {
    /// Host names (lowercase, without port; IPv6 in brackets) requests may name; empty or
    /// `*` accepts any.
    pub allowed_hosts: Vec<String>,
    /// Origins (`scheme://host[:port]`, lowercase) whose browser pages may call the API.
    pub allowed_origins: Vec<String>,
}

/// The host names every server accepts: its loopback names.
pub const LOOPBACK_HOSTS: &[&str] = &["localhost", "127.0.0.1", "[::1]"];

/// Paths a cross-site browser navigation may open: the MCP OAuth pages (the authorization
/// server sends the browser back to the callback; an `auth_url` opens the authorize page) and
/// the OIDC login pages (the identity provider sends the browser back to the callback, which
/// sends it on into the app).
fn is_oauth_navigation(method: &Method, path: &str) -> bool {
    method == Method::GET
        && (matches!(path, "/api/v1/mcp-servers/oauth/callback" | "/api/v1/auth/login" | "/api/v1/auth/callback")
            || path.strip_prefix("/api/v1/mcp-servers/").is_some_and(|rest| {
                rest.strip_suffix("/authorize").is_some_and(|name| !name.is_empty() && !name.contains('/'))
            }))
}

/// Whether a request is a browser opening one of the web UI's pages (a top-level `GET`
/// navigation outside the APIs): a link from elsewhere, or the OIDC callback sending the browser
/// on into the app. The page itself does nothing; its API calls are checked as any others.
fn is_page_navigation(method: &Method, path: &str, headers: &HeaderMap) -> bool {
    let header = |name: &str| headers.get(name).and_then(|value| value.to_str().ok()).map(str::to_ascii_lowercase);
    method == Method::GET
        && header("sec-fetch-mode").as_deref() == Some("navigate")
        && header("sec-fetch-dest").as_deref() == Some("document")
        && !["/api", "/v1"].iter().any(|root| path == *root || path.starts_with(&format!("{root}/")))
        && !matches!(path, "/healthz" | "/readyz" | "/metrics")
}

/// The middleware: checks `Host` and `Origin`, answers preflights, adds CORS headers.
pub async fn guard(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let policy = &state.config.browser;
    let headers = request.headers();
    let authority = request_authority(&request);
    let host = authority.as_deref().map(host_of);
    if let Some(host) = host
        && !host_allowed(policy, host)
    {
        return ApiError::new(
            StatusCode::MISDIRECTED_REQUEST,
            "host_not_allowed",
            "this server does not answer to that Host name; its operator can allow it with --allowed-hosts",
        )
        .into_response();
    }
    let origin = headers.get(header::ORIGIN).and_then(|value| value.to_str().ok()).map(str::to_ascii_lowercase);
    let allowed_origin = match &origin {
        None => None,
        Some(origin) if authority.as_deref().is_some_and(|authority| same_origin(origin, authority)) => None,
        Some(origin) if policy.allowed_origins.iter().any(|allowed| allowed == origin) => Some(origin.clone()),
        Some(_) if is_oauth_navigation(request.method(), request.uri().path()) => None,
        Some(_) => return cross_origin_refused(),
    };
    if origin.is_none()
        && cross_site_fetch(headers)
        && !is_oauth_navigation(request.method(), request.uri().path())
        && !is_page_navigation(request.method(), request.uri().path(), headers)
    {
        return cross_origin_refused();
    }
    let Some(allowed_origin) = allowed_origin else {
        return next.run(request).await;
    };
    if request.method() == Method::OPTIONS && headers.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD) {
        return preflight(&allowed_origin, headers);
    }
    let mut response = next.run(request).await;
    add_cors_headers(response.headers_mut(), &allowed_origin);
    response
}

fn cross_origin_refused() -> Response {
    ApiError::new(
        StatusCode::FORBIDDEN,
        "origin_not_allowed",
        "cross-origin requests from this origin are not allowed; the server's operator can allow an origin with --allowed-origins",
    )
    .into_response()
}

/// The authority (`host[:port]`, lowercase) the request names in `Host` (or its URI); `None`
/// when it names none.
fn request_authority(request: &Request) -> Option<String> {
    let authority = match request.headers().get(header::HOST) {
        Some(value) => value.to_str().ok()?,
        None => request.uri().authority()?.as_str(),
    };
    Some(authority.to_ascii_lowercase())
}

/// `host` of `host[:port]` (with `[v6]` kept in brackets).
fn host_of(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority.split_inclusive(']').next().unwrap_or(authority);
    }
    authority.split(':').next().unwrap_or(authority)
}

fn host_allowed(policy: &BrowserPolicy, host: &str) -> bool {
    policy.allowed_hosts.is_empty()
        || LOOPBACK_HOSTS.contains(&host)
        || policy.allowed_hosts.iter().any(|allowed| allowed == "*" || allowed == host)
}

/// Whether `origin` (`scheme://authority`) is the origin of a request to `authority`: the same
/// host and port (a scheme's default port may be left out on either side). Another port is
/// another origin: a page served by another program on this host is not this server.
fn same_origin(origin: &str, authority: &str) -> bool {
    let Some((scheme, origin_authority)) = origin.split_once("://") else { return false };
    let default_port = match scheme {
        "http" => ":80",
        "https" => ":443",
        _ => return false,
    };
    let normal = |authority: &str| authority.strip_suffix(default_port).unwrap_or(authority).to_owned();
    normal(origin_authority) == normal(authority)
}

/// Whether a browser says the request comes from another site or origin (`Sec-Fetch-Site`).
fn cross_site_fetch(headers: &HeaderMap) -> bool {
    headers
        .get("sec-fetch-site")
        .and_then(|value| value.to_str().ok())
        .is_some_and(|site| site.eq_ignore_ascii_case("cross-site") || site.eq_ignore_ascii_case("same-site"))
}

fn preflight(origin: &str, headers: &HeaderMap) -> Response {
    let mut response = StatusCode::NO_CONTENT.into_response();
    let response_headers = response.headers_mut();
    add_cors_headers(response_headers, origin);
    response_headers.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST, PUT, PATCH, DELETE"),
    );
    let requested = headers.get(header::ACCESS_CONTROL_REQUEST_HEADERS).cloned();
    response_headers.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        requested.unwrap_or_else(|| HeaderValue::from_static("authorization, content-type, last-event-id")),
    );
    response_headers.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("600"));
    response
}

fn add_cors_headers(headers: &mut HeaderMap, origin: &str) {
    if let Ok(value) = HeaderValue::from_str(origin) {
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, value);
        headers.append(header::VARY, HeaderValue::from_static("Origin"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_and_origins_are_compared_by_name() {
        assert_eq!(host_of("127.0.0.1:8790"), "127.0.0.1");
        assert_eq!(host_of("[::1]:8790"), "[::1]");
        assert_eq!(host_of("localhost"), "localhost");
        let policy = BrowserPolicy { allowed_hosts: vec!["agents.example.com".into()], allowed_origins: vec![] };
        assert!(host_allowed(&policy, "localhost") && host_allowed(&policy, "agents.example.com"));
        assert!(!host_allowed(&policy, "evil.example"));
        assert!(same_origin("http://127.0.0.1:8790", "127.0.0.1:8790"));
        assert!(same_origin("https://agents.example.com", "agents.example.com:443"));
        assert!(!same_origin("http://127.0.0.1:3000", "127.0.0.1:8790"));
        assert!(!same_origin("http://evil.example", "127.0.0.1:8790"));
        assert!(!same_origin("null", "127.0.0.1:8790"));
        assert!(is_oauth_navigation(&Method::GET, "/api/v1/mcp-servers/github/authorize"));
        assert!(is_oauth_navigation(&Method::GET, "/api/v1/mcp-servers/oauth/callback"));
        assert!(!is_oauth_navigation(&Method::GET, "/api/v1/mcp-servers/github/tools"));
        assert!(!is_oauth_navigation(&Method::DELETE, "/api/v1/mcp-servers/github/authorize"));
        assert!(is_oauth_navigation(&Method::GET, "/api/v1/auth/callback"));
        let mut navigation = HeaderMap::new();
        navigation.insert("sec-fetch-mode", HeaderValue::from_static("navigate"));
        navigation.insert("sec-fetch-dest", HeaderValue::from_static("document"));
        assert!(is_page_navigation(&Method::GET, "/", &navigation));
        assert!(!is_page_navigation(&Method::GET, "/api/v1/sessions", &navigation));
        assert!(!is_page_navigation(&Method::POST, "/", &navigation));
        assert!(!is_page_navigation(&Method::GET, "/", &HeaderMap::new()));
    }
}
