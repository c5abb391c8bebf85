//! E11–E14: draft sessions, which carry their own agent spec. Their turns, cancel and events
//! go through the session endpoints with the draft id.

use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Json, Router};
use teamster_protocol::api::{CreateDraftSessionRequest, Data, Page, UpdateDraftSessionRequest};
use teamster_protocol::session::{Session, SessionKind};
use teamster_service::{Caller, SessionListQuery, SessionUpdate};

use super::{session_page, session_query};
use crate::AppState;
use crate::auth::Authenticated;
use crate::error::{ApiError, ApiResult};
use crate::extract::JsonBody;
use crate::params::Params;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/agents/draft-sessions", get(list).post(create))
        .route("/agents/draft-sessions/{draft_session_id}", get(fetch).patch(update))
}

async fn create(State(state): State<AppState>, Authenticated(caller): Authenticated, JsonBody(body): JsonBody<CreateDraftSessionRequest>) -> ApiResult<Json<Data<Session>>> {
    let session = state.service.catalog().create_draft_session(&caller, body.agent_spec, body.agent_name, None).await?;
    Ok(Json(Data { data: session }))
}

async fn list(State(state): State<AppState>, Authenticated(caller): Authenticated, params: Params) -> ApiResult<Json<Page<Session>>> {
    let query = SessionListQuery { kind: Some(SessionKind::Draft), ..session_query(&params, true)? };
    session_page(&state, &caller, query).await
}

async fn draft(state: &AppState, caller: &Caller, id: &str) -> ApiResult<Session> {
    let session = state.service.catalog().get_session(caller, id).await?;
    if session.kind != SessionKind::Draft {
        return Err(ApiError::new(axum::http::StatusCode::NOT_FOUND, "not_found", format!("draft session {id:?} not found")));
    }
    Ok(session)
}

async fn fetch(State(state): State<AppState>, Authenticated(caller): Authenticated, Path(id): Path<String>) -> ApiResult<Json<Data<Session>>> {
    Ok(Json(Data { data: draft(&state, &caller, &id).await? }))
}

async fn update(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<UpdateDraftSessionRequest>,
) -> ApiResult<Json<Data<Session>>> {
    draft(&state, &caller, &id).await?;
    Ok(Json(Data { data: state.service.catalog().update_session(&caller, &id, SessionUpdate { spec: body.agent_spec, ..SessionUpdate::default() }).await? }))
}
