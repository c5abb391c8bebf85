//! `/api/v1/settings/model-providers`: configured providers; API keys are redacted in every
//! response, and a redacted key sent back keeps the stored one. `DELETE` and `PATCH` (a new
//! name) under `/{name}` undo and rename what the settings API stored.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use teamster_protocol::api::{Data, ModelProviderRequest, RenameSettingRequest};
use teamster_protocol::settings::ConfiguredModelProvider;
use teamster_service::ProviderWrite;
use crate::routes::routes;

use crate::AppState;
use crate::error::ApiResult;
use crate::extract::JsonBody;
use crate::routes::ApiRouter;

pub fn routes() -> ApiRouter {
    ApiRouter::new().routes(routes!(list, create, upsert)).routes(routes!(delete, rename))
}

#[utoipa::path(get, path = "/settings/model-providers", operation_id = "listModelProviders", tag = "Models", summary = "List configured model providers",
    responses((status = 200, description = "The providers, API keys redacted.", body = Data<Vec<ConfiguredModelProvider>>)))]
async fn list(State(state): State<AppState>) -> Json<Data<Vec<ConfiguredModelProvider>>> {
    Json(Data { data: state.service.catalog().providers().list() })
}

#[utoipa::path(post, path = "/settings/model-providers", operation_id = "createModelProvider", tag = "Models", summary = "Create a model provider", request_body = ModelProviderRequest,
    responses((status = 201, description = "The provider, its API key redacted.", body = Data<ConfiguredModelProvider>)))]
async fn create(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<ModelProviderRequest>,
) -> ApiResult<(StatusCode, Json<Data<ConfiguredModelProvider>>)> {
    let provider = state.service.catalog().providers().write(body.manifest, ProviderWrite::Create).await?;
    Ok((StatusCode::CREATED, Json(Data { data: provider })))
}

#[utoipa::path(put, path = "/settings/model-providers", operation_id = "putModelProvider", tag = "Models", summary = "Create or replace a model provider", request_body = ModelProviderRequest,
    description = "A redacted API key sent back keeps the stored one.",
    responses((status = 200, description = "The provider, its API key redacted.", body = Data<ConfiguredModelProvider>)))]
async fn upsert(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<ModelProviderRequest>,
) -> ApiResult<Json<Data<ConfiguredModelProvider>>> {
    Ok(Json(Data { data: state.service.catalog().providers().write(body.manifest, ProviderWrite::Upsert).await? }))
}

#[utoipa::path(delete, path = "/settings/model-providers/{name}", operation_id = "deleteModelProvider", tag = "Models", summary = "Delete a model provider",
    params(("name" = String, Path, description = "The provider's name.")),
    description = "Deletes a provider stored through the settings API. Agents that name its models are refused at save time and fail their next turn with an error naming the provider. A provider the server's environment stands for (`OPENAI_API_KEY`, ...) is removed by unsetting the variable and restarting (409 `configured_by_environment`); deleting a stored provider that overrode it brings the environment's back.",
    responses((status = 204, description = "Deleted."),
        (status = 404, description = "No provider of this name is stored.", body = teamster_protocol::api::ErrorResponse),
        (status = 409, description = "The provider comes from the environment.", body = teamster_protocol::api::ErrorResponse)))]
async fn delete(State(state): State<AppState>, Path(name): Path<String>) -> ApiResult<StatusCode> {
    state.service.catalog().providers().delete(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(patch, path = "/settings/model-providers/{name}", operation_id = "renameModelProvider", tag = "Models", summary = "Rename a model provider",
    params(("name" = String, Path, description = "The provider's current name.")), request_body = RenameSettingRequest,
    description = "Renames a `custom` provider stored through the settings API, keeping its key (a well-known provider is named by its type). Agents that name the old name must be changed to the new one.",
    responses((status = 200, description = "The provider under its new name, its API key redacted.", body = Data<ConfiguredModelProvider>),
        (status = 404, description = "No provider of this name is stored.", body = teamster_protocol::api::ErrorResponse),
        (status = 409, description = "The new name is taken, or the provider comes from the environment.", body = teamster_protocol::api::ErrorResponse)))]
async fn rename(
    State(state): State<AppState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<RenameSettingRequest>,
) -> ApiResult<Json<Data<ConfiguredModelProvider>>> {
    Ok(Json(Data { data: state.service.catalog().providers().rename(&name, &body.name).await? }))
}
