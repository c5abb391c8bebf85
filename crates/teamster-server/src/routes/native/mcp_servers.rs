//! MCP servers: `/api/v1/settings/mcp-servers` configures them (header and environment
//! secrets redacted in every response, a redacted value sent back keeps the stored one),
//! `/api/v1/mcp-servers` lists what agents can name, and `/api/v1/mcp-servers/{name}/tools`
//! connects to one and lists its tools (502 when it cannot be reached, 422 when it wants
//! authorization), and `POST /api/v1/mcp-servers/{name}/test` tests one (its verdict in a 200).
//! `DELETE` and `PATCH` (a new name) under `/api/v1/settings/mcp-servers/{name}` undo and
//! rename a configured server.
//!
//! OAuth (`dcr` servers): `GET /api/v1/mcp-servers/{name}/authorize` answers the caller's
//! `MCPAuthStatus`, or, with the `ticket` of an `mcp.auth_required` event's `auth_url`, sends
//! the browser to the authorization server (302); the authorization server sends it back to
//! `GET /api/v1/mcp-servers/oauth/callback`; `DELETE .../authorize` forgets the caller's tokens.

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::Json;
use teamster_protocol::api::{Data, McpServerRequest, RenameSettingRequest};
use teamster_protocol::settings::{AvailableMcpServer, ConfiguredMcpServer, McpAuthStatus, McpServerTestResult};
use teamster_service::{McpServerWrite, OAuthCallback};
use crate::routes::routes;

use crate::AppState;
use crate::auth::Authenticated;
use crate::error::{ApiError, ApiResult};
use crate::extract::JsonBody;
use crate::params::Params;
use crate::routes::ApiRouter;
use crate::schemas::JsonObject;

/// The longest callback query string read; authorization responses are far smaller.
const MAX_CALLBACK_QUERY_BYTES: usize = 16 * 1024;

/// What a browser sees after authorizing, when no `return_to` was given.
const AUTHORIZED_PAGE: &str = "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<title>Authorized</title></head><body><p>The MCP server is authorized. You can close this page \
and return to the chat.</p></body></html>\n";

pub fn routes() -> ApiRouter {
    ApiRouter::new()
        .routes(routes!(list_settings, create, upsert))
        .routes(routes!(fetch_setting, delete, rename))
        .routes(routes!(test))
        .routes(routes!(list_available))
        .routes(routes!(callback))
        .routes(routes!(list_tools))
        .routes(routes!(authorize, disconnect))
}

#[utoipa::path(get, path = "/settings/mcp-servers", operation_id = "listMcpServerSettings", tag = "MCP Servers", summary = "List MCP servers",
    responses((status = 200, description = "The configured servers, header and environment secrets redacted.", body = Data<Vec<ConfiguredMcpServer>>)))]
async fn list_settings(State(state): State<AppState>, Authenticated(caller): Authenticated) -> ApiResult<Json<Data<Vec<ConfiguredMcpServer>>>> {
    Ok(Json(Data { data: state.service.mcp().list_mcp_server_settings(&caller).await? }))
}

#[utoipa::path(get, path = "/settings/mcp-servers/{name}", operation_id = "getMcpServerSetting", tag = "MCP Servers", summary = "Get a single MCP server by name", params(("name" = String, Path, description = "The MCP server's name.")),
    responses((status = 200, description = "The server, secrets redacted.", body = Data<ConfiguredMcpServer>)))]
async fn fetch_setting(State(state): State<AppState>, Authenticated(caller): Authenticated, Path(name): Path<String>) -> ApiResult<Json<Data<ConfiguredMcpServer>>> {
    Ok(Json(Data { data: state.service.mcp().get_mcp_server_setting(&caller, &name).await? }))
}

#[utoipa::path(post, path = "/settings/mcp-servers", operation_id = "createMcpServer", tag = "MCP Servers", summary = "Create an MCP server", request_body = McpServerRequest,
    responses((status = 201, description = "The server, secrets redacted.", body = Data<ConfiguredMcpServer>)))]
async fn create(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    JsonBody(body): JsonBody<McpServerRequest>,
) -> ApiResult<(StatusCode, Json<Data<ConfiguredMcpServer>>)> {
    let server = state.service.mcp().write_mcp_server(&caller, body.manifest, McpServerWrite::Create).await?;
    Ok((StatusCode::CREATED, Json(Data { data: server })))
}

#[utoipa::path(put, path = "/settings/mcp-servers", operation_id = "putMcpServer", tag = "MCP Servers", summary = "Create or replace an MCP server", request_body = McpServerRequest,
    description = "A redacted value sent back keeps the stored one.",
    responses((status = 200, description = "The server, secrets redacted.", body = Data<ConfiguredMcpServer>)))]
