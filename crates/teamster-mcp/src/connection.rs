//! [`McpConnection`]: one initialized session with one MCP server, listed and called through the
//! tool seam.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResponse, CancelledNotification, CancelledNotificationParam,
    ClientCapabilities, ClientConfig, ClientRequest, Implementation, PaginatedRequestParams, ProtocolVersion, RequestId,
    RequestMetaObject, ServerResult,
};
use rmcp::service::{ClientInitializeError, PeerRequestOptions, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::{StreamableHttpClientTransportConfig, StreamableHttpError};
use rmcp::{Peer, RoleClient, ServiceError, ServiceExt};
use teamster_protocol::event::McpServerInit;
use teamster_tools::{CallContext, ProgressSink, Tool, ToolOutput, ToolSource};

/// The `_meta` key a `tools/call` request carries the turn's request context under.
pub const REQUEST_CONTEXT_META: &str = "teamster/request_context";

use crate::config::{Limits, McpServerConfig, Transport};
use crate::http::HttpClient;
use crate::progress::{Observed, ProgressRoutes};
use crate::sse::{OpenError, SseTransport};
use crate::stdio::ServerProcess;
use crate::{ListedTool, McpError, convert};

/// What the server said about itself in its `initialize` answer.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerInfo {
    /// The protocol version the server chose, e.g. `2025-11-25`.
    pub protocol_version: String,
    /// The server's implementation name (`serverInfo.name`).
    pub name: Option<String>,
    /// The server's implementation version (`serverInfo.version`).
    pub version: Option<String>,
    /// Instructions the server offers for using it.
    pub instructions: Option<String>,
    /// The server's capabilities, as the JSON it sent.
    pub capabilities: serde_json::Value,
}

/// An open, initialized session with one MCP server, reused for every list and call.
///
/// A call's failure is a [`ToolOutput`] with `is_error`, never an `Err`. When the server process
/// exits or its transport closes, [`McpConnection::is_alive`] turns false and every later call
/// answers an error; the caller reconnects with a new [`McpConnection::connect`]. Dropping the
/// connection ends the session (for stdio: stdin is closed, and the process is killed if it has
/// not exited two seconds later).
pub struct McpConnection {
    id: String,
    name: String,
    transport_type: Option<&'static str>,
    call_timeout: Duration,
    limits: Limits,
    server: ServerInfo,
    session_id: Option<String>,
    /// Set when a request failed in the transport (a dropped HTTP connection, a closed pipe):
    /// the session may be gone, so the caller should reconnect.
    broken: AtomicBool,
    /// Where the handler sends running calls' progress reports.
    progress: ProgressRoutes,
    // Invariant: `service` is declared before `process`, so on drop the transport (and with it
    // the server's stdin) closes before the process is asked to stop.
    service: RunningService<RoleClient, ClientConfig>,
    process: Option<ServerProcess>,
}

impl std::fmt::Debug for McpConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpConnection")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("server", &self.server)
            .field("alive", &self.is_alive())
            .finish_non_exhaustive()
    }
}

impl McpConnection {
    /// Lists the server's tools, following cursors, up to [`Limits::max_tools`], each with its
    /// entry as the server gave it; [`ToolSource::list`] is the same listing's tools.
    pub async fn list_entries(&self) -> Result<Vec<ListedTool>, teamster_tools::Error> {
        let mut tools = Vec::new();
        let mut cursor = None;
        // A page may be empty, so the number of pages is bounded separately.
        for _page in 0..=self.limits.max_tools {
            let request = PaginatedRequestParams::default().with_cursor(cursor);
            let listing =
                tokio::time::timeout(self.call_timeout, self.peer().list_tools(Some(request))).await;
            let page = match listing {
                Ok(Ok(page)) => page,
                Ok(Err(error)) => {
                    let reason = self.describe(error).await;
                    return Err(self.unavailable(format!("tools/list failed: {reason}")));
                }
                Err(_) => {
                    let timeout = self.call_timeout.as_secs_f64();
                    return Err(self.unavailable(format!("tools/list timed out after {timeout} s")));
                }
            };
            for tool in page.tools {
                if tools.len() == self.limits.max_tools {
                    tracing::warn!(
                        server = self.name,
                        limit = self.limits.max_tools,
                        "MCP server lists too many tools; the rest are ignored"
                    );
                    return Ok(tools);
                }
                tools.push(convert::listed(&self.id, &self.name, tool));
            }
            cursor = page.next_cursor;
            if cursor.is_none() {
                return Ok(tools);
            }
        }
        tracing::warn!(server = self.name, "MCP server kept returning cursors; the listing stops here");
        Ok(tools)
    }

