//! A turn's MCP tools: the agent's servers resolved (registry or inline), connected through the
//! session's pool, their tools picked by the selectors and named so that no two collide, and
//! an `mcp.initialize` event for the connections the turn opened. A registry name may also be
//! one of the program's in-process tool sets (`teamster_tools::tool_sets`), which come first:
//! the set is opened for the turn instead of connected, and its tools go through the same
//! selectors, approvals and naming.
//!
//! A server that is unknown or cannot be reached does not fail the turn: the turn goes on
//! without its tools, and the `mcp.initialize` event lists it with an `error` (a Teamster
//! extension to the entry), so clients and logs show why its tools are missing. A server that
//! needs the user's OAuth authorization is the exception: the turn pauses at its start with
//! `mcp.auth_required` (see `mcp_oauth.rs`). Connections are per session and user.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use teamster_engine::{ASK_USER_QUESTION, LOAD_TOOLS, READ_TOOL_RESULT, SEARCH_TOOLS, ToolBox};
use teamster_mcp::{McpConnection, McpError, McpServerConfig, Transport};
use teamster_protocol::agent::{AgentSpec, McpServer, McpServerSource};
use teamster_protocol::event::{McpAuthRequired, McpInitialize, McpServerAuth, McpServerInit};
use teamster_protocol::settings::McpServerAuth as ManifestAuth;
use teamster_protocol::{Event, MAIN_THREAD_ID, ids, timestamp};
use teamster_store::TurnRecord;
use teamster_tools::selector::Selectors;
use teamster_tools::tool_sets::{ToolScope, ToolSet};
use teamster_tools::{CallContext, Tool, ToolOutput, ToolSource};
use tokio_util::sync::CancellationToken;

use super::McpHost;
use super::oauth::subject_key;
use super::pool::{Pooled, fingerprint};
use super::servers::{
    endpoint_url, inline_config, inline_server_id, registry_config, registry_server_id, scrub_url,
};

/// How long a turn waits for one MCP server to connect and list its tools.
const TURN_CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// The longest tool name providers accept.
const MAX_TOOL_NAME: usize = 64;

/// One of the agent's servers, ready to connect, or why it cannot be.
struct Planned<'a> {
    server: &'a McpServer,
    config: Result<McpServerConfig, String>,
    /// The program's in-process tool set of that name, used instead of any connection.
    local: Option<Arc<dyn ToolSet>>,
    /// Whether the server is configured for OAuth (`dcr`): its connections carry the user's
    /// token, and without one the turn asks the user to authorize it.
    oauth: bool,
}

/// One of the agent's servers after connecting.
struct Connected<'a> {
    server: &'a McpServer,
    id: String,
    outcome: Outcome,
}

/// What connecting to a server gave.
enum Outcome {
    /// Its connection and whether this turn opened it.
    Ready(Pooled, bool),
    /// An in-process tool set, opened for the turn, and the tools it listed.
    Local(Arc<dyn ToolSource>, Vec<Tool>),
    /// Why it cannot be used; the turn goes on without it.
    Failed(String),
    /// The user must authorize it (OAuth) first; the turn pauses.
    NeedsAuthorization,
}

/// Why opening a connection failed.
enum OpenError {
    Unauthorized,
    Other(String),
}

/// A turn's tools, or why it cannot start yet.
pub enum TurnTools {
    Ready(ToolBox),
    /// Servers of the agent need the user's authorization: the turn pauses with this
    /// `mcp.auth_required` before any model call.
    NeedsAuthorization(McpAuthRequired),
}