async fn upsert(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    JsonBody(body): JsonBody<McpServerRequest>,
) -> ApiResult<Json<Data<ConfiguredMcpServer>>> {
    let server = state.service.mcp().write_mcp_server(&caller, body.manifest, McpServerWrite::Upsert).await?;
    Ok(Json(Data { data: server }))
}

#[utoipa::path(delete, path = "/settings/mcp-servers/{name}", operation_id = "deleteMcpServer", tag = "MCP Servers", summary = "Delete an MCP server",
    params(("name" = String, Path, description = "The MCP server's name.")),
    description = "Agents that name the server are refused at save time and, at their next turn, fail to connect to it with an error naming it.",
    responses((status = 204, description = "Deleted."),
        (status = 404, description = "No server of this name.", body = teamster_protocol::api::ErrorResponse)))]
async fn delete(State(state): State<AppState>, Path(name): Path<String>) -> ApiResult<StatusCode> {
    state.service.mcp().delete_mcp_server(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(patch, path = "/settings/mcp-servers/{name}", operation_id = "renameMcpServer", tag = "MCP Servers", summary = "Rename an MCP server",
    params(("name" = String, Path, description = "The MCP server's current name.")), request_body = RenameSettingRequest,
    description = "Keeps the server's secrets. Agents that name the old name must be changed to the new one; users of an OAuth server authorize it again.",
    responses((status = 200, description = "The server under its new name, secrets redacted.", body = Data<ConfiguredMcpServer>),
        (status = 404, description = "No server of this name.", body = teamster_protocol::api::ErrorResponse),
        (status = 409, description = "The new name is taken.", body = teamster_protocol::api::ErrorResponse)))]
async fn rename(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<RenameSettingRequest>,
) -> ApiResult<Json<Data<ConfiguredMcpServer>>> {
    Ok(Json(Data { data: state.service.mcp().rename_mcp_server(&caller, &name, &body.name).await? }))
}

#[utoipa::path(post, path = "/mcp-servers/{name}/test", operation_id = "testMcpServer", tag = "MCP Servers", summary = "Test the connection to an MCP server",
    params(("name" = String, Path, description = "The MCP server's name.")),
    description = "Connects to the server as a turn of the caller would (with the caller's token for an OAuth server) and lists its tools, within 10 s each. A server that fails is a 200 whose `ok` is false, with the reason.",
    responses((status = 200, description = "The verdict: the tools' names, or why it failed.", body = Data<McpServerTestResult>),
        (status = 404, description = "No server of this name.", body = teamster_protocol::api::ErrorResponse)))]
async fn test(State(state): State<AppState>, Authenticated(caller): Authenticated, Path(name): Path<String>) -> ApiResult<Json<Data<McpServerTestResult>>> {
    Ok(Json(Data { data: state.service.mcp().test_mcp_server(&caller, &name).await? }))
}

#[utoipa::path(get, path = "/mcp-servers", operation_id = "listMcpServers", tag = "MCP Servers", summary = "List MCP servers for chat",
    responses((status = 200, description = "The servers agents can name.", body = Data<Vec<AvailableMcpServer>>)))]
async fn list_available(State(state): State<AppState>, Authenticated(caller): Authenticated) -> ApiResult<Json<Data<Vec<AvailableMcpServer>>>> {
    Ok(Json(Data { data: state.service.mcp().list_available_mcp_servers(&caller).await? }))
}

#[utoipa::path(get, path = "/mcp-servers/{name}/tools", operation_id = "listMcpServerTools", tag = "MCP Servers", summary = "List tools of an MCP server", params(("name" = String, Path, description = "The MCP server's name.")),
    responses((status = 200, description = "The server's tools as it lists them (`tools/list` entries).", body = Data<Vec<JsonObject>>),
        (status = 422, description = "The server wants authorization.", body = teamster_protocol::api::ErrorResponse),
        (status = 502, description = "The server cannot be reached.", body = teamster_protocol::api::ErrorResponse)))]
async fn list_tools(State(state): State<AppState>, Authenticated(caller): Authenticated, Path(name): Path<String>) -> ApiResult<Json<Data<Vec<serde_json::Value>>>> {
    Ok(Json(Data { data: state.service.mcp().list_mcp_server_tools(&caller, &name).await? }))
}

