//! `/api/v1/chat`: the AI SDK's chat endpoint for `useChat` (`DefaultChatTransport`). `POST`
//! starts a turn of the session whose id is the chat id (created with the named agent on first
//! use) and answers with the turn's UI message stream; `GET /chat/{id}/stream` replays the
//! running turn's stream from its start (`resumeStream()`), or 204 when none runs.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use teamster_protocol::input::{InputKind, TurnInput};
use teamster_protocol::{Turn, TurnState};
use teamster_service::{Caller, CreateTurn, Service, ServiceError, TurnListQuery};
use crate::routes::routes;

use crate::AppState;
use crate::auth::Authenticated;
use crate::data_stream::prior;
use crate::error::{ApiError, ApiResult};
use crate::extract::JsonBody;
use crate::params::Params;
use crate::routes::ApiRouter;
use crate::ui_stream::request::{self, ChatRequest, Trigger};
use crate::ui_stream::response::chat_response;

pub fn routes() -> ApiRouter {
    ApiRouter::new().routes(routes!(create)).routes(routes!(resume))
}

#[utoipa::path(post, path = "/chat", operation_id = "chat", tag = "Chat", summary = "Chat (AI SDK `useChat`)",
    params(("agent" = Option<String>, Query, description = "The agent of a new chat, when the body does not name it.")),
    request_body(content = Object, description = "`DefaultChatTransport`'s body: `id` (the chat, which is the session), `messages` (only the last counts), `trigger` (`submit-message` or `regenerate-message`), `messageId`, and `agent` and `keepRunning` (Teamster's)."),
    description = "Starts a turn of the session whose id is the chat id (made with the named agent on first use) and answers with the turn's AI SDK UI message stream. A client that goes away cancels the turn unless `keepRunning`.",
    responses((status = 200, description = "The AI SDK UI message stream (Server-Sent Events of UI message chunks, then `[DONE]`).", content_type = "text/event-stream", body = String)))]
async fn create(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    params: Params,
    JsonBody(body): JsonBody<Value>,
) -> ApiResult<Response> {
    let chat = request::parse(body, params.string("agent"))?;
    let latest = match state.service.catalog().get_session(&caller, &chat.id).await {
        Ok(_) => latest_turn(&state.service, &caller, &chat.id).await?,
        Err(ServiceError::NotFound(_)) => None,
        Err(other) => return Err(other.into()),
    };
    // Everything is checked before the session is made, so a refused request stores nothing.
    let turn = next_turn(&state.service, &caller, &chat, latest.as_ref()).await?;
    if latest.is_none() {
        let agent = chat.agent.as_deref().ok_or_else(|| {
            ApiError::bad_request("invalid_request", "a new chat needs its agent: the body's agent or the query's ?agent=").with_param("agent")
        })?;
        match state.service.catalog().create_session_with_id(&caller, &chat.id, agent).await {
            // A request for the same new chat made it meanwhile.
            Ok(_) | Err(ServiceError::Conflict { .. }) => {}
            Err(other) => return Err(other.into()),
        }
    }
    let started = state.service.create_turn(&caller, &chat.id, turn).await?;
    let events = started.events(0);
    let translator = prior::translator(&state.service, &caller, &chat.id, &started.turn).await?;
    Ok(chat_response(&state, &caller, &chat.id, events, translator, !chat.keep_running))
}

#[utoipa::path(get, path = "/chat/{chat_id}/stream", operation_id = "resumeChatStream", tag = "Chat", summary = "Resume a chat's stream",
    params(("chat_id" = String, Path, description = "The chat's id (its session's).")),
    responses((status = 200, description = "The running turn's UI message stream from its start.", content_type = "text/event-stream", body = String),
        (status = 204, description = "No turn is running.")))]
async fn resume(State(state): State<AppState>, Authenticated(caller): Authenticated, Path(chat_id): Path<String>) -> ApiResult<Response> {
    let latest = match latest_turn(&state.service, &caller, &chat_id).await {
        Err(ServiceError::NotFound(_)) => None,
        other => other?,
    };
    let Some(turn) = latest.filter(|turn| matches!(turn.state, TurnState::Running)) else {
        return Ok(StatusCode::NO_CONTENT.into_response());
    };
    let translator = prior::translator(&state.service, &caller, &chat_id, &turn).await?;
    let events = state.service.events().subscribe(&caller, &chat_id, &turn.id, 0).await?;
    Ok(chat_response(&state, &caller, &chat_id, events, translator, false))
}

async fn latest_turn(service: &Service, caller: &Caller, session_id: &str) -> Result<Option<Turn>, ServiceError> {
    let (turns, _) = service.list_turns(caller, session_id, TurnListQuery { limit: 1, page_token: None }).await?;
    Ok(turns.into_iter().next())
}

/// The turn a chat request asks for, after `latest`, the session's last turn (none for a new
/// chat). Only the last message counts: the server's history wins over the client's.
async fn next_turn(service: &Service, caller: &Caller, chat: &ChatRequest, latest: Option<&Turn>) -> ApiResult<CreateTurn> {
    match (&chat.trigger, request::role(&chat.last), latest) {
        (Trigger::Regenerate, _, None) => {
            Err(ApiError::bad_request("invalid_request", "the chat has no answer to regenerate").with_param("trigger"))
        }
        // The answer began with the last turn that a user message started; it runs again
        // from the turn before that one.
        (Trigger::Regenerate, _, Some(latest)) => {
            let mut start = latest.clone();
            while start.input.first().is_some_and(|item| item.kind() == InputKind::ToolDecisions)
                && let Some(previous) = &start.previous_turn_id
            {
                start = service.get_turn(caller, &chat.id, previous).await?;
            }
            let previous_turn_id = Some(start.previous_turn_id.clone().unwrap_or_else(|| "none".to_owned()));
            Ok(CreateTurn { input: start.input, previous_turn_id, at_tip: false, request_context: None })
        }
        (Trigger::Submit, "user", _) => {
            let content = request::user_content(&chat.last)?;
            Ok(CreateTurn { input: vec![TurnInput::Message { content }], previous_turn_id: None, at_tip: false, request_context: None })
        }
        (Trigger::Submit, "assistant", Some(latest)) => {
            let input = request::decisions(&chat.last, &latest.state)?;
            Ok(CreateTurn { input, previous_turn_id: Some(latest.id.clone()), at_tip: true, request_context: None })
        }
        (Trigger::Submit, _, _) => Err(ApiError::bad_request(
            "invalid_request",
            "the last message must be the user's, or the assistant's with answers to waiting calls",
        )
        .with_param("messages")),
    }
}
