//! A turn's MCP tools: the agent's servers resolved (registry or inline), connected through the
//! session's pool, their tools picked by the selectors and named so that no two collide, and
//! an `mcp.initialize` event for the connections the turn opened.
//!
//! A server that is unknown or cannot be reached does not fail the turn: the turn goes on
//! without its tools, and the `mcp.initialize` event lists it with an `error` (a Teamster
//! extension to the entry), so clients and logs show why its tools are missing.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use teamster_engine::{ASK_USER_QUESTION, EventSink, LOAD_TOOLS, READ_TOOL_RESULT, SEARCH_TOOLS, ToolBox};
use teamster_mcp::{McpConnection, McpServerConfig};
use teamster_protocol::agent::{AgentSpec, McpServer, McpServerSource};
use teamster_protocol::event::{McpInitialize, McpServerInit};
use teamster_protocol::{Event, MAIN_THREAD_ID, ids, timestamp};
use teamster_store::TurnRecord;
use teamster_tools::selector::Selectors;
use teamster_tools::{Tool, ToolOutput, ToolSource};
use tokio_util::sync::CancellationToken;

use crate::Service;
use crate::mcp_pool::{Pooled, fingerprint};
use crate::mcp_servers::{
    endpoint_url, inline_config, inline_server_id, registry_config, registry_server_id, scrub_url,
};
use crate::sink::TurnSink;

/// How long a turn waits for one MCP server to connect and list its tools.
const TURN_CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// The longest tool name providers accept.
const MAX_TOOL_NAME: usize = 64;

/// One of the agent's servers, ready to connect, or why it cannot be.
struct Planned<'a> {
    server: &'a McpServer,
    config: Result<McpServerConfig, String>,
}

/// One of the agent's servers after connecting: its tools, or why there are none.
struct Connected<'a> {
    server: &'a McpServer,
    id: String,
    outcome: Result<(Pooled, bool), String>,
}