impl McpHost {
    /// The tools of a turn: `toolbox` (the built-ins), then each MCP server's selected tools
    /// (deferred ones held back until loaded), with the loads of earlier turns restored from
    /// `history`. Connecting is abandoned when `cancel` fires. Also answers the `mcp.initialize`
    /// event to record when the turn opened a connection or a server failed.
    ///
    /// If any server needs the turn's user to authorize it (an OAuth server for which the user
    /// holds no usable tokens, or whose tokens it refuses), the turn cannot start: the answer is
    /// the `mcp.auth_required` naming every such server, so one pause covers them all.
    pub async fn turn_tools(
        &self,
        mut toolbox: ToolBox,
        turn: &TurnRecord,
        spec: &AgentSpec,
        history: &[Event],
        cancel: &CancellationToken,
    ) -> (Option<Event>, TurnTools) {
        let servers = spec.mcp_servers.as_deref().unwrap_or_default();
        if servers.is_empty() {
            return (None, TurnTools::Ready(toolbox));
        }
        let user = &turn.created_by;
        let planned: Vec<Planned<'_>> = servers.iter().map(|server| self.plan_server(server)).collect();
        let connected = futures_util::future::join_all(
            planned.into_iter().map(|planned| self.connect_server(turn, planned, cancel)),
        )
        .await;

        let mut entries = Vec::new();
        let mut selected = Vec::new();
        let mut unauthorized = Vec::new();
        for Connected { server, id, outcome } in connected {
            let name = server.source.name();
            let (source, tools): (Arc<dyn ToolSource>, Vec<Tool>) = match outcome {
                Outcome::Ready(pooled, opened) => {
                    if opened {
                        entries.push(pooled.connection.init_event_entry());
                    }
                    (pooled.connection, pooled.tools.as_ref().clone())
                }
                Outcome::Local(source, tools) => (source, tools),
                Outcome::NeedsAuthorization => {
                    match self.oauth.auth_url(user, name, &turn.session_id) {
                        Ok(auth_url) => unauthorized.push(McpServerAuth { id, name: name.to_owned(), auth_url }),
                        Err(error) => {
                            entries.push(failed_entry(id, name, format!("the authorization link cannot be made: {error}")));
                        }
                    }
                    continue;
                }
                Outcome::Failed(error) => {
                    tracing::warn!(server = name, %error, "MCP server unavailable; the turn goes on without its tools");
                    entries.push(failed_entry(id, name, error));
                    continue;
                }
            };
            // Validated when the agent was saved; a failure here means a stale spec.
            match Selectors::from_server(server) {
                Ok(selectors) => {
                    let selection = selectors.apply(tools);
                    if !selection.unknown_names.is_empty() {
                        tracing::warn!(server = name, names = ?selection.unknown_names, "MCP tool selectors name tools the server does not have; ignored");
                    }
                    selected.push((name, source, selection.tools));
                }
                Err(error) => entries.push(failed_entry(id, name, error.to_string())),
            }
        }
        let initialized = (!entries.is_empty()).then(|| {
            Event::McpInitialize(McpInitialize {
                id: ids::new_id("evt"),
                created_at: timestamp::now(),
                thread_id: MAIN_THREAD_ID.to_owned(),
                mcp_servers: entries,
            })
        });
        if !unauthorized.is_empty() {
            // A run-level event: the spec leaves its thread null.
            let required = TurnTools::NeedsAuthorization(McpAuthRequired {
                id: ids::new_id("evt"),
                created_at: timestamp::now(),
                thread_id: None,
                mcp_servers: unauthorized,
            });
            return (initialized, required);
        }

        let mut reserved: HashSet<String> = toolbox.tools().iter().map(|tool| tool.name.clone()).collect();
        reserved.extend([READ_TOOL_RESULT, ASK_USER_QUESTION, SEARCH_TOOLS, LOAD_TOOLS].map(str::to_owned));
        let listed: Vec<(&str, Vec<&str>)> = selected
            .iter()
            .map(|(server, _, tools)| (*server, tools.iter().map(|selected| selected.tool.name.as_str()).collect()))
            .collect();
        let names = tool_names(&listed, &reserved);
        for ((_, server, tools), names) in selected.into_iter().zip(names) {
            let mut source = ServerTools { server, tools: Vec::new(), server_names: HashMap::new() };
            let mut preloaded = HashSet::new();
            for (selected, name) in tools.into_iter().zip(names) {
                let mut tool = selected.tool;
                source.server_names.insert(name.clone(), std::mem::replace(&mut tool.name, name.clone()));
                if selected.preload {
                    preloaded.insert(name);
                }
                source.tools.push(tool);
            }
            toolbox.add_deferred(Arc::new(source), |tool| !preloaded.contains(&tool.name)).await;
        }
        toolbox.restore_loads(history, MAIN_THREAD_ID);
        (initialized, TurnTools::Ready(toolbox))
    }

