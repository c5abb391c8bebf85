//! Path prefixes: clients may put any tenant path in front of the API.

use axum::extract::Request;
use axum::http::Uri;

/// The path segments where the API begins; anything before the first one is a prefix.
const API_ROOTS: &[&str] = &["/api/v1/", "/v1/agents/", "/v1/x/agents/", "/v1/agents?", "/healthz"];

/// Rewrites `/tenant/v1/agents/sessions` to `/v1/agents/sessions` (and likewise for the
/// native API and the health check), keeping the query string.
pub fn strip_prefix(mut request: Request) -> Request {
    let path = request.uri().path();
    let start = API_ROOTS
        .iter()
        .filter_map(|root| {
            let root = root.trim_end_matches('?');
            path.find(root).filter(|at| *at > 0 && (path[*at..].len() == root.len() || root.ends_with('/') || path.as_bytes()[at + root.len()] == b'/'))
        })
        .min();
    if let Some(start) = start {
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
            ("/t1/other", "/t1/other"),
        ] {
            let request = Request::builder().uri(path).body(axum::body::Body::empty()).unwrap();
            assert_eq!(strip_prefix(request).uri().to_string(), expected, "{path}");
        }
    }
}
