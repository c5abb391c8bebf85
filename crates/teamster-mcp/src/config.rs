//! How to reach one MCP server: [`McpServerConfig`], its [`Transport`] and its [`Limits`].

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use teamster_egress::EgressPolicy;

/// The default bound on one tool call.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// The default bound on connecting and the initialize handshake.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// One MCP server to connect to.
#[derive(Clone, Debug)]
pub struct McpServerConfig {
    /// Stable id of the server, sent as `server_id` in `tool_info` and as `id` in
    /// `mcp.initialize`.
    pub id: String,
    /// The configured name of the server, sent as `server_name` and `name`.
    pub name: String,
    /// How to reach the server.
    pub transport: Transport,
    /// How long one `tools/call` may take before it is cancelled and reported as an error.
    pub call_timeout: Duration,
    /// How long connecting and the initialize handshake may take.
    pub connect_timeout: Duration,
    /// Bounds on what the server may send.
    pub limits: Limits,
}

impl McpServerConfig {
    /// A configuration with the default timeouts and limits.
    pub fn new(id: impl Into<String>, name: impl Into<String>, transport: Transport) -> McpServerConfig {
        McpServerConfig {
            id: id.into(),
            name: name.into(),
            transport,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            limits: Limits::default(),
        }
    }
}

/// How the client talks to the server.
#[derive(Clone, Debug)]
pub enum Transport {
    /// Streamable HTTP: JSON-RPC over POST, answers as JSON or SSE, one `Mcp-Session-Id`.
    StreamableHttp(HttpTransport),
    /// The legacy HTTP+SSE transport (protocol 2024-11-05): an event stream from a GET and
    /// messages posted to the endpoint it names. The URL is the stream's, e.g. `.../sse`.
    Sse(HttpTransport),
    /// A child process speaking newline-delimited JSON-RPC on stdin and stdout.
    Stdio(StdioTransport),
}

impl Transport {
    /// The `transport_type` of an `mcp.initialize` entry (`None` for stdio, which the wire
    /// contract does not name).
    pub fn wire_type(&self) -> Option<&'static str> {
        match self {
            Transport::StreamableHttp(_) => Some("streamable-http"),
            Transport::Sse(_) => Some("sse"),
            Transport::Stdio(_) => None,
        }
    }
}

/// A streamable HTTP endpoint and the credentials to send to it.
#[derive(Clone, Default)]
pub struct HttpTransport {
    /// The MCP endpoint, e.g. `https://mcp.example.com/mcp`.
    pub url: String,
    /// Headers sent with every request (header auth, e.g. `Authorization: Bearer ...`).
    pub headers: BTreeMap<String, String>,
    /// Asked for a bearer token before every request; its token is sent as
    /// `Authorization: Bearer <token>` and replaces a configured `Authorization` header.
    pub bearer_token: Option<Arc<dyn BearerTokenProvider>>,
    /// Where the URL (its redirects, and a legacy server's endpoint) may lead: `Some` for a
    /// server a member named, whose URL must not reach this host or its network unless the
    /// operator allows it; `None` for an operator's server, which may be anywhere.
    pub egress: Option<Arc<EgressPolicy>>,
}

impl HttpTransport {
    /// An endpoint with no headers and no token provider.
    pub fn new(url: impl Into<String>) -> HttpTransport {
        HttpTransport { url: url.into(), ..HttpTransport::default() }
    }

    /// Adds a header sent with every request.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> HttpTransport {
        self.headers.insert(name.into(), value.into());
        self
    }
}

impl fmt::Debug for HttpTransport {
    /// Header values are credentials, so only their names are shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpTransport")
            .field("url", &self.url)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("bearer_token", &self.bearer_token.is_some())
            .field("egress", &self.egress)
            .finish()
    }
}

/// Supplies a bearer token for each HTTP request, e.g. from an OAuth token store that refreshes
/// expired tokens. `None` sends the request without one.
#[async_trait]
pub trait BearerTokenProvider: Send + Sync {
    async fn bearer_token(&self) -> Option<String>;
}

/// A command to start as the server's process.
#[derive(Clone, Debug, Default)]
pub struct StdioTransport {
    pub command: String,
    pub args: Vec<String>,
    /// Variables set for the server. The server does not inherit this process's environment
    /// (which holds provider keys); only `PATH`, `HOME`, `USER`, `LOGNAME`, `SHELL`, `TERM`,
    /// `LANG` and `TMPDIR` are passed through, then these are added.
    pub env: BTreeMap<String, String>,
    /// Working directory of the server; this process's when `None`.
    pub cwd: Option<PathBuf>,
}

impl StdioTransport {
    /// A command with arguments, no extra environment and the current directory.
    pub fn new(
        command: impl Into<String>,
        args: impl IntoIterator<Item = impl Into<String>>,
    ) -> StdioTransport {
        StdioTransport {
            command: command.into(),
            args: args.into_iter().map(Into::into).collect(),
            ..StdioTransport::default()
        }
    }
}

/// Bounds that keep one misbehaving server from exhausting memory or the model's context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest tool result handed to the model, in bytes; a longer one is cut with a note.
    pub max_result_bytes: usize,
    /// Most tools listed from one server; the rest are dropped with a warning.
    pub max_tools: usize,
    /// Largest single JSON-RPC message accepted from the server, in bytes (one stdio line or
    /// one SSE event or JSON body); a larger one fails the request it answers.
    pub max_message_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { max_result_bytes: 8 << 20, max_tools: 1024, max_message_bytes: 32 << 20 }
    }
}
