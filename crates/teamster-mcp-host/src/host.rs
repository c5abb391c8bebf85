//! The host itself ([`McpHost`]): its state, and the operations on configured servers (list,
//! write, rename, delete, test, list tools) that the settings API and agents' checks use.
//! Their manifests' rules are in `servers.rs`, authorizations in `oauth.rs`, a turn's tools in
//! `toolbox.rs`.

use std::sync::Arc;

use teamster_egress::EgressPolicy;
use teamster_identity::Caller;
use teamster_mcp::oauth::TokenKey;
use teamster_mcp::{McpConnection, Transport};
use teamster_protocol::agent::{McpServer, McpServerSource};
use teamster_protocol::settings::{
    AvailableMcpServer, ConfiguredMcpServer, McpServerAuth, McpServerAuthPublic, McpServerManifest, McpServerTestResult,
};
use teamster_sealed::SealedSettings;
use teamster_store::SettingsStore;
use teamster_tools::tool_sets::{ToolScope, ToolSets};
use teamster_tools::{Tool, ToolSource};

use crate::error::{McpHostError, Result};
use crate::links::McpLinks;
use crate::servers::{
    LISTING_TIMEOUT, McpRegistry, McpServerWrite, SETTING_KIND, configured, connect_bounded, inline_config,
    auth_status, keep_redacted_secrets, not_found, registry_config, scrub_url, sees_whole_urls, shown_url, stdio_disabled,
    validate_manifest,
};
use crate::{oauth, pool};

/// The MCP servers, connections and authorizations of this replica.
pub struct McpHost {
    pub(crate) store: Arc<dyn SettingsStore>,
    /// The servers configured through the settings API, by name.
    pub(crate) registry: McpRegistry,
    /// Sessions' open connections.
    pub(crate) pool: pool::McpPool,
    /// Users' OAuth authorizations.
    pub(crate) oauth: oauth::McpOAuth,
    /// Whether servers of type stdio (commands run on this host) may be configured and started.
    pub(crate) allow_stdio: bool,
    /// Seals the servers' header and environment secrets in the store.
    pub(crate) sealed: SealedSettings,
    /// Where the URLs of agents' inline servers (which members write) may lead.
    pub(crate) egress: Arc<EgressPolicy>,
    /// The program's in-process tool sets, which agents name as they name configured servers.
    pub(crate) tool_sets: ToolSets,
}

impl McpHost {
    /// Loads the configured servers and starts closing idle connections (until the host is
    /// dropped). `links` name the OAuth pages (`None`: users cannot authorize in a browser);
    /// `key` seals tokens (`None`: a random key for this process), `sealed` the servers'
    /// secrets; `egress` bounds where agents' inline servers may be; `tool_sets` are the
    /// program's in-process tools.
    pub async fn start(
        store: Arc<dyn SettingsStore>,
        links: Option<Arc<dyn McpLinks>>,
        key: Option<&TokenKey>,
        sealed: SealedSettings,
        allow_stdio: bool,
        egress: Arc<EgressPolicy>,
        tool_sets: ToolSets,
    ) -> Result<Arc<McpHost>> {
        let host = Arc::new(McpHost {
            registry: McpRegistry::load(store.as_ref(), &sealed).await?,
            pool: pool::McpPool::default(),
            oauth: oauth::McpOAuth::new(links, key)?,
            store,
            allow_stdio,
            sealed,
            egress,
            tool_sets,
        });
        pool::start_sweeper(&host);
        Ok(host)
    }

    pub(crate) fn store(&self) -> &dyn SettingsStore {
        self.store.as_ref()
    }

    /// Reads the configured servers again (another replica changed them).
    pub async fn reload(&self) -> Result<()> {
        self.registry.reload(self.store(), &self.sealed).await
    }

    /// Closes a session's connections (the session is gone).
    pub fn close_session(&self, session_id: &str) {
        self.pool.remove_session(session_id);
    }
}

impl McpHost {
    /// Every configured MCP server, secrets redacted, with the caller's auth status.
    pub async fn list_mcp_server_settings(&self, caller: &Caller) -> Result<Vec<ConfiguredMcpServer>> {
        let authorized = self.authorized_servers(&caller.subject).await?;
        let servers = self.registry.read();
        Ok(servers.iter().map(|(name, manifest)| configured(name, manifest, authorized.contains(name))).collect())
    }

    /// One configured MCP server, secrets redacted, with the caller's auth status.
    pub async fn get_mcp_server_setting(&self, caller: &Caller, name: &str) -> Result<ConfiguredMcpServer> {
        let manifest = self.registry.get(name).ok_or_else(|| not_found(name))?;
        let authorized = self.authorized_servers(&caller.subject).await?;
        Ok(configured(name, &manifest, authorized.contains(name)))
    }

