//! `/api/v1/capabilities` and `/api/v1/models`: what this server offers.

use axum::extract::State;
use axum::Json;
use teamster_protocol::api::{Capabilities, Data, Enabled, SkillCapability};
use teamster_protocol::settings::{AvailableModel, CurrentModel};
use teamster_service::Sandboxes;
use crate::routes::routes;

use crate::AppState;
use crate::auth::Authenticated;
use crate::error::{ApiError, ApiResult};
use crate::params::Params;
use crate::routes::ApiRouter;

pub fn routes() -> ApiRouter {
    ApiRouter::new().routes(routes!(capabilities)).routes(routes!(models)).routes(routes!(current_model))
}

#[utoipa::path(get, path = "/capabilities", operation_id = "getCapabilities", tag = "Capabilities", summary = "Get server capabilities",
    responses((status = 200, description = "What this server offers.", body = Data<Capabilities>)))]
/// Skills are mounted into sandboxes: they work where sandboxes run.
async fn capabilities(State(state): State<AppState>) -> Json<Data<Capabilities>> {
    let skill = match state.service.sandboxes() {
        Sandboxes::On { .. } => SkillCapability { enabled: true, reason: None },
        Sandboxes::Off { reason } => SkillCapability { enabled: false, reason: Some(format!("skills need sandboxes: {reason}")) },
    };
    Json(Data {
        data: Capabilities {
            sandbox: Enabled { enabled: state.service.sandboxes().enabled() },
            skill,
            settings: Enabled { enabled: true },
        },
    })
}

#[utoipa::path(get, path = "/models", operation_id = "listModels", tag = "Models", summary = "List models for chat",
    responses((status = 200, description = "Every configured model as `{name, model_id, provider: {name}, properties}`, with its `display_name`, whether it has an API key (`has_api_key`, `api_key_env_var` when the key comes from the environment, `has_auth`) and how often the caller's tenant used it (`use_count`: sessions switched to it or turns run on it).", body = Data<Vec<AvailableModel>>)))]
async fn models(State(state): State<AppState>, Authenticated(caller): Authenticated, params: Params) -> ApiResult<Json<Data<Vec<AvailableModel>>>> {
    params.only(&[])?;
    Ok(Json(Data { data: state.service.catalog().providers().available(&caller.tenant).await? }))
}

#[utoipa::path(get, path = "/models/current", operation_id = "getCurrentModel", tag = "Models", summary = "A session's model",
    params(("session_id" = String, Query, description = "The session's id.")),
    responses((status = 200, description = "The model the session's next turn runs on, what chose it (`session`, `mode` or `agent`), whether it can be called as configured, and its catalog entry.", body = Data<CurrentModel>)))]
async fn current_model(State(state): State<AppState>, Authenticated(caller): Authenticated, params: Params) -> ApiResult<Json<Data<CurrentModel>>> {
    params.only(&["session_id"])?;
    let Some(session_id) = params.string("session_id") else {
        return Err(ApiError::bad_request("invalid_request", "session_id is required").with_param("session_id"));
    };
    Ok(Json(Data { data: state.service.catalog().current_model(&caller, &session_id).await? }))
}
