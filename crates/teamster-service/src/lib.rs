//! The service layer both HTTP dialects share: agents, sessions, turns, events, settings.
//!
//! It owns the lifecycle of a turn: validate, record `turn.created`, run the engine on a task
//! of its own (a client disconnect never cancels it), stream events through the in-memory
//! [`live::TurnLog`] once the group-commit [`writer::EventWriter`] has made them durable, and
//! finish with `turn.done`. Requests name a [`Caller`]; every session is checked against it.
//! When other replicas share the store, `cluster` relays its change feed: other replicas'
//! turns are followed, cancelled and waited for through the store.
//!
//! Invariant: no HTTP here (no axum, no status codes) and no SQL; errors are
//! [`ServiceError`]s that the server maps to statuses.

pub mod catalog;
mod cluster;
mod cursor;
mod engine_metrics;
mod error;
mod events;
mod history_cache;
mod input_files;
mod leases;
pub mod mcp;
mod pending;
pub mod live;
mod recovery;
mod retention;
mod runner;
mod sink;
mod subscribe;
mod turns;
pub mod writer;

use teamster_llm::registry::RegistryOptions;
use std::sync::Arc;
use std::time::Duration;

use teamster_llm::registry::ModelRegistry;
use teamster_protocol::Subject;
use teamster_protocol::settings::ModelProviderManifest;
use teamster_store::Store;
use teamster_tools::ToolSource;

pub use error::{Result, ServiceError};
pub use events::{ListOrder, SessionEventsQuery, TurnEventsQuery};
pub use input_files::DownloadedFile;
pub use leases::LeaseConfig;
pub use mcp::{McpHost, McpLinks, McpServerWrite, OAuthCallback};
pub use teamster_mcp::oauth::TokenKey;
pub use catalog::{Catalog, ProviderWrite, SessionListQuery, SessionScope};
pub use live::StreamedEvent;
pub use subscribe::EventStream;
pub use teamster_store::SessionOrder;
pub use turns::{CreateTurn, TurnListQuery};

/// Who makes a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub subject: Subject,
}

impl Caller {
    pub fn local() -> Caller {
        Caller { subject: Subject::local() }
    }
}

/// Settings of the service, validated by the caller (the CLI).
#[derive(Clone)]
pub struct ServiceConfig {
    /// The longest a turn may run before it is cancelled with `server-execution-timeout`.
    pub turn_timeout: Duration,
    /// Providers from the environment; providers stored through the settings API override
    /// them by name.
    pub env_providers: Vec<ModelProviderManifest>,
    /// How model calls are retried, for every provider.
    pub model_options: RegistryOptions,
    /// Links to the MCP OAuth pages users' browsers open (the HTTP layer's routes under its
    /// public URL); `None` where nothing serves them, and MCP servers with OAuth cannot be
    /// authorized.
    pub mcp_links: Option<Arc<dyn McpLinks>>,
    /// The key that seals MCP OAuth tokens and client secrets in the store. `None` makes a
    /// random key for this process, so stored tokens do not outlive it (tests).
    pub secret_key: Option<TokenKey>,
    /// How running turns are leased, renewed, and taken over when their replica stops.
    pub leases: LeaseConfig,
    /// How long a finished turn keeps its stream (deltas included) for subscribers; its
    /// content events stay until its session is deleted.
    pub stream_retention: Duration,
    /// Whether MCP servers of type stdio (commands run on this host) may be configured and
    /// started. Off by default: whoever may write settings could otherwise run programs here.
    pub allow_stdio_mcp: bool,
}

impl Default for ServiceConfig {
    fn default() -> ServiceConfig {
        ServiceConfig {
            turn_timeout: Duration::from_secs(600),
            env_providers: Vec::new(),
            model_options: RegistryOptions::default(),
            mcp_links: None,
            secret_key: None,
            leases: LeaseConfig::default(),
            stream_retention: Duration::from_secs(24 * 3600),
            allow_stdio_mcp: false,
        }
    }
}

