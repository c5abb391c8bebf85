//! Path prefixes: clients may put any tenant path in front of the API.

use axum::extract::Request;
use axum::http::Uri;

/// The path segments where the API begins; anything before the first one is a prefix.
const API_ROOTS: &[&str] = &["/api/v1/", "/v1/agents/", "/v1/x/agents/", "/healthz"];

/// Rewrites `/tenant/v1/agents/sessions` to `/v1/agents/sessions` (and likewise for the
/// native API and the health check), keeping the query string.
pub fn strip_prefix(mut request: Request) -> Request {
    let path = request.uri().path();
    let start = API_ROOTS
        .iter()
        .filter_map(|root| path.find(root))
        .min();
    // The earliest root wins, so `/api/v1/agents` is not mistaken for a prefixed
    // `/v1/agents`; at position 0 there is no prefix to strip.
    if let Some(start) = start.filter(|start| *start > 0) {
        let rest = match request.uri().query() {
            Some(query) => format!("{}?{query}", &path[start..]),
            None => path[start..].to_owned(),
        };
        if let Ok(uri) = rest.parse::<Uri>() {
            *request.uri_mut() = uri;
        }
    }
    request
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_tenant_prefixes() {
        for (path, expected) in [
            ("/t1/v1/agents/sessions?limit=10", "/v1/agents/sessions?limit=10"),
            ("/a/b/api/v1/sessions", "/api/v1/sessions"),
            ("/v1/agents/sessions", "/v1/agents/sessions"),
            ("/t1/v1/x/agents/owned-sessions", "/v1/x/agents/owned-sessions"),
            ("/t1/healthz", "/healthz"),
            ("/api/v1/agents", "/api/v1/agents"),
            ("/t1/api/v1/agents/a1", "/api/v1/agents/a1"),
            ("/t1/other", "/t1/other"),
        ] {
            let request = Request::builder().uri(path).body(axum::body::Body::empty()).unwrap();
            assert_eq!(strip_prefix(request).uri().to_string(), expected, "{path}");
        }
    }
}
