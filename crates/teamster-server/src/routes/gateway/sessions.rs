//! E1–E5 and E10: sessions of saved agents, cancel, turn listing and session events.

use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use teamster_protocol::Turn;
use teamster_protocol::api::{CreateGatewaySessionRequest, Data, Empty, Page, SessionEventItem};
use teamster_protocol::session::{Session, SessionKind};
use teamster_service::{SessionListQuery, TurnListQuery};

use super::{session_page, session_query};
use crate::AppState;
use crate::auth::Authenticated;
use crate::error::{ApiError, ApiResult};
use crate::extract::JsonBody;
use crate::params::Params;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/agents/sessions", get(list).post(create))
        .route("/agents/sessions/{session_id}", get(fetch))
        .route("/agents/sessions/{session_id}/cancel", post(cancel))
        .route("/agents/sessions/{session_id}/turns", get(list_turns).post(super::turns::create))
        .route("/agents/sessions/{session_id}/events", get(events))
}

async fn create(State(state): State<AppState>, Authenticated(caller): Authenticated, JsonBody(body): JsonBody<CreateGatewaySessionRequest>) -> ApiResult<Json<Data<Session>>> {
    Ok(Json(Data { data: state.service.catalog().create_session(&caller, &body.agent_name, body.title).await? }))
}

async fn list(State(state): State<AppState>, Authenticated(caller): Authenticated, params: Params) -> ApiResult<Json<Page<Session>>> {
    let agent_name = params
        .string("agent_name")
        .ok_or_else(|| ApiError::bad_request("invalid_request", "agent_name is required").with_param("agent_name"))?;
    state.service.catalog().get_agent_by_name(&caller, &agent_name).await?;
    let query = SessionListQuery { kind: Some(SessionKind::Saved), ..session_query(&params, true)? };
    session_page(&state, &caller, query).await
}

async fn fetch(State(state): State<AppState>, Authenticated(caller): Authenticated, Path(session_id): Path<String>) -> ApiResult<Json<Data<Session>>> {
    Ok(Json(Data { data: state.service.catalog().get_visible_session(&caller, &session_id).await? }))
}

async fn cancel(State(state): State<AppState>, Authenticated(caller): Authenticated, Path(session_id): Path<String>, JsonBody(_): JsonBody<Empty>) -> ApiResult<Json<Empty>> {
    state.service.cancel_session(&caller, &session_id).await?;
    Ok(Json(Empty {}))
}

async fn list_turns(State(state): State<AppState>, Authenticated(caller): Authenticated, Path(session_id): Path<String>, params: Params) -> ApiResult<Json<Page<Turn>>> {
    let limit = params.limit(10, 25)?;
    let query = TurnListQuery { limit, page_token: params.string("page_token") };
    let (turns, next) = state.service.list_turns(&caller, &session_id, query).await?;
    Ok(crate::routes::page(turns, next, limit))
}

async fn events(State(state): State<AppState>, Authenticated(caller): Authenticated, Path(session_id): Path<String>, params: Params) -> ApiResult<Json<Page<SessionEventItem>>> {
    crate::routes::shared::session_events(&state, &caller, &session_id, &params, false).await
}
