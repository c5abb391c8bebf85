//! Command-line arguments. Every server setting can also come from the environment.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "teamster", version, about = "An agent harness: define agents once, run them for many users.", after_help = EXIT_CODES)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the HTTP server.
    Serve(Box<ServeArgs>),
    /// Manage saved agents on a running server.
    Agents(AgentsArgs),
    /// Run one turn of an agent (in a new session, or continuing one) and stream it to the
    /// terminal; a turn that waits for a person says what waits and how to answer, and exits 3.
    #[command(after_help = EXIT_CODES)]
    Run(RunArgs),
    /// List your sessions on a running server, newest first.
    Sessions(SessionsArgs),
    /// Chat with an agent in the terminal: streamed answers, tool calls, approvals and
    /// questions, sessions to resume. Without --server it runs the server in-process on the
    /// default data directory.
    Chat(ChatArgs),
    /// Manage API keys.
    Keys(KeysArgs),
    /// A running server's model providers and MCP servers: list, delete, rename, test.
    Settings(SettingsArgs),
}

/// The exit statuses of the client commands, shown by `--help`.
pub const EXIT_CODES: &str = "Exit status: 0 done; 1 an error (the server's, the turn's, or reaching the server); 2 the \
command line is wrong; 3 the turn waits for a person (an approval, an answer or an authorization: the message says how to \
give it); 4 the turn was cancelled.";

/// What every client command needs: where the server is, and the caller's key.
#[derive(clap::Args, Debug)]
pub struct ClientArgs {
    /// The server to talk to.
    #[arg(long, global = true, env = "TEAMSTER_URL", default_value = "http://127.0.0.1:8790")]
    pub server: String,
    /// The API key for a server that authenticates (`--auth api-keys`).
    #[arg(long, global = true, env = "TEAMSTER_API_KEY", hide_env_values = true, value_name = "KEY")]
    pub api_key: Option<String>,
}

impl ClientArgs {
    /// The key to send, if one was given (an empty one counts as none).
    pub fn key(&self) -> Option<&str> {
        self.api_key.as_deref().filter(|key| !key.is_empty())
    }
}

#[derive(clap::Args, Debug)]
pub struct AgentsArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(subcommand)]
    pub command: AgentsCommand,
}

#[derive(clap::Args, Debug)]
pub struct SessionsArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// How many sessions to show.
    #[arg(long, default_value_t = 25, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub limit: u32,
}

#[derive(clap::Args, Debug)]
#[command(after_help = "In the chat, /help lists the commands. Enter sends; Ctrl-C cancels the running turn, a second \
Ctrl-C exits; Ctrl-O shows or collapses reasoning; PgUp/PgDn scroll.")]
pub struct ChatArgs {
    /// The agent to chat with (default: `demo`, the example agent); not needed with --session.
    pub agent: Option<String>,
    /// Resume this session (see `teamster sessions`), its history shown.
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// A running server to talk to, such as http://127.0.0.1:8790. Without it the chat starts
    /// the server in-process, on the store below.
    #[arg(long, env = "TEAMSTER_URL", value_name = "URL")]
    pub server: Option<String>,
    /// The API key for a server that authenticates (`--auth api-keys`).
    #[arg(long, env = "TEAMSTER_API_KEY", hide_env_values = true, value_name = "KEY")]
    pub api_key: Option<String>,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// Where the store is.
#[derive(clap::Args, Debug, Clone)]
pub struct StoreArgs {
    /// Database URL: `sqlite://PATH` (default: a file in the data directory) or
    /// `postgres://USER:PASSWORD@HOST:PORT/DATABASE`.
    #[arg(long, env = "TEAMSTER_DATABASE_URL", global = true)]
    pub database: Option<String>,
    /// Where the default SQLite database lives (default: $XDG_DATA_HOME/teamster or
    /// ~/.local/share/teamster).
    #[arg(long, env = "TEAMSTER_DATA_DIR", global = true)]
    pub data_dir: Option<PathBuf>,
}

/// How `teamster serve` writes its log.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// Lines for people.
    Text,
    /// One JSON object per line, with the fields of the turn it belongs to (`session_id`,
    /// `turn_id`), for log collectors.
    Json,
}