    /// A configured MCP server as stored, secrets included (for connecting, and for OAuth).
    pub fn mcp_server_manifest(&self, name: &str) -> Option<McpServerManifest> {
        self.registry.get(name)
    }

    /// The MCP servers agents can name, without configuration or secrets, with the caller's
    /// auth status.
    pub async fn list_available_mcp_servers(&self, caller: &Caller) -> Result<Vec<AvailableMcpServer>> {
        let authorized = self.authorized_servers(&caller.subject).await?;
        let servers = self.registry.read();
        Ok(servers
            .iter()
            .map(|(name, manifest)| AvailableMcpServer {
                name: name.clone(),
                url: match (manifest.kind.as_str(), &manifest.url) {
                    (McpServerManifest::STDIO, _) => format!("stdio:{name}"),
                    (_, Some(url)) if sees_whole_urls(caller) => url.clone(),
                    (_, Some(url)) => shown_url(url),
                    (_, None) => String::new(),
                },
                auth: manifest.auth.as_ref().map(|auth| McpServerAuthPublic { kind: auth.kind().to_owned() }),
                auth_status: auth_status(manifest, authorized.contains(name)),
            })
            .collect())
    }

    /// Creates or replaces an MCP server, stored so it survives restarts. A redacted header or
    /// environment value keeps the stored one.
    pub async fn write_mcp_server(
        &self,
        caller: &Caller,
        mut manifest: McpServerManifest,
        mode: McpServerWrite,
    ) -> Result<ConfiguredMcpServer> {
        validate_manifest(&manifest)?;
        if manifest.kind == McpServerManifest::STDIO && !self.allow_stdio {
            return Err(McpHostError::Forbidden(stdio_disabled(&manifest.name)));
        }
        let name = manifest.name.clone();
        let registry = &self.registry;
        let _writing = registry.writes.lock().await;
        let existing = registry.get(&name);
        if mode == McpServerWrite::Create && existing.is_some() {
            return Err(McpHostError::Conflict {
                code: "already_exists",
                message: format!("an MCP server named {name:?} already exists"),
            });
        }
        keep_redacted_secrets(&mut manifest, existing.as_ref())?;
        self.sealed.put(self.store(), SETTING_KIND, &name, &manifest).await?;
        registry.servers.write().unwrap_or_else(std::sync::PoisonError::into_inner).insert(name.clone(), manifest.clone());
        let authorized = self.authorized_servers(&caller.subject).await?;
        Ok(configured(&name, &manifest, authorized.contains(&name)))
    }

    /// Deletes a configured MCP server. Agents that name it fail to connect to it at their next
    /// turn, with an error that names it (and, at save time, are refused).
    pub async fn delete_mcp_server(&self, name: &str) -> Result<()> {
        let registry = &self.registry;
        let _writing = registry.writes.lock().await;
        let stored = self.store().delete_setting(SETTING_KIND, name).await?;
        let known = registry.servers.write().unwrap_or_else(std::sync::PoisonError::into_inner).remove(name).is_some();
        if !stored && !known {
            return Err(not_found(name));
        }
        Ok(())
    }

    /// Renames a configured MCP server, keeping its secrets. Agents that name the old name must
    /// be changed to the new one; users of an OAuth server authorize it again under its new name.
    pub async fn rename_mcp_server(&self, caller: &Caller, name: &str, new_name: &str) -> Result<ConfiguredMcpServer> {
        let registry = &self.registry;
        let _writing = registry.writes.lock().await;
        let mut manifest = registry.get(name).ok_or_else(|| not_found(name))?;
        manifest.name = new_name.to_owned();
        validate_manifest(&manifest).map_err(|error| match error {
            McpHostError::Invalid { message, .. } => McpHostError::invalid_param("name", message),
            other => other,
        })?;
        if new_name != name {
            if registry.get(new_name).is_some() {
                return Err(McpHostError::Conflict {
                    code: "already_exists",
                    message: format!("an MCP server named {new_name:?} already exists"),
                });
            }
            self.sealed.put(self.store(), SETTING_KIND, new_name, &manifest).await?;
            self.store().delete_setting(SETTING_KIND, name).await?;
            let mut servers = registry.servers.write().unwrap_or_else(std::sync::PoisonError::into_inner);
            servers.remove(name);
            servers.insert(new_name.to_owned(), manifest.clone());
        }
        let authorized = self.authorized_servers(&caller.subject).await?;
        Ok(configured(new_name, &manifest, authorized.contains(new_name)))
    }

