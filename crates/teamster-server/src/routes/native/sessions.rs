//! `/api/v1/sessions`: create (from a saved agent by name, or with an inline spec), list,
//! get, patch, delete, cancel, the session's events, its task list, its sub-agent threads and
//! its tools.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use teamster_protocol::agent_check::ToolCheck;
use teamster_protocol::api::{
    CloneSessionRequest, CreateSessionRequest, Data, Empty, Page, SessionEventItem, SessionThread, UpdateSessionRequest,
};
use teamster_protocol::control::{Grant, Plan, QueueMessageRequest, QueuedMessage, TaskList};
use teamster_protocol::session::Session;
use teamster_service::catalog::{NewSession, NewSessionAgent};
use teamster_service::{CloneSession, SessionListQuery, SessionOrder, SessionUpdate};
use crate::routes::routes;

use crate::AppState;
use crate::auth::Authenticated;
use crate::error::{ApiError, ApiResult};
use crate::extract::JsonBody;
use crate::params::Params;
use crate::routes::ApiRouter;
use crate::schemas::JsonObject;

pub fn routes() -> ApiRouter {
    ApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(fetch, update, remove))
        .routes(routes!(cancel))
        .routes(routes!(events))
        .routes(routes!(tasks))
        .routes(routes!(plans))
        .routes(routes!(threads))
        .routes(routes!(grants))
        .routes(routes!(tools))
        .routes(routes!(session_state))
        .routes(routes!(clone))
        .routes(routes!(follow_ups, queue_follow_up))
        .routes(routes!(steer))
        .routes(routes!(cancel_follow_up))
        .routes(routes!(revoke_grant))
}

#[utoipa::path(post, path = "/sessions", operation_id = "createSession", tag = "Agent Sessions", summary = "Create a session", request_body = CreateSessionRequest,
    description = "A session of a saved agent (`agent: {\"name\": ...}`) or with its own spec (`agent: {\"spec\": ...}`), about the `resource_id` it names. With `?reuse_latest=true` (and a `resource_id` and a saved agent), the caller's latest session of that agent about that resource is answered (200) when there is one: \"select or create\".",
    params(("reuse_latest" = Option<bool>, Query, description = "Answer the resource's latest session of the agent instead of a new one, when there is one.")),
    responses((status = 201, description = "The created session.", body = Data<Session>), (status = 200, description = "The resource's latest session (`reuse_latest`).", body = Data<Session>)))]
async fn create(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    params: Params,
    JsonBody(body): JsonBody<CreateSessionRequest>,
) -> ApiResult<(StatusCode, Json<Data<Session>>)> {
    params.only(&["reuse_latest"])?;
    let agent = match (body.agent.name, body.agent.spec) {
        (Some(name), None) => NewSessionAgent::Saved(name),
        (None, Some(spec)) => NewSessionAgent::Spec(Box::new(spec)),
        _ => {
            return Err(ApiError::bad_request("invalid_request", "agent must be either { \"name\": ... } or { \"spec\": ... }")
                .with_param("agent"));
        }
    };
    let new = NewSession { agent, title: body.title, resource_id: body.resource_id, reuse_latest: params.flag("reuse_latest")? };
    let (session, created) = state.service.catalog().resources().create_or_reuse_session(&caller, new).await?;
    let status = if created { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, Json(Data { data: session })))
}

#[utoipa::path(get, path = "/sessions", operation_id = "listSessions", tag = "Agent Sessions", summary = "List sessions",
    params(("limit" = Option<u32>, Query, description = "Page size (at most 25, the default)."),
        ("order" = Option<String>, Query, description = "`asc` or `desc` (the default) by last update."),
        ("page_token" = Option<String>, Query, description = "The `next_page_token` of the previous page."),
        ("start_timestamp" = Option<String>, Query, description = "Sessions created at or after this RFC 3339 time."),
        ("end_timestamp" = Option<String>, Query, description = "Sessions created at or before this RFC 3339 time."),
        ("agent_id" = Option<String>, Query, description = "Only sessions of this agent."),
        ("resource_id" = Option<String>, Query, description = "Only sessions about this resource.")),
    responses((status = 200, description = "A page of the caller's sessions, most recently updated first, each with its `preview` (the start of its first user message).", body = Page<Session>)))]
