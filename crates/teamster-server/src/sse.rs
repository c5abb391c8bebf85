//! Server-Sent Events responses: each of a turn's events framed (`id:` its sequence number, its
//! JSON on `data:` lines, see `teamster_protocol::sse`), with `: ping` comments whenever the
//! stream has been quiet for the heartbeat interval. The body ends after `turn.done`, or when
//! the server shuts down. Every stream counts as open in the metrics until its body is dropped.
//!
//! The data stream dialect frames the parts each event translates to: one frame per part, all
//! of one event sent together, the last carrying the event's sequence number as its `id:`, so
//! a client resumes after the last event it saw whole.

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use futures_util::{Stream, StreamExt};
use teamster_protocol::Event;
use teamster_service::EventStream;

use crate::AppState;
use crate::params::Extensions;
use crate::data_stream::{Part, Translator};

const HEARTBEAT: &[u8] = b": ping\n\n";

/// Events framed into one buffer at most: the events that are ready together (a commit's worth)
/// go out as one piece of the body.
const EVENTS_PER_PIECE: usize = 64;

/// The native response: every event as stored, the extension events only as `extensions` asks.
pub fn sse_response(events: EventStream, extensions: Extensions, state: &AppState) -> Response {
    let frames = events.ready_chunks(EVENTS_PER_PIECE).filter_map(move |batch| {
        let mut frames = String::with_capacity(batch.iter().map(|event| event.json.len() + 32).sum());
        for event in batch.iter().filter(|event| extensions.sends(&event.json)) {
            teamster_protocol::sse::push_frame(&mut frames, event.sequence, &event.json);
        }
        std::future::ready((!frames.is_empty()).then(|| Bytes::from(frames)))
    });
    framed_response(frames, state)
}

/// The data stream response: `events` from the turn's first, each translated, and the parts
/// of those after `after` sent.
pub fn data_stream_response(
    events: EventStream,
    mut translator: Translator,
    after: u64,
    state: &AppState,
) -> Response {
    let frames = events.filter_map(move |event| {
        let parts = match serde_json::from_str::<Event>(&event.json) {
            Ok(parsed) => translator.translate(&parsed),
            Err(error) => {
                tracing::warn!(sequence = event.sequence, %error, "an event the data stream cannot read");
                Vec::new()
            }
        };
        let frames = (event.sequence > after && !parts.is_empty()).then(|| part_frames(event.sequence, &parts));
        std::future::ready(frames)
    });
    framed_response(frames, state)
}

/// The frames of one event's parts; the last carries `id: sequence`.
fn part_frames(sequence: u64, parts: &[Part]) -> Bytes {
    let mut frames = String::new();
    for (index, part) in parts.iter().enumerate() {
        if index + 1 == parts.len() {
            frames.push_str("id: ");
            frames.push_str(&sequence.to_string());
            frames.push('\n');
        }
        frames.push_str("data: ");
        frames.push_str(&serde_json::to_string(part).unwrap_or_default());
        frames.push_str("\n\n");
    }
    Bytes::from(frames)
}

/// The response of a stream of frames; its body ends with the frames, or as soon as `shutdown`
/// fires (after the last whole frame, so the client resumes from its last `id:`).
pub(crate) fn framed_response(frames: impl Stream<Item = Bytes> + Send + Unpin + 'static, state: &AppState) -> Response {
    let (heartbeat, shutdown) = (state.config.heartbeat, state.shutdown.clone());
    // The stream's guard goes with its frames: it is dropped with the body.
    let open = state.service.stream_opened();
    let body = futures_util::stream::unfold((frames, open), move |(mut frames, open)| {
        let shutdown = shutdown.clone();
        async move {
            let next = tokio::select! {
                biased;
                () = shutdown.cancelled() => return None,
                next = tokio::time::timeout(heartbeat, frames.next()) => next,
            };
            match next {
                Ok(Some(frame)) => Some((Ok::<Bytes, Infallible>(frame), (frames, open))),
                Ok(None) => None,
                Err(_) => Some((Ok(Bytes::from_static(HEARTBEAT)), (frames, open))),
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
