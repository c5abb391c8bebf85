//! The caller's trace: a request's W3C `traceparent` header becomes the parent of the traces of
//! the turns it starts (see `teamster_service::with_caller_trace`). A missing or malformed
//! header starts no trace of the caller's; the turn's trace is its own.

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use teamster_service::{TraceParent, with_caller_trace};

/// The middleware: runs the request with its caller's trace.
pub async fn continue_trace(request: Request, next: Next) -> Response {
    let parent = request.headers().get("traceparent").and_then(|value| value.to_str().ok()).and_then(TraceParent::parse);
    with_caller_trace(parent, next.run(request)).await
}
