//! `GET /healthz`: the process is up and serving.

use axum::Router;
use axum::routing::get;
use serde_json::json;

use crate::AppState;

pub fn routes() -> Router<AppState> {
    Router::new().route("/healthz", get(|| async { axum::Json(json!({"status": "ok"})) }))
}
