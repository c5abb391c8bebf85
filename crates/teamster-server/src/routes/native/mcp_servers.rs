//! MCP servers: `/api/v1/settings/mcp-servers` configures them (header and environment
//! secrets redacted in every response, a redacted value sent back keeps the stored one),
//! `/api/v1/mcp-servers` lists what agents can name, and `/api/v1/mcp-servers/{name}/tools`
//! connects to one and lists its tools (502 when it cannot be reached, 422 when it wants
//! authorization).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use teamster_protocol::api::{Data, McpServerRequest};
use teamster_protocol::settings::{AvailableMcpServer, ConfiguredMcpServer};
use teamster_service::McpServerWrite;

use crate::AppState;
use crate::error::ApiResult;
use crate::extract::JsonBody;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/settings/mcp-servers", get(list_settings).post(create).put(upsert))
        .route("/settings/mcp-servers/{name}", get(fetch_setting))
        .route("/mcp-servers", get(list_available))
        .route("/mcp-servers/{name}/tools", get(list_tools))
}

async fn list_settings(State(state): State<AppState>) -> Json<Data<Vec<ConfiguredMcpServer>>> {
    Json(Data { data: state.service.list_mcp_server_settings() })
}

async fn fetch_setting(State(state): State<AppState>, Path(name): Path<String>) -> ApiResult<Json<Data<ConfiguredMcpServer>>> {
    Ok(Json(Data { data: state.service.get_mcp_server_setting(&name)? }))
}

async fn create(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<McpServerRequest>,
) -> ApiResult<(StatusCode, Json<Data<ConfiguredMcpServer>>)> {
    let server = state.service.write_mcp_server(body.manifest, McpServerWrite::Create).await?;
    Ok((StatusCode::CREATED, Json(Data { data: server })))
}

async fn upsert(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<McpServerRequest>,
) -> ApiResult<Json<Data<ConfiguredMcpServer>>> {
    Ok(Json(Data { data: state.service.write_mcp_server(body.manifest, McpServerWrite::Upsert).await? }))
}

async fn list_available(State(state): State<AppState>) -> Json<Data<Vec<AvailableMcpServer>>> {
    Json(Data { data: state.service.list_available_mcp_servers() })
}

async fn list_tools(State(state): State<AppState>, Path(name): Path<String>) -> ApiResult<Json<Data<Vec<serde_json::Value>>>> {
    Ok(Json(Data { data: state.service.list_mcp_server_tools(&name).await? }))
}
