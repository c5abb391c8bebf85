//! The native API under `/api/v1`, per the OpenAPI document.

mod agents;
mod auth;
mod chat;
mod files;
mod keys;
mod live;
mod mcp_servers;
mod meta;
mod resources;
mod sessions;
mod settings;
mod skills;
mod turns;
mod workspace;

use crate::routes::ApiRouter;

pub fn routes() -> ApiRouter {
    ApiRouter::new().merge(agents::routes()).merge(sessions::routes()).merge(live::routes()).merge(files::routes()).merge(workspace::routes()).merge(resources::routes()).merge(turns::routes()).merge(settings::routes()).merge(mcp_servers::routes()).merge(skills::routes()).merge(meta::routes()).merge(chat::routes()).merge(keys::routes()).merge(auth::routes())
}
