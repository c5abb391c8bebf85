//! Handler logic both dialects share: starting a turn (streamed or not), subscribing, and
//! downloading a sandbox file.

use axum::Json;
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use serde_json::value::RawValue;
use teamster_protocol::api::{CreateTurnRequest, Data, Page, SessionEventItem};
use axum::http::header;
use teamster_service::{Caller, CreateTurn, ListOrder, SandboxAddress, SessionEventsQuery, TurnEventsQuery};
use tokio_util::io::ReaderStream;

use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::data_stream;
use crate::params::{Params, StreamFormat};
use crate::sse::{data_stream_response, sse_response};

/// Starts a turn. Everything is validated before the first byte: once the SSE response has
/// begun, failures arrive as `turn.done` with status `error`. `format` is the stream's dialect.
pub async fn create_turn(
    state: &AppState,
    caller: &Caller,
    session_id: &str,
    body: CreateTurnRequest,
    stream_by_default: bool,
    format: StreamFormat,
) -> ApiResult<Response> {
    let request = CreateTurn {
        input: body.input.unwrap_or_default(),
        previous_turn_id: body.previous_turn_id,
        at_tip: false,
        request_context: body.request_context,
    };
    let started = state.service.create_turn(caller, session_id, request).await?;
    if !body.stream.unwrap_or(stream_by_default) {
        return Ok(Json(Data { data: started.turn }).into_response());
    }
    let (events, turn) = (started.events(0), started.turn);
    match format {
        StreamFormat::Native(extensions) => Ok(sse_response(events, extensions, state)),
        StreamFormat::DataStream => {
            // The turn runs already: a failure to read its earlier turns ends this stream only.
            let translator = data_stream::prior::translator(&state.service, caller, session_id, &turn).await?;
            Ok(data_stream_response(events, translator, 0, state))
        }
    }
}

/// Streams a turn's events after `after`, in `format`.
pub async fn subscribe(state: &AppState, caller: &Caller, session_id: &str, turn_id: &str, after: u64, format: StreamFormat) -> ApiResult<Response> {
    match format {
        StreamFormat::Native(extensions) => {
            let events = state.service.events().subscribe(caller, session_id, turn_id, after).await?;
            Ok(sse_response(events, extensions, state))
        }
        StreamFormat::DataStream => {
            // The parts of an event depend on the ones before it: the stream folds from the start.
            let turn = state.service.get_turn(caller, session_id, turn_id).await?;
            let translator = data_stream::prior::translator(&state.service, caller, session_id, &turn).await?;
            let events = state.service.events().subscribe(caller, session_id, turn_id, 0).await?;
            Ok(data_stream_response(events, translator, after, state))
        }
    }
}

/// A page of a session's events, newest first. `include_running_tip` lists what a running
/// newest turn has persisted so far (native) instead of starting at its parent (gateway).
pub async fn session_events(
    state: &AppState,
    caller: &Caller,
    session_id: &str,
    params: &Params,
    include_running_tip: bool,
) -> ApiResult<Json<Page<SessionEventItem>>> {
    let limit = params.limit(100, 100)?;
    let query = SessionEventsQuery {
        limit,
        page_token: params.string("page_token"),
        last_turn_id: params.string("last_turn_id"),
        include_running_tip,
    };
    let (events, next) = state.service.events().session_events(caller, session_id, query).await?;
    Ok(crate::routes::page(events, next, limit))
}

/// A page of a turn's content events. `max_limit` is also the default page size (25 on the
/// gateway, 100 natively); `require_terminal` refuses a running turn, as the gateway does.
pub async fn turn_events(
    state: &AppState,
    caller: &Caller,
    session_id: &str,
    turn_id: &str,
    params: &Params,
    max_limit: u32,
    require_terminal: bool,
) -> ApiResult<Json<Page<Box<RawValue>>>> {
    let limit = params.limit(max_limit, max_limit)?;
    let query = TurnEventsQuery {
        limit,
        order: params.order(ListOrder::Ascending)?,
        page_token: params.string("page_token"),
        require_terminal,
    };
    let (events, next) = state.service.events().turn_events(caller, session_id, turn_id, query).await?;
    Ok(crate::routes::page(events, next, limit))
}

/// A sandbox file as an attachment: its bytes, a content type from its extension, and its name
/// (ASCII, and UTF-8 by RFC 5987). The `path` query parameter names it.
pub async fn download_sandbox_file(state: &AppState, caller: &Caller, address: SandboxAddress<'_>, params: &Params) -> ApiResult<Response> {
    let path = params
        .string("path")
        .ok_or_else(|| ApiError::bad_request("invalid_request", "the query parameter path is required").with_param("path"))?;
    let file = state.service.downloads().sandbox_file(caller, address, &path).await?;
    let ascii_name: String =
        file.name.chars().map(|c| if c.is_ascii_graphic() && c != '"' && c != '\\' || c == ' ' { c } else { '_' }).collect();
    let disposition = format!("attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{}", percent_encode(&file.name));
    // Streamed from the sandbox as it is read: a large file never sits in memory whole.
    let body = Body::from_stream(ReaderStream::new(file.file.reader));
    Ok(attachment(media_type_of(&file.name).to_owned(), disposition, "private, no-store", body, file.file.len))
}

/// A file of `len` bytes as a download. A client or an agent chose its bytes and type:
/// browsers must neither sniff nor run what it holds.
pub fn attachment(media_type: String, disposition: String, cache_control: &'static str, body: Body, len: u64) -> Response {
    (
        [
            (header::CONTENT_TYPE, media_type),
            (header::CONTENT_DISPOSITION, disposition),
            (header::CACHE_CONTROL, cache_control.to_owned()),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_owned()),
            (header::CONTENT_SECURITY_POLICY, "sandbox".to_owned()),
            (header::CONTENT_LENGTH, len.to_string()),
        ],
        body,
    )
        .into_response()
}

/// The media type of a file name's extension, for the common kinds agents write.
fn media_type_of(name: &str) -> &'static str {
    let extension = name.rsplit_once('.').map(|(_, extension)| extension.to_ascii_lowercase()).unwrap_or_default();
    match extension.as_str() {
        "txt" | "log" | "md" | "py" | "sh" | "js" | "ts" | "rs" => "text/plain; charset=utf-8",
        "csv" => "text/csv; charset=utf-8",
        "json" => "application/json",
        "html" | "htm" => "text/html; charset=utf-8",
        "pdf" => "application/pdf",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "svg" => "image/svg+xml",
        "zip" => "application/zip",
        "xlsx" => "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        _ => "application/octet-stream",
    }
}

/// `text` with every byte but RFC 5987's attribute characters percent-encoded.
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'!' | b'#' | b'$' | b'&' | b'+' | b'-' | b'.' | b'^' | b'_' | b'`' | b'|' | b'~' => {
                (byte as char).to_string()
            }
            _ => format!("%{byte:02X}"),
        })
        .collect()
}
