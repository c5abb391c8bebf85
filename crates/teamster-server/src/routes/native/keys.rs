//! `/api/v1/keys`: API keys, for admins (the auth layer refuses others). A key's secret is in
//! the creation answer only.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use teamster_protocol::api::Data;
use teamster_service::{ApiKey, NewKey, Role};
use crate::routes::routes;

use crate::AppState;
use crate::error::ApiResult;
use crate::extract::JsonBody;
use crate::routes::ApiRouter;

pub fn routes() -> ApiRouter {
    ApiRouter::new().routes(routes!(list, create)).routes(routes!(revoke))
}

/// `POST /api/v1/keys`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct CreateKeyRequest {
    subject: String,
    /// The subject's tenant (`default` when absent).
    #[serde(default)]
    tenant: Option<String>,
    #[serde(default)]
    role: Role,
    #[serde(default)]
    service_account: bool,
}

/// A created key: its record and the key itself, shown this once.
#[derive(Debug, Serialize, utoipa::ToSchema)]
struct CreatedKeyResponse {
    #[serde(flatten)]
    key: ApiKey,
    secret: String,
}

#[utoipa::path(post, path = "/keys", operation_id = "createKey", tag = "Keys", summary = "Create an API key", request_body = CreateKeyRequest,
    responses((status = 201, description = "The key's record and the key itself, shown this once.", body = Data<CreatedKeyResponse>)))]
async fn create(State(state): State<AppState>, JsonBody(body): JsonBody<CreateKeyRequest>) -> ApiResult<(StatusCode, Json<Data<CreatedKeyResponse>>)> {
    let new = NewKey {
        subject: body.subject,
        service_account: body.service_account,
        tenant: body.tenant.unwrap_or_else(|| "default".to_owned()),
        role: body.role,
    };
    let created = state.service.api_keys().create(new).await?;
    Ok((StatusCode::CREATED, Json(Data { data: CreatedKeyResponse { key: created.key, secret: created.secret } })))
}

#[utoipa::path(get, path = "/keys", operation_id = "listKeys", tag = "Keys", summary = "List API keys",
    responses((status = 200, description = "Every key, revoked ones included, without secrets.", body = Data<Vec<ApiKey>>)))]
async fn list(State(state): State<AppState>) -> ApiResult<Json<Data<Vec<ApiKey>>>> {
    Ok(Json(Data { data: state.service.api_keys().list().await? }))
}

#[utoipa::path(delete, path = "/keys/{key_id}", operation_id = "revokeKey", tag = "Keys", summary = "Revoke an API key", params(("key_id" = String, Path, description = "The key's id.")),
    responses((status = 200, description = "The revoked key.", body = Data<ApiKey>)))]
async fn revoke(State(state): State<AppState>, Path(key_id): Path<String>) -> ApiResult<Json<Data<ApiKey>>> {
    Ok(Json(Data { data: state.service.api_keys().revoke(&key_id).await? }))
}
