//! Server-Sent Events responses: the turn's frames, with `: ping` comments whenever the
//! stream has been quiet for the heartbeat interval. The body ends after `turn.done`, or when
//! the server shuts down.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use teamster_service::FrameStream;
use tokio_util::sync::CancellationToken;

const HEARTBEAT: &[u8] = b": ping\n\n";

/// The response; its body ends after `turn.done`, or as soon as `shutdown` fires (after the
/// last whole frame, so the client resumes from its last `id:`).
pub fn sse_response(frames: FrameStream, heartbeat: Duration, shutdown: CancellationToken) -> Response {
    let body = futures_util::stream::unfold(frames, move |mut frames| {
        let shutdown = shutdown.clone();
        async move {
            let next = tokio::select! {
                biased;
                () = shutdown.cancelled() => return None,
                next = tokio::time::timeout(heartbeat, frames.next()) => next,
            };
            match next {
                Ok(Some(frame)) => Some((Ok::<Bytes, Infallible>(frame), frames)),
                Ok(None) => None,
                Err(_) => Some((Ok(Bytes::from_static(HEARTBEAT)), frames)),
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