async fn list(State(state): State<AppState>, Authenticated(caller): Authenticated, params: Params) -> ApiResult<Json<Page<Session>>> {
    let limit = params.limit(25, 25)?;
    let query = SessionListQuery {
        agent_id: params.string("agent_id"),
        resource_id: params.string("resource_id"),
        created_from: params.timestamp("start_timestamp")?,
        created_to: params.timestamp("end_timestamp")?,
        order_by: SessionOrder::UpdatedAt,
        descending: params.order(teamster_service::ListOrder::Descending)? == teamster_service::ListOrder::Descending,
        page_token: params.string("page_token"),
        limit,
        ..SessionListQuery::default()
    };
    let (sessions, next) = state.service.catalog().list_sessions(&caller, query).await?;
    let sessions = state.service.events().with_previews(sessions).await?;
    Ok(crate::routes::page(sessions, next, limit))
}

#[utoipa::path(get, path = "/sessions/{session_id}", operation_id = "getSession", tag = "Agent Sessions", summary = "Get a session", params(("session_id" = String, Path, description = "The session's id.")),
    responses((status = 200, description = "The session.", body = Data<Session>)))]
async fn fetch(State(state): State<AppState>, Authenticated(caller): Authenticated, Path(session_id): Path<String>) -> ApiResult<Json<Data<Session>>> {
    Ok(Json(Data { data: state.service.catalog().get_session(&caller, &session_id).await? }))
}

#[utoipa::path(patch, path = "/sessions/{session_id}", operation_id = "updateSession", tag = "Agent Sessions", summary = "Update a session", params(("session_id" = String, Path, description = "The session's id.")), request_body = UpdateSessionRequest,
    description = "Changes the title, an inline session's spec, and (Teamster extensions) its mode, model, permissions and state.",
    responses((status = 200, description = "The updated session.", body = Data<Session>)))]
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
    Ok(Json(Data { data: state.service.catalog().update_session(&caller, &session_id, SessionUpdate { spec, title: body.title, mode: body.mode, model: body.model, subagent_models: body.subagent_models, permissions: body.permissions, state: body.state, resource_id: body.resource_id }).await? }))
}

#[utoipa::path(get, path = "/sessions/{session_id}/tasks", operation_id = "getSessionTasks", tag = "Agent Sessions", summary = "The session's task list", params(("session_id" = String, Path, description = "The session's id.")),
    responses((status = 200, description = "The task list (agents with `config.tasks`).", body = Data<TaskList>)))]
/// The session's task list (agents with `config.tasks` keep one).
async fn tasks(State(state): State<AppState>, Authenticated(caller): Authenticated, Path(session_id): Path<String>) -> ApiResult<Json<Data<TaskList>>> {
    Ok(Json(Data { data: state.service.events().tasks(&caller, &session_id).await? }))
}

#[utoipa::path(get, path = "/sessions/{session_id}/threads", operation_id = "listSessionThreads", tag = "Agent Sessions", summary = "The session's sub-agent threads",
    description = "The sub-agent threads the session's turns started, oldest first (the newest 1,000 of its last 1,000 turns), each with the agent that ran in it, the thread and call that started it, and how it ended. Forked threads (which started from a copy of their parent's context) are left out unless `include=forked`.",
    params(("session_id" = String, Path, description = "The session's id."),
        ("include" = Option<String>, Query, description = "`forked` to list forked threads too.")),
    responses((status = 200, description = "The session's sub-agent threads.", body = Data<Vec<SessionThread>>)))]
/// The session's sub-agent threads.
async fn threads(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    Path(session_id): Path<String>,
    params: Params,
) -> ApiResult<Json<Data<Vec<SessionThread>>>> {
    params.only(&["include"])?;
    let include_forked = match params.string("include").as_deref() {
        None => false,
        Some("forked") => true,
        Some(_) => return Err(crate::params::invalid("include", "include takes `forked`".to_owned())),
    };
    Ok(Json(Data { data: state.service.events().threads(&caller, &session_id, include_forked).await? }))
}

#[utoipa::path(get, path = "/sessions/{session_id}/plans", operation_id = "listSessionPlans", tag = "Agent Sessions", summary = "The session's plans", params(("session_id" = String, Path, description = "The session's id.")),
    responses((status = 200, description = "The plans the agent submitted, oldest first.", body = Data<Vec<Plan>>)))]
