//! The MCP host: the MCP servers operators configure (the registry), the connections sessions
//! hold to them (the pool), users' OAuth authorizations of them, and the tools a turn gets from
//! them. The rest of the service talks to it through [`McpHost`] alone; it knows no HTTP: the
//! server hands it [`McpLinks`] to build its own page links and an [`OAuthCallback`] already
//! read from the callback's query, and gets back where to send the browser.

mod error;
mod links;
mod oauth;
mod pool;
mod servers;
mod toolbox;

use std::sync::Arc;

use teamster_egress::EgressPolicy;
use teamster_mcp::oauth::TokenKey;
use teamster_store::SettingsStore;
use teamster_tools::tool_sets::ToolSets;

use teamster_sealed::SealedSettings;

pub use error::{McpHostError, Result};
pub use links::{McpLinks, OAuthCallback};
pub use oauth::is_oauth_kind;
pub use servers::{McpServerWrite, SETTING_KIND, validate_agent_servers};
pub use toolbox::{TurnTools, tool_names};

/// The MCP servers, connections and authorizations of this replica.
pub struct McpHost {
    store: Arc<dyn SettingsStore>,
    /// The servers configured through the settings API, by name.
    registry: servers::McpRegistry,
    /// Sessions' open connections.
    pool: pool::McpPool,
    /// Users' OAuth authorizations.
    oauth: oauth::McpOAuth,
    /// Whether servers of type stdio (commands run on this host) may be configured and started.
    allow_stdio: bool,
    /// Seals the servers' header and environment secrets in the store.
    sealed: SealedSettings,
    /// Where the URLs of agents' inline servers (which members write) may lead.
    egress: Arc<EgressPolicy>,
    /// The program's in-process tool sets, which agents name as they name configured servers.
    tool_sets: ToolSets,
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
            registry: servers::McpRegistry::load(store.as_ref(), &sealed).await?,
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

    fn store(&self) -> &dyn SettingsStore {
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