    /// Tests a configured server as a turn would use it: connects (with the caller's token for
    /// an OAuth server) and lists its tools. A failure is part of the answer, not an error; only
    /// an unknown name is.
    pub async fn test_mcp_server(&self, caller: &Caller, name: &str) -> Result<McpServerTestResult> {
        if self.registry.get(name).is_none() {
            return Err(not_found(name));
        }
        let started = std::time::Instant::now();
        let listed = self.list_mcp_server_tools(caller, name).await;
        let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let failed = |code: &str, message: String| McpServerTestResult {
            ok: false,
            tools: Vec::new(),
            elapsed_ms,
            error_code: Some(code.to_owned()),
            error: Some(message),
        };
        Ok(match listed {
            Ok(entries) => McpServerTestResult {
                ok: true,
                tools: entries
                    .iter()
                    .filter_map(|entry| entry.get("name").and_then(serde_json::Value::as_str).map(str::to_owned))
                    .collect(),
                elapsed_ms,
                error_code: None,
                error: None,
            },
            Err(McpHostError::AuthRequired(message)) => failed("auth_required", message),
            Err(McpHostError::Upstream(message)) => failed("unreachable", message),
            Err(McpHostError::Unprocessable(message) | McpHostError::Forbidden(message)) => failed("invalid_config", message),
            Err(other) => return Err(other),
        })
    }

    /// Connects to a configured server and lists its tools as the `tools/list` entries it gave
    /// (the selectors see the tools made from the same entries), with
    /// the caller's token for an OAuth server. Bounded in time; a server that cannot be reached
    /// is [`McpHostError::Upstream`], one that wants authorization (or the caller's, first)
    /// [`McpHostError::AuthRequired`].
    pub async fn list_mcp_server_tools(&self, caller: &Caller, name: &str) -> Result<Vec<serde_json::Value>> {
        let (connection, url) = self.connect_configured(caller, name).await?;
        let tools = connection.list_entries().await.map_err(|error| {
            McpHostError::Upstream(scrub_url(format!("MCP server {name:?} could not list its tools: {error}"), url.as_deref()))
        })?;
        Ok(tools.into_iter().map(|listed| listed.entry).collect())
    }

    /// Connects to the configured server `name` as `caller` would in a turn (with the caller's
    /// token for an OAuth server), each step bounded by [`LISTING_TIMEOUT`]; answers the
    /// connection and the URL its messages must not quote whole.
    async fn connect_configured(&self, caller: &Caller, name: &str) -> Result<(McpConnection, Option<String>)> {
        let manifest = self.registry.get(name).ok_or_else(|| not_found(name))?;
        let mut config = registry_config(name, &manifest, self.allow_stdio).map_err(|message| {
            if manifest.kind == McpServerManifest::STDIO { McpHostError::Forbidden(message) } else { McpHostError::Unprocessable(message) }
        })?;
        if matches!(manifest.auth, Some(McpServerAuth::Dcr {})) {
            let Some((bearer, _)) = self.oauth_bearer(&caller.subject, name).await else {
                return Err(McpHostError::AuthRequired(format!(
                    "MCP server {name:?} requires your authorization first: open GET /api/v1/mcp-servers/{name}/authorize"
                )));
            };
            if let Transport::StreamableHttp(http) | Transport::Sse(http) = &mut config.transport {
                http.bearer_token = Some(bearer);
            }
        }
        connect_bounded(name, config).await
    }

    /// Whether an agent may name `name` as a registry server: a configured server, or one of
    /// the program's in-process tool sets.
    pub fn names_server(&self, name: &str) -> bool {
        self.tool_sets.contains(name) || self.registry.get(name).is_some()
    }

    /// The tools an agent's server entry offers (before the entry's selectors), listed over a
    /// connection of its own that is closed once listed, connecting as `caller` would in a
    /// turn; or why the entry cannot be used. The check of an agent (`POST
    /// /api/v1/agents/check`) asks this.
    pub async fn probe(&self, caller: &Caller, server: &McpServer) -> std::result::Result<Vec<Tool>, String> {
        let (connection, url) = match &server.source {
            McpServerSource::Registry { name } => {
                if let Some(set) = self.tool_sets.get(name) {
                    let scope = ToolScope { session_id: "check".to_owned(), turn_id: "check".to_owned(), user: caller.subject.clone(), request_context: None };
                    return set.open(&scope).list().await.map_err(|error| error.to_string());
                }
                self.connect_configured(caller, name).await.map_err(|error| error.to_string())?
            }
            McpServerSource::Inline { name, url, transport } => {
                connect_bounded(name, inline_config(name, url, transport.as_deref(), &self.egress)).await.map_err(|error| error.to_string())?
            }
            McpServerSource::Unsupported { kind, .. } => return Err(format!("MCP servers of type {kind:?} cannot be used by an agent")),
        };
        match tokio::time::timeout(LISTING_TIMEOUT, connection.list()).await {
            Ok(Ok(tools)) => Ok(tools),
            Ok(Err(error)) => Err(scrub_url(format!("the server could not list its tools: {error}"), url.as_deref())),
            Err(_) => Err(format!("tools/list did not answer within {} s", LISTING_TIMEOUT.as_secs())),
        }
    }
}