    /// Where one of the agent's servers is: a registry name is the program's in-process tool
    /// set of that name first, then the configured server.
    fn plan_server<'a>(&self, server: &'a McpServer) -> Planned<'a> {
        if let McpServerSource::Registry { name } = &server.source
            && let Some(set) = self.tool_sets.get(name)
        {
            let config = Err(format!("{name:?} is an in-process tool set"));
            return Planned { server, config, local: Some(set.clone()), oauth: false };
        }
        let (config, oauth) = match &server.source {
            McpServerSource::Registry { name } => match self.registry.get(name) {
                Some(manifest) => {
                    (registry_config(name, &manifest, self.allow_stdio), matches!(manifest.auth, Some(ManifestAuth::Dcr {})))
                }
                None => (Err(format!("no MCP server named {name:?} is configured")), false),
            },
            McpServerSource::Inline { name, url, transport } => {
                (Ok(inline_config(name, url, transport.as_deref(), &self.egress)), false)
            }
            McpServerSource::Unsupported { kind, .. } => {
                (Err(format!("MCP servers of type {kind:?} cannot be used by an agent")), false)
            }
        };
        Planned { server, config, local: None, oauth }
    }

    /// The connection of the session and user to a server, reused when it is open and alive,
    /// else opened and listed (bounded in time, abandoned when the turn is cancelled). An OAuth
    /// server's connection sends the user's token; a 401 is retried once after a refresh, then
    /// asks for the user's authorization.
    async fn connect_server<'a>(&self, turn: &TurnRecord, planned: Planned<'a>, cancel: &CancellationToken) -> Connected<'a> {
        let (session_id, user) = (turn.session_id.as_str(), &turn.created_by);
        let server = planned.server;
        let name = server.source.name();
        let fallback_id = match &server.source {
            McpServerSource::Inline { name, .. } => inline_server_id(name),
            _ => registry_server_id(name),
        };
        if let Some(set) = planned.local {
            let scope = ToolScope {
                session_id: session_id.to_owned(),
                turn_id: turn.id.clone(),
                user: user.clone(),
                request_context: turn.request_context.clone(),
            };
            let source = set.open(&scope);
            let outcome = match source.list().await {
                Ok(tools) => Outcome::Local(source, tools),
                Err(error) => Outcome::Failed(error.to_string()),
            };
            return Connected { server, id: fallback_id, outcome };
        }
        let mut config = match planned.config {
            Ok(config) => config,
            Err(error) => return Connected { server, id: fallback_id, outcome: Outcome::Failed(error) },
        };
        let id = config.id.clone();
        let mut print = fingerprint(&config);
        let mut provider = None;
        if planned.oauth {
            // The grant is read on every turn, so a user who disconnected the server (on any
            // replica) is asked again, and a new grant's client opens a new connection.
            let Some((bearer, client_id)) = self.oauth_bearer(user, name).await else {
                return Connected { server, id, outcome: Outcome::NeedsAuthorization };
            };
            print = with_client(print, &client_id);
            if let Transport::StreamableHttp(http) | Transport::Sse(http) = &mut config.transport {
                http.bearer_token = Some(bearer.clone());
            }
            provider = Some(bearer);
        }
        let user_key = subject_key(user);
        let url = endpoint_url(&config).map(str::to_owned);
        if let Some(pooled) = self.pool.get(session_id, &user_key, name, print) {
            return Connected { server, id, outcome: Outcome::Ready(pooled, false) };
        }
        config.connect_timeout = TURN_CONNECT_TIMEOUT;
        let open = async {
            let mut opened = open_connection(config.clone()).await;
            if let (Err(OpenError::Unauthorized), Some(provider)) = (&opened, &provider) {
                // The server refused a token that had not expired (e.g. revoked): a refreshed
                // one may still do.
                if provider.refresh_now().await.is_ok() {
                    opened = open_connection(config).await;
                }
            }
            opened
        };
        let opened = tokio::select! {
            () = cancel.cancelled() => Err(OpenError::Other("the turn was cancelled while connecting".to_owned())),
            opened = open => opened,
        };
        let outcome = match opened {
            Ok(pooled) => {
                self.pool.insert(session_id, &user_key, name, print, pooled.clone());
                Outcome::Ready(pooled, true)
            }
            Err(OpenError::Unauthorized) if planned.oauth => Outcome::NeedsAuthorization,
            Err(OpenError::Unauthorized) => Outcome::Failed(
                "the server requires authorization; configure its credentials (auth type header or dcr) \
                 in /api/v1/settings/mcp-servers"
                    .to_owned(),
            ),
            Err(OpenError::Other(message)) => Outcome::Failed(scrub_url(message, url.as_deref())),
        };
        Connected { server, id, outcome }
    }
}

