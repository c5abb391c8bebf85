//! The service layer both HTTP dialects share: agents, sessions, turns, events, settings.
//!
//! It is built of rooms with private state, and [`Service`] is a facade over them: the
//! [`Catalog`] (agents, sessions, model providers), the [`McpHost`] (MCP servers, connections,
//! users' authorizations), the skill registry, the sandboxes, and the turn runtime of
//! `teamster-runtime` (a turn runs on a task of its own, so a client disconnect never cancels
//! it), for which `turn_planner` makes each turn's plan and this facade is the cluster member.
//! Requests name a [`Caller`]; every session is checked against it.
//!
//! Invariant: no HTTP here (no axum, no status codes) and no SQL; errors are
//! [`ServiceError`]s that the server maps to statuses.

mod agent_check;
mod attachments;
pub mod catalog;
mod clones;
mod cursor;
mod downloads;
mod error;
mod events;
mod follow_ups;
mod input_files;
mod sandboxes;
mod signals;
mod skills;
mod turn_planner;
mod turns;
mod views;
mod workspaces;

use teamster_llm::registry::RegistryOptions;
use std::sync::Arc;
use std::time::Duration;

use teamster_protocol::settings::ModelProviderManifest;
use teamster_runtime::{RuntimeStores, TurnRuntime, cluster};
use teamster_store::StoreParts;
pub use teamster_tools::tool_sets::{ToolScope, ToolSet, ToolSets};

pub use error::{Result, ServiceError};
pub use events::{Events, ListOrder, SessionEventsQuery, TurnEventsQuery};
pub use downloads::{DownloadedFile, Downloads, SandboxAddress, SandboxFile};
pub use sandboxes::{MAX_SKILLS, SkillSources};
pub use skills::{SkillRegistry, SkillWrite};
pub use teamster_skills::SkillCache;
pub use teamster_mcp_host::{McpHost, McpHostError, McpLinks, McpServerWrite, OAuthCallback};
pub use teamster_mcp::oauth::TokenKey;
pub use catalog::{Catalog, ModelProviders, ProviderWrite, SessionListQuery, SessionScope, SessionUpdate};
pub use teamster_runtime::{EventStream, LeaseConfig, StartedTurn, StreamedEvent};
pub use sandboxes::Sandboxes;
pub use workspaces::SessionWorkspaces;
pub use teamster_workspace::{FilesQuery as WorkspaceFilesQuery, MAX_LISTED_DEPTH as MAX_WORKSPACE_LISTING_DEPTH};
pub use teamster_store::SessionOrder;
pub use clones::CloneSession;
pub use follow_ups::FollowUps;
/// The plan tool's name (the stream dialects show its calls as plans).
pub use teamster_control::SUBMIT_PLAN;
/// The sub-agent tool's name (the UI message stream shows its calls as the threads they start).
pub use teamster_engine::RUN_SUB_AGENT;
/// The sandbox's command tool (the stream dialects announce the files its calls make).
pub use teamster_sandbox::EXEC_TOOL;
pub use teamster_identity::{ApiKey, ApiKeys, Caller, CreatedKey, IdentityError, NewKey, Role, oidc};
pub use teamster_telemetry::StreamGuard;
pub use teamster_telemetry::otlp::OtlpExporter;
pub use teamster_telemetry::traces::{TraceParent, with_caller_trace};
pub use turns::{CreateTurn, TurnListQuery};
pub use signals::Signal as SessionSignal;
pub use teamster_limits::{FanOut, Limits, QuotaExceeded, RateLimited, RequestRate, TenantBudget};

/// How long a readiness check waits for the store.
pub const READY_CHECK_TIMEOUT: Duration = Duration::from_secs(2);

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
    /// Where URLs that members write (agents' inline MCP servers) may lead: public addresses,
    /// and the networks and hosts the operator allows (`--allow-egress`).
    pub egress: Arc<teamster_egress::EgressPolicy>,
    /// Whether agents may have sandboxes, and who runs them.
    pub sandboxes: Sandboxes,
    /// Where turns' traces are exported (OTLP/HTTP); `None` records none.
    pub traces: Option<OtlpExporter>,
    /// The operator's limits on subjects' running turns and tenants' spending.
    pub limits: Limits,
    /// Tools the embedding program serves in-process, by name: an agent names one in its
    /// `mcp_servers` as it names a configured server, and its tools are selected, gated for
    /// approval and governed by session permissions as an MCP server's are. Empty in the server.
    pub tool_sets: ToolSets,
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
            egress: Arc::default(),
            sandboxes: Sandboxes::default(),
            traces: None,
            limits: Limits::default(),
            tool_sets: ToolSets::default(),
        }
    }
}

