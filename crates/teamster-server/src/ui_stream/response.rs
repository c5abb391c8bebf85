//! The UI message stream response: a turn's events from its first, each translated, every
//! chunk on a `data:` line, `data: [DONE]` after the last, and the header
//! `x-vercel-ai-ui-message-stream: v1`. A stream that is the client's own request can cancel
//! the turn when the client goes away before the turn ends (`Chat.stop()` aborts the fetch).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::body::Bytes;
use axum::http::HeaderValue;
use axum::response::Response;
use futures_util::StreamExt;
use teamster_protocol::Event;
use teamster_service::{Caller, EventStream};

use super::Translator;
use crate::AppState;
use crate::sse::framed_response;

/// The end of every UI message stream.
const DONE: &[u8] = b"data: [DONE]\n\n";

/// Cancels a session's running turn when dropped while armed: the stream was dropped before
/// the turn ended.
struct CancelOnDrop {
    state: AppState,
    caller: Caller,
    session_id: String,
    armed: Arc<AtomicBool>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        // A server shutting down hands its turns over; it does not cancel them.
        if !self.armed.load(Ordering::Acquire) || self.state.shutdown.is_cancelled() {
            return;
        }
        let service = self.state.service.clone();
        let caller = self.caller.clone();
        let session_id = std::mem::take(&mut self.session_id);
        tokio::spawn(async move {
            if let Err(error) = service.cancel_session(&caller, &session_id).await {
                tracing::warn!(%session_id, %error, "cancelling the turn of an aborted chat stream");
            }
        });
    }
}

/// The response streaming `events` (from the turn's first) through `translator`. With
/// `cancel_on_abort`, a client that goes away before the turn ends cancels it.
pub fn chat_response(
    state: &AppState,
    caller: &Caller,
    session_id: &str,
    events: EventStream,
    mut translator: Translator,
    cancel_on_abort: bool,
) -> Response {
    let armed = Arc::new(AtomicBool::new(cancel_on_abort));
    let guard = CancelOnDrop { state: state.clone(), caller: caller.clone(), session_id: session_id.to_owned(), armed: armed.clone() };
    let ended = armed.clone();
    let frames = events
        .map(move |event| {
            let chunks = match serde_json::from_str::<Event>(&event.json) {
                Ok(parsed) => translator.translate(&parsed),
                Err(error) => {
                    tracing::warn!(sequence = event.sequence, %error, "an event the UI message stream cannot read");
                    Vec::new()
                }
            };
            let mut frames = String::new();
            for chunk in &chunks {
                frames.push_str("data: ");
                frames.push_str(&serde_json::to_string(chunk).unwrap_or_default());
                frames.push_str("\n\n");
            }
            if translator.ended() {
                // The turn is over: a client leaving now cancels nothing.
                armed.store(false, Ordering::Release);
            }
            Bytes::from(frames)
        })
        .filter(|frames| std::future::ready(!frames.is_empty()))
        // The events ran out without the client leaving (the turn ended, or another replica
        // took it over and goes on with it): nothing to cancel.
        .chain(futures_util::stream::once(async move {
            ended.store(false, Ordering::Release);
            Bytes::from_static(DONE)
        }))
        .map(move |frames| {
            let _keep = &guard;
            frames
        });
    let mut response = framed_response(Box::pin(frames), state);
    response.headers_mut().insert("x-vercel-ai-ui-message-stream", HeaderValue::from_static("v1"));
    response
}