/// Whether sandboxed commands run in control groups of their own.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SandboxCgroupsArg {
    Auto,
    Required,
    Off,
}

/// How `teamster serve` authenticates requests.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthArg {
    None,
    ApiKeys,
}

#[derive(clap::Args, Debug)]
pub struct KeysArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Manage the keys of this running server through `/api/v1/keys` (with an operator's or a
    /// tenant admin's --api-key) instead of in the store directly.
    #[arg(long, global = true, value_name = "URL")]
    pub server: Option<String>,
    /// The API key of an operator or tenant admin, for --server.
    #[arg(long, global = true, env = "TEAMSTER_API_KEY", hide_env_values = true, value_name = "KEY")]
    pub api_key: Option<String>,
    #[command(subcommand)]
    pub command: KeysCommand,
}

/// API keys, managed in the store itself (with a SQLite database, while no server runs on it),
/// or with --server through a running server's `/api/v1/keys` (its operator and tenant admins).
#[derive(Subcommand, Debug)]
pub enum KeysCommand {
    /// Creates a key and prints it; it is shown this once (only its hash is stored).
    Create {
        /// The subject's name, unique within its tenant.
        #[arg(long)]
        subject: String,
        #[arg(long, default_value = "default")]
        tenant: String,
        #[arg(long, value_enum, default_value_t = RoleArg::Member)]
        role: RoleArg,
        /// The subject is a service account, not a person.
        #[arg(long)]
        service_account: bool,
    },
    /// Lists the keys (never their secrets).
    List,
    /// Revokes a key by its id.
    Revoke { id: String },
}

