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
                    let (param, message) = named_field(&path, &inner);
                    let error = ApiError::bad_request("invalid_request", format!("the request body is invalid: {message}"));
                    match param {
                        Some(param) => error.with_param(&param),
                        None => error,
                    }
                }
            }
        })?;
        deserializer.end().map_err(|error| ApiError::bad_request("invalid_json", format!("the request body is not valid JSON: {error}")))?;
        Ok(JsonBody(value))
    }
}

/// A data error of a body that is valid JSON, said of the field the user filled in (its path,
/// such as `manifest.models[0].name`), never of a line and column of JSON they may never have
/// seen: the field's path (none for the whole body) and the message. A missing field is named
/// with its path.
fn named_field(path: &str, error: &serde_json::Error) -> (Option<String>, String) {
    let text = error.to_string();
    let position = format!(" at line {} column {}", error.line(), error.column());
    let text = text.strip_suffix(&position).unwrap_or(&text);
    let missing = text.strip_prefix("missing field `").and_then(|rest| rest.strip_suffix('`'));
    let path = (path != ".").then_some(path);
    match (missing, path) {
        (Some(field), Some(path)) => (Some(format!("{path}.{field}")), format!("{path}.{field} is required")),
        (Some(field), None) => (Some(field.to_owned()), format!("{field} is required")),
        (None, Some(path)) => (Some(path.to_owned()), format!("{path}: {text}")),
        (None, None) => (None, text.to_owned()),
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
    use super::{is_json_media_type, named_field};

    #[test]
    fn data_errors_name_the_field_not_a_line_and_column() {
        #[derive(Debug, serde::Deserialize)]
        struct Model {
            #[allow(dead_code)]
            name: String,
        }
        #[derive(Debug, serde::Deserialize)]
        struct Body {
            #[allow(dead_code)]
            models: Vec<Model>,
        }
        let error_of = |json: &str| {
            let mut deserializer = serde_json::Deserializer::from_str(json);
            let error = serde_path_to_error::deserialize::<_, Body>(&mut deserializer).unwrap_err();
            let path = error.path().to_string();
            named_field(&path, &error.into_inner())
        };
        let (param, message) = error_of("{\"models\": [{\"name\": 5}]}");
        assert_eq!(param.as_deref(), Some("models[0].name"));
        assert_eq!(message, "models[0].name: invalid type: integer `5`, expected a string");
        let (param, message) = error_of("{\"models\": [{}]}");
        assert_eq!((param.as_deref(), message.as_str()), (Some("models[0].name"), "models[0].name is required"));
        let (param, message) = error_of("{}");
        assert_eq!((param.as_deref(), message.as_str()), (Some("models"), "models is required"));
        assert!(!message.contains("line"));
    }

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