/// The service: a facade over its rooms, the [`Catalog`] (agents, sessions, providers), the
/// [`McpHost`] (MCP servers and their authorizations) and the turn runtime, and the operations
/// that span them (turns, their events and files). Cheap to clone.
#[derive(Clone)]
pub struct Service {
    inner: Arc<Inner>,
}

struct Inner {
    stores: StoreParts,
    /// Opens sealed settings, and says when some cannot be (readiness).
    sealed: teamster_sealed::SealedSettings,
    catalog: Arc<Catalog>,
    mcp: Arc<McpHost>,
    runtime: TurnRuntime,
    sandboxes: Sandboxes,
    /// The skills agents can name.
    skills: skills::SkillRegistry,
    /// The sessions this process watches to start their follow-ups.
    follow_up_watchers: follow_ups::Watched,
    /// Wakes the live channels of a session changed on this replica.
    signals: Arc<signals::SessionSignals>,
    /// The process's metrics.
    telemetry: Arc<teamster_telemetry::Telemetry>,
    /// Each subject's running turns, against the operator's quota.
    turn_quota: teamster_limits::TurnQuota,
    /// The API key records this replica authenticated with.
    key_cache: teamster_identity::KeyCache,
}

impl Service {
    /// Starts the service on a store: loads settings, starts the MCP host and the turn
    /// runtime (which takes over turns whose server stopped), and, when other replicas share
    /// the store, relays its change feed. Must be called inside a Tokio runtime. `store` is
    /// any store (an `Arc<dyn Store>` or of a backend's type); each room gets the parts it uses.
    pub async fn start(store: impl Into<StoreParts>, config: ServiceConfig) -> Result<Service> {
        let stores: StoreParts = store.into();
        // Listening first, so no setting changed after the loads below goes unnoticed.
        let feed = stores.coordination.changes().await?;
        let sealed = teamster_sealed::SealedSettings::new(config.secret_key.as_ref());
        let signals = Arc::new(signals::SessionSignals::default());
        sealed.seal_all_plain(stores.settings.as_ref(), catalog::SETTING_KIND, teamster_mcp_host::SETTING_KIND).await?;
        let catalog = Arc::new(
            Catalog::load(
                &stores,
                config.env_providers.clone(),
                config.model_options,
                config.sandboxes.clone(),
                sealed.clone(),
                signals.clone(),
                config.turn_timeout,
            )
            .await?,
        );
        let mcp = McpHost::start(
            stores.settings.clone(),
            config.mcp_links.clone(),
            config.secret_key.as_ref(),
            sealed.clone(),
            config.allow_stdio_mcp,
            config.egress.clone(),
            config.tool_sets.clone(),
        )
        .await?;
        if let Some(message) = sealed.unopenable() {
            tracing::error!("{message}; this server reports itself not ready (GET /readyz) until they can be opened");
        }
        let cluster = feed.as_ref().map(|_| Arc::new(cluster::Cluster::default()));
        let planner = turn_planner::Planner {
            stores: stores.clone(),
            catalog: catalog.clone(),
            mcp: mcp.clone(),
            tools: vec![Arc::new(teamster_tools::builtin::Builtins)],
            sandboxes: config.sandboxes.clone(),
            tenant_ledger: Arc::new(teamster_limits::TenantLedger::new(config.limits.tenant_budget.clone(), stores.usage.clone())),
            fan_out: config.limits.fan_out,
            model_calls: Arc::new(teamster_limits::ModelCallPlaces::new(config.limits.max_concurrent_turns_per_subject)),
        };
        let runtime_config = teamster_runtime::RuntimeConfig {
            turn_timeout: config.turn_timeout,
            stream_retention: config.stream_retention,
            leases: config.leases,
        };
        let telemetry = Arc::new(teamster_telemetry::Telemetry::with_traces(config.traces.clone()));
        let runtime = TurnRuntime::start(RuntimeStores::from(&stores), cluster.clone(), Arc::new(planner), runtime_config, telemetry.clone());
        let turn_quota = teamster_limits::TurnQuota::new(config.limits.max_concurrent_turns_per_subject, stores.usage.clone());
        catalog.check_servers_with(&mcp);
        let inner = Arc::new(Inner {
            skills: skills::SkillRegistry::new(stores.settings.clone()),
            stores,
            sealed,
            catalog,
            mcp,
            runtime,
            sandboxes: config.sandboxes,
            follow_up_watchers: follow_ups::Watched::default(),
            signals,
            telemetry,
            turn_quota,
            key_cache: teamster_identity::KeyCache::default(),
        });
        if let (Some(feed), Some(cluster)) = (feed, cluster) {
            let member: std::sync::Weak<dyn cluster::ClusterMember> = Arc::downgrade(&inner) as _;
            cluster::start(cluster, feed, member);
        }
        let service = Service { inner };
        service.follow_ups().resume().await;
        Ok(service)
    }

