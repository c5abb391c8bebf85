//! MCP servers as toolkits: [`McpToolkit`] opens one connection to an MCP server per run
//! session, described by [`McpServer`] (fixed, or made from the session's context, such as a
//! token for its user), offers the server's tools and closes the connection with the session.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::future::BoxFuture;
use teamster_mcp::{HttpTransport, McpConnection, McpServerConfig, StdioTransport, Transport};
use teamster_tools::ToolSource;

use crate::{Tool, ToolError, Toolkit, ToolkitSession};

/// How to reach an MCP server: a command to run (stdio), or a URL (streamable HTTP, or the
/// legacy HTTP+SSE transport).
///
/// ```
/// use std::time::Duration;
/// use teamster::McpServer;
///
/// let local = McpServer::stdio("python3", ["server.py"]).env("LOG_LEVEL", "warning");
/// let remote = McpServer::streamable_http("https://mcp.example.com/mcp")
///     .header("Authorization", "Bearer secret")
///     .call_timeout(Duration::from_secs(30));
/// ```
#[derive(Clone, Debug)]
pub struct McpServer {
    config: McpServerConfig,
    /// A setting that does not fit the transport, reported when the toolkit connects.
    misuse: Option<String>,
}

impl McpServer {
    /// A server run as a child process, speaking MCP on its stdin and stdout. The process does
    /// not inherit your program's environment (which may hold keys): only `PATH`, `HOME`,
    /// `USER`, `LOGNAME`, `SHELL`, `TERM`, `LANG` and `TMPDIR`, and what [`McpServer::env`] sets.
    pub fn stdio(command: impl Into<String>, args: impl IntoIterator<Item = impl Into<String>>) -> McpServer {
        McpServer::with(Transport::Stdio(StdioTransport::new(command, args)))
    }

    /// A server at a streamable HTTP endpoint (the current MCP transport).
    pub fn streamable_http(url: impl Into<String>) -> McpServer {
        McpServer::with(Transport::StreamableHttp(HttpTransport::new(url)))
    }

    /// A server on the legacy HTTP+SSE transport; `url` is its SSE endpoint.
    pub fn sse(url: impl Into<String>) -> McpServer {
        McpServer::with(Transport::Sse(HttpTransport::new(url)))
    }

    fn with(transport: Transport) -> McpServer {
        McpServer { config: McpServerConfig::new("mcp", "mcp", transport), misuse: None }
    }

    /// Adds a header to every HTTP request (HTTP servers only).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> McpServer {
        match &mut self.config.transport {
            Transport::StreamableHttp(http) | Transport::Sse(http) => {
                http.headers.insert(name.into(), value.into());
            }
            Transport::Stdio(_) => self.misuse = Some("a stdio server takes no HTTP headers".to_owned()),
        }
        self
    }

    /// Sets an environment variable of the server process (stdio servers only).
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> McpServer {
        match &mut self.config.transport {
            Transport::Stdio(stdio) => {
                stdio.env.insert(name.into(), value.into());
            }
            Transport::StreamableHttp(_) | Transport::Sse(_) => {
                self.misuse = Some("an HTTP server takes no environment variables".to_owned());
            }
        }
        self
    }

    /// Runs the server process in `directory` (stdio servers only).
    pub fn cwd(mut self, directory: impl Into<std::path::PathBuf>) -> McpServer {
        match &mut self.config.transport {
            Transport::Stdio(stdio) => stdio.cwd = Some(directory.into()),
            Transport::StreamableHttp(_) | Transport::Sse(_) => {
                self.misuse = Some("an HTTP server takes no working directory".to_owned());
            }
        }
        self
    }

    /// How long one tool call may take before it is cancelled and reported to the model as
    /// failed (two minutes unless set).
    pub fn call_timeout(mut self, timeout: Duration) -> McpServer {
        self.config.call_timeout = timeout;
        self
    }
}

/// Makes the server a session connects to, from the session's context.
type ServerFor<Ctx> = dyn Fn(&Ctx) -> Result<McpServer, String> + Send + Sync;

