//! `/api/v1/agents`: saved agents; an update stores a new immutable version.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use teamster_protocol::agent::Agent;
use teamster_protocol::api::{CreateAgentRequest, Data, Empty, UpdateAgentRequest};

use crate::AppState;
use crate::error::ApiResult;
use crate::extract::JsonBody;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/agents", get(list).post(create))
        .route("/agents/{agent_id}", get(fetch).put(update).delete(remove))
}

async fn list(State(state): State<AppState>) -> ApiResult<Json<Data<Vec<Agent>>>> {
    Ok(Json(Data { data: state.service.catalog().list_agents().await? }))
}

async fn create(State(state): State<AppState>, JsonBody(body): JsonBody<CreateAgentRequest>) -> ApiResult<(StatusCode, Json<Data<Agent>>)> {
    let agent = state.service.catalog().create_agent(&body.name, body.manifest).await?;
    Ok((StatusCode::CREATED, Json(Data { data: agent })))
}

async fn fetch(State(state): State<AppState>, Path(agent_id): Path<String>) -> ApiResult<Json<Data<Agent>>> {
    Ok(Json(Data { data: state.service.catalog().get_agent(&agent_id).await? }))
}

async fn update(
    State(state): State<AppState>,
    Path(agent_id): Path<String>,
    JsonBody(body): JsonBody<UpdateAgentRequest>,
) -> ApiResult<Json<Data<Agent>>> {
    Ok(Json(Data { data: state.service.catalog().update_agent(&agent_id, body.manifest).await? }))
}

async fn remove(State(state): State<AppState>, Path(agent_id): Path<String>) -> ApiResult<Json<Empty>> {
    state.service.catalog().delete_agent(&agent_id).await?;
    Ok(Json(Empty {}))
}
