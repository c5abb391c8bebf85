//! The embedded web UI through the real application without a socket, on a server that needs
//! API keys: the page and its assets answer without one, navigations to other non-API paths
//! get the page, and API paths (known or not) stay the API's.

mod common;

use axum::body::{Body, to_bytes};
use axum::http::{Method, Request, StatusCode, header};
use axum::response::Response;
use teamster_server::{AppState, AuthMode, ServerConfig, app};
use tower::ServiceExt;

async fn state() -> AppState {
    common::app_state(ServerConfig { auth: AuthMode::ApiKeys, ..ServerConfig::default() }).await
}

async fn get(state: &AppState, method: Method, path: &str, headers: &[(header::HeaderName, &str)]) -> Response {
    let mut request = Request::builder().method(method).uri(path);
    for (name, value) in headers {
        request = request.header(name, *value);
    }
    app(state.clone()).oneshot(request.body(Body::empty()).unwrap()).await.unwrap()
}

async fn text(response: Response) -> String {
    String::from_utf8(to_bytes(response.into_body(), usize::MAX).await.unwrap().to_vec()).unwrap()
}

fn header_of(response: &Response, name: header::HeaderName) -> &str {
    response.headers().get(name).map(|value| value.to_str().unwrap()).unwrap_or_default()
}

#[tokio::test]
async fn the_page_and_its_assets_are_public_and_cached_by_kind() {
    let state = state().await;
    let page = get(&state, Method::GET, "/", &[]).await;
    assert_eq!(page.status(), StatusCode::OK);
    assert_eq!(header_of(&page, header::CONTENT_TYPE), "text/html; charset=utf-8");
    assert_eq!(header_of(&page, header::CACHE_CONTROL), "no-cache");
    assert!(header_of(&page, header::CONTENT_SECURITY_POLICY).contains("frame-ancestors 'none'"));
    let etag = header_of(&page, header::ETAG).to_owned();
    let html = text(page).await;
    let script = html.split("src=\"./").nth(1).and_then(|rest| rest.split('"').next()).expect("the page names its script").to_owned();

    let asset = get(&state, Method::GET, &format!("/{script}"), &[]).await;
    assert_eq!(asset.status(), StatusCode::OK);
    assert_eq!(header_of(&asset, header::CONTENT_TYPE), "text/javascript; charset=utf-8");
    assert_eq!(header_of(&asset, header::CACHE_CONTROL), "public, max-age=31536000, immutable");
    // Under a tenant prefix too, and a known ETag is a 304.
    assert_eq!(get(&state, Method::GET, &format!("/t1/{script}"), &[]).await.status(), StatusCode::OK);
    let again = get(&state, Method::GET, "/", &[(header::IF_NONE_MATCH, &etag)]).await;
    assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(text(again).await, "");
}

#[tokio::test]
async fn navigations_get_the_page_and_api_paths_stay_the_api() {
    let state = state().await;
    let html = [(header::ACCEPT, "text/html,application/xhtml+xml")];
    let navigation = get(&state, Method::GET, "/some/where", &html).await;
    assert_eq!(navigation.status(), StatusCode::OK);
    assert!(text(navigation).await.contains("<div id=\"root\">"));
    // Without asking for HTML an unknown path is not the page; the API still wants its key.
    assert_eq!(get(&state, Method::GET, "/some/where", &[]).await.status(), StatusCode::UNAUTHORIZED);
    for path in ["/api/v1/agents", "/api/v1/nothing", "/v1/agents/sessions", "/metrics"] {
        let response = get(&state, Method::GET, path, &html).await;
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{path}");
        assert!(header_of(&response, header::CONTENT_TYPE).starts_with("application/json"), "{path}");
    }
    // Only GET and HEAD read the UI.
    assert_eq!(get(&state, Method::HEAD, "/", &[]).await.status(), StatusCode::OK);
    assert_eq!(get(&state, Method::POST, "/", &html).await.status(), StatusCode::UNAUTHORIZED);
}
