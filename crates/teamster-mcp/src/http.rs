//! The HTTP side of the streamable HTTP transport (`rmcp`'s [`StreamableHttpClient`] on the
//! workspace's `reqwest`), and the requests of the legacy SSE transport.
//!
//! `rmcp` ships this client for a newer `reqwest` major than the rest of the workspace uses, so it
//! is written here instead, which also lets every request carry the configured headers and a
//! fresh bearer token, answer a 401 as `AuthRequired` with or without a challenge, remember the
//! session id for `mcp.initialize`, and bound every body it reads. A member-supplied server's
//! client carries an [`EgressPolicy`]: its names resolve only to allowed addresses, its
//! redirects are checked, and an IP-literal URL is checked before each request. An error answer
//! is reported by its status alone: the body of an answer from wherever the URL pointed never
//! reaches the caller's messages.

use std::borrow::Cow;
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::stream::{BoxStream, Stream, StreamExt};
use reqwest::StatusCode;
use reqwest::header::{
    ACCEPT, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, WWW_AUTHENTICATE,
};
use rmcp::model::{ClientJsonRpcMessage, JsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    AuthRequiredError, SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
};
use sse_stream::{Sse, SseStream};
use teamster_egress::{EgressError, EgressPolicy};

use crate::McpError;
use crate::config::{BearerTokenProvider, HttpTransport, Limits};

const SESSION_ID: &str = "mcp-session-id";
const LAST_EVENT_ID: &str = "last-event-id";
const EVENT_STREAM: &str = "text/event-stream";
const JSON: &str = "application/json";

/// Bytes of an error response body read to find a JSON-RPC error in it (the body itself is
/// never quoted).
const MAX_ERROR_BODY: usize = 4096;

/// The longest `Content-Type` quoted in an error, in characters.
const MAX_QUOTED_CONTENT_TYPE: usize = 64;

/// Headers the transport sets itself; configuring one of them is an error.
const RESERVED_HEADERS: &[&str] =
    &["accept", "content-type", "content-length", SESSION_ID, "mcp-protocol-version", LAST_EVENT_ID];

