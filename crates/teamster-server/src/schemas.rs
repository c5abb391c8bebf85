//! Types that exist only for the OpenAPI document: the handlers that answer with them send the
//! values they got, and name these in their `#[utoipa::path]` attributes. They live here, below
//! both `openapi` (which collects the routes) and the routes, so neither knows the other twice.

/// A JSON object the server passes on as it is (an MCP server's tool entries, a session state).
#[derive(utoipa::ToSchema)]
#[allow(dead_code, reason = "only a type for the document: the handlers send the objects they got")]
pub struct JsonObject(serde_json::Map<String, serde_json::Value>);
