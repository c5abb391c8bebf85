//! `GET /api/v1/sessions/{id}/live` (and `/display`), a session's live channel, and
//! `GET /api/v1/live`, the caller's: a live channel (`teamster_service::Live`) as
//! Server-Sent Events: each event's name on `event:`, its JSON on one `data:` line, and `: ping`
//! comments while it is quiet. A session's opens with `display_state_changed` carrying the whole
//! display state; a reconnect opens a fresh channel (there is no `Last-Event-ID` to resume from).

use axum::extract::{Path, State};
use axum::body::Bytes;
use axum::response::Response;
use futures_util::StreamExt;
use axum::Json;
use teamster_live::{DisplayState, LiveEvent, SharedEvent};
use teamster_protocol::api::Data;
use teamster_channels::LiveChannel;

use crate::AppState;
use crate::auth::Authenticated;
use crate::error::ApiResult;
use crate::params::Params;
use crate::routes::{ApiRouter, routes};
use crate::sse::framed_response;

pub fn routes() -> ApiRouter {
    ApiRouter::new().routes(routes!(live)).routes(routes!(display)).routes(routes!(caller_live))
}

#[utoipa::path(get, path = "/live", operation_id = "getLive", tag = "Agent Sessions", summary = "The caller's live channel",
    description = "Server-Sent Events about the caller's own sessions, the ones `GET /sessions` lists: `thread_created` (with the session), `thread_changed` (its title) and `thread_deleted`, as any client makes them (those of another replica within a second).",
    responses((status = 200, description = "The channel's events.", content_type = "text/event-stream", body = LiveEvent)))]
/// The caller's live channel.
async fn caller_live(State(state): State<AppState>, Authenticated(caller): Authenticated, params: Params) -> ApiResult<Response> {
    params.only(&[])?;
    let channel = state.channels.open_caller(&caller).await?;
    // A comment first: the channel is open (its first event may be long in coming).
    let opened = futures_util::stream::once(std::future::ready(Bytes::from_static(b": live\n\n")));
    Ok(framed_response(opened.chain(frames(channel)), &state))
}

#[utoipa::path(get, path = "/sessions/{session_id}/display", operation_id = "getSessionDisplay", tag = "Agent Sessions", summary = "The session's display state",
    params(("session_id" = String, Path, description = "The session's id.")),
    description = "What the live channel would open with now: the session's title, mode, model, state, tasks, plans, follow-ups and usage, and its last turn as a UI shows it.",
    responses((status = 200, description = "The display state.", body = Data<DisplayState>)))]
/// A session's display state.
async fn display(State(state): State<AppState>, Authenticated(caller): Authenticated, Path(session_id): Path<String>, params: Params) -> ApiResult<Json<Data<DisplayState>>> {
    params.only(&[])?;
    Ok(Json(Data { data: state.channels.display(&caller, &session_id).await? }))
}

#[utoipa::path(get, path = "/sessions/{session_id}/live", operation_id = "getSessionLive", tag = "Agent Sessions", summary = "The session's live channel",
    params(("session_id" = String, Path, description = "The session's id.")),
    description = "Server-Sent Events of the control layer's vocabulary: `display_state_changed` first (the whole display state), then `agent_start`, `message_update`, `tool_approval_required`, `subagent_start`, `mode_changed`, `follow_up_queued`, `thread_changed`, ... each as it happens, with the display state again after them (at most one per 50 ms while text streams). Each message's `event:` is the event's `type`; its `data:` the event's JSON.",
    responses((status = 200, description = "The channel's events.", content_type = "text/event-stream", body = LiveEvent)))]
/// A session's live channel.
async fn live(State(state): State<AppState>, Authenticated(caller): Authenticated, Path(session_id): Path<String>, params: Params) -> ApiResult<Response> {
    params.only(&[])?;
    let channel = state.channels.open(&caller, &session_id).await?;
    Ok(framed_response(frames(channel), &state))
}

/// A channel's events framed, those ready together in one piece.
fn frames(channel: LiveChannel) -> impl futures_util::Stream<Item = Bytes> + Send + Unpin + 'static {
    channel.ready_chunks(64).map(|events| {
        let mut frames = String::new();
        for event in &events {
            push_frame(&mut frames, event);
        }
        Bytes::from(frames)
    })
}

/// One event as an SSE message: its name, then its JSON on one line (made once for all the
/// channels that send it).
fn push_frame(frames: &mut String, event: &SharedEvent) {
    frames.push_str("event: ");
    frames.push_str(event.event().name());
    frames.push_str("\ndata: ");
    frames.push_str(event.json());
    frames.push_str("\n\n");
}
