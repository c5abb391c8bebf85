//! `/api/v1/sessions`: create (from a saved agent by name, or with an inline spec), list,
//! get, patch, delete, cancel, the session's events and its task list.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use teamster_protocol::api::{CloneSessionRequest, CreateSessionRequest, Data, Empty, Page, SessionEventItem, UpdateSessionRequest};
use teamster_protocol::control::{Grant, Plan, QueueMessageRequest, QueuedMessage, TaskList};
use teamster_protocol::session::Session;
use teamster_service::{CloneSession, SessionListQuery, SessionOrder, SessionUpdate};

use crate::AppState;
use crate::auth::Authenticated;
use crate::error::{ApiError, ApiResult};
use crate::extract::JsonBody;
use crate::params::Params;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/sessions", get(list).post(create))
        .route("/sessions/{session_id}", get(fetch).patch(update).delete(remove))
        .route("/sessions/{session_id}/cancel", post(cancel))
        .route("/sessions/{session_id}/events", get(events))
        .route("/sessions/{session_id}/tasks", get(tasks))
        .route("/sessions/{session_id}/plans", get(plans))
        .route("/sessions/{session_id}/grants", get(grants))
        .route("/sessions/{session_id}/state", get(session_state))
        .route("/sessions/{session_id}/clone", post(clone))
        .route("/sessions/{session_id}/follow-ups", get(follow_ups).post(queue_follow_up))
        .route("/sessions/{session_id}/steer", post(steer))
        .route("/sessions/{session_id}/follow-ups/{follow_up_id}", delete(cancel_follow_up))
        .route("/sessions/{session_id}/grants/{grant_id}", delete(revoke_grant))
}

async fn create(State(state): State<AppState>, Authenticated(caller): Authenticated, JsonBody(body): JsonBody<CreateSessionRequest>) -> ApiResult<(StatusCode, Json<Data<Session>>)> {
    let session = match (body.agent.name, body.agent.spec) {
        (Some(name), None) => state.service.catalog().create_session(&caller, &name, body.title).await?,
        (None, Some(spec)) => state.service.catalog().create_draft_session(&caller, spec, None, body.title).await?,
        _ => {
            return Err(ApiError::bad_request("invalid_request", "agent must be either { \"name\": ... } or { \"spec\": ... }")
                .with_param("agent"));
        }
    };
    Ok((StatusCode::CREATED, Json(Data { data: session })))
}

async fn list(State(state): State<AppState>, Authenticated(caller): Authenticated, params: Params) -> ApiResult<Json<Page<Session>>> {
    let limit = params.limit(25, 25)?;
    let query = SessionListQuery {
        agent_id: params.string("agent_id"),
        created_from: params.timestamp("start_timestamp")?,
        created_to: params.timestamp("end_timestamp")?,
        order_by: SessionOrder::UpdatedAt,
        descending: params.order(teamster_service::ListOrder::Descending)? == teamster_service::ListOrder::Descending,
        page_token: params.string("page_token"),
        limit,
        ..SessionListQuery::default()
    };
    let (sessions, next) = state.service.catalog().list_sessions(&caller, query).await?;
    Ok(crate::routes::page(sessions, next, limit))
}

async fn fetch(State(state): State<AppState>, Authenticated(caller): Authenticated, Path(session_id): Path<String>) -> ApiResult<Json<Data<Session>>> {
    Ok(Json(Data { data: state.service.catalog().get_session(&caller, &session_id).await? }))
}

async fn update(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    Path(session_id): Path<String>,
    JsonBody(body): JsonBody<UpdateSessionRequest>,
) -> ApiResult<Json<Data<Session>>> {
    let spec = match body.agent {
        None => None,
        Some(agent) if agent.name.is_none() && agent.spec.is_some() => agent.spec,
        Some(_) => {
            return Err(ApiError::bad_request("invalid_request", "agent must be { \"spec\": ... }").with_param("agent"));
        }
    };
    Ok(Json(Data { data: state.service.catalog().update_session(&caller, &session_id, SessionUpdate { spec, title: body.title, mode: body.mode, model: body.model, permissions: body.permissions, state: body.state }).await? }))
}

