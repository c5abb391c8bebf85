//! Routes: one module per dialect, one file per resource.

pub mod gateway;
pub mod health;
pub mod native;
mod shared;

use axum::http::StatusCode;

use crate::error::ApiError;

pub async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such endpoint")
}

pub async fn method_not_allowed() -> ApiError {
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", "this endpoint does not support that method")
}
