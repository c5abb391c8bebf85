//! `/api/v1/capabilities` and `/api/v1/models`: what this server offers.

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use teamster_protocol::api::{Capabilities, Data, Enabled, SkillCapability};
use teamster_protocol::settings::ModelProperties;
use teamster_service::Sandboxes;
use crate::routes::routes;

use crate::AppState;
use crate::routes::ApiRouter;

pub fn routes() -> ApiRouter {
    ApiRouter::new().routes(routes!(capabilities)).routes(routes!(models))
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
    responses((status = 200, description = "Every configured model as `{name, model_id, provider: {name}, properties}`.", body = Data<Vec<AvailableModel>>)))]
async fn models(State(state): State<AppState>) -> Json<Data<Vec<AvailableModel>>> {
    let models = state
        .service
        .catalog()
        .providers()
        .models()
        .into_iter()
        .map(|(name, provider, model)| AvailableModel {
            name,
            model_id: model.model_id,
            provider: AvailableModelProvider { name: provider },
            properties: model.properties,
        })
        .collect();
    Json(Data { data: models })
}

/// A model agents can name.
#[derive(Serialize, utoipa::ToSchema)]
struct AvailableModel {
    /// `provider/model`.
    name: String,
    /// The id sent to the provider.
    model_id: String,
    provider: AvailableModelProvider,
    properties: ModelProperties,
}

#[derive(Serialize, utoipa::ToSchema)]
struct AvailableModelProvider {
    name: String,
}
