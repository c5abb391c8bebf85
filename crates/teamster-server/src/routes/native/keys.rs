//! `/api/v1/keys`: API keys, for admins (the auth layer refuses members). The operator manages
//! every tenant's keys; a tenant admin lists, creates and revokes the keys of its own tenant only
//! (another tenant's key is a 404, creating one in another tenant or an operator key a 403). A
//! key's secret is in the creation answer only.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use teamster_protocol::api::Data;
use teamster_service::{ApiKey, NewKey, Role};
use crate::routes::routes;

use crate::AppState;
use crate::auth::Authenticated;
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
    /// The subject's tenant: when absent, a tenant admin's own tenant, or `default` for the
    /// operator. A tenant admin may name its own tenant only.
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
async fn create(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    JsonBody(body): JsonBody<CreateKeyRequest>,
) -> ApiResult<(StatusCode, Json<Data<CreatedKeyResponse>>)> {
    let default_tenant = if caller.is_operator() { "default".to_owned() } else { caller.tenant.clone() };
    let new = NewKey {
        subject: body.subject,
        service_account: body.service_account,
        tenant: body.tenant.unwrap_or(default_tenant),
        role: body.role,
    };
    let created = state.service.api_keys().create_for(&caller, new).await?;
    Ok((StatusCode::CREATED, Json(Data { data: CreatedKeyResponse { key: created.key, secret: created.secret } })))
}

#[utoipa::path(get, path = "/keys", operation_id = "listKeys", tag = "Keys", summary = "List API keys",
    responses((status = 200, description = "The keys the caller manages (every key for the operator, its own tenant's for a tenant admin), revoked ones included, without secrets.", body = Data<Vec<ApiKey>>)))]
async fn list(State(state): State<AppState>, Authenticated(caller): Authenticated) -> ApiResult<Json<Data<Vec<ApiKey>>>> {
    Ok(Json(Data { data: state.service.api_keys().list_for(&caller).await? }))
}

#[utoipa::path(delete, path = "/keys/{key_id}", operation_id = "revokeKey", tag = "Keys", summary = "Revoke an API key", params(("key_id" = String, Path, description = "The key's id.")),
    responses((status = 200, description = "The revoked key.", body = Data<ApiKey>)))]
async fn revoke(State(state): State<AppState>, Authenticated(caller): Authenticated, Path(key_id): Path<String>) -> ApiResult<Json<Data<ApiKey>>> {
    Ok(Json(Data { data: state.service.api_keys().revoke_for(&caller, &key_id).await? }))
}