/// The plans the session's agent submitted (agents with modes that lead to others).
async fn plans(State(state): State<AppState>, Authenticated(caller): Authenticated, Path(session_id): Path<String>) -> ApiResult<Json<Data<Vec<Plan>>>> {
    Ok(Json(Data { data: state.service.events().plans(&caller, &session_id).await? }))
}

#[utoipa::path(post, path = "/sessions/{session_id}/clone", operation_id = "cloneSession", tag = "Agent Sessions", summary = "Clone a session", params(("session_id" = String, Path, description = "The session's id.")), request_body = CloneSessionRequest,
    responses((status = 201, description = "The new session, with a copy of the history up to the turn.", body = Data<Session>)))]
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

#[utoipa::path(get, path = "/sessions/{session_id}/state", operation_id = "getSessionState", tag = "Agent Sessions", summary = "The session state", params(("session_id" = String, Path, description = "The session's id.")),
    responses((status = 200, description = "The state object (agents with a `state_schema`).", body = Data<JsonObject>)))]
/// The session state (agents with a `state_schema`).
async fn session_state(State(state): State<AppState>, Authenticated(caller): Authenticated, Path(session_id): Path<String>) -> ApiResult<Json<Data<serde_json::Value>>> {
    Ok(Json(Data { data: state.service.catalog().session_state(&caller, &session_id).await? }))
}

#[utoipa::path(get, path = "/sessions/{session_id}/grants", operation_id = "listSessionGrants", tag = "Agent Sessions", summary = "The session's grants", params(("session_id" = String, Path, description = "The session's id.")),
    responses((status = 200, description = "The \"always allow\" answers in force.", body = Data<Vec<Grant>>)))]
/// The session's grants ("always allow" answers).
async fn grants(State(state): State<AppState>, Authenticated(caller): Authenticated, Path(session_id): Path<String>) -> ApiResult<Json<Data<Vec<Grant>>>> {
    Ok(Json(Data { data: state.service.catalog().session_grants(&caller, &session_id).await? }))
}

#[utoipa::path(get, path = "/sessions/{session_id}/tools", operation_id = "listSessionTools", tag = "Agent Sessions", summary = "The session's tools", params(("session_id" = String, Path, description = "The session's id.")),
    description = "The tools the session's model is offered now (its agent's version, in the session's mode, with its MCP servers connected as the caller), each with its category and whether its calls run at once, ask for approval or are refused under the agent's rules and the session's permissions and grants.",
    responses((status = 200, description = "The session's tools.", body = Data<Vec<ToolCheck>>)))]
/// The tools the session's model is offered now, with their categories and permissions.
async fn tools(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    Path(session_id): Path<String>,
    params: Params,
) -> ApiResult<Json<Data<Vec<ToolCheck>>>> {
    params.only(&[])?;
    Ok(Json(Data { data: state.service.session_tools(&caller, &session_id).await? }))
}

#[utoipa::path(delete, path = "/sessions/{session_id}/grants/{grant_id}", operation_id = "revokeSessionGrant", tag = "Agent Sessions", summary = "Revoke a grant",
    params(("session_id" = String, Path, description = "The session's id."), ("grant_id" = String, Path, description = "The grant's id.")),
    responses((status = 204, description = "Revoked.")))]
async fn revoke_grant(State(state): State<AppState>, Authenticated(caller): Authenticated, Path((session_id, grant_id)): Path<(String, String)>) -> ApiResult<StatusCode> {
    state.service.catalog().revoke_grant(&caller, &session_id, &grant_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/sessions/{session_id}/follow-ups", operation_id = "queueFollowUp", tag = "Agent Sessions", summary = "Queue a follow-up", params(("session_id" = String, Path, description = "The session's id.")), request_body = QueueMessageRequest,
    responses((status = 201, description = "The queued message.", body = Data<QueuedMessage>)))]
/// Queues a message that starts the session's next turn once the running one ends (at once
/// when none runs).
async fn queue_follow_up(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    Path(session_id): Path<String>,
    JsonBody(body): JsonBody<QueueMessageRequest>,
) -> ApiResult<(StatusCode, Json<Data<QueuedMessage>>)> {
    let queued = state.service.follow_ups().queue(&caller, &session_id, body.content).await?;
    Ok((StatusCode::CREATED, Json(Data { data: queued })))
}

