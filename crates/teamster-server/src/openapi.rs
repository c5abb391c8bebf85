//! The OpenAPI 3.1 document of the native API, served at `GET /api/v1/openapi.json`, and the
//! page that shows it, `GET /api/v1/docs`. Both are public, like the health checks.
//!
//! Nothing here is written by hand twice: every native handler (and every health check) carries
//! a `#[utoipa::path]` naming its method and path, and the routers register handlers only with
//! `utoipa_axum::routes!`, which routes each handler at the path of that attribute, so a route is
//! served exactly where it is documented (a test holds the served routes to the document).
//! Schemas are derived from the `teamster-protocol` types the handlers speak (its `openapi`
//! feature). [`Conventions`] adds what holds for every operation: the bearer-key security
//! scheme (none on the public routes), the admin-only note, and the error shape as the answer to
//! every failure.

use std::sync::OnceLock;

use axum::http::header;
use axum::response::{Html, IntoResponse};
use teamster_protocol::api::ErrorResponse;
use teamster_protocol::event::Event;
use utoipa::OpenApi as _;
use utoipa::openapi::path::Operation;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{ContentBuilder, InfoBuilder, LicenseBuilder, OpenApi, Ref, ResponseBuilder};
use utoipa_axum::router::OpenApiRouter;

use crate::AppState;
use crate::auth::{is_admin_only, is_operator_only, is_public};
use crate::routes::{ApiRouter, health, native, routes};

/// The name of the security scheme (the spec's).
const BEARER: &str = "BearerAuth";

/// The document's introduction.
const DESCRIPTION: &str = "The native HTTP API of a Teamster server (`/api/v1`), with its health checks. \
This document is generated from the server's own handlers and wire types.\n\n\
**Authentication:** a server started with `--auth api-keys` wants `Authorization: Bearer <key>` on every \
route but the health checks, this document, its page and the MCP OAuth pages (401 without a valid key); \
settings, keys and metrics are for admins (403 for members). Keys are made with `teamster keys create` \
or `POST /api/v1/keys`. A server with OIDC (`--oidc-issuer`) also takes its provider's ID token as the \
bearer, or the `id_token` cookie a browser gets from `/api/v1/auth/login`. A server without authentication (`--auth none`, loopback only unless told \
otherwise) treats every request as its local admin's.\n\n\
**Errors:** every 4xx and 5xx answer is `{\"error\": {\"message\", \"type\", \"code\", \"param\"}}` \
(`RequestErrorResponse`).\n\n\
**Streams:** creating a turn (unless `stream: false`) and subscribing answer Server-Sent Events, one \
turn event per frame with its sequence number as the `id:`; `?stream_format=data-stream` gives the AI \
SDK data stream instead, and `POST /api/v1/chat` the AI SDK UI message stream.";

#[derive(utoipa::OpenApi)]
#[openapi(
    components(schemas(ErrorResponse, Event)),
    modifiers(&Conventions),
    tags(
        (name = "Agents", description = "Saved agents; each update stores a new immutable version."),
        (name = "Agent Sessions", description = "Sessions, their turns and event streams, and their controls (tasks, plans, grants, state, follow-ups, steering)."),
        (name = "Chat", description = "The AI SDK chat endpoint for `useChat`."),
        (name = "Capabilities", description = "What this server offers."),
        (name = "Models", description = "Model providers and the models they serve."),
        (name = "MCP Servers", description = "MCP servers: configuration, what agents can name, tools and OAuth."),
        (name = "Skills", description = "Skills mounted into sandboxes."),
        (name = "Keys", description = "API keys (admins only)."),
        (name = "Auth", description = "OIDC login for the browser, and who the caller is."),
        (name = "Health", description = "Liveness, readiness and metrics."),
        (name = "Docs", description = "This document and its page."),
    )
)]
struct ApiDoc;

/// Every documented route: the health checks and the native API under `/api/v1`.
fn routes() -> ApiRouter {
    let native = native::routes().merge(ApiRouter::new().routes(routes!(openapi_json)).routes(routes!(page)));
    ApiRouter::new().merge(health::routes()).nest("/api/v1", native)
}

/// The router of every documented route, without the document (see `routes::documented`).
pub fn router() -> axum::Router<AppState> {
    routes().into_router()
}

