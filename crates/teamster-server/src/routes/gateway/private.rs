//! E15–E17: the caller's owned sessions, session search, and sandbox file downloads.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use teamster_protocol::api::{Page, Pagination};
use teamster_protocol::session::{Session, SessionKind};
use teamster_service::{Caller, SessionListQuery, SessionOrder};

use super::{descending, window};
use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::params::Params;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/x/agents/owned-sessions", get(owned))
        .route("/x/agents/search-sessions", get(search))
        .route("/agents/sandbox/{sandbox_id}/file", get(sandbox_file))
}

async fn owned(State(state): State<AppState>, params: Params) -> ApiResult<Json<Page<Session>>> {
    let limit = params.limit(10, 100)?;
    let (created_from, created_to) = window(&params, true)?;
    let query = SessionListQuery {
        agent_name: params.string("agent_name"),
        created_from,
        created_to,
        order_by: SessionOrder::CreatedAt,
        descending: descending(&params)?,
        page_token: params.string("page_token"),
        limit,
        ..SessionListQuery::default()
    };
    let (sessions, next) = state.service.list_sessions(&Caller::local(), query).await?;
    Ok(Json(Page { data: sessions, pagination: Pagination { next_page_token: next, previous_page_token: None, limit } }))
}

async fn search(State(state): State<AppState>, params: Params) -> ApiResult<Json<Page<Session>>> {
    let limit = params.limit(10, 100)?;
    let (created_from, created_to) = window(&params, false)?;
    let kind = match params.string("session_type") {
        None => None,
        Some(text) => Some(SessionKind::parse(&text).ok_or_else(|| {
            ApiError::bad_request("invalid_request", "session_type must be \"session\" or \"session/draft\"").with_param("session_type")
        })?),
    };
    let query = SessionListQuery {
        agent_name: params.string("agent_name"),
        kind,
        session_id: params.string("session_id"),
        created_by_subject_id: params.string("created_by_subject_id"),
        created_from,
        created_to,
        order_by: SessionOrder::CreatedAt,
        descending: descending(&params)?,
        page_token: params.string("page_token"),
        limit,
        ..SessionListQuery::default()
    };
    let (sessions, next) = state.service.list_sessions(&Caller::local(), query).await?;
    Ok(Json(Page { data: sessions, pagination: Pagination { next_page_token: next, previous_page_token: None, limit } }))
}

/// No sandbox exists on this server, so no sandbox file can be found.
async fn sandbox_file(Path(sandbox_id): Path<String>) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("sandbox {sandbox_id:?} not found: this server runs no sandboxes"))
}
