//! `GET`, `POST` and `DELETE /api/v1/sessions/{id}/workspace`: a session's workspace, reported
//! with its files, made ahead of the first tool call, or destroyed while the session goes on.

use axum::Json;
use axum::extract::{Path, State};
use teamster_protocol::api::Data;
use teamster_protocol::workspace::Workspace;
use teamster_service::{MAX_WORKSPACE_LISTING_DEPTH as MAX_LISTED_DEPTH, WorkspaceFilesQuery as FilesQuery};

use crate::AppState;
use crate::auth::Authenticated;
use crate::error::{ApiError, ApiResult};
use crate::params::{Params, invalid};
use crate::routes::{ApiRouter, routes};

pub fn routes() -> ApiRouter {
    ApiRouter::new().routes(routes!(get_workspace, provision_workspace, destroy_workspace))
}

#[utoipa::path(get, path = "/sessions/{session_id}/workspace", operation_id = "getSessionWorkspace", tag = "Agent Sessions", summary = "The session's workspace",
    description = "Where the session's workspace (its sandbox's files) stands: `none` (not made yet, or the agent has no sandbox: then no `provider`), `provisioning`, `ready` (with its usage, quota and files), `error` (the last attempt to make it failed: `error` says why) or `destroyed`. `files` lists the top level of the workspace, or of `path` to `depth` levels (at most 500 entries).",
    params(("session_id" = String, Path, description = "The session's id."),
        ("path" = Option<String>, Query, description = "The directory to list: relative to the workspace, or absolute under `/workspace` or `/tmp`."),
        ("depth" = Option<u32>, Query, description = "How many levels to list, 1 to 8 (1 when absent).")),
    responses((status = 200, description = "The workspace.", body = Data<Workspace>)))]
/// A session's workspace.
async fn get_workspace(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    Path(session_id): Path<String>,
    params: Params,
) -> ApiResult<Json<Data<Workspace>>> {
    params.only(&["path", "depth"])?;
    let files = FilesQuery { path: params.string("path").unwrap_or_default(), depth: depth(&params)? };
    Ok(Json(Data { data: state.service.workspaces().get(&caller, &session_id, &files).await? }))
}

#[utoipa::path(post, path = "/sessions/{session_id}/workspace", operation_id = "provisionSessionWorkspace", tag = "Agent Sessions", summary = "Make the session's workspace now",
    description = "Makes the session's workspace ahead of its first tool call (a warm start); one that exists is left as it is. The live channel says `workspace_status_changed` and `workspace_ready` (or `workspace_error`). 409 when the session's agent has no sandbox.",
    params(("session_id" = String, Path, description = "The session's id.")),
    responses((status = 200, description = "The workspace, ready.", body = Data<Workspace>)))]
/// Makes a session's workspace now.
async fn provision_workspace(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    Path(session_id): Path<String>,
    params: Params,
) -> ApiResult<Json<Data<Workspace>>> {
    params.only(&[])?;
    Ok(Json(Data { data: state.service.workspaces().provision(&caller, &session_id).await? }))
}

#[utoipa::path(delete, path = "/sessions/{session_id}/workspace", operation_id = "destroySessionWorkspace", tag = "Agent Sessions", summary = "Destroy the session's workspace",
    description = "Destroys the session's workspace while the session goes on: a command running in it is killed first (its tool call ends with an error), its files are gone, and the session's next tool call makes a fresh one. 409 when the session's agent has no sandbox.",
    params(("session_id" = String, Path, description = "The session's id.")),
    responses((status = 200, description = "The workspace, destroyed.", body = Data<Workspace>)))]
/// Destroys a session's workspace.
async fn destroy_workspace(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    Path(session_id): Path<String>,
    params: Params,
) -> ApiResult<Json<Data<Workspace>>> {
    params.only(&[])?;
    Ok(Json(Data { data: state.service.workspaces().destroy(&caller, &session_id).await? }))
}

/// `depth`: 1 to [`MAX_LISTED_DEPTH`], 1 when absent.
fn depth(params: &Params) -> Result<u32, ApiError> {
    let Some(text) = params.string("depth") else { return Ok(1) };
    match text.parse::<u32>() {
        Ok(depth) if (1..=MAX_LISTED_DEPTH).contains(&depth) => Ok(depth),
        _ => Err(invalid("depth", format!("depth must be a whole number from 1 to {MAX_LISTED_DEPTH}"))),
    }
}
