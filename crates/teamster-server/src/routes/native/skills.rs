//! Skills: `/api/v1/settings/skills` configures them (git repositories with a `SKILL.md`),
//! `/api/v1/skills` lists what agents can name, and `/api/v1/catalogs/skills` the presets this
//! server ships (none).

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use teamster_protocol::api::{Data, SkillRequest};
use teamster_protocol::settings::{AvailableSkill, ConfiguredSkill, SkillManifest};
use teamster_service::SkillWrite;

use crate::AppState;
use crate::error::ApiResult;
use crate::extract::JsonBody;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/settings/skills", get(list).post(create).put(upsert))
        .route("/skills", get(available))
        .route("/catalogs/skills", get(catalog))
}

async fn list(State(state): State<AppState>) -> ApiResult<Json<Data<Vec<ConfiguredSkill>>>> {
    Ok(Json(Data { data: state.service.list_skill_settings().await? }))
}

async fn create(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<SkillRequest>,
) -> ApiResult<(StatusCode, Json<Data<ConfiguredSkill>>)> {
    let skill = state.service.write_skill(body.manifest, SkillWrite::Create).await?;
    Ok((StatusCode::CREATED, Json(Data { data: skill })))
}

async fn upsert(State(state): State<AppState>, JsonBody(body): JsonBody<SkillRequest>) -> ApiResult<Json<Data<ConfiguredSkill>>> {
    Ok(Json(Data { data: state.service.write_skill(body.manifest, SkillWrite::Upsert).await? }))
}

async fn available(State(state): State<AppState>) -> ApiResult<Json<Data<Vec<AvailableSkill>>>> {
    Ok(Json(Data { data: state.service.list_available_skills().await? }))
}

/// No presets ship with this server.
async fn catalog() -> Json<Data<Vec<SkillManifest>>> {
    Json(Data { data: Vec::new() })
}
