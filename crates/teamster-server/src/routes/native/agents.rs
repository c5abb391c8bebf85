//! `/api/v1/agents`: saved agents; an update stores a new immutable version.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use teamster_protocol::agent::Agent;
use teamster_protocol::api::{CreateAgentRequest, Data, Empty, ErrorResponse, UpdateAgentRequest};
use crate::routes::routes;

use crate::AppState;
use crate::auth::Authenticated;
use crate::error::ApiResult;
use crate::extract::JsonBody;
use crate::routes::ApiRouter;

pub fn routes() -> ApiRouter {
    ApiRouter::new().routes(routes!(list, create)).routes(routes!(fetch, update, remove))
}

#[utoipa::path(get, path = "/agents", operation_id = "listAgents", tag = "Agents", summary = "List agents",
    description = "The agents the caller may see: those of its tenant that it created or is a collaborator of (all of them, for an admin of the tenant).",
    responses((status = 200, description = "Every saved agent the caller may see, its latest version.", body = Data<Vec<Agent>>)))]
async fn list(State(state): State<AppState>, Authenticated(caller): Authenticated) -> ApiResult<Json<Data<Vec<Agent>>>> {
    Ok(Json(Data { data: state.service.catalog().list_agents(&caller).await? }))
}

#[utoipa::path(post, path = "/agents", operation_id = "createAgent", tag = "Agents", summary = "Create an agent", request_body = CreateAgentRequest,
    description = "Creates an agent (version 1) in the caller's tenant, created by the caller. Fails if `name` is already taken; the name cannot change later. `manifest.collaborators` (`user:<name>` or `team:<tenant>`, role `agent-manager` or `agent-user`) decides who else may see, run and edit it.",
    responses((status = 201, description = "The created agent.", body = Data<Agent>),
        (status = 409, description = "An agent with this name already exists.", body = ErrorResponse)))]
async fn create(State(state): State<AppState>, Authenticated(caller): Authenticated, JsonBody(body): JsonBody<CreateAgentRequest>) -> ApiResult<(StatusCode, Json<Data<Agent>>)> {
    let agent = state.service.catalog().create_agent(&caller, &body.name, body.manifest).await?;
    Ok((StatusCode::CREATED, Json(Data { data: agent })))
}

#[utoipa::path(get, path = "/agents/{agent_id}", operation_id = "getAgent", tag = "Agents", summary = "Get an agent", params(("agent_id" = String, Path, description = "The agent's id.")),
    responses((status = 200, description = "The agent, its latest version.", body = Data<Agent>)))]
async fn fetch(State(state): State<AppState>, Authenticated(caller): Authenticated, Path(agent_id): Path<String>) -> ApiResult<Json<Data<Agent>>> {
    Ok(Json(Data { data: state.service.catalog().get_agent(&caller, &agent_id).await? }))
}

#[utoipa::path(put, path = "/agents/{agent_id}", operation_id = "updateAgent", tag = "Agents", summary = "Update an agent", params(("agent_id" = String, Path, description = "The agent's id.")),
    request_body = UpdateAgentRequest, description = "Stores the manifest as a new immutable version: for the agent's creator, its managers and the tenant's admins (403 for its other collaborators).",
    responses((status = 200, description = "The agent at its new version.", body = Data<Agent>),
        (status = 403, description = "The caller may run the agent but not edit it.", body = ErrorResponse)))]
async fn update(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    Path(agent_id): Path<String>,
    JsonBody(body): JsonBody<UpdateAgentRequest>,
) -> ApiResult<Json<Data<Agent>>> {
    Ok(Json(Data { data: state.service.catalog().update_agent(&caller, &agent_id, body.manifest).await? }))
}

#[utoipa::path(delete, path = "/agents/{agent_id}", operation_id = "deleteAgent", tag = "Agents", summary = "Delete an agent", params(("agent_id" = String, Path, description = "The agent's id.")),
    description = "For the agent's creator, its managers and the tenant's admins (403 for its other collaborators); deleting an agent that does not exist (or that the caller may not see) deletes nothing.",
    responses((status = 200, description = "Deleted.", body = Empty),
        (status = 403, description = "The caller may run the agent but not delete it.", body = ErrorResponse)))]
async fn remove(State(state): State<AppState>, Authenticated(caller): Authenticated, Path(agent_id): Path<String>) -> ApiResult<Json<Empty>> {
    state.service.catalog().delete_agent(&caller, &agent_id).await?;
    Ok(Json(Empty {}))
}
