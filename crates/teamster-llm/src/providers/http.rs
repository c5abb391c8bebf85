//! The HTTP exchange the streaming adapters share.
//!
//! An adapter builds its request and a [`Decoder`] for its provider's JSON; [`stream_answer`]
//! sends the request, classifies the status (429 with its `Retry-After`, other errors with the
//! message of their body), feeds the event-stream body to the decoder as bytes arrive (or a whole
//! JSON answer, which some servers send even when asked to stream), and hands out the events in
//! order, ending with at most one error. Nothing is retried here: retries are a separate layer.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::time::Duration;

use futures_util::stream;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, RETRY_AFTER};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc2822;

use super::sse::SseDecoder;
use crate::{Error, ModelEvent, ModelStream, ToolDefinition};

/// How many bytes of an error body are kept in an [`Error::Provider`] message.
pub(crate) const MAX_ERROR_MESSAGE_BYTES: usize = 4 * 1024;
/// How many bytes of an error body are read at most.
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;
/// How many bytes of a non-streamed JSON answer are read at most.
const MAX_JSON_BODY_BYTES: usize = 32 * 1024 * 1024;
/// How long the rest of a body is read after the end of the answer, so that the connection can
/// be reused.
const DRAIN_TIMEOUT: Duration = Duration::from_millis(250);

/// Whether decoding goes on after a payload.
pub(crate) enum Flow {
    Continue,
    /// The provider marked the end of the answer.
    Done,
}

/// One provider's answer format: turns event payloads, or a whole JSON answer, into events.
pub(crate) trait Decoder: Send + 'static {
    /// Decodes the `data` of one server-sent event, appending what it carries to `out`. Events
    /// appended before an `Err` are still delivered, then the error ends the stream.
    fn take_payload(&mut self, payload: &str, out: &mut VecDeque<ModelEvent>) -> Result<Flow, Error>;

    /// Decodes a whole non-streamed JSON answer into the events a stream would have carried.
    fn take_json(&mut self, body: &[u8], out: &mut VecDeque<ModelEvent>) -> Result<(), Error>;

    /// Whether an answer whose body ended without the provider's end marker is complete anyway.
    fn is_complete(&self) -> bool;

    /// Appends what comes after everything else (the usage) once the answer is complete.
    fn finish(&mut self, out: &mut VecDeque<ModelEvent>);
}

/// A `POST` of a JSON body that asks for an event stream.
pub(crate) fn post(http: &reqwest::Client, url: &str, body: Vec<u8>) -> reqwest::RequestBuilder {
    http.post(url).header(CONTENT_TYPE, "application/json").header(ACCEPT, "text/event-stream").body(body)
}

/// Serialises a request body.
pub(crate) fn encode(body: &impl serde::Serialize) -> Result<Vec<u8>, Error> {
    serde_json::to_vec(body).map_err(|error| Error::Decode(format!("could not encode the request: {error}")))
}

/// A stream that fails at once.
pub(crate) fn failed(error: Error) -> ModelStream {
    Box::pin(stream::once(async move { Err(error) }))
}

/// Sends `request` when first polled and streams the answer through `decoder`.
pub(crate) fn stream_answer(request: reqwest::RequestBuilder, decoder: impl Decoder) -> ModelStream {
    let reader = Reader {
        phase: Phase::Connect(request),
        sse: SseDecoder::default(),
        decoder,
        events: VecDeque::new(),
        error: None,
        payloads: Vec::new(),
    };
    Box::pin(stream::unfold(reader, |mut reader| async move {
        let item = reader.next().await?;
        Some((item, reader))
    }))
}

/// The `parameters` of a tool, or an empty object schema when it has none.
pub(crate) fn tool_parameters(tool: &ToolDefinition) -> Cow<'_, serde_json::Value> {
    if tool.parameters.is_null() {
        Cow::Owned(serde_json::json!({"type": "object", "properties": {}}))
    } else {
        Cow::Borrowed(&tool.parameters)
    }
}

/// The human-readable part of an error value: a string, an object's `message`, or the JSON.
pub(crate) fn value_message(error: &serde_json::Value) -> String {
    match error {
        serde_json::Value::String(message) => message.clone(),
        _ => match error.get("message").and_then(|message| message.as_str()) {
            Some(message) => message.to_owned(),
            None => error.to_string(),
        },
    }
}

