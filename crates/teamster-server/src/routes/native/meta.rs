//! `/api/v1/capabilities` and `/api/v1/models`: what this server offers.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};
use teamster_protocol::api::{Capabilities, Data, Enabled, SkillCapability};
use teamster_service::Sandboxes;

use crate::AppState;

pub fn routes() -> Router<AppState> {
    Router::new().route("/capabilities", get(capabilities)).route("/models", get(models))
}

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

async fn models(State(state): State<AppState>) -> Json<Data<Vec<Value>>> {
    let models = state
        .service
        .catalog()
        .list_models()
        .into_iter()
        .map(|(name, provider, model)| {
            json!({"name": name, "model_id": model.model_id, "provider": {"name": provider}, "properties": model.properties})
        })
        .collect();
    Json(Data { data: models })
}
