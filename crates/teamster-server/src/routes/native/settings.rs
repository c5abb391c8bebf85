//! `/api/v1/settings/model-providers`: configured providers; API keys are redacted in every
//! response, and a redacted key sent back keeps the stored one.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use teamster_protocol::api::{Data, ModelProviderRequest};
use teamster_protocol::settings::ConfiguredModelProvider;
use teamster_service::ProviderWrite;
use crate::routes::routes;

use crate::AppState;
use crate::error::ApiResult;
use crate::extract::JsonBody;
use crate::routes::ApiRouter;

pub fn routes() -> ApiRouter {
    ApiRouter::new().routes(routes!(list, create, upsert))
}

#[utoipa::path(get, path = "/settings/model-providers", operation_id = "listModelProviders", tag = "Models", summary = "List configured model providers",
    responses((status = 200, description = "The providers, API keys redacted.", body = Data<Vec<ConfiguredModelProvider>>)))]
async fn list(State(state): State<AppState>) -> Json<Data<Vec<ConfiguredModelProvider>>> {
    Json(Data { data: state.service.catalog().list_model_providers() })
}

#[utoipa::path(post, path = "/settings/model-providers", operation_id = "createModelProvider", tag = "Models", summary = "Create a model provider", request_body = ModelProviderRequest,
    responses((status = 201, description = "The provider, its API key redacted.", body = Data<ConfiguredModelProvider>)))]
async fn create(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<ModelProviderRequest>,
) -> ApiResult<(StatusCode, Json<Data<ConfiguredModelProvider>>)> {
    let provider = state.service.catalog().write_model_provider(body.manifest, ProviderWrite::Create).await?;
    Ok((StatusCode::CREATED, Json(Data { data: provider })))
}

#[utoipa::path(put, path = "/settings/model-providers", operation_id = "putModelProvider", tag = "Models", summary = "Create or replace a model provider", request_body = ModelProviderRequest,
    description = "A redacted API key sent back keeps the stored one.",
    responses((status = 200, description = "The provider, its API key redacted.", body = Data<ConfiguredModelProvider>)))]
async fn upsert(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<ModelProviderRequest>,
) -> ApiResult<Json<Data<ConfiguredModelProvider>>> {
    Ok(Json(Data { data: state.service.catalog().write_model_provider(body.manifest, ProviderWrite::Upsert).await? }))
}