    /// Connects to the server, performs the `initialize` handshake and keeps the session open.
    ///
    /// A 401 from an HTTP server is [`McpError::Unauthorized`], so the caller can start OAuth.
    pub async fn connect(config: McpServerConfig) -> Result<McpConnection, McpError> {
        let McpServerConfig { id, name, transport, call_timeout, connect_timeout, limits } = config;
        let transport_type = transport.wire_type();
        let progress = ProgressRoutes::default();
        let handshake = client_config();
        let (service, process, http) = match &transport {
            Transport::Stdio(stdio) => {
                let (process, stdout, stdin) = ServerProcess::spawn(&name, stdio)?;
                let rw = AsyncRwTransport::<RoleClient, _, _>::new(stdout, stdin)
                    .with_max_line_length(limits.max_message_bytes);
                let service = bounded(connect_timeout, handshake.serve(Observed::new(rw, &progress))).await?;
                (service, Some(process), None)
            }
            Transport::Sse(endpoint) => {
                let client = HttpClient::new(endpoint, &limits)?;
                let session = async {
                    let sse = SseTransport::open(client, &endpoint.url).await.map_err(open_error)?;
                    handshake.serve(Observed::new(sse, &progress)).await.map_err(handshake_error)
                };
                let service = match tokio::time::timeout(connect_timeout, session).await {
                    Ok(service) => service?,
                    Err(_) => return Err(McpError::Timeout(connect_timeout)),
                };
                (service, None, None)
            }
            Transport::StreamableHttp(endpoint) => {
                let client = HttpClient::new(endpoint, &limits)?;
                let mut settings = StreamableHttpClientTransportConfig::with_uri(endpoint.url.as_str());
                settings.max_sse_event_size = limits.max_message_bytes;
                let http = StreamableHttpClientTransport::with_client(client.clone(), settings);
                let service = bounded(connect_timeout, handshake.serve(Observed::new(http, &progress))).await?;
                (service, None, Some(client))
            }
        };
        let Some(peer_info) = service.peer().peer_info() else {
            return Err(McpError::Handshake("the server sent no initialize result".to_owned()));
        };
        let server = ServerInfo {
            protocol_version: peer_info.protocol_version.to_string(),
            name: peer_info.server_info.as_ref().map(|info| info.name.clone()),
            version: peer_info.server_info.as_ref().map(|info| info.version.clone()),
            instructions: peer_info.instructions.clone(),
            capabilities: serde_json::to_value(&peer_info.capabilities).unwrap_or_default(),
        };
        let session_id = http.and_then(|client| client.session_id());
        Ok(McpConnection {
            id,
            name,
            transport_type,
            call_timeout,
            limits,
            server,
            session_id,
            broken: AtomicBool::new(false),
            progress,
            service,
            process,
        })
    }

    /// The server's `initialize` answer.
    pub fn server_info(&self) -> &ServerInfo {
        &self.server
    }

    /// This server's entry of an `mcp.initialize` event.
    pub fn init_event_entry(&self) -> McpServerInit {
        McpServerInit {
            id: self.id.clone(),
            name: self.name.clone(),
            session_id: self.session_id.clone(),
            transport_type: self.transport_type.map(str::to_owned),
            error: None,
        }
    }

    /// Whether the session can still carry calls: false once the server process has exited, the
    /// transport has closed, or a request failed in the transport. A dead connection stays
    /// dead; the caller connects again.
    pub fn is_alive(&self) -> bool {
        !self.broken.load(Ordering::Relaxed)
            && !self.service.is_closed()
            && !self.peer().is_transport_closed()
    }

