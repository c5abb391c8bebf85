//! `/api/v1/sessions/{id}/turns`: create (streamed by default), list, get, a turn's events,
//! and subscribe (`GET`, cursor in `after_sequence_number` or `Last-Event-ID`). Streams are in
//! the native format, or the AI SDK data stream with `?stream_format=data-stream`.

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::Json;
use serde_json::value::RawValue;
use teamster_protocol::Turn;
use teamster_protocol::api::{CreateTurnRequest, Data, Page};
use teamster_protocol::event::Event;
use teamster_service::{SandboxAddress, TurnListQuery};
use crate::routes::routes;

use crate::AppState;
use crate::auth::Authenticated;
use crate::error::{ApiError, ApiResult};
use crate::extract::JsonBody;
use crate::params::{Params, last_event_id};
use crate::routes::{ApiRouter, shared};

pub fn routes() -> ApiRouter {
    ApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(fetch))
        .routes(routes!(events))
        .routes(routes!(subscribe))
        .routes(routes!(download_sandbox_file))
}

#[utoipa::path(post, path = "/sessions/{session_id}/turns", operation_id = "createTurn", tag = "Agent Sessions", summary = "Create and execute a turn in a session", params(("session_id" = String, Path, description = "The session's id."), ("stream_format" = Option<String>, Query, description = "`native` (the default: turn events) or `data-stream` (the AI SDK data stream)."),
        ("include" = Option<String>, Query, description = "A comma-separated list of Teamster extension events a native stream also carries: `tool.progress` (a running tool's progress reports) and `shell.output` (what a running command prints, as it comes).")),
    request_body = CreateTurnRequest,
    description = "Starts a turn. With `stream` true (the default) the answer is the turn's events as Server-Sent Events; with `stream` false, the running turn at once. `previous_turn_id` chains to a turn (`auto`, the default: the session's last; `none`: a new root).",
    responses((status = 200, description = "When `stream` is false: the running turn. Otherwise the turn's events as Server-Sent Events.",
        content((Data<Turn> = "application/json"), (Event = "text/event-stream")))))]
async fn create(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    Path(session_id): Path<String>,
    params: Params,
    JsonBody(body): JsonBody<CreateTurnRequest>,
) -> ApiResult<Response> {
    shared::create_turn(&state, &caller, &session_id, body, true, params.stream_format()?).await
}

#[utoipa::path(get, path = "/sessions/{session_id}/turns", operation_id = "listTurns", tag = "Agent Sessions", summary = "List turns in a session", params(("session_id" = String, Path, description = "The session's id."),
        ("limit" = Option<u32>, Query, description = "Page size (at most 25, the default)."),
        ("page_token" = Option<String>, Query, description = "The `next_page_token` of the previous page.")),
    responses((status = 200, description = "A page of the session's turns, newest first.", body = Page<Turn>)))]
async fn list(State(state): State<AppState>, Authenticated(caller): Authenticated, Path(session_id): Path<String>, params: Params) -> ApiResult<Json<Page<Turn>>> {
    let limit = params.limit(25, 25)?;
    let query = TurnListQuery { limit, page_token: params.string("page_token") };
    let (turns, next) = state.service.list_turns(&caller, &session_id, query).await?;
    Ok(crate::routes::page(turns, next, limit))
}

#[utoipa::path(get, path = "/sessions/{session_id}/turns/{turn_id}", operation_id = "getTurn", tag = "Agent Sessions", summary = "Get a turn", params(("session_id" = String, Path, description = "The session's id."), ("turn_id" = String, Path, description = "The turn's id.")),
    responses((status = 200, description = "The turn.", body = Data<Turn>)))]
async fn fetch(State(state): State<AppState>, Authenticated(caller): Authenticated, Path((session_id, turn_id)): Path<(String, String)>) -> ApiResult<Json<Data<Turn>>> {
    Ok(Json(Data { data: state.service.get_turn(&caller, &session_id, &turn_id).await? }))
}

#[utoipa::path(get, path = "/sessions/{session_id}/turns/{turn_id}/events", operation_id = "listTurnEvents", tag = "Agent Sessions", summary = "List turn events", params(("session_id" = String, Path, description = "The session's id."), ("turn_id" = String, Path, description = "The turn's id."),
        ("limit" = Option<u32>, Query, description = "Page size (at most 100, the default)."),
        ("order" = Option<String>, Query, description = "`asc` (the default) or `desc`."),
        ("page_token" = Option<String>, Query, description = "The `next_page_token` of the previous page.")),
    responses((status = 200, description = "A page of the turn's content events (no `turn.created`, `turn.done` or deltas), model messages folded.", body = Page<Event>)))]
async fn events(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    Path((session_id, turn_id)): Path<(String, String)>,
    params: Params,
) -> ApiResult<Json<Page<Box<RawValue>>>> {
    shared::turn_events(&state, &caller, &session_id, &turn_id, &params, 100, false).await
}

#[utoipa::path(get, path = "/sessions/{session_id}/turns/{turn_id}/subscribe", operation_id = "subscribeTurn", tag = "Agent Sessions", summary = "Subscribe to a running turn", params(("session_id" = String, Path, description = "The session's id."), ("turn_id" = String, Path, description = "The turn's id."),
        ("after_sequence_number" = Option<u64>, Query, description = "Replay from after this event (the `Last-Event-ID` header wins)."), ("stream_format" = Option<String>, Query, description = "`native` (the default: turn events) or `data-stream` (the AI SDK data stream)."),
        ("include" = Option<String>, Query, description = "A comma-separated list of Teamster extension events a native stream also carries: `tool.progress` (a running tool's progress reports) and `shell.output` (what a running command prints, as it comes).")),
    responses((status = 200, description = "The turn's events as Server-Sent Events, from the cursor to `turn.done`.", content_type = "text/event-stream", body = Event)))]
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

#[utoipa::path(get, path = "/sessions/{session_id}/turns/{turn_id}/download-sandbox-file", operation_id = "downloadSandboxFile", tag = "Agent Sessions", summary = "Download a file from the turn sandbox",
    params(("session_id" = String, Path, description = "The session's id."), ("turn_id" = String, Path, description = "The turn's id."), ("path" = String, Query, description = "The file's path in the sandbox (relative to `/workspace`, or absolute under it or `/tmp`).")),
    responses((status = 200, description = "The file's bytes, as an attachment (the media type from its name)."),
        (status = 424, description = "The sandbox failed.", body = teamster_protocol::api::ErrorResponse)))]
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
