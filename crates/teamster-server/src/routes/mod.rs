//! Routes: one module per dialect, one file per resource.

pub(crate) mod documented;
pub mod gateway;
pub mod health;
pub mod native;
mod shared;
pub mod web;

use axum::http::StatusCode;

use teamster_protocol::api::{Page, Pagination};

use crate::error::ApiError;

pub use documented::ApiRouter;
pub(crate) use documented::routes;

/// A list response: the items, the next page's token (if any) and the page size.
pub fn page<T>(data: Vec<T>, next_page_token: Option<String>, limit: u32) -> axum::Json<Page<T>> {
    axum::Json(Page { data, pagination: Pagination { next_page_token, previous_page_token: None, limit } })
}

pub async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such endpoint")
}

pub async fn method_not_allowed() -> ApiError {
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", "this endpoint does not support that method")
}