/// The session's task list (agents with `config.tasks` keep one).
async fn tasks(State(state): State<AppState>, Authenticated(caller): Authenticated, Path(session_id): Path<String>) -> ApiResult<Json<Data<TaskList>>> {
    Ok(Json(Data { data: state.service.session_tasks(&caller, &session_id).await? }))
}

/// The plans the session's agent submitted (agents with modes that lead to others).
async fn plans(State(state): State<AppState>, Authenticated(caller): Authenticated, Path(session_id): Path<String>) -> ApiResult<Json<Data<Vec<Plan>>>> {
    Ok(Json(Data { data: state.service.session_plans(&caller, &session_id).await? }))
}

/// A new session with a copy of this one's history, up to a turn.
async fn clone(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    Path(session_id): Path<String>,
    JsonBody(body): JsonBody<CloneSessionRequest>,
) -> ApiResult<(StatusCode, Json<Data<Session>>)> {
    let request = CloneSession { title: body.title, turn_id: body.turn_id };
    let clone = state.service.clone_session(&caller, &session_id, request).await?;
    Ok((StatusCode::CREATED, Json(Data { data: clone })))
}

/// The session state (agents with a `state_schema`).
async fn session_state(State(state): State<AppState>, Authenticated(caller): Authenticated, Path(session_id): Path<String>) -> ApiResult<Json<Data<serde_json::Value>>> {
    Ok(Json(Data { data: state.service.catalog().session_state(&caller, &session_id).await? }))
}

/// The session's grants ("always allow" answers).
async fn grants(State(state): State<AppState>, Authenticated(caller): Authenticated, Path(session_id): Path<String>) -> ApiResult<Json<Data<Vec<Grant>>>> {
    Ok(Json(Data { data: state.service.catalog().session_grants(&caller, &session_id).await? }))
}

async fn revoke_grant(State(state): State<AppState>, Authenticated(caller): Authenticated, Path((session_id, grant_id)): Path<(String, String)>) -> ApiResult<StatusCode> {
    state.service.catalog().revoke_grant(&caller, &session_id, &grant_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Queues a message that starts the session's next turn once the running one ends (at once
/// when none runs).
async fn queue_follow_up(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    Path(session_id): Path<String>,
    JsonBody(body): JsonBody<QueueMessageRequest>,
) -> ApiResult<(StatusCode, Json<Data<QueuedMessage>>)> {
    let queued = state.service.queue_follow_up(&caller, &session_id, body.content).await?;
    Ok((StatusCode::CREATED, Json(Data { data: queued })))
}

/// Queues an instruction for the running turn, which takes it before its next model call.
async fn steer(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    Path(session_id): Path<String>,
    JsonBody(body): JsonBody<QueueMessageRequest>,
) -> ApiResult<(StatusCode, Json<Data<QueuedMessage>>)> {
    let queued = state.service.steer(&caller, &session_id, body.content).await?;
    Ok((StatusCode::ACCEPTED, Json(Data { data: queued })))
}

async fn follow_ups(State(state): State<AppState>, Authenticated(caller): Authenticated, Path(session_id): Path<String>) -> ApiResult<Json<Data<Vec<QueuedMessage>>>> {
    Ok(Json(Data { data: state.service.follow_ups(&caller, &session_id).await? }))
}

async fn cancel_follow_up(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    Path((session_id, follow_up_id)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    state.service.cancel_follow_up(&caller, &session_id, &follow_up_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn remove(State(state): State<AppState>, Authenticated(caller): Authenticated, Path(session_id): Path<String>) -> ApiResult<StatusCode> {
    state.service.delete_session(&caller, &session_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn cancel(State(state): State<AppState>, Authenticated(caller): Authenticated, Path(session_id): Path<String>, JsonBody(_): JsonBody<Empty>) -> ApiResult<Json<Empty>> {
    state.service.cancel_session(&caller, &session_id).await?;
    Ok(Json(Empty {}))
}

async fn events(State(state): State<AppState>, Authenticated(caller): Authenticated, Path(session_id): Path<String>, params: Params) -> ApiResult<Json<Page<SessionEventItem>>> {
    crate::routes::shared::session_events(&state, &caller, &session_id, &params, true).await
}
