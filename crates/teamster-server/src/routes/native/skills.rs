//! Skills: `/api/v1/settings/skills` configures them (git repositories with a `SKILL.md`),
//! `/api/v1/skills` lists what agents can name, and `/api/v1/catalogs/skills` the presets this
//! server ships (none).

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use teamster_protocol::api::{Data, SkillRequest};
use teamster_protocol::settings::{AvailableSkill, ConfiguredSkill, SkillManifest};
use teamster_service::SkillWrite;
use crate::routes::routes;

use crate::AppState;
use crate::error::ApiResult;
use crate::extract::JsonBody;
use crate::routes::ApiRouter;

pub fn routes() -> ApiRouter {
    ApiRouter::new().routes(routes!(list, create, upsert)).routes(routes!(available)).routes(routes!(catalog))
}

#[utoipa::path(get, path = "/settings/skills", operation_id = "listSkillSettings", tag = "Skills", summary = "List configured skills",
    responses((status = 200, description = "The configured skills.", body = Data<Vec<ConfiguredSkill>>)))]
async fn list(State(state): State<AppState>) -> ApiResult<Json<Data<Vec<ConfiguredSkill>>>> {
    Ok(Json(Data { data: state.service.skills().list_skill_settings().await? }))
}

#[utoipa::path(post, path = "/settings/skills", operation_id = "createSkill", tag = "Skills", summary = "Create a skill", request_body = SkillRequest,
    responses((status = 201, description = "The skill.", body = Data<ConfiguredSkill>)))]
async fn create(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<SkillRequest>,
) -> ApiResult<(StatusCode, Json<Data<ConfiguredSkill>>)> {
    let skill = state.service.skills().write_skill(body.manifest, SkillWrite::Create).await?;
    Ok((StatusCode::CREATED, Json(Data { data: skill })))
}

#[utoipa::path(put, path = "/settings/skills", operation_id = "putSkill", tag = "Skills", summary = "Create or replace a skill", request_body = SkillRequest,
    responses((status = 200, description = "The skill.", body = Data<ConfiguredSkill>)))]
async fn upsert(State(state): State<AppState>, JsonBody(body): JsonBody<SkillRequest>) -> ApiResult<Json<Data<ConfiguredSkill>>> {
    Ok(Json(Data { data: state.service.skills().write_skill(body.manifest, SkillWrite::Upsert).await? }))
}

#[utoipa::path(get, path = "/skills", operation_id = "listSkills", tag = "Skills", summary = "List skills for chat",
    responses((status = 200, description = "The skills agents can name.", body = Data<Vec<AvailableSkill>>)))]
async fn available(State(state): State<AppState>) -> ApiResult<Json<Data<Vec<AvailableSkill>>>> {
    Ok(Json(Data { data: state.service.skills().list_available_skills().await? }))
}

#[utoipa::path(get, path = "/catalogs/skills", operation_id = "getSkillCatalog", tag = "Skills", summary = "Get the skill catalog",
    responses((status = 200, description = "The presets this server ships (none).", body = Data<Vec<SkillManifest>>)))]
/// No presets ship with this server.
async fn catalog() -> Json<Data<Vec<SkillManifest>>> {
    Json(Data { data: Vec::new() })
}
