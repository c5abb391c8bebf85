//! `teamster serve`: open the store, start the service and serve HTTP until a signal.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use teamster_llm::registry::ModelRegistry;
use teamster_protocol::AgentManifest;
use teamster_server::{AppState, AuthMode, ServerConfig};
use teamster_llm::registry::RegistryOptions;
use teamster_llm::retry::RetryPolicy;
use teamster_sandbox::{Bubblewrap, CgroupPolicy, Limits as SandboxLimits};
use teamster_service::{LeaseConfig, OtlpExporter, Sandboxes, Service, ServiceConfig, SkillCache, SkillSources, TokenKey};
use tracing_subscriber::fmt::format::JsonFields;

use crate::args::{AuthArg, LogFormat, SandboxCgroupsArg, ServeArgs};
use crate::store::OpenStore;

/// The exporter of turns' traces, when the operator names a collector.
fn trace_exporter(endpoint: Option<&str>) -> anyhow::Result<Option<OtlpExporter>> {
    let Some(endpoint) = endpoint.filter(|endpoint| !endpoint.trim().is_empty()) else { return Ok(None) };
    let exporter = OtlpExporter::start(endpoint).map_err(|message| anyhow::anyhow!("--otlp-endpoint: {message}"))?;
    tracing::info!(endpoint, "exporting turns' traces over OTLP/HTTP");
    Ok(Some(exporter))
}

/// The example agent created on first start.
const EXAMPLE_AGENT: &str = include_str!("../../../examples/agents/demo.yaml");
/// How long running turns get to record their end on shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

pub async fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TEAMSTER_LOG").unwrap_or_else(|_| "info".into());
    // Colours only for a terminal: a log file or collector gets plain lines.
    let colours = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let log = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(colours);
    match args.log_format {
        LogFormat::Text => log.init(),
        // One object per line: the event's fields at the top level, and the turn's span.
        LogFormat::Json => log.fmt_fields(JsonFields::new()).event_format(crate::log_lines::JsonLines).init(),
    }
    serve(args, |address| println!("listening on http://{address}"), shutdown_signal()).await
}