/// The longest prefix of `text` that fits in `max_bytes` and ends on a character boundary.
pub(crate) fn truncate(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Where the reader is in the exchange.
enum Phase {
    /// The request has not been sent yet.
    Connect(reqwest::RequestBuilder),
    /// The body is being read and decoded.
    Streaming(reqwest::Response),
    /// The answer is complete; the rest of the body is read and ignored so that the connection
    /// can be reused.
    Draining(reqwest::Response),
    Done,
}

/// The state of one answer, driven by [`Reader::next`].
struct Reader<D> {
    phase: Phase,
    sse: SseDecoder,
    decoder: D,
    /// Events decoded and not yet handed out, in order.
    events: VecDeque<ModelEvent>,
    /// The error that ends the stream once `events` are handed out.
    error: Option<Error>,
    /// Scratch space for the payloads one network chunk completes.
    payloads: Vec<String>,
}

impl<D: Decoder> Reader<D> {
    async fn next(&mut self) -> Option<Result<ModelEvent, Error>> {
        loop {
            if let Some(event) = self.events.pop_front() {
                return Some(Ok(event));
            }
            if let Some(error) = self.error.take() {
                self.phase = Phase::Done;
                return Some(Err(error));
            }
            match std::mem::replace(&mut self.phase, Phase::Done) {
                Phase::Done => return None,
                Phase::Connect(request) => match connect(request).await {
                    Ok(Connected::Stream(response)) => self.phase = Phase::Streaming(response),
                    Ok(Connected::Json(body)) => match self.decoder.take_json(&body, &mut self.events) {
                        Ok(()) => self.decoder.finish(&mut self.events),
                        Err(error) => self.error = Some(error),
                    },
                    Err(error) => return Some(Err(error)),
                },
                Phase::Streaming(mut response) => match response.chunk().await {
                    Ok(Some(bytes)) => match self.take_bytes(&bytes) {
                        Flow::Continue => self.phase = Phase::Streaming(response),
                        Flow::Done => self.phase = Phase::Draining(response),
                    },
                    Ok(None) => self.take_end_of_body(),
                    Err(error) => self.error = Some(transport_error(&error)),
                },
                Phase::Draining(mut response) => {
                    // Whatever follows the end of the answer is ignored; a server that keeps the
                    // connection open is given up on after a short while.
                    let drain = async {
                        let mut read = 0;
                        while let Ok(Some(bytes)) = response.chunk().await {
                            read += bytes.len();
                            if read > MAX_ERROR_BODY_BYTES {
                                break;
                            }
                        }
                    };
                    let _ = tokio::time::timeout(DRAIN_TIMEOUT, drain).await;
                    return None;
                }
            }
        }
    }

    /// Decodes one network chunk.
    fn take_bytes(&mut self, bytes: &[u8]) -> Flow {
        let mut payloads = std::mem::take(&mut self.payloads);
        let flow = match self.sse.feed(bytes, &mut payloads) {
            Ok(()) => self.take_payloads(&mut payloads),
            // The events the chunk completed before its bad line count, as they would had the
            // network cut the chunk there; an answer already complete ignores what follows.
            Err(error) => {
                if let Flow::Continue = self.take_payloads(&mut payloads) {
                    self.error = Some(error);
                }
                Flow::Done
            }
        };
        payloads.clear();
        self.payloads = payloads;
        flow
    }

    fn take_payloads(&mut self, payloads: &mut Vec<String>) -> Flow {
        for payload in payloads.drain(..) {
            match self.decoder.take_payload(&payload, &mut self.events) {
                Ok(Flow::Continue) => {}
                Ok(Flow::Done) => {
                    self.decoder.finish(&mut self.events);
                    return Flow::Done;
                }
                Err(error) => {
                    self.error = Some(error);
                    return Flow::Done;
                }
            }
        }
        Flow::Continue
    }

    /// The body ended: a last event without its blank line still counts, and an answer without
    /// its end marker is a broken stream unless the decoder says it is complete.
    fn take_end_of_body(&mut self) {
        let mut payloads = Vec::new();
        if let Err(error) = self.sse.finish(&mut payloads) {
            self.error = Some(error);
            return;
        }
        if let Flow::Done = self.take_payloads(&mut payloads) {
            return;
        }
        if self.decoder.is_complete() {
            self.decoder.finish(&mut self.events);
        } else {
            self.error =
                Some(Error::Transport("the provider's stream ended before the answer was complete".to_owned()));
        }
    }
}

/// Reads a whole event-stream body, cut into `chunks` as the network might deliver it, the way
/// [`stream_answer`] reads a response: the events in order, then the error that ended them.
#[cfg(test)]
pub(crate) fn decode_body<D: Decoder>(decoder: D, chunks: &[&[u8]]) -> (Vec<ModelEvent>, Option<Error>) {
    let mut reader =
        Reader { phase: Phase::Done, sse: SseDecoder::default(), decoder, events: VecDeque::new(), error: None, payloads: Vec::new() };
    let mut ended = false;
    for chunk in chunks {
        if let Flow::Done = reader.take_bytes(chunk) {
            ended = true;
            break;
        }
    }
    if !ended {
        reader.take_end_of_body();
    }
    (reader.events.into_iter().collect(), reader.error)
}

/// What a successful response turned out to carry.
enum Connected {
    Stream(reqwest::Response),
    Json(Vec<u8>),
}

/// Sends the request and classifies the response status.
async fn connect(request: reqwest::RequestBuilder) -> Result<Connected, Error> {
    let response = request.send().await.map_err(|error| transport_error(&error))?;
    let status = response.status();
    if !status.is_success() {
        let retry_after = retry_after(response.headers(), OffsetDateTime::now_utc());
        let body = read_body(response, MAX_ERROR_BODY_BYTES).await.unwrap_or_default();
        let message = error_message(&body)
            .unwrap_or_else(|| status.canonical_reason().unwrap_or("error without a body").to_owned());
        if status == reqwest::StatusCode::TOO_MANY_REQUESTS {
            return Err(Error::RateLimited { retry_after, message });
        }
        return Err(Error::Provider { status: status.as_u16(), message });
    }
    let is_json = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.trim_start().starts_with("application/json"));
    if !is_json {
        return Ok(Connected::Stream(response));
    }
    let body = read_body(response, MAX_JSON_BODY_BYTES).await.map_err(|error| transport_error(&error))?;
    Ok(Connected::Json(body))
}

