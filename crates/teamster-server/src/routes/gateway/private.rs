//! E15–E17: the caller's owned sessions, session search, and sandbox file downloads.

use axum::extract::{Path, State};
use axum::response::Response;
use axum::routing::get;
use axum::{Json, Router};
use teamster_protocol::api::{Page};
use teamster_protocol::session::{Session, SessionKind};
use teamster_service::{SandboxAddress, SessionListQuery, SessionScope};

use super::{session_page, session_query};
use crate::AppState;
use crate::auth::Authenticated;
use crate::error::{ApiError, ApiResult};
use crate::params::Params;
use crate::routes::shared;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/x/agents/owned-sessions", get(owned))
        .route("/x/agents/search-sessions", get(search))
        .route("/agents/sandbox/{sandbox_id}/file", get(sandbox_file))
}

async fn owned(State(state): State<AppState>, Authenticated(caller): Authenticated, params: Params) -> ApiResult<Json<Page<Session>>> {
    session_page(&state, &caller, session_query(&params, true)?).await
}

async fn search(State(state): State<AppState>, Authenticated(caller): Authenticated, params: Params) -> ApiResult<Json<Page<Session>>> {
    let kind = match params.string("session_type") {
        None => None,
        Some(text) => Some(SessionKind::parse(&text).ok_or_else(|| {
            ApiError::bad_request("invalid_request", "session_type must be \"session\" or \"session/draft\"").with_param("session_type")
        })?),
    };
    let query = SessionListQuery {
        scope: SessionScope::Visible,
        kind,
        session_id: params.string("session_id"),
        created_by_subject_id: params.string("created_by_subject_id"),
        ..session_query(&params, false)?
    };
    session_page(&state, &caller, query).await
}

/// E17: a file of a sandbox, by the id `sandbox.created` gave.
async fn sandbox_file(State(state): State<AppState>, Authenticated(caller): Authenticated, Path(sandbox_id): Path<String>, params: Params) -> ApiResult<Response> {
    shared::download_sandbox_file(&state, &caller, SandboxAddress::Sandbox(&sandbox_id), &params).await
}