/// Serves until `shutdown` completes, calling `listening` with the bound address once the
/// service has started: `teamster serve`, and the runtime `teamster chat` embeds.
pub async fn serve(
    args: ServeArgs,
    listening: impl FnOnce(std::net::SocketAddr),
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<ExitCode> {
    let data_dir = crate::store::data_dir(&args.store);
    // Where URLs that members write (inline MCP servers, git skills) may lead.
    let egress = Arc::new(
        teamster_egress::EgressPolicy::parse(&args.allow_egress).map_err(|error| anyhow::anyhow!("invalid --allow-egress: {error}"))?,
    );
    // Checking that sandboxes work starts one; it overlaps opening the store.
    let sandboxes = tokio::spawn(start_sandboxes(
        (!args.no_sandbox).then(|| args.sandbox_root.clone().unwrap_or_else(|| default_sandbox_root(&data_dir))),
        Duration::from_secs(args.sandbox_idle_hours.saturating_mul(3600)),
        sandbox_limits(&args),
        egress.clone(),
    ));
    // The secret key (read, or created with an fsync on first start) is loaded while the store
    // opens; a store that fails to open is still the error reported.
    let key_file = args.secret_key_file.clone().unwrap_or_else(|| default_key_file(&crate::store::database_url(&args.store), &data_dir));
    let secret_key = tokio::spawn(load_secret_key(key_file));
    let OpenStore { store, shown: shown_database } = crate::store::open(&args.store).await?;

    let env_providers = ModelRegistry::env_manifest(|name| std::env::var(name).ok());
    let retry = RetryPolicy {
        max_attempts: args.model_retry_attempts,
        base_delay: Duration::from_millis(args.model_retry_base_ms),
        max_delay: Duration::from_secs(args.model_retry_max_secs),
    };
    let secret_key = secret_key.await.context("loading the secret key")??;

    let listener = tokio::net::TcpListener::bind(&args.listen).await.with_context(|| format!("listening on {}", args.listen))?;
    let address = listener.local_addr()?;
    if matches!(args.auth, AuthArg::None) && !args.oidc.enabled() && !address.ip().is_loopback() {
        if !args.insecure_no_auth {
            bail!(
                "refusing to serve {address} without authentication: anyone who reaches it would act as the local admin. \
                 Start with --auth api-keys (keys from `teamster keys create`) or --oidc-issuer, listen on a loopback address, or say --insecure-no-auth"
            );
        }
        tracing::warn!(%address, "serving without authentication on a non-loopback address (--insecure-no-auth)");
    }
    if args.oidc.enabled() && args.public_url.is_none() && address.ip().is_unspecified() {
        bail!("OIDC login needs --public-url: the identity provider sends browsers back to <public URL>/api/v1/auth/callback");
    }
    if args.public_url.is_none() && address.ip().is_unspecified() {
        tracing::warn!(%address, "no --public-url: MCP authorization links name an address browsers cannot open; set --public-url");
    }
    let public_url = args.public_url.clone().unwrap_or_else(|| format!("http://{address}"));
    let links = teamster_server::PublicLinks::new(&public_url).map_err(|message| anyhow::anyhow!("invalid --public-url: {message}"))?;
    let public_url = links.public_url().to_owned();
    let oidc = crate::oidc::login(&args.oidc, &links, &secret_key).await?;
    let config = ServiceConfig {
        turn_timeout: Duration::from_secs(args.turn_timeout_secs),
        env_providers,
        model_options: RegistryOptions { retry },
        mcp_links: Some(Arc::new(links)),
        secret_key: Some(secret_key),
        leases: lease_config(args.lease_ttl_ms, args.lease_renew_ms, args.takeover_interval_ms, args.max_takeovers)?,
        stream_retention: Duration::from_secs(args.stream_retention_secs.unwrap_or(args.stream_retention_hours * 3600)),
        allow_stdio_mcp: args.allow_stdio_mcp,
        egress: egress.clone(),
        sandboxes: sandboxes.await.context("checking the sandbox provider")?.with_network(sandbox_network(&args)),
        traces: trace_exporter(args.otlp_endpoint.as_deref())?,
        limits: crate::limits::service_limits(&args),
        // In-process tools are for programs that embed the runtime; the server has none.
        tool_sets: teamster_service::ToolSets::default(),
    };
    let service = Service::start(store, config).await.context("starting the service")?;
    if !args.no_example {
        for tenant in example_tenants(&args) {
            ensure_example_agent(&service, &tenant).await?;
        }
    }

    listening(address);
    let worker_threads = tokio::runtime::Handle::current().metrics().num_workers();
    tracing::info!(%address, database = %shown_database, worker_threads, "teamster is serving");

    let state = AppState::new(
        service.clone(),
        ServerConfig {
            heartbeat: Duration::from_secs(args.heartbeat_secs),
            max_body_bytes: args.max_body_bytes,
            browser: browser_policy(&args.allowed_hosts, &args.allowed_origins, &public_url, address)?,
            header_timeout: Duration::from_secs(args.header_timeout_secs),
            max_connections: connection_cap(args.max_connections),
            body_timeout: Duration::from_secs(args.body_timeout_secs),
            max_requests_per_subject: usize::try_from(args.max_requests_per_subject).unwrap_or(usize::MAX),
            auth: match args.auth {
                AuthArg::None => AuthMode::None,
                AuthArg::ApiKeys => AuthMode::ApiKeys,
            },
            oidc,
            rate_limit_per_minute: args.rate_limit_per_minute,
            live_reread: args.live_reread_secs.map(Duration::from_secs),
        },
    );
    teamster_server::serve(listener, state, shutdown).await?;
    service.shutdown(SHUTDOWN_GRACE).await;
    Ok(ExitCode::SUCCESS)
}

/// The bounds of sandboxed commands the operator chose (`--sandbox-memory-mib` and the rest).
fn sandbox_limits(args: &ServeArgs) -> SandboxLimits {
    SandboxLimits {
        max_command_memory_bytes: args.sandbox_memory_mib.saturating_mul(1024 * 1024),
        max_processes: args.sandbox_processes,
        max_command_cpu_millis: args.sandbox_cpus,
        max_shm_bytes: args.sandbox_shm_mib.saturating_mul(1024 * 1024),
        // Zero is no bound: the totals are then never over it.
        max_subject_bytes: mib_or_unbounded(args.sandbox_disk_per_subject_mib),
        max_subject_files: match args.sandbox_disk_per_subject_mib {
            0 => u64::MAX,
            _ => SandboxLimits::default().max_subject_files,
        },
        max_tenant_bytes: mib_or_unbounded(args.sandbox_disk_per_tenant_mib),
        cgroups: match args.sandbox_cgroups {
            SandboxCgroupsArg::Auto => CgroupPolicy::Auto,
            SandboxCgroupsArg::Required => CgroupPolicy::Required,
            SandboxCgroupsArg::Off => CgroupPolicy::Off,
        },
        ..SandboxLimits::default()
    }
}

/// `mib` MiB in bytes, or no bound for 0.
fn mib_or_unbounded(mib: u64) -> u64 {
    match mib {
        0 => u64::MAX,
        mib => mib.saturating_mul(1024 * 1024),
    }
}

/// The sandbox provider on bubblewrap under `root` (`None`: turned off), with a task removing
/// sandboxes idle for `idle` (zero: none). When sandboxes are off (turned off, or unable to run
/// here), the log says so and why at start-up. Skills fetched from git are cached in `root/.skills` (a
/// name no sandbox has), where every replica sharing the root finds them and sandboxes' users can
/// reach them; git URLs agents name may lead where `egress` allows.
async fn start_sandboxes(
    root: Option<PathBuf>,
    idle: Duration,
    limits: SandboxLimits,
    egress: Arc<teamster_egress::EgressPolicy>,
) -> Sandboxes {
    let reason = match root {
        None => "sandboxes are turned off (--no-sandbox)".to_owned(),
        Some(root) => match Bubblewrap::start(&root, limits).await {
            Ok(provider) => {
                let provider = Arc::new(provider);
                tracing::info!(root = %root.display(), "sandboxes run with bubblewrap");
                if !idle.is_zero() {
                    tokio::spawn(sweep_idle_sandboxes(provider.clone(), idle));
                }
                let skills = SkillSources::new(SkillCache::new(root.join(".skills"))).with_egress(egress);
                return Sandboxes::on(provider, skills);
            }
            Err(error) => error.to_string(),
        },
    };
    tracing::warn!(%reason, "sandboxes are off; agents that enable one are refused");
    Sandboxes::Off { reason }
}

/// Removes sandboxes idle for `idle`, looking every quarter of it (one minute to an hour).
async fn sweep_idle_sandboxes(provider: Arc<Bubblewrap>, idle: Duration) {
    let mut every = tokio::time::interval((idle / 4).clamp(Duration::from_secs(60), Duration::from_secs(3600)));
    loop {
        every.tick().await;
        match provider.sweep_idle(idle).await {
            Ok(0) => {}
            Ok(removed) => tracing::info!(removed, "removed idle sandboxes"),
            Err(error) => tracing::warn!(%error, "sweeping idle sandboxes failed"),
        }
    }
}

/// Where sandboxes live without `--sandbox-root`: `sandboxes` in the data directory, unless the
/// server runs as root and other users cannot enter a directory above it (root's home is
/// `0700`), since sandboxes then run as users of their own. Then it is a directory of this data
/// directory's own under [`SHARED_SANDBOX_ROOT`], named by a hash of the data directory's path,
/// so servers with different data directories keep apart and a restart finds its sandboxes.
fn default_sandbox_root(data_dir: &std::path::Path) -> PathBuf {
    let inside = data_dir.join("sandboxes");
    use std::os::unix::fs::MetadataExt;
    let as_root = std::fs::metadata("/proc/self").is_ok_and(|meta| meta.uid() == 0);
    if !as_root || others_may_reach(&inside) {
        return inside;
    }
    let absolute = std::path::absolute(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    let shared = PathBuf::from(SHARED_SANDBOX_ROOT).join(format!("{:016x}", fnv1a(absolute.as_os_str().as_encoded_bytes())));
    tracing::info!(
        data_dir = %absolute.display(),
        sandbox_root = %shared.display(),
        "other users cannot enter the data directory, and as root sandboxes run as users of their own: they live outside it"
    );
    shared
}

/// Where root's sandboxes live when the data directory is shut to other users.
const SHARED_SANDBOX_ROOT: &str = "/var/lib/teamster/sandboxes";

/// Whether other users may enter every existing directory above `path` (one not made yet gets
/// the process's default mode).
fn others_may_reach(path: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    absolute.ancestors().skip(1).all(|dir| match std::fs::metadata(dir) {
        Ok(meta) => meta.permissions().mode() & 0o001 != 0,
        Err(_) => true,
    })
}

/// The 64-bit FNV-1a hash: small, and the same in every build, so a directory named by it is
/// found again after an upgrade.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3))
}

/// Where the secret key lives unless configured: beside a SQLite database file (so a database
/// given with --database keeps its key with it, not in the data directory), else in the data
/// directory.
fn default_key_file(database: &str, data_dir: &std::path::Path) -> PathBuf {
    let sqlite_file = database
        .strip_prefix("sqlite://")
        .or_else(|| database.strip_prefix("sqlite:"))
        .map(|rest| rest.split('?').next().unwrap_or_default())
        .filter(|path| !path.is_empty() && !path.starts_with(":memory:"));
    match sqlite_file.and_then(|path| std::path::Path::new(path).parent()) {
        Some(directory) if !directory.as_os_str().is_empty() => directory.join("secret.key"),
        Some(_) => PathBuf::from("secret.key"),
        None => data_dir.join("secret.key"),
    }
}

/// The key that seals MCP OAuth tokens: `TEAMSTER_SECRET_KEY` when set, else the key file
/// (created on first start).
async fn load_secret_key(key_file: PathBuf) -> anyhow::Result<TokenKey> {
    let from_env = std::env::var("TEAMSTER_SECRET_KEY").ok();
    let shown = key_file.display().to_string();
    tokio::task::spawn_blocking(move || TokenKey::load(from_env.as_deref(), &key_file))
        .await
        .context("loading the secret key")?
        .with_context(|| match std::env::var_os("TEAMSTER_SECRET_KEY").filter(|value| !value.is_empty()) {
            Some(_) => "reading TEAMSTER_SECRET_KEY".to_owned(),
            None => format!("loading the secret key file {shown}"),
        })
}

/// The `Host` names and origins the server answers: the loopback names always, the public
/// URL's host, the listening IP when it is a specific one, and what the operator adds.
fn browser_policy(
    hosts: &[String],
    origins: &[String],
    public_url: &str,
    address: std::net::SocketAddr,
) -> anyhow::Result<teamster_server::BrowserPolicy> {
    let mut allowed_hosts: Vec<String> = teamster_server::LOOPBACK_HOSTS.iter().map(|host| (*host).to_owned()).collect();
    if let Some(host) = url::Url::parse(public_url).ok().and_then(|url| url.host_str().map(str::to_ascii_lowercase)) {
        allowed_hosts.push(host);
    }
    if !address.ip().is_unspecified() {
        allowed_hosts.push(match address.ip() {
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            ip => ip.to_string(),
        });
    }
    for host in hosts.iter().map(|host| host.trim().to_ascii_lowercase()).filter(|host| !host.is_empty()) {
        if host != "*" && (host.contains(['/', ':']) && !host.starts_with('[') || host.contains(char::is_whitespace)) {
            bail!("--allowed-hosts takes host names without scheme or port, such as agents.example.com; got {host:?}");
        }
        allowed_hosts.push(host);
    }
    let mut allowed_origins = Vec::new();
    for origin in origins.iter().map(|origin| origin.trim()).filter(|origin| !origin.is_empty()) {
        let parsed = url::Url::parse(origin).ok().filter(|url| {
            matches!(url.scheme(), "http" | "https") && url.host_str().is_some() && url.path() == "/" && url.query().is_none()
        });
        let Some(parsed) = parsed else {
            bail!("--allowed-origins takes origins such as https://app.example.com (scheme, host, optional port); got {origin:?}");
        };
        allowed_origins.push(parsed.origin().ascii_serialization());
    }
    Ok(teamster_server::BrowserPolicy { allowed_hosts, allowed_origins })
}

/// Descriptors kept for everything but client connections: the database, MCP servers, logs.
const RESERVED_FILES: u64 = 512;

/// The connection cap: what the operator asked for, lowered to fit the process's open-file
/// limit (read from `/proc/self/limits` where there is one).
fn connection_cap(wanted: u64) -> usize {
    let limit = std::fs::read_to_string("/proc/self/limits").ok().and_then(|limits| {
        let line = limits.lines().find(|line| line.starts_with("Max open files"))?;
        line.split_whitespace().nth(3)?.parse::<u64>().ok()
    });
    let cap = match limit {
        Some(limit) if limit.saturating_sub(RESERVED_FILES) < wanted => {
            let lowered = limit.saturating_sub(RESERVED_FILES).max(16);
            tracing::warn!(wanted, lowered, open_file_limit = limit, "--max-connections lowered to fit the open-file limit");
            lowered
        }
        _ => wanted,
    };
    usize::try_from(cap).unwrap_or(usize::MAX)
}

/// The lease settings, checked: renewals must come at least twice per lease.
fn lease_config(ttl_ms: u64, renew_ms: u64, takeover_ms: u64, max_takeovers: u64) -> anyhow::Result<LeaseConfig> {
    if renew_ms.saturating_mul(2) > ttl_ms {
        bail!("--lease-renew-ms ({renew_ms}) must be at most half of --lease-ttl-ms ({ttl_ms})");
    }
    Ok(LeaseConfig {
        ttl: Duration::from_millis(ttl_ms),
        renew_every: Duration::from_millis(renew_ms),
        takeover_every: Duration::from_millis(takeover_ms),
        max_takeovers,
    })
}


/// The tenants the example agent is made in: the local user's (every request's without
/// authentication) and, when requests authenticate, the tenant `teamster keys create` puts keys
/// in by default (and OIDC's default tenant), so the first keys the README makes see it.
fn example_tenants(args: &ServeArgs) -> Vec<String> {
    let mut tenants = vec!["local".to_owned()];
    if args.auth == AuthArg::ApiKeys || args.oidc.enabled() {
        tenants.push(DEFAULT_KEY_TENANT.to_owned());
        let oidc_tenant = args.oidc.oidc_default_tenant.trim();
        if args.oidc.enabled() && !oidc_tenant.is_empty() && !tenants.iter().any(|tenant| tenant == oidc_tenant) {
            tenants.push(oidc_tenant.to_owned());
        }
    }
    tenants
}

/// The tenant of a key made without `--tenant`.
const DEFAULT_KEY_TENANT: &str = "default";

/// Makes the example agent in `tenant` unless it has an agent of that name. Outside the local
/// tenant it is made by the server (the local subject, whom no key acts as) and shared with the
/// whole tenant (`team:<tenant>` as `agent-user`): the tenant's admins and the operator manage
/// it, every member runs it.
async fn ensure_example_agent(service: &Service, tenant: &str) -> anyhow::Result<()> {
    let manifest: AgentManifest = serde_yaml::from_str(EXAMPLE_AGENT).context("the bundled example agent")?;
    // The local user's, like every agent made without authentication.
    let caller = teamster_service::Caller { tenant: tenant.to_owned(), ..teamster_service::Caller::local() };
    let mut spec = manifest.to_spec();
    if tenant != "local" {
        spec.collaborators = Some(vec![teamster_protocol::collaborator::Collaborator {
            subject: format!("team:{tenant}"),
            role_id: "agent-user".to_owned(),
        }]);
    }
    match service.catalog().get_agent_by_name(&caller, &manifest.name).await {
        Ok(_) => Ok(()),
        Err(teamster_service::ServiceError::NotFound(_)) => {
            service.catalog().create_agent(&caller, &manifest.name, spec).await?;
            tracing::info!(agent = %manifest.name, tenant, "created the example agent (offline demo model)");
            Ok(())
        }
        Err(other) => Err(other.into()),
    }
}

async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = interrupt => {},
        () = terminate => {},
    }
    tracing::info!("shutting down");
}