/// A key's role.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoleArg {
    /// The server's operator: settings, providers, MCP servers, skills, metrics, every tenant's keys.
    Operator,
    /// An admin of its own tenant: that tenant's keys, agents and sessions.
    Admin,
    Member,
}

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "TEAMSTER_LISTEN", default_value = "127.0.0.1:8790")]
    pub listen: String,
    #[command(flatten)]
    pub store: StoreArgs,
    /// How requests are authenticated: `none` (every request is the local admin's; only on a
    /// loopback address unless --insecure-no-auth) or `api-keys` (`Authorization: Bearer`, keys
    /// from `teamster keys create` or `POST /api/v1/keys`).
    #[arg(long, env = "TEAMSTER_AUTH", value_enum, default_value_t = AuthArg::None)]
    pub auth: AuthArg,
    /// Serve without authentication on an address other than loopback: anyone who reaches it
    /// acts as the local admin.
    #[arg(long, env = "TEAMSTER_INSECURE_NO_AUTH")]
    pub insecure_no_auth: bool,
    #[command(flatten)]
    pub oidc: crate::oidc::OidcArgs,
    /// Export a trace of every turn over OTLP/HTTP (protobuf) to this collector, e.g.
    /// `http://localhost:4318` (the spans go to `<URL>/v1/traces`); a request's `traceparent`
    /// header makes its turns part of the caller's trace.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// The log's format on standard error; `TEAMSTER_LOG` filters it (default `info`).
    #[arg(long, env = "TEAMSTER_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Seconds between a live channel's re-reads of its session when no change was announced
    /// (changes made on any replica are announced at once; this covers a lost announcement).
    /// Default: 1 with a shared PostgreSQL store, 30 on SQLite.
    #[arg(long, env = "TEAMSTER_LIVE_REREAD_SECS", value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub live_reread_secs: Option<u64>,
    /// Seconds of silence on an event stream before a heartbeat comment.
    #[arg(long, env = "TEAMSTER_HEARTBEAT_SECS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=300))]
    pub heartbeat_secs: u64,
    /// The longest a turn may run, in seconds.
    #[arg(long, env = "TEAMSTER_TURN_TIMEOUT_SECS", default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub turn_timeout_secs: u64,
    /// The largest request body accepted, in bytes.
    #[arg(long, env = "TEAMSTER_MAX_BODY_BYTES", default_value_t = 10 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// How many times a model call is tried when the provider fails transiently (1: no retry).
    #[arg(long, env = "TEAMSTER_MODEL_RETRY_ATTEMPTS", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub model_retry_attempts: u32,
    /// The first retry's back-off in milliseconds; it doubles per retry, with jitter.
    #[arg(long, env = "TEAMSTER_MODEL_RETRY_BASE_MS", default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub model_retry_base_ms: u64,
    /// The longest wait between tries in seconds; a provider asking for longer is not retried.
    #[arg(long, env = "TEAMSTER_MODEL_RETRY_MAX_SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub model_retry_max_secs: u64,
    /// Do not create the example agent `demo` on start.
    #[arg(long)]
    pub no_example: bool,
    /// How long a finished turn keeps its whole event stream (deltas included) for
    /// subscribers, in hours; afterwards subscribing answers 412, while its events stay listable
    /// until the session is deleted.
    #[arg(long, env = "TEAMSTER_STREAM_RETENTION_HOURS", default_value_t = 24, value_parser = clap::value_parser!(u64).range(1..=87_600))]
    pub stream_retention_hours: u64,
    /// The stream retention in seconds, overriding --stream-retention-hours (for tests).
    #[arg(long, hide = true, value_parser = clap::value_parser!(u64).range(1..))]
    pub stream_retention_secs: Option<u64>,
    /// How many times one turn may be taken over from a stopped server and resumed; a turn
    /// taken over more often ends `cancelled` with reason `abandoned`.
    #[arg(long, env = "TEAMSTER_MAX_TAKEOVERS", default_value_t = 3, value_parser = clap::value_parser!(u64).range(0..=100))]
    pub max_takeovers: u64,
    /// How long a turn's lease lasts without renewal, in milliseconds (for tests): another
    /// server takes the turn over once it has expired.
    #[arg(long, hide = true, default_value_t = 15_000, value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    pub lease_ttl_ms: u64,
    /// How often leases are renewed, in milliseconds (for tests); at most half the lease.
    #[arg(long, hide = true, default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(10..=1_800_000))]
    pub lease_renew_ms: u64,
    /// How often each server looks for turns to take over, in milliseconds (for tests).
    #[arg(long, hide = true, default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(10..=3_600_000))]
    pub takeover_interval_ms: u64,
    /// The URL users' browsers reach this server at, with any path prefix (default:
    /// `http://` and the listening address). MCP OAuth links and callbacks are built on it.
    #[arg(long, env = "TEAMSTER_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// The file holding the key that seals MCP OAuth tokens in the database, created (mode
    /// 0600) if missing (default: `secret.key` in the data directory). The environment variable
    /// `TEAMSTER_SECRET_KEY` (32 bytes in base64) takes precedence; replicas sharing a database
    /// need the same key.
    #[arg(long, env = "TEAMSTER_SECRET_KEY_FILE")]
    pub secret_key_file: Option<PathBuf>,
    /// Allow MCP servers of type stdio, which run a command on this host, to be configured
    /// through the settings API and started. Off by default: anyone who may write settings
    /// could otherwise run programs as this server's user.
    #[arg(long, env = "TEAMSTER_ALLOW_STDIO_MCP")]
    pub allow_stdio_mcp: bool,
    /// Let agents whose spec says `config.sandbox.network: true` run commands with network
    /// access: each command in a network namespace of its own (slirp4netns) that reaches public
    /// addresses only, never this host's loopback or private, link-local (cloud metadata) and
    /// other special ranges. Off by default: such specs are refused.
    #[arg(long, env = "TEAMSTER_ALLOW_SANDBOX_NETWORK")]
    pub allow_sandbox_network: bool,
    /// With --auth none, --allow-sandbox-network is refused unless this is given too (anyone
    /// who reaches the server could run networked commands).
    #[arg(long, env = "TEAMSTER_ALLOW_SANDBOX_NETWORK_WITHOUT_AUTH")]
    pub allow_sandbox_network_without_auth: bool,
    /// Let URLs that members write (agents' inline MCP servers, git skill sources) reach this
    /// network, address or host name (`10.0.0.0/8`, `127.0.0.1`, `mcp.internal`); repeat it,
    /// or separate entries with commas. Without it they reach public addresses only: never
    /// loopback, private, link-local (cloud metadata) or other special ranges.
    #[arg(long = "allow-egress", env = "TEAMSTER_ALLOW_EGRESS", value_delimiter = ',', value_name = "CIDR|HOST")]
    pub allow_egress: Vec<String>,
    /// Where sessions' sandboxes (their workspaces) live (default: `sandboxes` in the data
    /// directory). Replicas that share a database should share this directory too (shared
    /// storage), so a turn resumed on another replica finds its files.
    #[arg(long, env = "TEAMSTER_SANDBOX_ROOT")]
    pub sandbox_root: Option<PathBuf>,
    /// Run no sandboxes: agents that enable one are refused.
    #[arg(long, env = "TEAMSTER_NO_SANDBOX")]
    pub no_sandbox: bool,
    /// Remove a sandbox no command has used for this many hours (0: keep them until their
    /// session is deleted).
    #[arg(long, env = "TEAMSTER_SANDBOX_IDLE_HOURS", default_value_t = 24)]
    pub sandbox_idle_hours: u64,
    /// Memory a sandboxed command's processes may use together, in MiB: its control group's
    /// memory limit, which counts the tmpfs and shared memory pages they write (no swap on top).
    #[arg(long, env = "TEAMSTER_SANDBOX_MEMORY_MIB", default_value_t = 1024, value_parser = clap::value_parser!(u64).range(16..=1_048_576))]
    pub sandbox_memory_mib: u64,
    /// Processes and threads a sandboxed command may have at once (its control group's pids
    /// limit, and the sandbox user's RLIMIT_NPROC).
    #[arg(long, env = "TEAMSTER_SANDBOX_PROCESSES", default_value_t = 256, value_parser = clap::value_parser!(u64).range(8..=65_536))]
    pub sandbox_processes: u64,
    /// CPUs a sandboxed command may keep busy (`0.5`, `2`): its control group's CPU quota.
    #[arg(long, env = "TEAMSTER_SANDBOX_CPUS", default_value = "1", value_parser = cpu_millis)]
    pub sandbox_cpus: u64,
    /// The size of a sandbox's /dev/shm, in MiB (a tmpfs: host memory).
    #[arg(long, env = "TEAMSTER_SANDBOX_SHM_MIB", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=65_536))]
    pub sandbox_shm_mib: u64,
    /// Disk space, in MiB, the sandboxes of one subject (a session's creator) may take
    /// together across all their sessions (0: no bound beyond each sandbox's own 1 GiB).
    #[arg(long, env = "TEAMSTER_SANDBOX_DISK_PER_SUBJECT_MIB", default_value_t = 4096, value_parser = clap::value_parser!(u64).range(0..=1 << 40))]
    pub sandbox_disk_per_subject_mib: u64,
    /// Disk space, in MiB, the sandboxes of one tenant's subjects may take together (0: no bound).
    #[arg(long, env = "TEAMSTER_SANDBOX_DISK_PER_TENANT_MIB", default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1 << 40))]
    pub sandbox_disk_per_tenant_mib: u64,
    /// Whether sandboxed commands run in control groups of their own (bounding their memory,
    /// processes and CPU): `auto` where this host lets the server make them (cgroup v2 with a
    /// delegated subtree, or v1 as root), `required` to refuse to run sandboxes otherwise, `off`.
    #[arg(long, env = "TEAMSTER_SANDBOX_CGROUPS", value_enum, default_value_t = SandboxCgroupsArg::Auto)]
    pub sandbox_cgroups: SandboxCgroupsArg,
    /// Host names requests may address this server by, besides the loopback names, the
    /// --public-url host and the listening IP (comma-separated; `*` for any). Others get 421:
    /// this is what stops DNS rebinding.
    #[arg(long, env = "TEAMSTER_ALLOWED_HOSTS", value_delimiter = ',')]
    pub allowed_hosts: Vec<String>,
    /// Browser origins (`https://app.example.com`) whose pages may call the API across origins
    /// (comma-separated); other cross-origin browser requests get 403.
    #[arg(long, env = "TEAMSTER_ALLOWED_ORIGINS", value_delimiter = ',')]
    pub allowed_origins: Vec<String>,
    /// Seconds a connection may take to send a complete request header, when it opens and
    /// between requests (an idle kept-alive connection); then it is closed.
    #[arg(long, env = "TEAMSTER_HEADER_TIMEOUT_SECS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub header_timeout_secs: u64,
    /// The most connections open at once (at most the process's open-file limit, less a
    /// reserve for the database and MCP servers); more wait to be accepted.
    #[arg(long, env = "TEAMSTER_MAX_CONNECTIONS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(16..=1_000_000))]
    pub max_connections: u64,
    /// Seconds a request's whole body may take to arrive after its head; a slower one gets 408
    /// and its connection is closed.
    #[arg(long, env = "TEAMSTER_BODY_TIMEOUT_SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub body_timeout_secs: u64,
    /// The most requests (event streams included) each subject may have in flight; more get 429
    /// at once. Never more than half of the connections left after the health checks' reserve
    /// (a tenth of --max-connections, 2 to 100).
    #[arg(long, env = "TEAMSTER_MAX_REQUESTS_PER_SUBJECT", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_requests_per_subject: u64,
    /// Threads that run the server's tasks (default: half the machine's cores, at least one).
    /// The rest of the machine is left to the store's connection threads, the processes the
    /// turns start and the kernel's network work; on two cores one worker spends less CPU per
    /// turn and serves more turns per second than two (bench/README.md).
    #[arg(long, env = "TEAMSTER_WORKER_THREADS", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub worker_threads: Option<u16>,
    /// Requests per minute each subject (API key's subject; without --auth, the local user)
    /// may send, in a burst of as many; beyond it 429 with Retry-After. Counted per server
    /// process. Default: no limit.
    #[arg(long, env = "TEAMSTER_RATE_LIMIT_PER_MINUTE", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub rate_limit_per_minute: Option<u32>,
    /// The most turns one subject may have running at once (counted per server process); a
    /// turn beyond it is refused with 429 and Retry-After. Default: no limit.
    #[arg(long, env = "TEAMSTER_MAX_CONCURRENT_TURNS_PER_SUBJECT", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_concurrent_turns_per_subject: Option<u32>,
    /// The model tokens (input plus output) each tenant's turns may spend per budget window;
    /// a turn that finds it spent ends in error before its next model call. Default: none.
    #[arg(long, env = "TEAMSTER_TENANT_TOKEN_BUDGET", value_parser = clap::value_parser!(u64).range(1..))]
    pub tenant_token_budget: Option<u64>,
    /// The model cost in US dollars (models with known prices) each tenant's turns may spend
    /// per budget window. Default: none.
    #[arg(long, env = "TEAMSTER_TENANT_COST_BUDGET_USD", value_parser = positive_dollars)]
    pub tenant_cost_budget_usd: Option<f64>,
    /// The tenant budget's window in hours, aligned on the Unix epoch (24: each UTC day);
    /// spending counts from zero again in each window.
    #[arg(long, env = "TEAMSTER_TENANT_BUDGET_WINDOW_HOURS", default_value_t = 24, value_parser = clap::value_parser!(u64).range(1..=8_784))]
    pub tenant_budget_window_hours: u64,
    /// How many tool calls of one model message run at once; the others wait their turn. An
    /// agent's `config.fan_out.max_parallel_tool_calls` may lower it.
    #[arg(long, env = "TEAMSTER_MAX_PARALLEL_TOOL_CALLS", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub max_parallel_tool_calls: u32,
    /// How many sub-agent threads one turn may start, at every depth together; a call beyond
    /// it gets a tool error. An agent's `config.fan_out.max_threads_per_turn` may lower it.
    #[arg(long, env = "TEAMSTER_MAX_THREADS_PER_TURN", default_value_t = 16, value_parser = clap::value_parser!(u32).range(0..=4096))]
    pub max_threads_per_turn: u32,
}