/// A toolkit whose tools are an MCP server's: each run session connects to the server when it
/// is created, lists its tools, calls them for the session's runs, and disconnects when the
/// session closes (a stdio server's process ends with it). The server's instructions, if it
/// sends any, are added to the agent's.
///
/// A call the server answers as an error, or that times out, goes back to the model as a failed
/// tool call; a server that cannot be reached fails the session's creation with
/// [`Error::Toolkit`](crate::Error::Toolkit).
///
/// ```no_run
/// use teamster::{Agent, AgentItem, AgentRequest, McpServer, McpToolkit, Model};
///
/// /// Who a run is for.
/// struct User {
///     token: String,
/// }
///
/// # async fn example() -> Result<(), teamster::Error> {
/// // Each user's session connects with that user's token.
/// let issues = McpToolkit::per_context("issues", |user: &User| {
///     Ok(McpServer::streamable_http("https://mcp.example.com/mcp").header("Authorization", format!("Bearer {}", user.token)))
/// });
/// let agent = Agent::builder("triage", Model::offline()).toolkit(issues).build()?;
/// let user = User { token: "t0k3n".into() };
/// let response = agent.run(AgentRequest { input: vec![AgentItem::user("list_issues")], context: user }).await?;
/// println!("{}", response.text());
/// # Ok(())
/// # }
/// ```
pub struct McpToolkit<Ctx> {
    name: String,
    server_for: Arc<ServerFor<Ctx>>,
}

impl<Ctx> McpToolkit<Ctx> {
    /// Every session connects to the same server.
    pub fn new(name: impl Into<String>, server: McpServer) -> McpToolkit<Ctx> {
        McpToolkit::per_context(name, move |_: &Ctx| Ok(server.clone()))
    }

    /// Each session connects to the server `server_for` makes from its context; an `Err` fails
    /// the session's creation with that message.
    pub fn per_context(
        name: impl Into<String>,
        server_for: impl Fn(&Ctx) -> Result<McpServer, String> + Send + Sync + 'static,
    ) -> McpToolkit<Ctx> {
        McpToolkit { name: name.into(), server_for: Arc::new(server_for) }
    }
}

#[async_trait]
impl<Ctx: Send + Sync + 'static> Toolkit<Ctx> for McpToolkit<Ctx> {
    fn name(&self) -> &str {
        &self.name
    }

    async fn create_session(&self, context: &Ctx) -> Result<Box<dyn ToolkitSession<Ctx>>, String> {
        let McpServer { mut config, misuse } = (self.server_for)(context)?;
        if let Some(misuse) = misuse {
            return Err(misuse);
        }
        config.id.clone_from(&self.name);
        config.name.clone_from(&self.name);
        let connection = McpConnection::connect(config).await.map_err(|error| error.to_string())?;
        let listed = connection.list().await.map_err(|error| error.to_string())?;
        let instructions = connection.server_info().instructions.clone().filter(|text| !text.trim().is_empty());
        let shared = Arc::new(Mutex::new(Some(Arc::new(connection))));
        let tools = listed
            .into_iter()
            .map(|tool| {
                Arc::new(McpTool {
                    connection: shared.clone(),
                    name: tool.name,
                    description: tool.description,
                    parameters: tool.input_schema,
                }) as Arc<dyn Tool<Ctx>>
            })
            .collect();
        Ok(Box::new(McpSession { connection: shared, tools, instructions }))
    }
}

/// The connection of one session, shared by its tools until the session closes it.
type SharedConnection = Arc<Mutex<Option<Arc<McpConnection>>>>;

/// One run session's connection and the tools it listed.
struct McpSession<Ctx> {
    connection: SharedConnection,
    tools: Vec<Arc<dyn Tool<Ctx>>>,
    instructions: Option<String>,
}

#[async_trait]
impl<Ctx: Send + Sync + 'static> ToolkitSession<Ctx> for McpSession<Ctx> {
    fn instructions(&self) -> Option<String> {
        self.instructions.clone()
    }

    fn tools(&self) -> Vec<Arc<dyn Tool<Ctx>>> {
        self.tools.clone()
    }

    /// Drops the session's hold on the connection; it ends once no call is using it.
    async fn close(&self) {
        self.connection.lock().unwrap_or_else(PoisonError::into_inner).take();
    }
}

/// One of the server's tools, called over the session's connection.
struct McpTool {
    connection: SharedConnection,
    name: String,
    description: String,
    parameters: serde_json::Value,
}

impl<Ctx> Tool<Ctx> for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> &serde_json::Value {
        &self.parameters
    }

    fn call<'a>(&'a self, arguments: serde_json::Value, _: &'a Ctx) -> BoxFuture<'a, Result<String, ToolError>> {
        let connection = self.connection.lock().unwrap_or_else(PoisonError::into_inner).clone();
        Box::pin(async move {
            let Some(connection) = connection else {
                return Err(ToolError::new("the MCP connection is closed"));
            };
            let output = connection.call(&self.name, &arguments.to_string()).await;
            if output.is_error { Err(ToolError::new(output.content)) } else { Ok(output.content) }
        })
    }
}