    fn peer(&self) -> &Peer<RoleClient> {
        self.service.peer()
    }

    /// Why calls fail once the session is gone, with the exit status of a stdio server.
    async fn closed_reason(&self) -> String {
        let exit = match &self.process {
            Some(process) => process.exit_status(Duration::from_secs(2)).await,
            None => None,
        };
        match exit {
            Some(status) => format!("MCP server {} exited ({status})", self.name),
            None => format!("the connection to MCP server {} is closed", self.name),
        }
    }

    /// Says what went wrong with a request, and marks the connection dead when the transport
    /// failed.
    async fn describe(&self, error: ServiceError) -> String {
        match error {
            ServiceError::McpError(error) => format!("{} (JSON-RPC error {})", error.message, error.code.0),
            ServiceError::TransportClosed => {
                self.broken.store(true, Ordering::Relaxed);
                self.closed_reason().await
            }
            ServiceError::TransportSend(error) => {
                self.broken.store(true, Ordering::Relaxed);
                format!("cannot reach MCP server {}: {}", self.name, error_chain(error.error.as_ref()))
            }
            other => other.to_string(),
        }
    }

    fn unavailable(&self, message: String) -> teamster_tools::Error {
        teamster_tools::Error::Unavailable { source_name: self.name.clone(), message }
    }
}

#[async_trait]
impl ToolSource for McpConnection {
    /// Lists the server's tools, following cursors, up to [`Limits::max_tools`].
    async fn list(&self) -> Result<Vec<Tool>, teamster_tools::Error> {
        Ok(self.list_entries().await?.into_iter().map(|listed| listed.tool).collect())
    }

    async fn call(&self, name: &str, arguments: &str) -> ToolOutput {
        self.call_in(name, arguments, CallContext::NONE).await
    }

    /// Calls a tool, handing the `notifications/progress` the server sends for the call to
    /// `progress`. Dropping the returned future (the turn's cancellation) sends
    /// `notifications/cancelled` for the request; so does the call timeout.
    async fn call_in(&self, name: &str, arguments: &str, context: CallContext<'_>) -> ToolOutput {
        let arguments = match parse_arguments(arguments) {
            Ok(arguments) => arguments,
            Err(message) => return ToolOutput::error(message),
        };
        if !self.is_alive() {
            return ToolOutput::error(self.closed_reason().await);
        }
        let mut request = CallToolRequestParams::new(name.to_owned());
        request.arguments = arguments;
        if let Some(request_context) = context.request_context {
            let mut meta = RequestMetaObject::new();
            meta.0.insert(REQUEST_CONTEXT_META.to_owned(), serde_json::Value::Object(request_context.clone()));
            request.meta = Some(meta);
        }
        let answer = tokio::time::timeout(self.call_timeout, self.call_tool(request, context.progress)).await;
        match answer {
            Err(_) => ToolOutput::error(format!(
                "MCP tool {name} on server {} timed out after {} s and was cancelled",
                self.name,
                self.call_timeout.as_secs_f64()
            )),
            Ok(Ok(CallToolResponse::Complete(result))) => {
                convert::output(result, self.limits.max_result_bytes)
            }
            Ok(Ok(_)) => ToolOutput::error(format!(
                "MCP tool {name} on server {} asked for input or started a task, which is not supported",
                self.name
            )),
            Ok(Err(error)) => ToolOutput::error(convert::truncate(
                format!("MCP tool {name} on server {} failed: {}", self.name, self.describe(error).await),
                self.limits.max_result_bytes,
            )),
        }
    }
}