    /// The catalog: agents, sessions and model providers.
    pub fn catalog(&self) -> &Catalog {
        &self.inner.catalog
    }

    /// The MCP host: configured servers, their tools, and users' authorizations of them.
    pub fn mcp(&self) -> &McpHost {
        &self.inner.mcp
    }

    /// Checks an agent manifest without saving it ("why this toolset", `agent_check.rs`): the
    /// problems saving would refuse (beside `problems`, those the request already had), its
    /// models resolved, its MCP servers connected as `caller`, and the tools a new session is
    /// offered with whether each waits for approval and why. `name` is checked when given.
    pub async fn check_agent(
        &self,
        caller: &Caller,
        name: Option<&str>,
        spec: Option<&teamster_protocol::agent::AgentSpec>,
        problems: Vec<teamster_protocol::agent_check::CheckProblem>,
    ) -> teamster_protocol::agent_check::AgentCheckReport {
        agent_check::AgentCheck { catalog: self.catalog(), mcp: self.mcp() }.run(caller, name, spec, problems).await
    }

    /// The tools the session's model is offered now (its agent's version in its mode), each
    /// with its category and whether its calls run at once, ask or are refused under the
    /// agent's rules and the session's policy and grants; MCP servers are connected as `caller`.
    pub async fn session_tools(&self, caller: &Caller, session_id: &str) -> Result<Vec<teamster_protocol::agent_check::ToolCheck>> {
        let session = self.catalog().owned_session(caller, session_id).await?;
        let spec = self.catalog().runnable_spec(caller, &session).await?;
        let check = agent_check::AgentCheck { catalog: self.catalog(), mcp: self.mcp() };
        Ok(check.session_tools(caller, &spec, &session.control).await)
    }

    /// The skill registry: the skills configured for agents to name.
    pub fn skills(&self) -> &SkillRegistry {
        &self.inner.skills
    }

    /// Whether agents may have sandboxes here.
    pub fn sandboxes(&self) -> &Sandboxes {
        &self.inner.sandboxes
    }

