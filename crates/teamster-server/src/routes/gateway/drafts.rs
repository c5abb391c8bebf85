//! E11–E14: draft sessions, which carry their own agent spec. Their turns, cancel and events
//! go through the session endpoints with the draft id.

use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Json, Router};
use teamster_protocol::api::{CreateDraftSessionRequest, Data, Page, Pagination, UpdateDraftSessionRequest};
use teamster_protocol::session::{Session, SessionKind};
use teamster_service::{Caller, SessionListQuery, SessionOrder};

use super::{descending, window};
use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::extract::JsonBody;
use crate::params::Params;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/agents/draft-sessions", get(list).post(create))
        .route("/agents/draft-sessions/{draft_session_id}", get(fetch).patch(update))
}

async fn create(State(state): State<AppState>, JsonBody(body): JsonBody<CreateDraftSessionRequest>) -> ApiResult<Json<Data<Session>>> {
    let session = state.service.create_draft_session(&Caller::local(), body.agent_spec, body.agent_name, None).await?;
    Ok(Json(Data { data: session }))
}

async fn list(State(state): State<AppState>, params: Params) -> ApiResult<Json<Page<Session>>> {
    let limit = params.limit(10, 100)?;
    let (created_from, created_to) = window(&params, true)?;
    let query = SessionListQuery {
        agent_name: params.string("agent_name"),
        kind: Some(SessionKind::Draft),
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

async fn draft(state: &AppState, id: &str) -> ApiResult<Session> {
    let session = state.service.get_session(&Caller::local(), id).await?;
    if session.kind != SessionKind::Draft {
        return Err(ApiError::new(axum::http::StatusCode::NOT_FOUND, "not_found", format!("draft session {id:?} not found")));
    }
    Ok(session)
}

async fn fetch(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult<Json<Data<Session>>> {
    Ok(Json(Data { data: draft(&state, &id).await? }))
}

async fn update(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<UpdateDraftSessionRequest>,
) -> ApiResult<Json<Data<Session>>> {
    draft(&state, &id).await?;
    Ok(Json(Data { data: state.service.update_session(&Caller::local(), &id, body.agent_spec, None).await? }))
}
