//! `GET /healthz`: the process is up and serving. `GET /readyz`: it can serve requests, because
//! its store answers and its secret key opens the stored settings (503 in the error shape when
//! not). `GET /metrics`: its metrics in
//! the Prometheus text exposition format.
//!
//! The two checks say nothing but up or not, so they are public; the metrics add up every
//! tenant's activity and name the tools agents call, so with API keys they are the operator's
//! (see `auth`).

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use serde_json::json;
use crate::routes::routes;

use crate::AppState;
use crate::error::ApiResult;
use crate::routes::ApiRouter;

/// The content type of the text exposition format.
const EXPOSITION_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

pub fn routes() -> ApiRouter {
    ApiRouter::new().routes(routes!(live)).routes(routes!(ready)).routes(routes!(metrics))
}

#[utoipa::path(get, path = "/healthz", operation_id = "healthz", tag = "Health", summary = "Liveness",
    responses((status = 200, description = "The process is up.", body = Object, example = json!({"status": "ok"}))))]
async fn live() -> axum::Json<serde_json::Value> {
    axum::Json(json!({"status": "ok"}))
}

#[utoipa::path(get, path = "/readyz", operation_id = "readyz", tag = "Health", summary = "Readiness",
    responses((status = 200, description = "The store answers.", body = Object, example = json!({"status": "ready"})),
        (status = 503, description = "The store did not answer a one-row read within 2 s, or this server's secret key cannot open stored settings (the message says which; replicas sharing a database need the same key).", body = teamster_protocol::api::ErrorResponse)))]
async fn ready(State(state): State<AppState>) -> ApiResult<axum::Json<serde_json::Value>> {
    state.service.ready().await?;
    Ok(axum::Json(json!({"status": "ready"})))
}

#[utoipa::path(get, path = "/metrics", operation_id = "metrics", tag = "Health", summary = "Metrics",
    description = "Counters and histograms of turns, tokens, cost, tool calls, streams and the store, in the Prometheus text exposition format.",
    responses((status = 200, description = "The metrics.", content_type = "text/plain; version=0.0.4; charset=utf-8", body = String)))]
async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, EXPOSITION_TYPE)], state.service.metrics())
}