    /// A session's events, and the views folded from them.
    pub fn events(&self) -> Events<'_> {
        Events { service: self }
    }

    fn signals(&self) -> &signals::SessionSignals {
        &self.inner.signals
    }

    /// A reader of this replica's session signals from now on: a wake-up whenever a session
    /// changes (here, or on another replica as the store's change feed tells), what the live
    /// channels re-read on.
    pub fn session_signals(&self) -> tokio::sync::broadcast::Receiver<SessionSignal> {
        self.inner.signals.subscribe()
    }

    /// Whether other replicas share the store (changes then also come from them).
    pub fn is_clustered(&self) -> bool {
        self.runtime().is_clustered()
    }

    /// Sessions' workspaces: reported, made ahead, destroyed.
    pub fn workspaces(&self) -> SessionWorkspaces<'_> {
        SessionWorkspaces { service: self }
    }

    /// A session's files, for download.
    pub fn downloads(&self) -> Downloads<'_> {
        Downloads { service: self }
    }

    /// A session's queued follow-ups and steering instructions.
    pub fn follow_ups(&self) -> FollowUps<'_> {
        FollowUps { service: self }
    }

    fn follow_up_watchers(&self) -> &follow_ups::Watched {
        &self.inner.follow_up_watchers
    }

    fn runtime(&self) -> &TurnRuntime {
        &self.inner.runtime
    }

    fn stores(&self) -> &StoreParts {
        &self.inner.stores
    }

    /// The server's API keys, with this replica's cache of their records.
    pub fn api_keys(&self) -> ApiKeys<'_> {
        ApiKeys::cached(self.stores().settings.as_ref(), &self.inner.key_cache)
    }

    /// The caller a bearer key stands for (see [`ApiKeys::authenticate`]).
    pub async fn authenticate(&self, bearer: &str) -> Result<Option<Caller>> {
        Ok(self.api_keys().authenticate(bearer).await?)
    }

    /// A limit of `per_minute` requests a minute per subject, counted in this service's store.
    pub fn request_rate(&self, per_minute: u32) -> RequestRate {
        RequestRate::new(self.stores().usage.clone(), per_minute)
    }

    /// The number of turns running in this process.
    pub fn running_turns(&self) -> usize {
        self.runtime().running_turns()
    }

    /// This process's metrics in the Prometheus text exposition format.
    pub fn metrics(&self) -> String {
        self.inner.telemetry.render(self.running_turns())
    }

    /// Counts an event stream to a client as open until the guard is dropped.
    pub fn stream_opened(&self) -> StreamGuard {
        self.inner.telemetry.stream_opened()
    }

    /// Whether the stored settings open with this server's secret key (when not, the error says
    /// so) and the store answers a cheap query (one setting by key) within
    /// [`READY_CHECK_TIMEOUT`] (the reason it does not is logged, not returned).
    pub async fn ready(&self) -> Result<()> {
        if let Some(message) = self.inner.sealed.unopenable() {
            return Err(ServiceError::Unavailable(message));
        }
        let started = std::time::Instant::now();
        let answer = tokio::time::timeout(READY_CHECK_TIMEOUT, self.stores().settings.get_setting("readiness", "check")).await;
        self.inner.telemetry.store_ready_check(started.elapsed());
        match answer {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(error)) => {
                tracing::warn!(%error, "readiness check: the store failed");
                Err(ServiceError::Unavailable("the store does not answer".to_owned()))
            }
            Err(_) => {
                tracing::warn!(timeout = ?READY_CHECK_TIMEOUT, "readiness check: the store did not answer in time");
                Err(ServiceError::Unavailable("the store does not answer".to_owned()))
            }
        }
    }

    /// Hands every running turn over, on shutdown: stops them here without recording an end,
    /// waits up to `grace` for them to stop and for the writer to settle, then releases their
    /// leases, so that another replica (or this server, once restarted) resumes them at once;
    /// then stores the model uses counted since the last batch.
    pub async fn shutdown(&self, grace: Duration) {
        self.runtime().shutdown(grace).await;
        self.catalog().providers().flush_uses().await;
    }
}

#[async_trait::async_trait]
impl cluster::ClusterMember for Inner {
    fn kept(&self, kind: &str) -> cluster::KeptSettings {
        if [catalog::SETTING_KIND, teamster_mcp_host::SETTING_KIND, teamster_identity::SETTING_KIND].contains(&kind) {
            cluster::KeptSettings::Reloaded
        } else if teamster_mcp_host::is_oauth_kind(kind) {
            cluster::KeptSettings::OAuth
        } else {
            cluster::KeptSettings::NotKept
        }
    }

    fn cancel_local(&self, turn_id: &str, reason: teamster_protocol::CancelReason) {
        self.runtime.cancel_local(turn_id, reason);
    }

    async fn apply_cancel_requests(&self) {
        self.runtime.apply_cancel_requests().await;
        self.runtime.apply_steers().await;
    }

    async fn reload_settings(&self, kind: Option<&str>) {
        let wanted = |setting_kind: &str| kind.is_none_or(|kind| kind == setting_kind);
        if wanted(catalog::SETTING_KIND)
            && let Err(error) = self.catalog.providers().reload().await
        {
            tracing::warn!(%error, "could not reload model providers");
        }
        if wanted(teamster_mcp_host::SETTING_KIND)
            && let Err(error) = self.mcp.reload().await
        {
            tracing::warn!(%error, "could not reload MCP servers");
        }
        if wanted(teamster_identity::SETTING_KIND) {
            self.key_cache.forget_all();
        }
    }

    async fn oauth_changed(&self, kind: Option<&str>) {
        self.mcp.oauth_changed_elsewhere(kind).await;
    }

    fn session_changed(&self, session_id: Option<&str>, listed_for: Option<&str>) {
        match (session_id, listed_for) {
            (Some(session_id), Some(subject_id)) => self.signals.notify_listed(session_id, subject_id),
            (Some(session_id), None) => self.signals.notify(session_id),
            (None, _) => self.signals.notify_all(),
        }
    }
}
