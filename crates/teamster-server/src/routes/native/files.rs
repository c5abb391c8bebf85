//! `/api/v1/sessions/{id}/files/{digest}`: a file of the session, stored once when it came as
//! a large attachment, named by the SHA-256 digest its `teamster-file:` reference carries.

use axum::Router;
use axum::extract::{Path, State};
use axum::response::Response;
use axum::routing::get;

use crate::AppState;
use crate::auth::Authenticated;
use crate::error::ApiResult;
use crate::routes::shared;

pub fn routes() -> Router<AppState> {
    Router::new().route("/sessions/{session_id}/files/{digest}", get(download))
}

/// The file's bytes with its media type, as an attachment named after its digest.
async fn download(State(state): State<AppState>, Authenticated(caller): Authenticated, Path((session_id, digest)): Path<(String, String)>) -> ApiResult<Response> {
    let file = state.service.get_session_file(&caller, &session_id, &digest).await?;
    let disposition = format!("attachment; filename=\"{digest}\"");
    let len = file.data.len() as u64;
    Ok(shared::attachment(file.media_type, disposition, "private, max-age=31536000, immutable", file.data.into(), len))
}
