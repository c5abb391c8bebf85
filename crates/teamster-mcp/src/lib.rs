//! The MCP client: [`McpConnection`] keeps one initialized session with one MCP server, over
//! streamable HTTP, the legacy HTTP+SSE transport or a child process's stdio, and implements
//! [`teamster_tools::ToolSource`] on it.
//!
//! Built on the official Rust SDK, `rmcp`. `config.rs` says how to reach a server, `http.rs` is
//! the HTTP client under the streamable HTTP transport (headers, bearer tokens, 401s, bounded
//! bodies), `sse.rs` the legacy transport on the same client, `stdio.rs` runs a server process,
//! and `convert.rs` maps MCP tools and results to the tool seam's (a listed tool also keeps its
//! entry as given, [`ListedTool`]), and `progress.rs` routes a running call's
//! `notifications/progress` to it. Tool failures are data: every
//! failed call is a `ToolOutput` with `is_error`. [`oauth`] authorizes connections to servers
//! that answer 401.

mod config;
mod connection;
mod convert;
mod http;
pub mod oauth;
mod progress;
mod sse;
mod stdio;

use std::time::Duration;

pub use config::{
    BearerTokenProvider, DEFAULT_CALL_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, HttpTransport, Limits,
    McpServerConfig, StdioTransport, Transport,
};
pub use connection::{McpConnection, REQUEST_CONTEXT_META, ServerInfo};

/// A tool of a server's listing: the entry as the server gave it, and the tool made from it.
#[derive(Clone, Debug, PartialEq)]
pub struct ListedTool {
    /// The `tools/list` entry as the server sent it: `title`, `annotations` and the rest, no
    /// defaults filled in for hints it did not set.
    pub entry: serde_json::Value,
    /// The tool the selectors and the engine see, made from `entry` (missing hints take the MCP
    /// defaults there).
    pub tool: teamster_tools::Tool,
}

/// Why a connection could not be opened. Failures of calls on an open connection are
/// [`teamster_tools::ToolOutput`]s instead.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("invalid MCP server configuration: {0}")]
    InvalidConfig(String),
    #[error("cannot start MCP server command {command:?}: {message}")]
    Spawn { command: String, message: String },
    /// The server answered 401: the caller may authorize (OAuth) and connect again.
    #[error("the MCP server requires authorization")]
    Unauthorized {
        /// The server's `WWW-Authenticate` challenge, which names its authorization metadata.
        www_authenticate: Option<String>,
    },
    #[error("the MCP handshake did not finish within {0:?}")]
    Timeout(Duration),
    #[error("the MCP handshake failed: {0}")]
    Handshake(String),
}