#[utoipa::path(get, path = "/mcp-servers/{name}/authorize", operation_id = "authorizeMcpServer", tag = "MCP Servers", summary = "Start (or short-circuit) the auth flow for an MCP server",
    params(("name" = String, Path, description = "The MCP server's name."), ("ticket" = Option<String>, Query, description = "The ticket of an `mcp.auth_required` event's `auth_url`."),
        ("return_to" = Option<String>, Query, description = "Where the browser goes once authorized.")),
    responses((status = 200, description = "Without a ticket: the caller's authorization status.", body = McpAuthStatus),
        (status = 302, description = "With a ticket: to the authorization server.")))]
/// With a `ticket` (the `auth_url` of an `mcp.auth_required` event, opened in a browser): a
/// 302 to the authorization server. Without: the caller's status as JSON, with an
/// authorization URL when the caller must authorize.
async fn authorize(State(state): State<AppState>, caller: Option<Authenticated>, Path(name): Path<String>, params: Params) -> ApiResult<Response> {
    let return_to = params.string("return_to");
    match params.string("ticket") {
        Some(ticket) => {
            let location = state.service.mcp().begin_mcp_authorization(&name, &ticket, return_to.as_deref()).await?;
            Ok(redirect(&location))
        }
        None => {
            let Some(Authenticated(caller)) = caller else {
                return Ok(crate::auth::unauthorized("an API key is required: send Authorization: Bearer <key>"));
            };
            let status: McpAuthStatus =
                state.service.mcp().mcp_authorization_status(&caller, &name, return_to.as_deref()).await?;
            Ok(Json(status).into_response())
        }
    }
}

#[utoipa::path(delete, path = "/mcp-servers/{name}/authorize", operation_id = "disconnectMcpServer", tag = "MCP Servers", summary = "Disconnect OAuth for an MCP server", params(("name" = String, Path, description = "The MCP server's name.")),
    responses((status = 200, description = "The server; the caller's tokens are forgotten.", body = Data<ConfiguredMcpServer>)))]
async fn disconnect(State(state): State<AppState>, Authenticated(caller): Authenticated, Path(name): Path<String>) -> ApiResult<Json<Data<ConfiguredMcpServer>>> {
    Ok(Json(Data { data: state.service.mcp().disconnect_mcp_server(&caller, &name).await? }))
}

#[utoipa::path(get, path = "/mcp-servers/oauth/callback", operation_id = "mcpOAuthCallback", tag = "MCP Servers", summary = "OAuth callback for MCP authorization",
    params(("state" = Option<String>, Query), ("code" = Option<String>, Query), ("iss" = Option<String>, Query),
        ("error" = Option<String>, Query), ("error_description" = Option<String>, Query)),
    responses((status = 200, description = "`{\"success\": true}`, or a short HTML page for a browser.", body = Object, example = json!({"success": true})),
        (status = 302, description = "To the `return_to` given at authorize time.")))]
/// The authorization server's redirect back: `{"success": true}` (a short HTML page for a
/// browser that asks for HTML), or a 302 to the `return_to` given at authorize time.
async fn callback(State(state): State<AppState>, headers: HeaderMap, RawQuery(query): RawQuery) -> ApiResult<Response> {
    let query = query.unwrap_or_default();
    if query.len() > MAX_CALLBACK_QUERY_BYTES {
        return Err(ApiError::bad_request("invalid_request", "the callback's query string is too long").with_param("state"));
    }
    match state.service.mcp().finish_mcp_authorization(oauth_callback(&query)?).await? {
        Some(location) => Ok(redirect(&location)),
        None if wants_html(&headers) => Ok(Html(AUTHORIZED_PAGE).into_response()),
        None => Ok(Json(serde_json::json!({"success": true})).into_response()),
    }
}

/// The authorization server's answer in a callback's query string (the first value of each
/// parameter counts).
fn oauth_callback(query: &str) -> ApiResult<OAuthCallback> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query)
        .map_err(|error| ApiError::bad_request("invalid_request", format!("invalid query string: {error}")))?;
    let mut callback = OAuthCallback::default();
    for (name, value) in pairs {
        let slot = match name.as_str() {
            "state" => &mut callback.state,
            "code" => &mut callback.code,
            "iss" => &mut callback.issuer,
            "error" => &mut callback.error,
            "error_description" => &mut callback.error_description,
            _ => continue,
        };
        slot.get_or_insert(value);
    }
    Ok(callback)
}

/// A 302 to `location`, which is never cached.
fn redirect(location: &str) -> Response {
    (StatusCode::FOUND, [(header::LOCATION, location), (header::CACHE_CONTROL, "no-store")]).into_response()
}

/// Whether the client prefers HTML (a browser navigating), by its `Accept` header.
fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|accept| accept.to_str().ok())
        .is_some_and(|accept| accept.split(',').any(|kind| kind.trim().starts_with("text/html")))
}
