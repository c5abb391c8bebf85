//! The gateway dialect under `/v1/agents` and `/v1/x/agents`, per
//! `gateway-wire-protocol.md` (E1–E17). Draft ids work wherever a session id does.

mod drafts;
mod private;
mod sessions;
mod turns;

use axum::Router;
use teamster_protocol::timestamp;
use axum::Json;
use teamster_protocol::api::Page;
use teamster_protocol::session::Session;
use teamster_service::{Caller, ListOrder, SessionListQuery, SessionOrder};

use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::params::Params;

pub fn routes() -> Router<AppState> {
    Router::new().merge(sessions::routes()).merge(turns::routes()).merge(drafts::routes()).merge(private::routes())
}

/// The listing window `[start_timestamp, end_timestamp]`: the end defaults to now, and the
/// start to 30 minutes before the end when `default_lower_bound` is set.
fn window(params: &Params, default_lower_bound: bool) -> Result<(Option<String>, Option<String>), ApiError> {
    let end = params.timestamp("end_timestamp")?.unwrap_or_else(timestamp::now);
    let start = match params.timestamp("start_timestamp")? {
        Some(start) => Some(start),
        None if default_lower_bound => timestamp::shift(&end, -30 * 60),
        None => None,
    };
    Ok((start, Some(end)))
}

/// What every gateway session listing reads from the query string: `agent_name`, the time
/// window, `order` (by `created_at`, newest first by default), `page_token` and `limit`.
fn session_query(params: &Params, default_lower_bound: bool) -> Result<SessionListQuery, ApiError> {
    let (created_from, created_to) = window(params, default_lower_bound)?;
    Ok(SessionListQuery {
        agent_name: params.string("agent_name"),
        created_from,
        created_to,
        order_by: SessionOrder::CreatedAt,
        descending: params.order(ListOrder::Descending)? == ListOrder::Descending,
        page_token: params.string("page_token"),
        limit: params.limit(10, 100)?,
        ..SessionListQuery::default()
    })
}

async fn session_page(state: &AppState, caller: &Caller, query: SessionListQuery) -> ApiResult<Json<Page<Session>>> {
    let limit = query.limit;
    let (sessions, next) = state.service.catalog().list_sessions(caller, query).await?;
    Ok(crate::routes::page(sessions, next, limit))
}