impl ServeArgs {
    /// The runtime's worker threads: as given, or half the machine's cores (at least one).
    pub fn worker_threads(&self) -> usize {
        self.worker_threads.map_or_else(
            || std::thread::available_parallelism().map_or(1, |cores| cores.get() / 2).max(1),
            usize::from,
        )
    }
}

#[derive(Subcommand, Debug)]
pub enum AgentsCommand {
    /// Create or update an agent from a `truefoundry-agent` manifest (YAML or JSON); applying
    /// an unchanged manifest keeps the agent's version.
    Apply {
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        /// Use this model (`provider/model`) instead of the manifest's, e.g. to try the example
        /// agent with a real model without editing its file.
        #[arg(long)]
        model: Option<String>,
        /// Save nothing: check the manifest as saving would, resolve its models, connect to its
        /// MCP servers, and print the tools a new session is offered, whether each asks for
        /// approval and why, and each absent tool and why ("why this toolset"). Exits 1 when
        /// saving would be refused.
        #[arg(long)]
        dry_run: bool,
    },
    /// List saved agents.
    List,
    /// Show one agent by name.
    Get { name: String },
}

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// `AGENT PROMPT`: the agent's name and what to say; with --session, only `PROMPT` (or
    /// nothing, with --approve, --deny or --answer).
    #[arg(value_name = "AGENT PROMPT", num_args = 0..=2)]
    pub words: Vec<String>,
    /// Continue this session (see `teamster sessions`) with its agent, instead of starting a
    /// new session.
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// With --session: approve this tool call the session's last turn waits on (repeat it for
    /// several), instead of saying something.
    #[arg(long, value_name = "CALL", requires = "session")]
    pub approve: Vec<String>,
    /// With --session: deny this waiting tool call (repeat it for several).
    #[arg(long, value_name = "CALL", requires = "session")]
    pub deny: Vec<String>,
    /// With --session: answer the question the session's last turn waits on.
    #[arg(long, value_name = "TEXT", requires = "session")]
    pub answer: Option<String>,
    /// Print the turn's events, one JSON object per line (NDJSON), instead of its text, for
    /// piping into other programs; the exit code is as without it.
    #[arg(long)]
    pub json: bool,
}