/// The service; cheap to clone.
#[derive(Clone)]
pub struct Service {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn Store>,
    writer: writer::EventWriter,
    live: live::LiveTurns,
    /// Agents, sessions and model providers.
    catalog: catalog::Catalog,
    tools: Vec<Arc<dyn ToolSource>>,
    /// Histories of recently finished turns, so chained turns need not re-read the chain.
    history: history_cache::HistoryCache,
    /// MCP servers, their connections and users' authorizations of them.
    mcp: Arc<mcp::McpHost>,
    /// The leases of the turns this replica runs.
    leases: Arc<leases::Leases>,
    /// Readers of turns running on other replicas; `None` when the store has no change feed
    /// (no other process shares it).
    cluster: Option<Arc<cluster::Cluster>>,
    config: ServiceConfig,
}

impl Service {
    /// Starts the service on a store: loads settings, starts the event writer, the lease keeper,
    /// the takeover of turns whose server stopped (see `recovery`) and the stream retention
    /// sweeper. Must be called inside a Tokio runtime.
    pub async fn start(store: Arc<dyn Store>, config: ServiceConfig) -> Result<Service> {
        // Listening first, so no setting changed after the loads below goes unnoticed.
        let feed = store.changes().await?;
        let writer = writer::EventWriter::start(store.clone());
        let catalog = catalog::Catalog::load(store.clone(), config.env_providers.clone(), config.model_options).await?;
        let mcp = mcp::McpHost::start(store.clone(), config.mcp_links.clone(), config.secret_key.as_ref(), config.allow_stdio_mcp).await?;
        let service = Service {
            inner: Arc::new(Inner {
                store,
                writer,
                live: live::LiveTurns::default(),
                catalog,
                tools: vec![Arc::new(teamster_tools::builtin::Builtins)],
                history: history_cache::HistoryCache::default(),
                mcp,
                cluster: feed.as_ref().map(|_| Arc::default()),
                leases: Arc::new(leases::Leases::new(config.leases)),
                config,
            }),
        };
        if let Some(feed) = feed {
            cluster::start(&service, feed);
        }
        leases::start_keeper(Arc::downgrade(&service.inner), service.inner.config.leases);
        recovery::start_takeovers(&service);
        retention::start_sweeper(&service);
        Ok(service)
    }

    /// The MCP host: configured servers, their tools, and users' authorizations of them.
    pub fn mcp(&self) -> &McpHost {
        &self.inner.mcp
    }

    fn store(&self) -> &dyn Store {
        self.inner.store.as_ref()
    }

    /// The catalog: agents, sessions and model providers.
    pub fn catalog(&self) -> &Catalog {
        &self.inner.catalog
    }

    fn models(&self) -> Arc<ModelRegistry> {
        self.inner.catalog.models()
    }

    /// The number of turns running in this process.
    pub fn running_turns(&self) -> usize {
        self.inner.live.len()
    }

    /// Hands every running turn over, on shutdown: stops them here without recording an end,
    /// waits up to `grace` for them to stop and for the writer to settle, then releases their
    /// leases, so that another replica (or this server, once restarted) resumes them at once.
    pub async fn shutdown(&self, grace: Duration) {
        let running = self.inner.live.all();
        let handed_over = self.inner.leases.hand_over_all();
        let stopped = futures_util::future::join_all(running.iter().map(|log| log.wait_finished()));
        let _ = tokio::time::timeout(grace, stopped).await;
        self.inner.writer.flush().await;
        let owner = &self.inner.leases.owner;
        let released = handed_over.iter().map(|lease| self.store().release_lease(owner, lease));
        for (lease, result) in handed_over.iter().zip(futures_util::future::join_all(released).await) {
            if let Err(error) = result {
                tracing::warn!(turn_id = %lease.turn_id, %error, "releasing a lease failed; it expires on its own");
            }
        }
    }
}
