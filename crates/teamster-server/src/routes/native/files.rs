//! `/api/v1/sessions/{id}/files/{digest}`: a file of the session, stored once when it came as
//! a large attachment, named by the SHA-256 digest its `teamster-file:` reference carries.

use axum::extract::{Path, State};
use axum::response::Response;
use crate::routes::routes;

use crate::AppState;
use crate::auth::Authenticated;
use crate::error::ApiResult;
use crate::routes::{ApiRouter, shared};

pub fn routes() -> ApiRouter {
    ApiRouter::new().routes(routes!(download))
}

#[utoipa::path(get, path = "/sessions/{session_id}/files/{digest}", operation_id = "downloadSessionFile", tag = "Agent Sessions", summary = "Download a session file",
    params(("session_id" = String, Path, description = "The session's id."), ("digest" = String, Path, description = "The SHA-256 digest of the file's `teamster-file:` reference.")),
    responses((status = 200, description = "The file's bytes with its media type, as an attachment.")))]
/// The file's bytes with its media type, as an attachment named after its digest.
async fn download(State(state): State<AppState>, Authenticated(caller): Authenticated, Path((session_id, digest)): Path<(String, String)>) -> ApiResult<Response> {
    let file = state.service.downloads().session_file(&caller, &session_id, &digest).await?;
    let disposition = format!("attachment; filename=\"{digest}\"");
    let len = file.data.len() as u64;
    Ok(shared::attachment(file.media_type, disposition, "private, max-age=31536000, immutable", file.data.into(), len))
}
