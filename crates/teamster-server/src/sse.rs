//! Server-Sent Events responses: each of a turn's events framed (`id:` its sequence number, its
//! JSON on `data:` lines, see `teamster_protocol::sse`), with `: ping` comments whenever the
//! stream has been quiet for the heartbeat interval. The body ends after `turn.done`, or when
//! the server shuts down.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use teamster_service::EventStream;
use tokio_util::sync::CancellationToken;

const HEARTBEAT: &[u8] = b": ping\n\n";

/// The response; its body ends after `turn.done`, or as soon as `shutdown` fires (after the
/// last whole frame, so the client resumes from its last `id:`).
pub fn sse_response(events: EventStream, heartbeat: Duration, shutdown: CancellationToken) -> Response {
    let body = futures_util::stream::unfold(events, move |mut events| {
        let shutdown = shutdown.clone();
        async move {
            let next = tokio::select! {
                biased;
                () = shutdown.cancelled() => return None,
                next = tokio::time::timeout(heartbeat, events.next()) => next,
            };
            match next {
                Ok(Some(event)) => {
                    let frame = Bytes::from(teamster_protocol::sse::frame(event.sequence, &event.json));
                    Some((Ok::<Bytes, Infallible>(frame), events))
                }
                Ok(None) => None,
                Err(_) => Some((Ok(Bytes::from_static(HEARTBEAT)), events)),
            }
        }
    });
    (
        [
            (header::CONTENT_TYPE, "text/event-stream; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
            (header::HeaderName::from_static("x-accel-buffering"), "no"),
        ],
        Body::from_stream(body),
    )
        .into_response()
}
