//! `GET /healthz`: the process is up and serving. `GET /readyz`: it can serve requests, because
//! its store answers (503 in the error shape when it does not). `GET /metrics`: its metrics in
//! the Prometheus text exposition format.
//!
//! The two checks say nothing but up or not, so they are public; the metrics add up every
//! tenant's activity and name the tools agents call, so with API keys they are for admins
//! (see `auth`).

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use serde_json::json;

use crate::AppState;
use crate::error::ApiResult;

/// The content type of the text exposition format.
const EXPOSITION_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(|| async { axum::Json(json!({"status": "ok"})) }))
        .route("/readyz", get(ready))
        .route("/metrics", get(metrics))
}

async fn ready(State(state): State<AppState>) -> ApiResult<axum::Json<serde_json::Value>> {
    state.service.ready().await?;
    Ok(axum::Json(json!({"status": "ready"})))
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, EXPOSITION_TYPE)], state.service.metrics())
}
