//! E6–E9: create a turn (`stream` decides SSE or JSON), get it, subscribe (`POST`, cursor
//! from `Last-Event-ID` first, then `after_sequence_number`), and list its events.

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::value::RawValue;
use teamster_protocol::Turn;
use teamster_protocol::api::{CreateTurnRequest, Data, Page, SubscribeRequest};

use crate::AppState;
use crate::auth::Authenticated;
use crate::error::ApiResult;
use crate::extract::JsonBody;
use crate::params::{Extensions, Params, StreamFormat, last_event_id};
use crate::routes::shared;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/agents/sessions/{session_id}/turns/{turn_id}", get(fetch))
        .route("/agents/sessions/{session_id}/turns/{turn_id}/subscribe", post(subscribe))
        .route("/agents/sessions/{session_id}/turns/{turn_id}/events", get(events))
}

pub async fn create(State(state): State<AppState>, Authenticated(caller): Authenticated, Path(session_id): Path<String>, JsonBody(body): JsonBody<CreateTurnRequest>) -> ApiResult<Response> {
    shared::create_turn(&state, &caller, &session_id, body, false, StreamFormat::Native(Extensions::ALL)).await
}

async fn fetch(State(state): State<AppState>, Authenticated(caller): Authenticated, Path((session_id, turn_id)): Path<(String, String)>) -> ApiResult<Json<Data<Turn>>> {
    Ok(Json(Data { data: state.service.get_turn(&caller, &session_id, &turn_id).await? }))
}

async fn subscribe(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    Path((session_id, turn_id)): Path<(String, String)>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<SubscribeRequest>,
) -> ApiResult<Response> {
    let after = match last_event_id(&headers)? {
        Some(after) => after,
        None => body.after_sequence_number.unwrap_or(0),
    };
    shared::subscribe(&state, &caller, &session_id, &turn_id, after, StreamFormat::Native(Extensions::ALL)).await
}

async fn events(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    Path((session_id, turn_id)): Path<(String, String)>,
    params: Params,
) -> ApiResult<Json<Page<Box<RawValue>>>> {
    shared::turn_events(&state, &caller, &session_id, &turn_id, &params, 25, true).await
}
