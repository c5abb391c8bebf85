//! Server-Sent Events responses: the turn's frames, with `: ping` comments whenever the
//! stream has been quiet for the heartbeat interval. The body ends after `turn.done`.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use teamster_service::FrameStream;

const HEARTBEAT: &[u8] = b": ping\n\n";

pub fn sse_response(frames: FrameStream, heartbeat: Duration) -> Response {
    let body = futures_util::stream::unfold(frames, move |mut frames| async move {
        match tokio::time::timeout(heartbeat, frames.next()).await {
            Ok(Some(frame)) => Some((Ok::<Bytes, Infallible>(frame), frames)),
            Ok(None) => None,
            Err(_) => Some((Ok(Bytes::from_static(HEARTBEAT)), frames)),
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
