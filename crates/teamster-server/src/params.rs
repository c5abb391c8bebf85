//! Query-string parameters, parsed with errors that name the parameter.

use std::collections::HashMap;

use axum::extract::{FromRequestParts, Query};
use axum::http::request::Parts;
use teamster_protocol::timestamp;
use teamster_service::ListOrder;

use crate::error::ApiError;

/// A request's query parameters (the last value wins for repeated keys).
pub struct Params(pub HashMap<String, String>);

impl<S: Send + Sync> FromRequestParts<S> for Params {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Query(map) = Query::<HashMap<String, String>>::from_request_parts(parts, state)
            .await
            .map_err(|rejection| ApiError::bad_request("invalid_request", format!("invalid query string: {rejection}")))?;
        Ok(Params(map))
    }
}

pub(crate) fn invalid(param: &str, message: String) -> ApiError {
    ApiError::bad_request("invalid_request", message).with_param(param)
}

impl Params {
    /// Refuses (400) a parameter not in `known`, naming it.
    pub fn only(&self, known: &[&str]) -> Result<(), ApiError> {
        let mut unknown: Vec<&str> = self.0.keys().map(String::as_str).filter(|name| !known.contains(name)).collect();
        unknown.sort_unstable();
        match unknown.first() {
            None => Ok(()),
            Some(name) => Err(invalid(name, format!("unknown query parameter {name:?}; this route takes {known:?}"))),
        }
    }

    /// A string parameter; empty means absent.
    pub fn string(&self, name: &str) -> Option<String> {
        self.0.get(name).filter(|value| !value.is_empty()).cloned()
    }

    /// A page size: `default` when absent, an error unless a positive integer, capped at `max`.
    pub fn limit(&self, default: u32, max: u32) -> Result<u32, ApiError> {
        match self.string("limit") {
            None => Ok(default),
            Some(text) => match text.parse::<u32>() {
                Ok(limit) if limit > 0 => Ok(limit.min(max)),
                _ => Err(invalid("limit", format!("limit must be an integer between 1 and {max}"))),
            },
        }
    }

    /// `asc` or `desc`, or `default` when absent.
    pub fn order(&self, default: ListOrder) -> Result<ListOrder, ApiError> {
        match self.string("order").as_deref() {
            None => Ok(default),
            Some("asc") => Ok(ListOrder::Ascending),
            Some("desc") => Ok(ListOrder::Descending),
            Some(other) => Err(invalid("order", format!("order must be \"asc\" or \"desc\", not {other:?}"))),
        }
    }

    /// An RFC 3339 timestamp, normalised.
    pub fn timestamp(&self, name: &str) -> Result<Option<String>, ApiError> {
        match self.string(name) {
            None => Ok(None),
            Some(text) => timestamp::normalize(&text)
                .map(Some)
                .ok_or_else(|| invalid(name, format!("{name} must be an RFC 3339 timestamp such as 2025-01-01T00:00:00Z"))),
        }
    }

    /// The `stream_format` of a turn's stream: `native` when absent. A native stream carries
    /// the `tool.progress` and `shell.output` extension events only when `include` names them.
    pub fn stream_format(&self) -> Result<StreamFormat, ApiError> {
        let mut extensions = Extensions::default();
        for name in self.string("include").iter().flat_map(|list| list.split(',')).map(str::trim) {
            match name {
                "tool.progress" => extensions.progress = true,
                "shell.output" => extensions.shell_output = true,
                other => {
                    return Err(invalid(
                        "include",
                        format!("include may only name \"tool.progress\" and \"shell.output\", not {other:?}"),
                    ));
                }
            }
        }
        match self.string("stream_format").as_deref() {
            None | Some("native") => Ok(StreamFormat::Native(extensions)),
            Some("data-stream") => Ok(StreamFormat::DataStream),
            Some(other) => Err(invalid(
                "stream_format",
                format!("stream_format must be one of \"native\", \"data-stream\", not {other:?}"),
            )),
        }
    }

    /// A flag: `true` or `false`, `false` when absent.
    pub fn flag(&self, name: &str) -> Result<bool, ApiError> {
        match self.string(name).as_deref() {
            None | Some("false") => Ok(false),
            Some("true") => Ok(true),
            Some(_) => Err(invalid(name, format!("{name} must be true or false"))),
        }
    }

    /// A non-negative integer.
    pub fn sequence(&self, name: &str) -> Result<Option<u64>, ApiError> {
        match self.string(name) {
            None => Ok(None),
            Some(text) => text
                .parse::<u64>()
                .map(Some)
                .map_err(|_| invalid(name, format!("{name} must be a non-negative integer"))),
        }
    }
}

/// The extension events a native stream carries besides the stored ones.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Extensions {
    /// `tool.progress`.
    pub progress: bool,
    /// `shell.output`.
    pub shell_output: bool,
}

impl Extensions {
    /// Every extension event (the gateway dialect's streams).
    pub const ALL: Extensions = Extensions { progress: true, shell_output: true };

    /// Whether an event's stored JSON is sent.
    pub fn sends(self, json: &str) -> bool {
        (self.progress || !teamster_protocol::Event::is_progress_json(json))
            && (self.shell_output || !teamster_protocol::Event::is_shell_output_json(json))
    }
}

/// The dialect a turn's event stream is sent in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamFormat {
    /// The events as stored (both TrueFoundry dialects), the extension events only as
    /// `Extensions` asks. The gateway dialect always sends them: its ids must be contiguous,
    /// and its client skips an event type it does not know (lists never carry them).
    Native(Extensions),
    /// The AI SDK data stream (`crate::data_stream`).
    DataStream,
}

/// The `Last-Event-ID` header as a sequence number, if present.
pub fn last_event_id(headers: &axum::http::HeaderMap) -> Result<Option<u64>, ApiError> {
    match headers.get("last-event-id") {
        None => Ok(None),
        Some(value) => value
            .to_str()
            .ok()
            .map(str::trim)
            .and_then(|text| text.parse::<u64>().ok())
            .map(Some)
            .ok_or_else(|| invalid("Last-Event-ID", "the Last-Event-ID header must be a non-negative integer".to_owned())),
    }
}
