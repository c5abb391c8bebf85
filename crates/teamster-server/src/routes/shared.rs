//! Handler logic both dialects share: starting a turn (streamed or not) and subscribing.

use axum::Json;
use axum::response::{IntoResponse, Response};
use serde_json::value::RawValue;
use teamster_protocol::api::{CreateTurnRequest, Data, Page, SessionEventItem};
use teamster_service::{Caller, CreateTurn, ListOrder, SessionEventsQuery, TurnEventsQuery};

use crate::AppState;
use crate::error::ApiResult;
use crate::params::Params;
use crate::sse::sse_response;

/// Starts a turn. Everything is validated before the first byte: once the SSE response has
/// begun, failures arrive as `turn.done` with status `error`.
pub async fn create_turn(state: &AppState, session_id: &str, body: CreateTurnRequest, stream_by_default: bool) -> ApiResult<Response> {
    let caller = Caller::local();
    let request = CreateTurn { input: body.input.unwrap_or_default(), previous_turn_id: body.previous_turn_id };
    let (turn, log) = state.service.create_turn(&caller, session_id, request).await?;
    if body.stream.unwrap_or(stream_by_default) {
        Ok(sse_response(state.service.follow(log, 0), state.config.heartbeat, state.shutdown.clone()))
    } else {
        Ok(Json(Data { data: turn }).into_response())
    }
}

/// Streams a turn's events after `after`.
pub async fn subscribe(state: &AppState, session_id: &str, turn_id: &str, after: u64) -> ApiResult<Response> {
    let events = state.service.subscribe(&Caller::local(), session_id, turn_id, after).await?;
    Ok(sse_response(events, state.config.heartbeat, state.shutdown.clone()))
}

/// A page of a session's events, newest first. `include_running_tip` lists what a running
/// newest turn has persisted so far (native) instead of starting at its parent (gateway).
pub async fn session_events(
    state: &AppState,
    session_id: &str,
    params: &Params,
    include_running_tip: bool,
) -> ApiResult<Json<Page<SessionEventItem>>> {
    let limit = params.limit(100, 100)?;
    let query = SessionEventsQuery {
        limit,
        page_token: params.string("page_token"),
        last_turn_id: params.string("last_turn_id"),
        include_running_tip,
    };
    let (events, next) = state.service.list_session_events(&Caller::local(), session_id, query).await?;
    Ok(crate::routes::page(events, next, limit))
}

/// A page of a turn's content events. `max_limit` is also the default page size (25 on the
/// gateway, 100 natively); `require_terminal` refuses a running turn, as the gateway does.
pub async fn turn_events(
    state: &AppState,
    session_id: &str,
    turn_id: &str,
    params: &Params,
    max_limit: u32,
    require_terminal: bool,
) -> ApiResult<Json<Page<Box<RawValue>>>> {
    let limit = params.limit(max_limit, max_limit)?;
    let query = TurnEventsQuery {
        limit,
        order: params.order(ListOrder::Ascending)?,
        page_token: params.string("page_token"),
        require_terminal,
    };
    let (events, next) = state.service.list_turn_events(&Caller::local(), session_id, turn_id, query).await?;
    Ok(crate::routes::page(events, next, limit))
}