/// Opens a connection and lists its tools, within [`TURN_CONNECT_TIMEOUT`] for the listing.
async fn open_connection(config: McpServerConfig) -> Result<Pooled, OpenError> {
    let connection = McpConnection::connect(config).await.map_err(|error| match error {
        McpError::Unauthorized { .. } => OpenError::Unauthorized,
        other => OpenError::Other(other.to_string()),
    })?;
    let listing = tokio::time::timeout(TURN_CONNECT_TIMEOUT, connection.list()).await;
    let tools = match listing {
        Ok(Ok(tools)) => tools,
        Ok(Err(error)) => return Err(OpenError::Other(error.to_string())),
        Err(_) => {
            return Err(OpenError::Other(format!("tools/list did not answer within {} s", TURN_CONNECT_TIMEOUT.as_secs())));
        }
    };
    Ok(Pooled { connection: Arc::new(connection), tools: Arc::new(tools) })
}

/// A connection fingerprint that also names the OAuth client, so a grant from another client
/// opens a new connection.
fn with_client(fingerprint: u64, client_id: &str) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (fingerprint, client_id).hash(&mut hasher);
    hasher.finish()
}

fn failed_entry(id: String, name: &str, error: String) -> McpServerInit {
    McpServerInit { id, name: name.to_owned(), session_id: None, transport_type: None, error: Some(error) }
}

/// One server's (or in-process tool set's) selected tools under the names the model calls
/// them by.
struct ServerTools {
    server: Arc<dyn ToolSource>,
    tools: Vec<Tool>,
    /// The model's name of each tool to the server's own.
    server_names: HashMap<String, String>,
}

#[async_trait]
impl ToolSource for ServerTools {
    async fn list(&self) -> Result<Vec<Tool>, teamster_tools::Error> {
        Ok(self.tools.clone())
    }

    async fn call(&self, name: &str, arguments: &str) -> ToolOutput {
        self.call_in(name, arguments, CallContext::NONE).await
    }

    async fn call_in(&self, name: &str, arguments: &str, context: CallContext<'_>) -> ToolOutput {
        match self.server_names.get(name) {
            Some(own) => self.server.call_in(own, arguments, context).await,
            None => ToolOutput::error(format!("There is no tool named {name:?}.")),
        }
    }
}

/// The names the model calls each server's tools by: a tool keeps its own name when that is
/// unique among every server's tools and not `reserved`, and is `<server>__<tool>` otherwise.
/// Names are cut to `^[a-zA-Z0-9_-]{1,64}$` (what OpenAI and Anthropic accept), and a name that
/// would still collide gets a `_2`, `_3`, ... suffix. Deterministic: the same servers and tools
/// in the same order always get the same names.
pub fn tool_names(servers: &[(&str, Vec<&str>)], reserved: &HashSet<String>) -> Vec<Vec<String>> {
    let mut counts: HashMap<String, usize> = HashMap::new();
    for (_, tools) in servers {
        for tool in tools {
            *counts.entry(sanitize(tool)).or_default() += 1;
        }
    }
    let mut taken: HashSet<String> = reserved.clone();
    servers
        .iter()
        .map(|(server, tools)| {
            tools
                .iter()
                .map(|tool| {
                    let own = sanitize(tool);
                    let wanted = if counts[&own] == 1 && !reserved.contains(&own) && own.len() <= MAX_TOOL_NAME {
                        own
                    } else {
                        fit(&format!("{}__{}", sanitize(server), sanitize(tool)), "")
                    };
                    let mut name = wanted.clone();
                    let mut suffix = 2;
                    while taken.contains(&name) {
                        name = fit(&wanted, &format!("_{suffix}"));
                        suffix += 1;
                    }
                    taken.insert(name.clone());
                    name
                })
                .collect()
        })
        .collect()
}

