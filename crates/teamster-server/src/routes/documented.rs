//! Documented routes, registered once and built two ways: the router that serves them, at
//! start-up, and the OpenAPI document, on first use (see `openapi`).
//!
//! `utoipa_axum::routes!` builds a route's piece of the document (its operation and the schemas
//! of every type it names, recursively) whenever it is called, so a router made of it builds the
//! whole document, about 5 MB of allocations and a third of the server's start-up, only to drop
//! it. This crate's [`routes!`](crate::routes::routes) keeps both ways as functions instead: the
//! router's way routes each handler at the path and methods of its `#[utoipa::path]` (nothing
//! else of it), and the document's way is `utoipa_axum::routes!` itself. An [`ApiRouter`]
//! records the calls made on it (`routes`, `merge`, `nest`) and replays them either way, so the
//! router and the document come from one list and a route is served exactly where it is
//! documented (`tests/openapi.rs` holds them to each other).

use axum::Router;
use axum::routing::MethodRouter;
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouter};

use crate::AppState;

/// One `routes!` call: handlers that share a path (usually), both ways.
#[derive(Clone, Copy)]
pub struct Routes {
    /// The paths of the handlers and the method router that serves all of them.
    pub serve: fn() -> (Vec<String>, MethodRouter<AppState>),
    /// The same handlers with their piece of the document.
    pub document: fn() -> UtoipaMethodRouter<AppState>,
}

/// A call made on an [`ApiRouter`], in order.
enum Part {
    Routes(Routes),
    Merge(ApiRouter),
    Nest(&'static str, ApiRouter),
}

/// A router of documented routes: handlers are added with [`routes!`](crate::routes::routes),
/// which routes each at the method and path of its `#[utoipa::path]`.
#[derive(Default)]
pub struct ApiRouter {
    parts: Vec<Part>,
}

impl ApiRouter {
    pub fn new() -> ApiRouter {
        ApiRouter::default()
    }

    /// Adds the handlers of one `routes!` call.
    #[must_use]
    pub fn routes(mut self, routes: Routes) -> ApiRouter {
        self.parts.push(Part::Routes(routes));
        self
    }

    /// Adds another router's routes (as `axum::Router::merge`).
    #[must_use]
    pub fn merge(mut self, other: ApiRouter) -> ApiRouter {
        self.parts.push(Part::Merge(other));
        self
    }

    /// Adds another router's routes under `prefix` (as `axum::Router::nest`).
    #[must_use]
    pub fn nest(mut self, prefix: &'static str, other: ApiRouter) -> ApiRouter {
        self.parts.push(Part::Nest(prefix, other));
        self
    }

    /// The router that serves the routes, without their document.
    pub fn into_router(self) -> Router<AppState> {
        self.parts.into_iter().fold(Router::new(), |router, part| match part {
            // As `OpenApiRouter::routes` does: every path of the call gets the call's methods.
            Part::Routes(routes) => {
                let (paths, methods) = (routes.serve)();
                paths.iter().fold(router, |router, path| router.route(if path.is_empty() { "/" } else { path }, methods.clone()))
            }
            Part::Merge(other) => router.merge(other.into_router()),
            Part::Nest(prefix, other) => router.nest(prefix, other.into_router()),
        })
    }

    /// The routes with their document, added to `base` in the order they were added here.
    pub fn into_openapi_router(self, base: OpenApiRouter<AppState>) -> OpenApiRouter<AppState> {
        self.parts.into_iter().fold(base, |router, part| match part {
            Part::Routes(routes) => router.routes((routes.document)()),
            Part::Merge(other) => router.merge(other.into_openapi_router(OpenApiRouter::new())),
            Part::Nest(prefix, other) => router.nest(prefix, other.into_openapi_router(OpenApiRouter::new())),
        })
    }
}

/// Documented handlers, for [`ApiRouter::routes`]: `routes!(list, create)` routes each handler
/// at the method and path of its `#[utoipa::path]`, and documents it with
/// `utoipa_axum::routes!` when the document is built. Handlers are named by their identifier, in
/// the module that defines them.
macro_rules! routes {
    ( $( $handler:ident ),+ $(,)? ) => {
        $crate::routes::documented::Routes {
            serve: || {
                use utoipa_axum::PathItemExt as _;
                let mut paths: Vec<String> = Vec::new();
                let mut methods = axum::routing::MethodRouter::new();
                $(
                    utoipa_axum::paste! {
                        let path = <[<__path_ $handler>] as utoipa::Path>::path();
                        for method in <[<__path_ $handler>] as utoipa::Path>::methods() {
                            methods = methods.on(method.to_method_filter(), $handler);
                        }
                    }
                    if !paths.contains(&path) {
                        paths.push(path);
                    }
                )+
                (paths, methods)
            },
            document: || utoipa_axum::routes!( $( $handler ),+ ),
        }
    };
}
pub(crate) use routes;