impl Service {
    /// The tools of a turn: the built-ins, then each MCP server's selected tools (deferred ones
    /// held back until loaded), with the loads of earlier turns restored from `history`.
    /// Emits `mcp.initialize` when the turn opened a connection or a server failed.
    pub(crate) async fn turn_toolbox(&self, turn: &TurnRecord, spec: &AgentSpec, history: &[Event]) -> ToolBox {
        let mut toolbox = ToolBox::collect(self.inner.tools.clone()).await;
        let servers = spec.mcp_servers.as_deref().unwrap_or_default();
        if servers.is_empty() {
            return toolbox;
        }
        let log = self.inner.live.get(&turn.id);
        let cancel = log.as_ref().map(|log| log.cancel.clone()).unwrap_or_default();
        let planned: Vec<Planned<'_>> = servers.iter().map(|server| self.plan_server(server)).collect();
        let connected = futures_util::future::join_all(
            planned.into_iter().map(|planned| self.connect_server(&turn.session_id, planned, &cancel)),
        )
        .await;

        let mut entries = Vec::new();
        let mut selected = Vec::new();
        for Connected { server, id, outcome } in connected {
            let name = server.source.name();
            match outcome {
                Ok((pooled, opened)) => {
                    if opened {
                        entries.push(pooled.connection.init_event_entry());
                    }
                    // Validated when the agent was saved; a failure here means a stale spec.
                    match Selectors::from_server(server) {
                        Ok(selectors) => {
                            let selection = selectors.apply(pooled.tools.as_ref().clone());
                            if !selection.unknown_names.is_empty() {
                                tracing::warn!(server = name, names = ?selection.unknown_names, "MCP tool selectors name tools the server does not have; ignored");
                            }
                            selected.push((name, pooled.connection, selection.tools));
                        }
                        Err(error) => entries.push(failed_entry(id, name, error.to_string())),
                    }
                }
                Err(error) => {
                    tracing::warn!(server = name, %error, "MCP server unavailable; the turn goes on without its tools");
                    entries.push(failed_entry(id, name, error));
                }
            }
        }
        if !entries.is_empty()
            && let Some(log) = log
        {
            let sink = TurnSink { log, writer: self.inner.writer.clone() };
            sink.emit_content(&Event::McpInitialize(McpInitialize {
                id: ids::new_id("evt"),
                created_at: timestamp::now(),
                thread_id: MAIN_THREAD_ID.to_owned(),
                mcp_servers: entries,
            }));
        }

        let mut reserved: HashSet<String> = toolbox.tools().iter().map(|tool| tool.name.clone()).collect();
        reserved.extend([READ_TOOL_RESULT, ASK_USER_QUESTION, SEARCH_TOOLS, LOAD_TOOLS].map(str::to_owned));
        let listed: Vec<(&str, Vec<&str>)> = selected
            .iter()
            .map(|(server, _, tools)| (*server, tools.iter().map(|selected| selected.tool.name.as_str()).collect()))
            .collect();
        let names = tool_names(&listed, &reserved);
        for ((_, connection, tools), names) in selected.into_iter().zip(names) {
            let mut source = ServerTools { connection, tools: Vec::new(), server_names: HashMap::new() };
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
        toolbox
    }

    /// Where one of the agent's servers is.
    fn plan_server<'a>(&self, server: &'a McpServer) -> Planned<'a> {
        let config = match &server.source {
            McpServerSource::Registry { name } => match self.inner.mcp_servers.get(name) {
                Some(manifest) => registry_config(name, &manifest),
                None => Err(format!("no MCP server named {name:?} is configured")),
            },
            McpServerSource::Inline { name, url, transport } => Ok(inline_config(name, url, transport.as_deref())),
            McpServerSource::Unsupported { kind, .. } => Err(format!("MCP servers of type {kind:?} cannot be used by an agent")),
        };
        Planned { server, config }
    }

    /// The session's connection to a server, reused when it is open and alive, else opened
    /// and listed (bounded in time, abandoned when the turn is cancelled). The flag says
    /// whether this call opened it.
    async fn connect_server<'a>(&self, session_id: &str, planned: Planned<'a>, cancel: &CancellationToken) -> Connected<'a> {
        let server = planned.server;
        let name = server.source.name();
        let fallback_id = match &server.source {
            McpServerSource::Inline { name, .. } => inline_server_id(name),
            _ => registry_server_id(name),
        };
        let mut config = match planned.config {
            Ok(config) => config,
            Err(error) => return Connected { server, id: fallback_id, outcome: Err(error) },
        };
        let id = config.id.clone();
        let print = fingerprint(&config);
        let url = endpoint_url(&config).map(str::to_owned);
        if let Some(pooled) = self.inner.mcp_pool.get(session_id, name, print) {
            return Connected { server, id, outcome: Ok((pooled, false)) };
        }
        config.connect_timeout = TURN_CONNECT_TIMEOUT;
        let open = async {
            let connection = McpConnection::connect(config).await.map_err(|error| match error {
                teamster_mcp::McpError::Unauthorized { .. } => "the server requires authorization".to_owned(),
                other => other.to_string(),
            })?;
            let listing = tokio::time::timeout(TURN_CONNECT_TIMEOUT, connection.list()).await;
            let tools = match listing {
                Ok(Ok(tools)) => tools,
                Ok(Err(error)) => return Err(error.to_string()),
                Err(_) => return Err(format!("tools/list did not answer within {} s", TURN_CONNECT_TIMEOUT.as_secs())),
            };
            Ok(Pooled { connection: Arc::new(connection), tools: Arc::new(tools) })
        };
        let outcome = tokio::select! {
            () = cancel.cancelled() => Err("the turn was cancelled while connecting".to_owned()),
            opened = open => opened,
        };
        let outcome = outcome.map_err(|message| scrub_url(message, url.as_deref())).map(|pooled| {
            self.inner.mcp_pool.insert(session_id, name, print, pooled.clone());
            (pooled, true)
        });
        Connected { server, id, outcome }
    }
}

fn failed_entry(id: String, name: &str, error: String) -> McpServerInit {
    McpServerInit { id, name: name.to_owned(), session_id: None, transport_type: None, error: Some(error) }
}

/// One server's selected tools under the names the model calls them by.
struct ServerTools {
    connection: Arc<McpConnection>,
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
        match self.server_names.get(name) {
            Some(own) => self.connection.call(own, arguments).await,
            None => ToolOutput::error(format!("There is no tool named {name:?}.")),
        }
    }
}

/// The names the model calls each server's tools by: a tool keeps its own name when that is
/// unique among every server's tools and not `reserved`, and is `<server>__<tool>` otherwise.
/// Names are cut to `^[a-zA-Z0-9_-]{1,64}$` (what OpenAI and Anthropic accept), and a name that
/// would still collide gets a `_2`, `_3`, ... suffix. Deterministic: the same servers and tools
/// in the same order always get the same names.
pub(crate) fn tool_names(servers: &[(&str, Vec<&str>)], reserved: &HashSet<String>) -> Vec<Vec<String>> {
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