/// Every character outside `[a-zA-Z0-9_-]` replaced by `_`; `tool` when empty.
fn sanitize(name: &str) -> String {
    let clean: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect();
    if clean.is_empty() { "tool".to_owned() } else { clean }
}

/// `name` followed by `suffix`, within [`MAX_TOOL_NAME`]: a long name is cut and keeps a hash
/// of its whole text, so two long names that share a beginning stay apart.
fn fit(name: &str, suffix: &str) -> String {
    if name.len() + suffix.len() <= MAX_TOOL_NAME {
        return format!("{name}{suffix}");
    }
    // FNV-1a: stable across builds, unlike the standard library's hasher.
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3));
    let tail = format!("_{:08x}{suffix}", hash as u32);
    // Sanitized names are ASCII, so any byte index is a character boundary.
    format!("{}{tail}", &name[..MAX_TOOL_NAME - tail.len()])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(servers: &[(&str, &[&str])], reserved: &[&str]) -> Vec<Vec<String>> {
        let servers: Vec<(&str, Vec<&str>)> = servers.iter().map(|(server, tools)| (*server, tools.to_vec())).collect();
        tool_names(&servers, &reserved.iter().map(|name| (*name).to_owned()).collect())
    }

    /// Servers with their tools, reserved names, and the expected names.
    type Case<'a> = (&'a [(&'a str, &'a [&'a str])], &'a [&'a str], &'a [&'a [&'a str]]);

    #[test]
    fn names_stay_unless_they_collide() {
        let cases: &[Case<'_>] = &[
            (&[("github", &["search", "issues"])], &[], &[&["search", "issues"]]),
            (
                &[("github", &["search", "issues"]), ("jira", &["search"])],
                &[],
                &[&["github__search", "issues"], &["jira__search"]],
            ),
            (&[("a", &["load_tools", "echo"])], &["load_tools"], &[&["a__load_tools", "echo"]]),
            (&[("my.server", &["do it", "x.y"])], &[], &[&["do_it", "x_y"]]),
            // Two names that sanitize alike collide, and so do their qualified forms.
            (&[("s", &["a.b", "a_b"])], &[], &[&["s__a_b", "s__a_b_2"]]),
            // A unique name that equals another's qualified form is kept; the later one moves.
            (&[("s", &["t__x"]), ("t", &["x"]), ("u", &["x"])], &[], &[&["t__x"], &["t__x_2"], &["u__x"]]),
            (&[("s", &[""])], &[], &[&["tool"]]),
        ];
        for (servers, reserved, expected) in cases {
            let expected: Vec<Vec<String>> =
                expected.iter().map(|tools| tools.iter().map(|name| (*name).to_owned()).collect()).collect();
            assert_eq!(names(servers, reserved), expected, "{servers:?}");
        }
    }

    #[test]
    fn long_names_are_cut_with_a_hash_and_stay_valid() {
        let long = "x".repeat(100);
        let other = format!("{}y", "x".repeat(99));
        let result = names(&[("s", &[long.as_str(), other.as_str()]), ("t", &[long.as_str()])], &[]);
        let all: Vec<&String> = result.iter().flatten().collect();
        assert_eq!(all.len(), 3);
        assert_eq!(all.iter().collect::<HashSet<_>>().len(), 3, "{all:?}");
        for name in &all {
            assert!(name.len() <= MAX_TOOL_NAME && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'), "{name}");
        }
        assert_eq!(result, names(&[("s", &[long.as_str(), other.as_str()]), ("t", &[long.as_str()])], &[]));
    }
}