/// Reads a body, stopping after `limit` bytes.
async fn read_body(mut response: reqwest::Response, limit: usize) -> Result<Vec<u8>, reqwest::Error> {
    let mut body = Vec::new();
    while let Some(bytes) = response.chunk().await? {
        body.extend_from_slice(&bytes);
        if body.len() >= limit {
            body.truncate(limit);
            break;
        }
    }
    Ok(body)
}

/// The message of an error body: `error.message` (OpenAI's and Anthropic's shape), a top-level
/// `message`, or the raw body.
fn error_message(body: &[u8]) -> Option<String> {
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) {
        let message = match value.get("error") {
            Some(error) => Some(value_message(error)),
            None => value.get("message").and_then(|message| message.as_str()).map(str::to_owned),
        };
        if let Some(message) = message.filter(|message| !message.is_empty()) {
            return Some(truncate(&message, MAX_ERROR_MESSAGE_BYTES).to_owned());
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    (!text.is_empty()).then(|| truncate(text, MAX_ERROR_MESSAGE_BYTES).to_owned())
}

/// The wait a 429 asks for, as of `now`: `retry-after-ms` (OpenAI's own header), then
/// `Retry-After` in seconds or as an HTTP date (a date in the past means no wait).
fn retry_after(headers: &HeaderMap, now: OffsetDateTime) -> Option<Duration> {
    let header = |name: &str| headers.get(name)?.to_str().ok().map(str::trim);
    let seconds = |text: &str| -> Option<f64> {
        let value: f64 = text.parse().ok()?;
        (value.is_finite() && value >= 0.0).then_some(value)
    };
    if let Some(millis) = header("retry-after-ms").and_then(seconds) {
        return Some(Duration::from_secs_f64(millis / 1000.0));
    }
    let value = header(RETRY_AFTER.as_str())?;
    if let Some(seconds) = seconds(value) {
        return Some(Duration::from_secs_f64(seconds));
    }
    let date = OffsetDateTime::parse(value, &Rfc2822).ok()?;
    Some(Duration::try_from(date - now).unwrap_or(Duration::ZERO))
}

/// A transport error with its chain of causes, which is where reqwest keeps the useful part
/// ("connection refused").
fn transport_error(error: &reqwest::Error) -> Error {
    let mut message = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !message.contains(&cause_text) {
            message.push_str(": ");
            message.push_str(&cause_text);
        }
        source = cause.source();
    }
    Error::Transport(message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn error_bodies_give_their_message() {
        assert_eq!(error_message(b"{\"error\":{\"message\":\"bad key\"}}").as_deref(), Some("bad key"));
        assert_eq!(
            error_message(br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#).as_deref(),
            Some("Overloaded")
        );
        assert_eq!(error_message(b"{\"message\":\"top level\"}").as_deref(), Some("top level"));
        assert_eq!(error_message(b"  plain text  ").as_deref(), Some("plain text"));
        assert_eq!(error_message(b""), None);
        assert_eq!(truncate("aé", 2), "a");
    }

    #[test]
    fn retry_after_reads_milliseconds_seconds_and_http_dates() {
        let now = OffsetDateTime::parse("Wed, 21 Oct 2015 07:28:00 GMT", &Rfc2822).unwrap();
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut headers = HeaderMap::new();
            for (name, value) in pairs {
                headers.insert(*name, HeaderValue::from_static(value));
            }
            headers
        };
        let wait = |pairs: &[(&'static str, &'static str)]| retry_after(&headers(pairs), now);
        assert_eq!(wait(&[("retry-after-ms", "1500"), ("retry-after", "9")]), Some(Duration::from_millis(1500)));
        assert_eq!(wait(&[("retry-after", "7")]), Some(Duration::from_secs(7)));
        assert_eq!(wait(&[("retry-after", "0.5")]), Some(Duration::from_millis(500)));
        assert_eq!(wait(&[("retry-after", "Wed, 21 Oct 2015 07:30:30 GMT")]), Some(Duration::from_secs(150)));
        assert_eq!(wait(&[("retry-after", "Wed, 21 Oct 2015 07:00:00 GMT")]), Some(Duration::ZERO));
        assert_eq!(wait(&[("retry-after", "soon")]), None);
        assert_eq!(wait(&[("retry-after", "-3")]), None);
        assert_eq!(wait(&[]), None);
    }
}
