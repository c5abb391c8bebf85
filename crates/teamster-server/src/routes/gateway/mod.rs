//! The gateway dialect under `/v1/agents` and `/v1/x/agents`, per
//! `gateway-wire-protocol.md` (E1–E17). Draft ids work wherever a session id does.

mod drafts;
mod private;
mod sessions;
mod turns;

use axum::Router;
use teamster_protocol::timestamp;
use teamster_service::ListOrder;

use crate::AppState;
use crate::error::ApiError;
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

fn descending(params: &Params) -> Result<bool, ApiError> {
    Ok(params.order(ListOrder::Descending)? == ListOrder::Descending)
}
