//! `/api/v1/keys`: API keys, for admins (the auth layer refuses others). A key's secret is in
//! the creation answer only.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, get};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use teamster_protocol::api::Data;
use teamster_service::{ApiKey, NewKey, Role};

use crate::AppState;
use crate::error::ApiResult;
use crate::extract::JsonBody;

pub fn routes() -> Router<AppState> {
    Router::new().route("/keys", get(list).post(create)).route("/keys/{key_id}", delete(revoke))
}

/// `POST /api/v1/keys`.
#[derive(Debug, Deserialize)]
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
#[derive(Debug, Serialize)]
struct CreatedKeyResponse {
    #[serde(flatten)]
    key: ApiKey,
    secret: String,
}

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

async fn list(State(state): State<AppState>) -> ApiResult<Json<Data<Vec<ApiKey>>>> {
    Ok(Json(Data { data: state.service.api_keys().list().await? }))
}

async fn revoke(State(state): State<AppState>, Path(key_id): Path<String>) -> ApiResult<Json<Data<ApiKey>>> {
    Ok(Json(Data { data: state.service.api_keys().revoke(&key_id).await? }))
}
