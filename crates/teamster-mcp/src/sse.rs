//! The legacy HTTP+SSE transport (protocol 2024-11-05), which `rmcp` no longer ships: a GET opens
//! an event stream whose first `endpoint` event names the URL to POST messages to; every answer
//! arrives on the stream as a `message` event.
//!
//! The stream is the session: when it ends, the transport closes and the connection is dead.

use std::sync::Arc;

use futures_util::stream::{BoxStream, StreamExt};
use rmcp::RoleClient;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::streamable_http_client::{SseError, StreamableHttpError};
use sse_stream::Sse;

use crate::http::{HttpClient, HttpError};

/// An open legacy SSE session.
pub(crate) struct SseTransport {
    client: HttpClient,
    /// Where messages are posted, from the `endpoint` event.
    post_url: Arc<str>,
    events: BoxStream<'static, Result<Sse, SseError>>,
}

/// Why the event stream could not be opened.
pub(crate) type OpenError = StreamableHttpError<HttpError>;

impl SseTransport {
    /// Opens the event stream and waits for its `endpoint` event. The endpoint must be on the
    /// stream's origin, so credentials never go to another host.
    pub(crate) async fn open(client: HttpClient, url: &str) -> Result<SseTransport, OpenError> {
        let (mut events, stream_url) = client.open_event_stream(url).await?;
        while let Some(event) = events.next().await {
            let event = event?;
            if event.event.as_deref() != Some("endpoint") {
                continue;
            }
            let endpoint = event.data.unwrap_or_default();
            let post_url = stream_url.join(endpoint.trim()).map_err(|error| {
                StreamableHttpError::UnexpectedServerResponse(
                    format!("bad endpoint {:?}: {error}", quoted(&endpoint)).into(),
                )
            })?;
            if post_url.origin() != stream_url.origin() {
                return Err(StreamableHttpError::UnexpectedServerResponse(
                    format!("the endpoint {} is on another origin than the event stream", quoted(post_url.as_str())).into(),
                ));
            }
            return Ok(SseTransport { client, post_url: post_url.as_str().into(), events });
        }
        Err(StreamableHttpError::UnexpectedEndOfStream)
    }
}

/// The most of a server's endpoint an error quotes, in characters: what the server sent is
/// not copied into messages beyond what names the problem.
const MAX_QUOTED_ENDPOINT: usize = 100;

fn quoted(endpoint: &str) -> String {
    match endpoint.char_indices().nth(MAX_QUOTED_ENDPOINT) {
        Some((end, _)) => format!("{}...", &endpoint[..end]),
        None => endpoint.to_owned(),
    }
}

impl Transport<RoleClient> for SseTransport {
    type Error = OpenError;

    fn send(
        &mut self,
        message: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let client = self.client.clone();
        let post_url = self.post_url.clone();
        async move {
            let body = serde_json::to_vec(&message)?;
            client.post_only(&post_url, body).await
        }
    }

    /// The next message on the stream; `None` once the stream ends or fails.
    async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
        loop {
            let event = match self.events.next().await? {
                Ok(event) => event,
                Err(error) => {
                    tracing::debug!(%error, "MCP event stream failed");
                    return None;
                }
            };
            if event.event.as_deref().is_some_and(|kind| kind != "message") {
                continue;
            }
            let Some(data) = event.data else { continue };
            match serde_json::from_str(&data) {
                Ok(message) => return Some(message),
                Err(error) => tracing::warn!(%error, "MCP server sent an event that is not JSON-RPC"),
            }
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        std::future::ready(Ok(()))
    }
}