impl McpConnection {
    /// Sends one `tools/call` and waits for its answer, passing on the call's progress reports
    /// as they arrive (all of them before the answer).
    async fn call_tool(&self, params: CallToolRequestParams, progress: &dyn ProgressSink) -> Result<CallToolResponse, ServiceError> {
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let handle = self.peer().send_request_with_option(request, PeerRequestOptions::no_options()).await?;
        // Invariant: from here until the answer, dropping this future cancels the request on
        // the server (the timeout above and a cancelled turn both drop it).
        let mut abandoned = Abandoned { peer: self.peer().clone(), id: Some(handle.id.clone()) };
        let mut reports = self.progress.subscribe(handle.progress_token.clone());
        let answer = handle.await_response();
        tokio::pin!(answer);
        let result = loop {
            tokio::select! {
                biased;
                Some(report) = reports.receiver.recv() => progress.report(report),
                result = &mut answer => break result,
            }
        };
        abandoned.id = None;
        while let Ok(report) = reports.receiver.try_recv() {
            progress.report(report);
        }
        match result? {
            ServerResult::CallToolResult(result) => Ok(CallToolResponse::Complete(result)),
            ServerResult::InputRequiredResult(result) => Ok(CallToolResponse::InputRequired(result)),
            ServerResult::CreateTaskResult(result) => Ok(CallToolResponse::Task(result)),
            _ => Err(ServiceError::UnexpectedResponse),
        }
    }
}

/// A request the caller stopped waiting for: dropped while armed, it tells the server to
/// cancel it.
struct Abandoned {
    peer: Peer<RoleClient>,
    id: Option<RequestId>,
}

impl Drop for Abandoned {
    fn drop(&mut self) {
        let (Some(id), Ok(runtime)) = (self.id.take(), tokio::runtime::Handle::try_current()) else { return };
        let peer = self.peer.clone();
        let reason = "the call was abandoned (timeout or a cancelled turn)".to_owned();
        let notification = CancelledNotification::new(CancelledNotificationParam::new(Some(id), Some(reason)));
        runtime.spawn(async move {
            let _ = peer.send_notification(notification.into()).await;
        });
    }
}

/// The client's side of the handshake. It asks for the newest protocol version that still has
/// an `initialize` handshake, which every current server speaks.
fn client_config() -> ClientConfig {
    let mut config = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("teamster", env!("CARGO_PKG_VERSION")),
    );
    config.protocol_version = ProtocolVersion::LATEST_WITH_INITIALIZE;
    config
}

/// Bounds the handshake and maps its failure.
async fn bounded<S>(
    timeout: Duration,
    handshake: impl Future<Output = Result<S, ClientInitializeError>>,
) -> Result<S, McpError> {
    match tokio::time::timeout(timeout, handshake).await {
        Err(_) => Err(McpError::Timeout(timeout)),
        Ok(Ok(service)) => Ok(service),
        Ok(Err(error)) => Err(handshake_error(error)),
    }
}

fn handshake_error(error: ClientInitializeError) -> McpError {
    if let Some(challenge) = error.auth_challenge() {
        let www_authenticate = (!challenge.is_empty()).then(|| challenge.to_owned());
        return McpError::Unauthorized { www_authenticate };
    }
    if error.is_authorization_required() {
        return McpError::Unauthorized { www_authenticate: None };
    }
    McpError::Handshake(error_chain(&error))
}

/// Maps a failure to open the legacy event stream.
fn open_error(error: OpenError) -> McpError {
    match error {
        StreamableHttpError::AuthRequired(required) => {
            let challenge = required.www_authenticate_header;
            McpError::Unauthorized { www_authenticate: (!challenge.is_empty()).then_some(challenge) }
        }
        other => McpError::Handshake(error_chain(&other)),
    }
}

/// An error and its sources, joined, so the root cause is never hidden.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

/// The call's arguments: a JSON object, or nothing when the text is empty.
fn parse_arguments(arguments: &str) -> Result<Option<serde_json::Map<String, serde_json::Value>>, String> {
    if arguments.trim().is_empty() {
        return Ok(None);
    }
    match serde_json::from_str(arguments) {
        Ok(serde_json::Value::Object(object)) => Ok(Some(object)),
        Ok(_) => Err("arguments must be a JSON object".to_owned()),
        Err(error) => Err(format!("arguments are not valid JSON: {error}")),
    }
}
