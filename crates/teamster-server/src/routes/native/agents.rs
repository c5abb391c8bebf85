//! `/api/v1/agents`: saved agents; an update stores a new immutable version.

use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::Json;
use teamster_protocol::agent::Agent;
use teamster_protocol::agent_check::{AgentCheckReport, CheckProblem};
use teamster_protocol::api::{CreateAgentRequest, Data, Empty, ErrorResponse, UpdateAgentRequest};
use crate::routes::routes;

use crate::AppState;
use crate::auth::Authenticated;
use crate::error::ApiResult;
use crate::extract::JsonBody;
use crate::manifest_schema;
use crate::routes::ApiRouter;

pub fn routes() -> ApiRouter {
    ApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(fetch, update, remove))
        .routes(routes!(manifest_json_schema))
        .routes(routes!(check))
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
        (status = 400, description = "The manifest is invalid: a key the schema (`/api/v1/schemas/agent-manifest.json`) does not have (code `unknown_field`, with the key that was likely meant), a model the providers do not have, an MCP server that is not configured, or another problem, named in `param`.", body = ErrorResponse),
        (status = 409, description = "An agent with this name already exists.", body = ErrorResponse)))]
async fn create(State(state): State<AppState>, Authenticated(caller): Authenticated, JsonBody(body): JsonBody<serde_json::Value>) -> ApiResult<(StatusCode, Json<Data<Agent>>)> {
    let body: CreateAgentRequest = manifest_schema::decode_request(body, &["name", "manifest"])?;
    let agent = state.service.catalog().create_agent(&caller, &body.name, body.manifest).await?;
    Ok((StatusCode::CREATED, Json(Data { data: agent })))
}

#[utoipa::path(get, path = "/schemas/agent-manifest.json", operation_id = "getAgentManifestSchema", tag = "Agents",
    summary = "The agent manifest's JSON Schema",
    description = "The JSON Schema (2020-12) of an agent's `manifest`, generated from the server's own types, for editors to validate and complete manifests with. Every object is closed: the server refuses a key the schema does not list. Public, like this document.",
    responses((status = 200, description = "The schema.", content_type = "application/schema+json", body = Object)))]
async fn manifest_json_schema() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/schema+json")], manifest_schema::schema_text())
}

#[utoipa::path(post, path = "/agents/check", operation_id = "checkAgent", tag = "Agents", summary = "Check an agent manifest", request_body = CreateAgentRequest,
    description = "Checks a manifest as creating the agent would, without saving anything, and says what it would run with (\"why this toolset\"): every model it names resolved; every MCP server it names connected (as the caller, who may have to authorize an OAuth server first); the tools a new session's model is offered, in the starting mode, each with whether its calls wait for a person's approval and why (a session's permission policy and grants may change that later); and each tool the agent could have had but does not, with the key that decides it. Problems saving would refuse (unknown keys, an unknown model or MCP server, a bad name) are in `problems` and leave `ok` false; the answer is 200 all the same. Without `name`, the name is not checked.",
    responses((status = 200, description = "The report, also when the manifest has problems.", body = Data<AgentCheckReport>)))]
async fn check(State(state): State<AppState>, Authenticated(caller): Authenticated, JsonBody(body): JsonBody<serde_json::Value>) -> ApiResult<Json<Data<AgentCheckReport>>> {
    let as_problem = |refused: crate::ApiError| CheckProblem { param: refused.param, message: refused.message };
    // Unknown keys are a problem, but the rest of the manifest is still checked.
    let mut problems: Vec<CheckProblem> = manifest_schema::check_keys(&body, &["name", "manifest"]).err().map(as_problem).into_iter().collect();
    let decoded = manifest_schema::decode::<CheckAgentRequest>(body).map_err(|refused| problems.push(as_problem(refused))).ok();
    let name = decoded.as_ref().and_then(|request| request.name.as_deref());
    let spec = decoded.as_ref().map(|request| &request.manifest);
    Ok(Json(Data { data: state.service.check_agent(&caller, name, spec, problems).await }))
}

/// What `POST /agents/check` reads: a create request whose name may be left out.
#[derive(serde::Deserialize)]
struct CheckAgentRequest {
    #[serde(default)]
    name: Option<String>,
    manifest: teamster_protocol::agent::AgentSpec,
}

#[utoipa::path(get, path = "/agents/{agent_id}", operation_id = "getAgent", tag = "Agents", summary = "Get an agent", params(("agent_id" = String, Path, description = "The agent's id.")),
    responses((status = 200, description = "The agent, its latest version.", body = Data<Agent>)))]
async fn fetch(State(state): State<AppState>, Authenticated(caller): Authenticated, Path(agent_id): Path<String>) -> ApiResult<Json<Data<Agent>>> {
    Ok(Json(Data { data: state.service.catalog().get_agent(&caller, &agent_id).await? }))
}

#[utoipa::path(put, path = "/agents/{agent_id}", operation_id = "updateAgent", tag = "Agents", summary = "Update an agent", params(("agent_id" = String, Path, description = "The agent's id.")),
    request_body = UpdateAgentRequest, description = "Stores the manifest as a new immutable version: for the agent's creator, its managers and the tenant's admins (403 for its other collaborators).",
    responses((status = 200, description = "The agent at its new version.", body = Data<Agent>),
        (status = 400, description = "The manifest is invalid, as for creating an agent.", body = ErrorResponse),
        (status = 403, description = "The caller may run the agent but not edit it.", body = ErrorResponse)))]
async fn update(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    Path(agent_id): Path<String>,
    JsonBody(body): JsonBody<serde_json::Value>,
) -> ApiResult<Json<Data<Agent>>> {
    let body: UpdateAgentRequest = manifest_schema::decode_request(body, &["manifest"])?;
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