/// A failure below MCP: the request could not be sent or its body not read.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("{0}")]
    Request(#[from] reqwest::Error),
    #[error("the server's answer is larger than {limit} bytes")]
    TooLarge { limit: usize },
    #[error(transparent)]
    Egress(#[from] EgressError),
}

pub(crate) type Error = StreamableHttpError<HttpError>;

/// One MCP server's HTTP client; cheap to clone (the transport clones it per request).
#[derive(Clone)]
pub(crate) struct HttpClient {
    http: reqwest::Client,
    /// Configured headers, validated once.
    headers: Arc<HeaderMap>,
    bearer_token: Option<Arc<dyn BearerTokenProvider>>,
    /// The last `Mcp-Session-Id` the server assigned.
    session_id: Arc<Mutex<Option<String>>>,
    max_message_bytes: usize,
    /// The destinations a member-supplied server's URLs may reach; `None` for an operator's.
    egress: Option<Arc<EgressPolicy>>,
}

impl HttpClient {
    pub(crate) fn new(config: &HttpTransport, limits: &Limits) -> Result<HttpClient, McpError> {
        let mut headers = HeaderMap::new();
        for (name, value) in &config.headers {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| McpError::InvalidConfig(format!("invalid header name {name:?}")))?;
            if RESERVED_HEADERS.contains(&name.as_str()) {
                return Err(McpError::InvalidConfig(format!("header {name} is set by the MCP transport")));
            }
            let mut value = HeaderValue::from_str(value)
                .map_err(|_| McpError::InvalidConfig(format!("invalid value for header {name}")))?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        let builder = match &config.egress {
            Some(policy) => teamster_egress::client_builder(Arc::clone(policy))
                .redirect(teamster_egress::redirect_policy(Arc::clone(policy), same_origin_redirect)),
            None => reqwest::Client::builder().redirect(reqwest::redirect::Policy::custom(same_origin_redirect)),
        };
        let http = builder
            .connect_timeout(std::time::Duration::from_secs(10))
            .build()
            .map_err(|error| McpError::InvalidConfig(format!("cannot build an HTTP client: {error}")))?;
        Ok(HttpClient {
            http,
            headers: Arc::new(headers),
            bearer_token: config.bearer_token.clone(),
            session_id: Arc::default(),
            max_message_bytes: limits.max_message_bytes,
            egress: config.egress.clone(),
        })
    }

    /// Refuses a URL whose literal address the egress policy forbids (a name is checked when
    /// it is resolved, at connect time).
    fn check_destination(&self, url: &str) -> Result<(), Error> {
        let Some(policy) = &self.egress else { return Ok(()) };
        let parsed = reqwest::Url::parse(url)
            .map_err(|_| StreamableHttpError::Client(HttpError::Egress(EgressError::NoHost)))?;
        policy.check_url(&parsed).map_err(|error| StreamableHttpError::Client(error.into()))
    }

    /// The session id the server assigned, if any.
    pub(crate) fn session_id(&self) -> Option<String> {
        self.session_id.lock().map(|id| id.clone()).unwrap_or_default()
    }

    /// The headers of one request: the configured ones, a fresh bearer token, the session and
    /// the protocol headers `rmcp` adds.
    async fn request_headers(
        &self,
        session_id: Option<&str>,
        protocol_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HeaderMap {
        let mut headers = HeaderMap::clone(&self.headers);
        if let Some(provider) = &self.bearer_token
            && let Some(token) = provider.bearer_token().await
            && let Ok(mut value) = HeaderValue::from_str(&format!("Bearer {token}"))
        {
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        if let Some(session_id) = session_id.and_then(|id| HeaderValue::from_str(id).ok()) {
            headers.insert(SESSION_ID, session_id);
        }
        for (name, value) in protocol_headers {
            headers.insert(name, value);
        }
        headers
    }

    /// Opens the legacy transport's event stream; answers the stream and the URL it came from
    /// (after redirects), which relative endpoint URLs are resolved against.
    pub(crate) async fn open_event_stream(
        &self,
        url: &str,
    ) -> Result<(BoxStream<'static, Result<Sse, SseError>>, reqwest::Url), Error> {
        self.check_destination(url)?;
        let mut headers = self.request_headers(None, HashMap::new()).await;
        headers.insert(ACCEPT, HeaderValue::from_static(EVENT_STREAM));
        let response = self
            .http
            .get(url)
            .headers(headers)
            .send()
            .await
            .map_err(request_error)?;
        check_auth(&response)?;
        let status = response.status();
        if !status.is_success() {
            return Err(unexpected(format!("HTTP {status} on the event stream")));
        }
        let content_type = content_type(&response);
        if !content_type.starts_with(EVENT_STREAM) {
            return Err(StreamableHttpError::UnexpectedContentType(Some(quoted(content_type))));
        }
        let url = response.url().clone();
        Ok((bounded_events(response.bytes_stream(), self.max_message_bytes), url))
    }

    /// Posts one message of the legacy transport, whose answer arrives on the event stream.
    pub(crate) async fn post_only(&self, url: &str, body: Vec<u8>) -> Result<(), Error> {
        self.check_destination(url)?;
        let mut headers = self.request_headers(None, HashMap::new()).await;
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(JSON));
        let response = self
            .http
            .post(url)
            .headers(headers)
            .body(body)
            .send()
            .await
            .map_err(request_error)?;
        check_auth(&response)?;
        let status = response.status();
        if !status.is_success() {
            return Err(unexpected(format!("HTTP {status} on a posted message")));
        }
        Ok(())
    }

    fn remember_session(&self, response: &reqwest::Response) -> Option<String> {
        let session_id = response.headers().get(SESSION_ID)?.to_str().ok()?.to_owned();
        if let Ok(mut slot) = self.session_id.lock() {
            *slot = Some(session_id.clone());
        }
        Some(session_id)
    }
}

impl StreamableHttpClient for HttpClient {
    type Error = HttpError;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth_header: Option<String>,
        protocol_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, Error> {
        self.check_destination(&uri)?;
        let mut headers = self.request_headers(session_id.as_deref(), protocol_headers).await;
        headers.insert(ACCEPT, HeaderValue::from_static("application/json, text/event-stream"));
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(JSON));
        let body = serde_json::to_vec(&message)?;
        let response = self
            .http
            .post(uri.as_ref())
            .headers(headers)
            .body(body)
            .send()
            .await
            .map_err(request_error)?;
        let status = response.status();
        check_auth(&response)?;
        if matches!(status, StatusCode::ACCEPTED | StatusCode::NO_CONTENT) {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if status == StatusCode::NOT_FOUND && session_id.is_some() {
            return Err(StreamableHttpError::SessionExpired);
        }
        let session_id = self.remember_session(&response);
        let content_type = content_type(&response);
        let expects_answer = matches!(message, ClientJsonRpcMessage::Request(_));
        if !status.is_success() {
            let body = read_body(response, MAX_ERROR_BODY, true).await.unwrap_or_default();
            if content_type.starts_with(JSON)
                && let Ok(error @ JsonRpcMessage::Error(_)) =
                    serde_json::from_slice::<ServerJsonRpcMessage>(&body)
            {
                return Ok(StreamableHttpPostResponse::Json(error, session_id));
            }
            return Err(unexpected(format!("HTTP {status}")));
        }
        if !expects_answer && declared_length(&response) == Some(0) {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if content_type.starts_with(EVENT_STREAM) {
            let events = bounded_events(response.bytes_stream(), self.max_message_bytes);
            return Ok(StreamableHttpPostResponse::Sse(events, session_id));
        }
        if content_type.starts_with(JSON) {
            let body = read_body(response, self.max_message_bytes, false).await?;
            return match serde_json::from_slice::<ServerJsonRpcMessage>(&body) {
                Ok(answer) => Ok(StreamableHttpPostResponse::Json(answer, session_id)),
                Err(_) if !expects_answer => Ok(StreamableHttpPostResponse::Accepted),
                // serde's message may quote the body; only where it broke is kept.
                Err(error) => Err(unexpected(format!(
                    "the server's JSON is not a JSON-RPC message (line {}, column {})",
                    error.line(),
                    error.column()
                ))),
            };
        }
        if !expects_answer {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        Err(StreamableHttpError::UnexpectedContentType(Some(quoted(content_type))))
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        _auth_header: Option<String>,
        protocol_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), Error> {
        self.check_destination(&uri)?;
        let headers = self.request_headers(Some(&session_id), protocol_headers).await;
        let response = self
            .http
            .delete(uri.as_ref())
            .headers(headers)
            .send()
            .await
            .map_err(request_error)?;
        let status = response.status();
        if status.is_success() || status == StatusCode::METHOD_NOT_ALLOWED || status == StatusCode::NOT_FOUND
        {
            return Ok(());
        }
        Err(unexpected(format!("HTTP {status} when closing the session")))
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _auth_header: Option<String>,
        protocol_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, Error> {
        self.check_destination(&uri)?;
        let mut headers = self.request_headers(session_id.as_deref(), protocol_headers).await;
        headers.insert(ACCEPT, HeaderValue::from_static(EVENT_STREAM));
        if let Some(value) = last_event_id.and_then(|id| HeaderValue::from_str(&id).ok()) {
            headers.insert(LAST_EVENT_ID, value);
        }
        let response = self
            .http
            .get(uri.as_ref())
            .headers(headers)
            .send()
            .await
            .map_err(request_error)?;
        let status = response.status();
        if status == StatusCode::METHOD_NOT_ALLOWED {
            return Err(StreamableHttpError::ServerDoesNotSupportSse);
        }
        check_auth(&response)?;
        if !status.is_success() {
            return Err(unexpected(format!("HTTP {status} on the event stream")));
        }
        let content_type = content_type(&response);
        if !content_type.starts_with(EVENT_STREAM) {
            return Err(StreamableHttpError::UnexpectedContentType(Some(quoted(content_type))));
        }
        Ok(bounded_events(response.bytes_stream(), self.max_message_bytes))
    }
}

/// A 401 becomes `AuthRequired` (the challenge is empty when the server sent none).
fn check_auth(response: &reqwest::Response) -> Result<(), Error> {
    if response.status() != StatusCode::UNAUTHORIZED {
        return Ok(());
    }
    let challenge = response
        .headers()
        .get(WWW_AUTHENTICATE)
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
        .unwrap_or_default();
    Err(StreamableHttpError::AuthRequired(AuthRequiredError::new(challenge)))
}

/// A request that failed; an egress refusal (from the resolver or the redirect policy, deep in
/// `reqwest`'s error) is reported as itself, so the message says why.
fn request_error(error: reqwest::Error) -> Error {
    match teamster_egress::refusal(&error) {
        Some(refused) => StreamableHttpError::Client(HttpError::Egress(refused.clone())),
        None => StreamableHttpError::Client(error.into()),
    }
}

fn unexpected(message: String) -> Error {
    StreamableHttpError::UnexpectedServerResponse(Cow::Owned(message))
}

fn content_type(response: &reqwest::Response) -> String {
    response
        .headers()
        .get(CONTENT_TYPE)
        .map(|value| String::from_utf8_lossy(value.as_bytes()).to_ascii_lowercase())
        .unwrap_or_default()
}

/// A `Content-Type` as an error quotes it: cut to [`MAX_QUOTED_CONTENT_TYPE`] characters.
fn quoted(content_type: String) -> String {
    match content_type.char_indices().nth(MAX_QUOTED_CONTENT_TYPE) {
        Some((end, _)) => format!("{}...", &content_type[..end]),
        None => content_type,
    }
}

fn declared_length(response: &reqwest::Response) -> Option<u64> {
    response.headers().get(CONTENT_LENGTH)?.to_str().ok()?.parse().ok()
}

/// Reads a body of at most `limit` bytes; with `truncate` a longer one is cut instead of
/// refused.
async fn read_body(response: reqwest::Response, limit: usize, truncate: bool) -> Result<Vec<u8>, Error> {
    if !truncate && declared_length(&response).is_some_and(|length| length > limit as u64) {
        return Err(StreamableHttpError::Client(HttpError::TooLarge { limit }));
    }
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|error| StreamableHttpError::Client(error.into()))?;
        if chunk.len() > limit - body.len() {
            if truncate {
                body.extend_from_slice(&chunk[..limit - body.len()]);
                break;
            }
            return Err(StreamableHttpError::Client(HttpError::TooLarge { limit }));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Parses an SSE body, failing once one event grows past `limit` bytes.
fn bounded_events<S>(bytes: S, limit: usize) -> BoxStream<'static, Result<Sse, SseError>>
where
    S: Stream<Item = Result<Bytes, reqwest::Error>> + Send + 'static,
{
    let bounded =
        EventSizeLimit { inner: Box::pin(bytes), limit, event_bytes: 0, after_newline: false, failed: false };
    SseStream::from_bytes_stream(bounded).boxed()
}

/// Counts the bytes of the current SSE event (since the last blank line) and fails the stream
/// when they pass the limit, before the parser buffers them.
struct EventSizeLimit {
    inner: Pin<Box<dyn Stream<Item = Result<Bytes, reqwest::Error>> + Send>>,
    limit: usize,
    event_bytes: usize,
    /// Whether the last byte seen ended a line (`\r` bytes are ignored).
    after_newline: bool,
    failed: bool,
}

impl Stream for EventSizeLimit {
    type Item = Result<Bytes, HttpError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.failed {
            return Poll::Ready(None);
        }
        match self.inner.as_mut().poll_next(cx) {
            Poll::Ready(Some(Ok(chunk))) => {
                let mut too_large = false;
                for &byte in chunk.iter() {
                    match byte {
                        b'\r' => {}
                        b'\n' if self.after_newline => self.event_bytes = 0,
                        b'\n' => self.after_newline = true,
                        _ => {
                            self.after_newline = false;
                            self.event_bytes += 1;
                            too_large |= self.event_bytes > self.limit;
                        }
                    }
                }
                if too_large {
                    self.failed = true;
                    return Poll::Ready(Some(Err(HttpError::TooLarge { limit: self.limit })));
                }
                Poll::Ready(Some(Ok(chunk)))
            }
            Poll::Ready(Some(Err(error))) => {
                self.failed = true;
                Poll::Ready(Some(Err(error.into())))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Follows only same-origin 307 and 308 redirects (they keep the method and body), so the
/// session id and credentials never go to another host.
fn same_origin_redirect(attempt: reqwest::redirect::Attempt<'_>) -> reqwest::redirect::Action {
    let keeps_body = matches!(attempt.status(), StatusCode::TEMPORARY_REDIRECT | StatusCode::PERMANENT_REDIRECT);
    let same_origin = attempt.previous().first().is_some_and(|first| first.origin() == attempt.url().origin());
    if !keeps_body || !same_origin {
        attempt.stop()
    } else if attempt.previous().len() > 5 {
        attempt.error("too many redirects")
    } else {
        attempt.follow()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn events(chunks: &[&'static str], limit: usize) -> Vec<Result<Option<String>, String>> {
        let chunks: Vec<Result<Bytes, reqwest::Error>> =
            chunks.iter().map(|chunk| Ok(Bytes::from_static(chunk.as_bytes()))).collect();
        bounded_events(futures_util::stream::iter(chunks), limit)
            .map(|event| event.map(|event| event.data).map_err(|error| error.to_string()))
            .collect()
            .await
    }

    #[tokio::test]
    async fn sse_events_are_bounded_one_at_a_time() {
        let small = events(&["data: 12345\n\n", "data: 67", "890\r\n\r\n"], 16).await;
        assert_eq!(small, vec![Ok(Some("12345".to_owned())), Ok(Some("67890".to_owned()))]);

        let large = events(&["data: 12345\n\n", "data: 123456789012345678901234567890\n\n"], 16).await;
        assert_eq!(large[0], Ok(Some("12345".to_owned())));
        assert!(large[1].as_ref().is_err_and(|error| error.contains("larger than 16 bytes")), "{large:?}");
    }

    #[test]
    fn reserved_and_invalid_headers_are_refused() {
        let limits = Limits::default();
        for (name, value) in [("Mcp-Session-Id", "x"), ("Accept", "x"), ("bad header", "x"), ("X-Ok", "a\nb")]
        {
            let config = HttpTransport::new("http://127.0.0.1:1/mcp").header(name, value);
            assert!(
                matches!(HttpClient::new(&config, &limits), Err(McpError::InvalidConfig(_))),
                "{name}: {value:?} was accepted"
            );
        }
        let config = HttpTransport::new("http://127.0.0.1:1/mcp").header("Authorization", "Bearer t");
        assert!(HttpClient::new(&config, &limits).is_ok());
    }
}
