//! `/api/v1/settings/model-providers`: configured providers; API keys are redacted in every
//! response, and a redacted key sent back keeps the stored one.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use teamster_protocol::api::{Data, ModelProviderRequest};
use teamster_protocol::settings::ConfiguredModelProvider;
use teamster_service::ProviderWrite;

use crate::AppState;
use crate::error::ApiResult;
use crate::extract::JsonBody;

pub fn routes() -> Router<AppState> {
    Router::new().route("/settings/model-providers", get(list).post(create).put(upsert))
}

async fn list(State(state): State<AppState>) -> Json<Data<Vec<ConfiguredModelProvider>>> {
    Json(Data { data: state.service.catalog().list_model_providers() })
}

async fn create(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<ModelProviderRequest>,
) -> ApiResult<(StatusCode, Json<Data<ConfiguredModelProvider>>)> {
    let provider = state.service.catalog().write_model_provider(body.manifest, ProviderWrite::Create).await?;
    Ok((StatusCode::CREATED, Json(Data { data: provider })))
}

async fn upsert(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<ModelProviderRequest>,
) -> ApiResult<Json<Data<ConfiguredModelProvider>>> {
    Ok(Json(Data { data: state.service.catalog().write_model_provider(body.manifest, ProviderWrite::Upsert).await? }))
}