impl RunArgs {
    /// Whether the run decides what the last turn waits on instead of saying something.
    pub fn decides(&self) -> bool {
        !self.approve.is_empty() || !self.deny.is_empty() || self.answer.is_some()
    }
}

/// A number of CPUs (`0.5`, `2`), from a hundredth to 1024, in thousandths.
fn cpu_millis(text: &str) -> Result<u64, String> {
    match text.trim().parse::<f64>() {
        Ok(cpus) if (0.01..=1024.0).contains(&cpus) => Ok((cpus * 1000.0).round() as u64),
        _ => Err(format!("{text:?} is not a number of CPUs from 0.01 to 1024")),
    }
}

/// A positive, finite amount of US dollars.
fn positive_dollars(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(amount) if amount.is_finite() && amount > 0.0 => Ok(amount),
        _ => Err(format!("{text:?} is not a positive amount of US dollars")),
    }
}

/// `teamster settings`: a running server's model providers and MCP servers (`settings.rs`).
#[derive(clap::Args, Debug)]
pub struct SettingsArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(subcommand)]
    pub command: SettingsCommand,
}

/// What is configured on the server.
#[derive(Subcommand, Debug)]
pub enum SettingsCommand {
    /// Model providers: list, delete, rename.
    Providers {
        #[command(subcommand)]
        command: ProvidersCommand,
    },
    /// MCP servers: list, delete, rename, test.
    McpServers {
        #[command(subcommand)]
        command: McpServersCommand,
    },
}

#[derive(Subcommand, Debug)]
pub enum ProvidersCommand {
    /// Lists the providers: name, type and models.
    List,
    /// Deletes a provider stored through the settings (agents that name it are refused).
    Delete { name: String },
    /// Renames a custom provider; agents must then name its models by the new name.
    Rename { name: String, new_name: String },
}

#[derive(Subcommand, Debug)]
pub enum McpServersCommand {
    /// Lists the servers: name, type and URL.
    List,
    /// Adds a server, or replaces the one of the same name, from a settings manifest file
    /// (YAML or JSON, `type: remote` with a `url`, or `type: stdio` with a `command`), as
    /// `PUT /api/v1/settings/mcp-servers` does; agents then name it in their `mcp_servers`.
    Apply {
        #[arg(short = 'f', long = "file")]
        file: std::path::PathBuf,
    },
    /// Deletes a server (agents that name it no longer get its tools).
    Delete { name: String },
    /// Renames a server; agents must then name it by the new name.
    Rename { name: String, new_name: String },
    /// Connects to a server and lists its tools; exits 1 when that fails.
    Test { name: String },
}
