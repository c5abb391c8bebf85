//! The HTTP face of Teamster: the native `/api/v1` API and the gateway `/v1/agents/...`
//! dialect, both thin routers over one [`teamster_service::Service`].
//!
//! [`app`] builds the whole application (prefix stripping included) for tests and for
//! [`serve`]. Only this crate knows HTTP: status codes, SSE framing, headers, query strings.

mod auth;
mod data_stream;
mod error;
mod extract;
mod field_docs;
mod guard;
mod in_flight;
mod links;
mod listen;
mod manifest_schema;
mod oidc;
mod openapi;
mod params;
mod prefix;
mod rate_limit;
mod routes;
mod schemas;
mod sse;
mod streamed;
mod trace_context;
mod ui_stream;

use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use tower::Layer;
use tower::util::MapRequestLayer;

pub use auth::AuthMode;
pub use error::ApiError;
pub use guard::{BrowserPolicy, LOOPBACK_HOSTS};
pub use links::PublicLinks;
pub use listen::serve;
pub use oidc::OidcLogin;
use teamster_service::Service;

/// HTTP settings.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// The longest silence on an SSE stream before a `: ping` comment.
    pub heartbeat: Duration,
    /// The largest request body accepted; larger ones get 413.
    pub max_body_bytes: usize,
    /// The `Host` names and browser origins this server answers (see `guard`).
    pub browser: BrowserPolicy,
    /// How long a connection may take to send a complete request header, after it opens or
    /// between requests; then it is closed.
    pub header_timeout: Duration,
    /// The most connections open at once.
    pub max_connections: usize,
    /// How long a request's whole body may take to arrive after its head; then 408.
    pub body_timeout: Duration,
    /// The most requests each subject may have in flight (see `in_flight`; at most half of
    /// what the connection cap leaves after the health checks' reserve).
    pub max_requests_per_subject: usize,
    /// How requests are authenticated.
    pub auth: AuthMode,
    /// OIDC login for browsers (and ID tokens as bearers), besides or instead of API keys.
    pub oidc: Option<std::sync::Arc<OidcLogin>>,
    /// Requests per minute each subject may send (see `rate_limit`); `None`: no limit.
    pub rate_limit_per_minute: Option<u32>,
    /// How often a live channel reads its session or session list again when nothing
    /// announced a change (a lost announcement, or one no write makes); `None` for the
    /// defaults: `teamster_channels::FALLBACK_READ` with replicas, `ALONE_FALLBACK_READ` alone.
    pub live_reread: Option<Duration>,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            heartbeat: Duration::from_secs(15),
            max_body_bytes: 10 * 1024 * 1024,
            browser: BrowserPolicy::default(),
            header_timeout: Duration::from_secs(15),
            max_connections: 10_000,
            body_timeout: Duration::from_secs(30),
            max_requests_per_subject: 64,
            auth: AuthMode::None,
            oidc: None,
            rate_limit_per_minute: None,
            live_reread: None,
        }
    }
}

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    pub service: Service,
    /// The sessions' and callers' live channels.
    pub channels: teamster_channels::Channels,
    pub config: ServerConfig,
    /// Fires when the server shuts down: live event streams end at once (see `listen`).
    pub shutdown: tokio_util::sync::CancellationToken,
    /// Each subject's request budget, when the configuration sets a rate limit.
    pub rate_limiter: Option<std::sync::Arc<rate_limit::RateLimiter>>,
    /// The requests in flight, against the per-subject and total caps.
    pub in_flight: std::sync::Arc<in_flight::InFlight>,
}

impl AppState {
    pub fn new(service: Service, config: ServerConfig) -> AppState {
        let rate_limiter = config.rate_limit_per_minute.map(|per_minute| std::sync::Arc::new(rate_limit::RateLimiter::new(&service, per_minute)));
        let in_flight = std::sync::Arc::new(in_flight::InFlight::new(config.max_connections, config.max_requests_per_subject));
        let channels = teamster_channels::Channels::new(service.clone(), config.live_reread);
        AppState { service, channels, config, shutdown: tokio_util::sync::CancellationToken::new(), rate_limiter, in_flight }
    }
}

/// The routes of both dialects, at the root.
pub fn router(state: AppState) -> Router {
    let body_limit = state.config.max_body_bytes;
    // The health checks and `/api/v1`, each route where its `#[utoipa::path]` says (see `openapi`).
    Router::new()
        .merge(openapi::router())
        .nest("/v1", routes::gateway::routes())
        .fallback(routes::not_found)
        .method_not_allowed_fallback(routes::method_not_allowed)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::from_fn_with_state(state.clone(), rate_limit::limit))
        .layer(axum::middleware::from_fn_with_state(state.clone(), in_flight::limit))
        .layer(axum::middleware::from_fn_with_state(state.clone(), auth::authenticate))
        .layer(axum::middleware::from_fn(routes::web::serve))
        .layer(axum::middleware::from_fn(close_after_rejected_body))
        .layer(axum::middleware::from_fn(trace_context::continue_trace))
        .layer(axum::middleware::from_fn_with_state(state.clone(), guard::guard))
        .layer(axum::middleware::from_fn_with_state(state.clone(), in_flight::stamp_deadline))
        .with_state(state)
}

/// Closes the connection after an error answer to a request that sent a body: the handler may
/// have answered without reading it, and unread bytes would corrupt the next request on a
/// kept-alive connection.
async fn close_after_rejected_body(request: Request, next: axum::middleware::Next) -> axum::response::Response {
    use axum::http::header;
    let has_body = request.headers().get(header::CONTENT_LENGTH).is_some_and(|length| length != "0")
        || request.headers().contains_key(header::TRANSFER_ENCODING);
    let mut response = next.run(request).await;
    if has_body && (response.status().is_client_error() || response.status().is_server_error()) {
        response.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
    }
    response
}

/// The application: [`router`] behind the layer that strips any path prefix, so the API
/// works under a tenant path such as `/t1/v1/agents/sessions`.
pub fn app(state: AppState) -> impl tower::Service<
    Request,
    Response = axum::response::Response,
    Error = std::convert::Infallible,
    Future = impl Send,
> + Clone + Send + 'static {
    MapRequestLayer::new(prefix::strip_prefix).layer(router(state))
}