/// Whether sandboxed commands may be given a network (`--allow-sandbox-network`), or why not,
/// said at start-up. Without authentication anyone who reaches the server could ask for one:
/// the operator must insist (`--allow-sandbox-network-without-auth`).
fn sandbox_network(args: &ServeArgs) -> Result<(), String> {
    let unauthenticated = matches!(args.auth, AuthArg::None) && !args.oidc.enabled();
    let allowed = if !args.allow_sandbox_network {
        Err("network sandboxes are off on this server (the operator allows them with --allow-sandbox-network)".to_owned())
    } else if unauthenticated && !args.allow_sandbox_network_without_auth {
        Err("network sandboxes are refused under --auth none (the operator may insist with --allow-sandbox-network-without-auth)".to_owned())
    } else {
        Bubblewrap::network_support().map_err(|reason| format!("network sandboxes cannot run on this host: {reason}"))
    };
    match &allowed {
        Ok(()) if unauthenticated => tracing::warn!("network sandboxes are allowed without authentication (--allow-sandbox-network-without-auth)"),
        Ok(()) => tracing::info!("network sandboxes are allowed: public addresses only (--allow-sandbox-network)"),
        Err(reason) if args.allow_sandbox_network => tracing::warn!(%reason, "agents asking for network sandboxes are refused"),
        Err(reason) => tracing::info!(%reason, "agents asking for network sandboxes are refused"),
    }
    allowed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_secret_key_lives_beside_a_sqlite_database() {
        let data = std::path::Path::new("/home/u/.local/share/teamster");
        for (database, expected) in [
            ("sqlite:///srv/app/teamster.db", "/srv/app/secret.key"),
            ("sqlite:/srv/app/t.db?mode=rwc", "/srv/app/secret.key"),
            ("sqlite://teamster.db", "secret.key"),
            ("sqlite::memory:", "/home/u/.local/share/teamster/secret.key"),
            ("postgres://db/teamster", "/home/u/.local/share/teamster/secret.key"),
        ] {
            assert_eq!(default_key_file(database, data), PathBuf::from(expected), "{database}");
        }
    }

    #[test]
    fn the_bundled_example_agent_is_a_valid_offline_manifest() {
        let manifest: AgentManifest = serde_yaml::from_str(EXAMPLE_AGENT).unwrap();
        assert_eq!(manifest.kind, AgentManifest::TYPE);
        assert_eq!(manifest.name, "demo");
        let spec = manifest.to_spec();
        assert_eq!(spec.model.name, "offline/echo");
        assert_eq!(spec.variables.unwrap()["assistant_name"], "Teamster Demo");
    }
}