#[utoipa::path(post, path = "/sessions/{session_id}/steer", operation_id = "steerSession", tag = "Agent Sessions", summary = "Steer the running turn", params(("session_id" = String, Path, description = "The session's id.")), request_body = QueueMessageRequest,
    responses((status = 202, description = "The instruction, taken before the turn's next model call.", body = Data<QueuedMessage>)))]
/// Queues an instruction for the running turn, which takes it before its next model call.
async fn steer(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    Path(session_id): Path<String>,
    JsonBody(body): JsonBody<QueueMessageRequest>,
) -> ApiResult<(StatusCode, Json<Data<QueuedMessage>>)> {
    let queued = state.service.follow_ups().steer(&caller, &session_id, body.content).await?;
    Ok((StatusCode::ACCEPTED, Json(Data { data: queued })))
}

#[utoipa::path(get, path = "/sessions/{session_id}/follow-ups", operation_id = "listFollowUps", tag = "Agent Sessions", summary = "List queued follow-ups", params(("session_id" = String, Path, description = "The session's id.")),
    responses((status = 200, description = "The messages waiting to start the next turns, in order.", body = Data<Vec<QueuedMessage>>)))]
async fn follow_ups(State(state): State<AppState>, Authenticated(caller): Authenticated, Path(session_id): Path<String>) -> ApiResult<Json<Data<Vec<QueuedMessage>>>> {
    Ok(Json(Data { data: state.service.follow_ups().list(&caller, &session_id).await? }))
}

#[utoipa::path(delete, path = "/sessions/{session_id}/follow-ups/{follow_up_id}", operation_id = "cancelFollowUp", tag = "Agent Sessions", summary = "Cancel a queued follow-up",
    params(("session_id" = String, Path, description = "The session's id."), ("follow_up_id" = String, Path, description = "The queued message's id.")),
    responses((status = 204, description = "Cancelled.")))]
async fn cancel_follow_up(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    Path((session_id, follow_up_id)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    state.service.follow_ups().cancel(&caller, &session_id, &follow_up_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(delete, path = "/sessions/{session_id}", operation_id = "deleteSession", tag = "Agent Sessions", summary = "Delete a session", params(("session_id" = String, Path, description = "The session's id.")),
    responses((status = 204, description = "Deleted, with its turns and events.")))]
async fn remove(State(state): State<AppState>, Authenticated(caller): Authenticated, Path(session_id): Path<String>) -> ApiResult<StatusCode> {
    state.service.delete_session(&caller, &session_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/sessions/{session_id}/cancel", operation_id = "cancelSession", tag = "Agent Sessions", summary = "Cancel a running turn in a session", params(("session_id" = String, Path, description = "The session's id.")),
    request_body = Empty, responses((status = 200, description = "Cancelled (or nothing ran).", body = Empty)))]
async fn cancel(State(state): State<AppState>, Authenticated(caller): Authenticated, Path(session_id): Path<String>, JsonBody(_): JsonBody<Empty>) -> ApiResult<Json<Empty>> {
    state.service.cancel_session(&caller, &session_id).await?;
    Ok(Json(Empty {}))
}

#[utoipa::path(get, path = "/sessions/{session_id}/events", operation_id = "listSessionEvents", tag = "Agent Sessions", summary = "List session events", params(("session_id" = String, Path, description = "The session's id."),
        ("page_token" = Option<String>, Query, description = "The `next_page_token` of the previous page."),
        ("last_turn_id" = Option<String>, Query, description = "The turn whose chain to list; the session's last turn when absent."),
        ("limit" = Option<u32>, Query, description = "Page size (at most 100, the default).")),
    responses((status = 200, description = "A page of the events of the turn chain, newest first, model messages folded.", body = Page<SessionEventItem>)))]
async fn events(State(state): State<AppState>, Authenticated(caller): Authenticated, Path(session_id): Path<String>, params: Params) -> ApiResult<Json<Page<SessionEventItem>>> {
    crate::routes::shared::session_events(&state, &caller, &session_id, &params, true).await
}
