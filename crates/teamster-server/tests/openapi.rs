//! The served OpenAPI document (`GET /api/v1/openapi.json`) documents exactly the routes the
//! router serves, and every reference in it resolves.
//!
//! The served routes are read from the router itself, not from the document's source: axum
//! shows its route table only through `Debug`, which names every path it routes (the test fails
//! if that reading finds none of the paths it must find); which methods each path serves is asked
//! of the router, since a method it does not route at a path answers the router's own 405. The
//! gateway dialect (`/v1/...`) has its own spec and is left out.

mod common;

use std::collections::BTreeSet;
use std::convert::Infallible;

use axum::body::{Body, to_bytes};
use axum::http::{Method, Request, StatusCode};
use axum::response::Response;
use serde_json::Value;
use teamster_server::{AppState, ServerConfig, app, router};
use tower::ServiceExt;

/// The methods the API uses (`HEAD` comes with every `GET`).
const METHODS: [Method; 5] = [Method::GET, Method::POST, Method::PUT, Method::PATCH, Method::DELETE];

async fn state() -> AppState {
    common::app_state(ServerConfig::default()).await
}

/// Sends a request without a body to the application `app` made.
async fn send<App>(app: &App, method: Method, path: &str) -> (StatusCode, String)
where
    App: tower::Service<Request<Body>, Response = Response, Error = Infallible> + Clone,
{
    let request = Request::builder().method(method).uri(path).body(Body::empty()).unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    // An event stream (a live channel) goes on until its client leaves: its status is enough.
    let streams = response.headers().get("content-type").is_some_and(|value| value.as_bytes().starts_with(b"text/event-stream"));
    if streams {
        return (status, String::new());
    }
    let bytes = to_bytes(response.into_body(), usize::MAX).await.unwrap();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

async fn document(state: &AppState) -> Value {
    let (status, body) = send(&app(state.clone()), Method::GET, "/api/v1/openapi.json").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// Every path the router routes, from its `Debug` rendering: the quoted strings that are paths in
/// its path router (its fallback router routes every path to the 404).
fn served_paths(debug: &str) -> BTreeSet<String> {
    let (path_router, _) = debug.split_once("fallback_router").expect("the router's Debug rendering names its fallback router");
    path_router
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|text| text.starts_with('/') && !text.contains("__private__"))
        .map(str::to_owned)
        .collect()
}

/// Whether the router routes `method` at `path`: it answers its own 405 when it does not.
async fn serves<App>(app: &App, method: &Method, path: &str) -> bool
where
    App: tower::Service<Request<Body>, Response = Response, Error = Infallible> + Clone,
{
    let concrete: String = path
        .split('/')
        .map(|segment| if segment.starts_with('{') { "x" } else { segment })
        .collect::<Vec<_>>()
        .join("/");
    let (status, body) = send(app, method.clone(), &concrete).await;
    assert!(!body.contains("no such endpoint"), "{method} {concrete} fell through to the router's 404: {body}");
    status != StatusCode::METHOD_NOT_ALLOWED
}

#[tokio::test]
async fn the_document_covers_exactly_the_routes_the_router_serves() {
    let state = state().await;
    let document = document(&state).await;
    assert_eq!(document["openapi"], "3.1.0");
    let mut documented = BTreeSet::new();
    let mut operation_ids = BTreeSet::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            documented.insert((method.to_uppercase(), path.clone()));
            let id = operation["operationId"].as_str().unwrap_or_else(|| panic!("{method} {path} has no operationId"));
            assert!(operation_ids.insert(id.to_owned()), "operationId {id} twice");
        }
    }

    let paths = served_paths(&format!("{:?}", router(state.clone())));
    for must in ["/healthz", "/api/v1/agents", "/api/v1/sessions/{session_id}/turns", "/v1/agents/sessions"] {
        assert!(paths.contains(must), "the router's Debug rendering no longer names its paths ({must} missing): {paths:?}");
    }
    let mut served = BTreeSet::new();
    let app = app(state.clone());
    for path in paths.iter().filter(|path| !path.starts_with("/v1/")) {
        for method in &METHODS {
            if serves(&app, method, path).await {
                served.insert((method.to_string(), path.clone()));
            }
        }
    }

    let undocumented: Vec<_> = served.difference(&documented).collect();
    let unserved: Vec<_> = documented.difference(&served).collect();
    assert!(
        undocumented.is_empty() && unserved.is_empty(),
        "served but not documented: {undocumented:?}\ndocumented but not served: {unserved:?}"
    );
    assert!(served.len() > 50, "too few routes found: {served:?}");
}

#[tokio::test]
async fn every_reference_in_the_document_resolves() {
    let state = state().await;
    let document = document(&state).await;
    let schemas = document["components"]["schemas"].as_object().unwrap();
    let mut references = BTreeSet::new();
    collect_references(&document, &mut references);
    let dangling: Vec<_> = references
        .iter()
        .filter(|reference| reference.strip_prefix("#/components/schemas/").is_none_or(|name| !schemas.contains_key(name)))
        .collect();
    assert!(dangling.is_empty(), "references to nothing: {dangling:?}");
    for name in ["RequestErrorResponse", "Event", "Session", "Turn", "Agent", "TokenPagination"] {
        assert!(schemas.contains_key(name), "no schema {name}");
    }
}

fn collect_references(value: &Value, references: &mut BTreeSet<String>) {
    match value {
        Value::Object(object) => {
            if let Some(Value::String(reference)) = object.get("$ref") {
                references.insert(reference.clone());
            }
            object.values().for_each(|value| collect_references(value, references));
        }
        Value::Array(items) => items.iter().for_each(|value| collect_references(value, references)),
        _ => {}
    }
}

#[tokio::test]
async fn the_docs_page_is_served_self_contained() {
    let state = state().await;
    let request = Request::builder().uri("/api/v1/docs").body(Body::empty()).unwrap();
    let response = app(state.clone()).oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
    let policy = response.headers()["content-security-policy"].to_str().unwrap().to_owned();
    assert!(policy.contains("default-src 'none'") && policy.contains("connect-src 'self'"), "{policy}");
    let page = String::from_utf8(to_bytes(response.into_body(), usize::MAX).await.unwrap().to_vec()).unwrap();
    assert!(page.contains("fetch(\"openapi.json\""));
    for outside in ["http://", "https://", "//cdn", "src=\"/"] {
        assert!(!page.contains(outside), "the page reaches outside itself: {outside}");
    }
}
