//! `/api/v1/sessions/{id}/turns`: create (streamed by default), list, get, a turn's events,
//! and subscribe (`GET`, cursor in `after_sequence_number` or `Last-Event-ID`). Streams are in
//! the native format, or the AI SDK data stream with `?stream_format=data-stream`.

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::value::RawValue;
use teamster_protocol::Turn;
use teamster_protocol::api::{CreateTurnRequest, Data, Page};
use teamster_service::{SandboxAddress, TurnListQuery};

use crate::AppState;
use crate::auth::Authenticated;
use crate::error::{ApiError, ApiResult};
use crate::extract::JsonBody;
use crate::params::{Params, last_event_id};
use crate::routes::shared;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/sessions/{session_id}/turns", get(list).post(create))
        .route("/sessions/{session_id}/turns/{turn_id}", get(fetch))
        .route("/sessions/{session_id}/turns/{turn_id}/events", get(events))
        .route("/sessions/{session_id}/turns/{turn_id}/subscribe", get(subscribe))
        .route("/sessions/{session_id}/turns/{turn_id}/download-sandbox-file", get(download_sandbox_file))
}

async fn create(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    Path(session_id): Path<String>,
    params: Params,
    JsonBody(body): JsonBody<CreateTurnRequest>,
) -> ApiResult<Response> {
    shared::create_turn(&state, &caller, &session_id, body, true, params.stream_format()?).await
}

async fn list(State(state): State<AppState>, Authenticated(caller): Authenticated, Path(session_id): Path<String>, params: Params) -> ApiResult<Json<Page<Turn>>> {
    let limit = params.limit(25, 25)?;
    let query = TurnListQuery { limit, page_token: params.string("page_token") };
    let (turns, next) = state.service.list_turns(&caller, &session_id, query).await?;
    Ok(crate::routes::page(turns, next, limit))
}

async fn fetch(State(state): State<AppState>, Authenticated(caller): Authenticated, Path((session_id, turn_id)): Path<(String, String)>) -> ApiResult<Json<Data<Turn>>> {
    Ok(Json(Data { data: state.service.get_turn(&caller, &session_id, &turn_id).await? }))
}

async fn events(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    Path((session_id, turn_id)): Path<(String, String)>,
    params: Params,
) -> ApiResult<Json<Page<Box<RawValue>>>> {
    shared::turn_events(&state, &caller, &session_id, &turn_id, &params, 100, false).await
}

async fn subscribe(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    Path((session_id, turn_id)): Path<(String, String)>,
    headers: HeaderMap,
    params: Params,
) -> ApiResult<Response> {
    let format = params.stream_format()?;
    let after = match last_event_id(&headers)? {
        Some(after) => after,
        None => params.sequence("after_sequence_number")?.unwrap_or(0),
    };
    shared::subscribe(&state, &caller, &session_id, &turn_id, after, format).await
}

/// A file of the sandbox the turn ran in; a sandbox that fails is a failed dependency here (424).
async fn download_sandbox_file(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    Path((session_id, turn_id)): Path<(String, String)>,
    params: Params,
) -> ApiResult<Response> {
    let address = SandboxAddress::Turn { session_id: &session_id, turn_id: &turn_id };
    shared::download_sandbox_file(&state, &caller, address, &params).await.map_err(ApiError::upstream_as_failed_dependency)
}
