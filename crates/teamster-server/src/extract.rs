//! Request extractors whose failures are [`ApiError`]s in the spec's shape.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use crate::error::ApiError;
use crate::in_flight::BodyDeadline;

/// A JSON body. A body that does not say it is JSON (`Content-Type: application/json`, or
/// another `+json` type) is 415: a browser may send `text/plain` across sites without asking
/// first. Malformed JSON is 400 `invalid_json`; JSON of the wrong shape is 400
/// `invalid_request` naming the problem; an oversize body is 413; a body that has not arrived
/// whole by the request's deadline (see `in_flight`) is 408. An empty body reads as `{}`, since
/// several endpoints take an optional body.
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let declared_json = request
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(is_json_media_type);
        let deadline = request.extensions().get::<BodyDeadline>().copied();
        let read = Bytes::from_request(request, state);
        let read = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline.at, read).await.map_err(|_| {
                ApiError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    "request_timeout",
                    format!("the request body did not arrive within {} s", deadline.timeout.as_secs_f64()),
                )
            })?,
            None => read.await,
        };
        let bytes = read.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", "the request body is larger than this server accepts")
            } else {
                ApiError::bad_request("invalid_request", format!("the request body could not be read: {rejection}"))
            }
        })?;
        let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else if !declared_json {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "the request body must be JSON, sent with Content-Type: application/json",
            ));
        } else {
            &bytes
        };
        let mut deserializer = serde_json::Deserializer::from_slice(bytes);
        let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
            let path = error.path().to_string();
            let inner = error.into_inner();
            match inner.classify() {
                serde_json::error::Category::Syntax | serde_json::error::Category::Eof | serde_json::error::Category::Io => {
                    ApiError::bad_request("invalid_json", format!("the request body is not valid JSON: {inner}"))
                }
                serde_json::error::Category::Data => {
                    let at = if path == "." { String::new() } else { format!(" at {path}") };
                    let error = ApiError::bad_request("invalid_request", format!("the request body is invalid{at}: {inner}"));
                    if path == "." { error } else { error.with_param(&path) }
                }
            }
        })?;
        deserializer.end().map_err(|error| ApiError::bad_request("invalid_json", format!("the request body is not valid JSON: {error}")))?;
        Ok(JsonBody(value))
    }
}

/// Whether a `Content-Type` value names JSON: `application/json` or `application/<x>+json`,
/// with any parameters.
fn is_json_media_type(value: &str) -> bool {
    let essence = value.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
}

#[cfg(test)]
mod tests {
    use super::is_json_media_type;

    #[test]
    fn json_media_types() {
        for json in ["application/json", "Application/JSON; charset=utf-8", "application/merge-patch+json"] {
            assert!(is_json_media_type(json), "{json}");
        }
        for other in ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "", "json"] {
            assert!(!is_json_media_type(other), "{other}");
        }
    }
}