/// The document, built on first use, from the same routes as [`router`].
pub fn document() -> &'static OpenApi {
    static DOCUMENT: OnceLock<OpenApi> = OnceLock::new();
    DOCUMENT.get_or_init(|| {
        let mut api = routes().into_openapi_router(OpenApiRouter::with_openapi(ApiDoc::openapi())).split_for_parts().1;
        finish(&mut api);
        crate::field_docs::describe_shared_fields(&mut api);
        api
    })
}

/// The document as JSON, serialised once.
fn document_json() -> &'static str {
    static JSON: OnceLock<String> = OnceLock::new();
    JSON.get_or_init(|| document().to_json().expect("an OpenAPI document serialises"))
}

/// The OpenAPI 3.1 document of every route on this page.
#[utoipa::path(get, path = "/openapi.json", operation_id = "getOpenApiDocument", tag = "Docs", summary = "The OpenAPI document",
    responses((status = 200, description = "This document.", content_type = "application/json", body = Object)))]
async fn openapi_json() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], document_json())
}

/// The docs page: renders the document's operations, schemas and examples in the browser. It is
/// self-contained (no script, style or font from anywhere else) and reads `openapi.json` beside it.
#[utoipa::path(get, path = "/docs", operation_id = "getDocsPage", tag = "Docs", summary = "The API docs page",
    responses((status = 200, description = "An HTML page that renders this document.", content_type = "text/html", body = String)))]
async fn page() -> impl IntoResponse {
    (
        [(
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        )],
        Html(include_str!("docs.html")),
    )
}

/// What holds for every operation (see the module comment).
struct Conventions;

impl utoipa::Modify for Conventions {
    fn modify(&self, api: &mut OpenApi) {
        api.info = InfoBuilder::new()
            .title("Teamster API")
            .version(env!("CARGO_PKG_VERSION"))
            .description(Some(DESCRIPTION))
            .license(Some(LicenseBuilder::new().name("MIT").identifier(Some("MIT")).build()))
            .build();
        let scheme = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .bearer_format("tsk_<id>_<secret>")
            .description(Some(
                "An API key (`Authorization: Bearer tsk_...`), when the server runs with `--auth api-keys`; \
                 without authentication no header is needed.",
            ))
            .build();
        api.components.get_or_insert_with(Default::default).add_security_scheme(BEARER, SecurityScheme::Http(scheme));
        api.security = Some(vec![SecurityRequirement::new(BEARER, Vec::<String>::new())]);
    }
}

/// The conventions that depend on each operation's path, applied once the routers have added
/// their paths (a `Modify` runs before they do).
fn finish(api: &mut OpenApi) {
    let error = ResponseBuilder::new()
        .description("The error shape, with the status that says what failed.")
        .content("application/json", ContentBuilder::new().schema(Some(Ref::from_schema_name("RequestErrorResponse"))).build())
        .build();
    for (path, item) in api.paths.paths.iter_mut() {
        if let Some(operation) = &mut item.get {
            finish_operation(path, true, operation, &error);
        }
        let operations = [&mut item.put, &mut item.post, &mut item.delete, &mut item.patch];
        for operation in operations.into_iter().flatten() {
            finish_operation(path, false, operation, &error);
        }
    }
}

/// Public routes are the `GET`s of public paths (the others want a caller): anyone may call them,
/// and a key, when sent, is still checked.
fn finish_operation(path: &str, is_get: bool, operation: &mut Operation, error: &utoipa::openapi::Response) {
    if is_get && is_public(path) {
        operation.security = Some(vec![SecurityRequirement::default(), SecurityRequirement::new(BEARER, Vec::<String>::new())]);
    } else if is_operator_only(path) || is_admin_only(path) {
        let note = match is_operator_only(path) {
            true => "The server's operator only when the server has API keys (403 for tenant admins and members).",
            false => "Admins only when the server has API keys (403 for members); a tenant admin manages its own tenant's keys only.",
        };
        operation.description = Some(match operation.description.take() {
            Some(description) => format!("{description}\n\n{note}"),
            None => note.to_owned(),
        });
    }
    operation.responses.responses.entry("default".to_owned()).or_insert_with(|| error.clone().into());
}
