//! HTTP errors: every failure becomes `{"error": {"message", "type", "code", "param"}}` with
//! the right status. Internals are logged, never shown.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use teamster_protocol::api::{ErrorDetail, ErrorResponse};
use teamster_service::ServiceError;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub param: Option<String>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { status, code, message: message.into(), param: None }
    }

    pub fn bad_request(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub fn with_param(mut self, param: &str) -> ApiError {
        self.param = Some(param.to_owned());
        self
    }

    /// The native API's status for a failed sandbox or other dependency: 424, not 502.
    pub fn upstream_as_failed_dependency(mut self) -> ApiError {
        if self.status == StatusCode::BAD_GATEWAY {
            self.status = StatusCode::FAILED_DEPENDENCY;
        }
        self
    }
}

fn error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 | 408 | 413 | 415 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        405 => "invalid_request_error",
        409 => "conflict_error",
        421 => "invalid_request_error",
        410 => "not_found_error",
        412 => "precondition_failed_error",
        424 => "failed_dependency_error",
        429 => "rate_limit_error",
        _ => "server_error",
    }
}

/// The most characters of a message an error body carries; messages quote what a client sent,
/// and a megabyte name must not come back as a megabyte error.
const MAX_MESSAGE_CHARS: usize = 1024;
/// The most characters of the `param` an error body names.
const MAX_PARAM_CHARS: usize = 256;

/// `text` cut to at most `max` characters, with an ellipsis where it was cut.
fn capped(mut text: String, max: usize) -> String {
    if let Some((end, _)) = text.char_indices().nth(max) {
        text.truncate(end);
        text.push('…');
    }
    text
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // A request refused for want of a slot is the server defending itself, not a failure:
        // under a flood, logging each as an error would flood the log too.
        if self.status.is_server_error() && self.code != "server_busy" {
            tracing::error!(status = %self.status, message = %self.message, "request failed");
        }
        let retry_after = match (self.status, self.code) {
            (StatusCode::CONFLICT, "turn_running") => Some(RETRY_RUNNING_TURN),
            (StatusCode::TOO_MANY_REQUESTS, _) => Some(RETRY_TOO_MANY),
            _ => None,
        };
        let body = ErrorResponse {
            error: ErrorDetail {
                message: capped(self.message, MAX_MESSAGE_CHARS),
                kind: Some(error_type(self.status).to_owned()),
                code: Some(self.code.to_owned()),
                param: self.param.map(|param| capped(param, MAX_PARAM_CHARS)),
            },
        };
        let mut response = (self.status, Json(body)).into_response();
        if let Some(seconds) = retry_after {
            response.headers_mut().insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from_static(seconds));
        }
        response
    }
}

/// When to try again after a 409 `turn_running`: turns that are cancelled or finishing end
/// within about a second.
const RETRY_RUNNING_TURN: &str = "1";

/// When to try again after a 429 that names no time of its own (a quota of running turns,
/// queued follow-ups): the rate limiter sets its own.
const RETRY_TOO_MANY: &str = "1";

impl From<teamster_service::IdentityError> for ApiError {
    fn from(error: teamster_service::IdentityError) -> ApiError {
        ServiceError::from(error).into()
    }
}

impl From<teamster_service::McpHostError> for ApiError {
    fn from(error: teamster_service::McpHostError) -> ApiError {
        ServiceError::from(error).into()
    }
}

impl From<ServiceError> for ApiError {
    fn from(error: ServiceError) -> ApiError {
        let message = error.to_string();
        match error {
            ServiceError::Invalid { param, .. } => {
                let code = if param == Some("input") { "invalid_input" } else { "invalid_request" };
                ApiError { status: StatusCode::BAD_REQUEST, code, message, param: param.map(str::to_owned) }
            }
            ServiceError::Forbidden(_) => ApiError::new(StatusCode::FORBIDDEN, "forbidden", message),
            ServiceError::NotFound(_) => ApiError::new(StatusCode::NOT_FOUND, "not_found", message),
            ServiceError::TooLarge(_) => ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", message),
            ServiceError::Conflict { code, .. } => ApiError::new(StatusCode::CONFLICT, code, message),
            ServiceError::PreconditionFailed(_) => {
                ApiError::new(StatusCode::PRECONDITION_FAILED, "precondition_failed", message)
            }
            ServiceError::Gone(_) => ApiError::new(StatusCode::GONE, "gone", message),
            ServiceError::TooMany(_) => ApiError::new(StatusCode::TOO_MANY_REQUESTS, "too_many_requests", message),
            ServiceError::Unprocessable(_) => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "unsupported", message),
            ServiceError::AuthRequired(_) => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "auth_required", message),
            ServiceError::FailedDependency(_) => {
                ApiError::new(StatusCode::FAILED_DEPENDENCY, "failed_dependency", message)
            }
            ServiceError::Upstream(_) => ApiError::new(StatusCode::BAD_GATEWAY, "upstream_unavailable", message),
            ServiceError::Unavailable(_) => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message),
            ServiceError::Store(source) => {
                tracing::error!(error = %source, "storage failure");
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", "internal server error")
            }
        }
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

#[cfg(test)]
mod tests {
    use super::capped;

    #[test]
    fn long_messages_are_cut_on_character_boundaries() {
        assert_eq!(capped("short".to_owned(), 10), "short");
        assert_eq!(capped("ééééé".to_owned(), 3), "ééé…");
    }
}
