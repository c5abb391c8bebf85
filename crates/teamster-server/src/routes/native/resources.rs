//! `GET /api/v1/resources`: the resources the caller's sessions are about.

use axum::Json;
use axum::extract::State;
use teamster_protocol::api::{Data, Resource};
use teamster_service::catalog::MAX_LISTED_RESOURCES;

use crate::AppState;
use crate::auth::Authenticated;
use crate::error::ApiResult;
use crate::params::Params;
use crate::routes::{ApiRouter, routes};

pub fn routes() -> ApiRouter {
    ApiRouter::new().routes(routes!(list_resources))
}

#[utoipa::path(get, path = "/resources", operation_id = "listResources", tag = "Agent Sessions", summary = "The caller's resources",
    description = "The resources the caller's sessions are about (their `resource_id`), the most recently updated first, each with how many sessions are about it; `GET /sessions?resource_id=` lists them.",
    params(("limit" = Option<u32>, Query, description = "How many, at most 100 (the default).")),
    responses((status = 200, description = "The caller's resources.", body = Data<Vec<Resource>>)))]
/// The resources the caller's sessions are about.
async fn list_resources(State(state): State<AppState>, Authenticated(caller): Authenticated, params: Params) -> ApiResult<Json<Data<Vec<Resource>>>> {
    params.only(&["limit"])?;
    let limit = params.limit(MAX_LISTED_RESOURCES, MAX_LISTED_RESOURCES)?;
    Ok(Json(Data { data: state.service.catalog().resources().list(&caller, limit).await? }))
}
