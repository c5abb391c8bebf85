//! `teamster-bench`: the load driver of the Teamster benchmarks.
//!
//! It starts `fake-model` and `teamster serve` itself (loopback only, a fresh SQLite database, or
//! the PostgreSQL database given, with one or more replicas sharing it; requests then go to the
//! replicas in turn, a client-side round robin), drives streamed turns through the native API, and measures server CPU per turn, turn
//! latency, time to first event and first model delta, throughput with parallel sessions,
//! resident memory idle and after finished turns, and cold start. Every figure is set next to
//! its floor: the same measurement made by calling a fresh fake model directly with the exact
//! request body Teamster sends it. It prints a Markdown table and writes a JSON file. Every
//! wait and loop is bounded, and a watchdog ends the whole run.

mod client;
mod database;
mod dialects;
mod library;
mod overhead;
mod phases;
mod process;
mod report;
mod sandbox;
mod workspace;
mod live;
mod streams;
mod wire;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;

use crate::client::{Kind, RoundRobin, Target};
use crate::phases::{Probe, sequential};
use crate::process::{ProcReader, Served};
use crate::report::{Checkpoint, ColdStarts, Config, Report, Side};

/// Benchmarks `teamster serve` against the fake model floor.
/// How long the processes are watched doing nothing, for their idle CPU use.
const IDLE_CPU_WINDOW: Duration = Duration::from_secs(2);

#[derive(Parser, Debug)]
#[command(name = "teamster-bench")]
struct Args {
    /// The `teamster` binary.
    #[arg(long, default_value = "target/release/teamster")]
    teamster: PathBuf,
    /// The `fake-model` binary.
    #[arg(long, default_value = "target/release/fake-model")]
    fake_model: PathBuf,
    /// Content chunks the fake model streams per turn (`[tokens:N]`).
    #[arg(long, default_value_t = 50)]
    tokens: u32,
    /// Sequential warm-up turns before anything is measured.
    #[arg(long, default_value_t = 100)]
    warmup: usize,
    /// Sequential measured turns (CPU per turn and latency).
    #[arg(long, default_value_t = 1000)]
    turns: usize,
    /// Memory checkpoints: RSS after this many finished turns, and after as many again.
    #[arg(long, default_value_t = 1000)]
    memory_turns: usize,
    /// Sessions running turns back to back in the throughput phase.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Warm-up of the throughput phase, in seconds.
    #[arg(long, default_value_t = 2)]
    parallel_warmup_secs: u64,
    /// Measured duration of the throughput phase, in seconds.
    #[arg(long, default_value_t = 10)]
    duration_secs: u64,
    /// Cold starts to take the median of.
    #[arg(long, default_value_t = 10)]
    cold_starts: usize,
    /// Chained turns (`previous_turn_id: auto`) measured separately, in two halves; 0 skips.
    #[arg(long, default_value_t = 200)]
    chained_turns: usize,
    /// Sequential turns on a new connection each (no keep-alive), reported in the details.
    #[arg(long, default_value_t = 200)]
    fresh_connection_turns: usize,
    /// Where to write the JSON results.
    #[arg(long, default_value = "bench/results/latest.json")]
    json: PathBuf,
    /// Driver runtime threads (1 = a single-threaded runtime, so the driver uses at most one core).
    #[arg(long, default_value_t = 1)]
    driver_threads: usize,
    /// Watchdog: the whole run is abandoned after this many seconds.
    #[arg(long, default_value_t = 900)]
    max_secs: u64,
    /// The database of `teamster serve` (default: a fresh SQLite file per server), e.g. an
    /// empty PostgreSQL database, `postgres://USER@HOST:PORT/DATABASE`.
    #[arg(long)]
    database: Option<String>,
    /// How many `teamster serve` replicas share the database (two or more need PostgreSQL);
    /// turn requests go to them in turn, and their CPU and memory are summed.
    #[arg(long, default_value_t = 1)]
    replicas: usize,
    /// Instead of the server table: the `teamster` library's `agent.run` in this process,
    /// against a direct call to the fake model and the same turn over HTTP (`--warmup`,
    /// `--turns`, `--tokens` apply).
    #[arg(long)]
    library: bool,
    /// Instead of the server table: one `exec` of `true` in a bubblewrap sandbox against
    /// spawning `/bin/sh -c true` directly (`--warmup`, `--turns` apply).
    #[arg(long, conflicts_with = "library")]
    sandbox: bool,
    /// Instead of the server table: a file's round trip through `write_file` and `read_file`
    /// against `exec` of a shell in a bubblewrap sandbox (`--warmup`, `--turns` apply), then the
    /// server's CPU per KiB of a command's streamed output (`--turns` of each kind, at most 200).
    #[arg(long, conflicts_with_all = ["library", "sandbox"])]
    workspace: bool,
    /// Instead of the server table: one turn read natively, as the AI SDK data stream and as
    /// the UI message stream (`POST /api/v1/chat`), the server's CPU per turn and per event of
    /// each (`--warmup`, `--turns` of each kind, `--tokens`, `--rounds` apply).
    #[arg(long, conflicts_with_all = ["library", "sandbox"])]
    dialects: bool,
    /// Instead of the server table: the server's CPU per turn with API key authentication, OTLP
    /// trace export (to a receiver the driver runs) and `/metrics` scrapes all on, against all
    /// off (`--warmup`, `--turns` of each, `--tokens`, `--rounds` apply).
    #[arg(long, conflicts_with_all = ["library", "sandbox", "dialects"])]
    overhead: bool,
    /// With `--dialects` and `--overhead`: the measured turns are run in this many rounds, each
    /// a block of every kind in a rotating order, so background load falls on all kinds alike.
    #[arg(long, default_value_t = 10)]
    rounds: usize,
    /// Instead of the server table: `--subscribers` streams on one running turn (`--tokens`
    /// chunks), then `--idle-streams` open streams on a silent turn (memory per stream).
    #[arg(long, conflicts_with_all = ["library", "sandbox", "dialects", "overhead"])]
    streams: bool,
    /// Instead of the server table: `--subscribers` clients on one session's live channel
    /// while one turn streams `--tokens` chunks (CPU per delivered event, memory per channel,
    /// and the display states the coalescing sends per turn).
    #[arg(long, conflicts_with_all = ["library", "sandbox", "dialects", "overhead", "streams"])]
    live: bool,
    /// With `--streams` and `--live`: subscribers of the running turn (or of the session).
    #[arg(long, default_value_t = 1_000)]
    subscribers: usize,
    /// With `--streams`: idle open streams.
    #[arg(long, default_value_t = 10_000)]
    idle_streams: usize,
    /// On PostgreSQL: sequential turns through a counting relay, for the round trips,
    /// statements, transactions, rows and WAL bytes of one turn; 0 skips.
    #[arg(long, default_value_t = 200)]
    count_turns: usize,
}

impl Args {
    /// How many rounds `--dialects` and `--overhead` spread their measured turns over.
    fn measured_rounds(&self) -> usize {
        self.rounds.clamp(1, self.turns.max(1))
    }

    /// What the report calls the database.
    fn database_label(&self) -> &'static str {
        match &self.database {
            Some(url) if url.starts_with("postgres") => "PostgreSQL",
            Some(_) => "the given database",
            None => "SQLite",
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut builder = if args.driver_threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(args.driver_threads);
        builder
    };
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("teamster-bench: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let watchdog = Duration::from_secs(args.max_secs);
    let outcome = runtime.block_on(async move {
        match tokio::time::timeout(watchdog, run(args)).await {
            Ok(result) => result,
            Err(_) => Err(anyhow::anyhow!("the run took longer than {watchdog:?} and was abandoned")),
        }
    });
    // Children are killed on drop; give the runtime a moment to reap them.
    runtime.shutdown_timeout(Duration::from_secs(5));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("teamster-bench: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    if args.sandbox {
        return sandbox::run(&args).await;
    }
    if args.workspace {
        return workspace::run(&args).await;
    }
    for binary in [&args.teamster, &args.fake_model] {
        if !binary.is_file() {
            bail!(
                "{} not found (build with `cargo build --release -p teamster-cli -p teamster-fake-model`)",
                binary.display()
            );
        }
    }
    if args.concurrency == 0 || args.turns == 0 || args.replicas == 0 {
        bail!("--concurrency, --turns and --replicas must be at least 1");
    }
    if args.replicas > 2 {
        bail!("--replicas is 1 or 2");
    }
    if args.replicas > 1 && args.database_label() != "PostgreSQL" {
        bail!("several replicas need a shared database: pass --database postgres://...");
    }
    if args.library {
        return library::run(&args).await;
    }
    if args.dialects {
        return dialects::run(&args).await;
    }
    if args.overhead {
        return overhead::run(&args).await;
    }
    if args.streams {
        return streams::run(&args).await;
    }
    if args.live {
        return live::run(&args).await;
    }

    let proc = ProcReader::new();
    let client = client::http_client(true)?;
    let fresh_client = client::http_client(false)?;
    let started = Instant::now();
    let load_at_start = process::load_average();

    eprintln!("cold starts ({} each)...", args.cold_starts);
    let cold = cold_starts(&args, &client).await?;

    eprintln!("teamster: start-up and setup...");
    let (teamster_side, direct_body, chained, server_log_bytes) =
        measure_teamster(&args, &client, &fresh_client, proc).await?;

    eprintln!("floor: direct calls to a fresh fake model...");
    let floor_side = measure_floor(&args, &client, &fresh_client, proc, &direct_body).await?;

    let counted = match &args.database {
        Some(url) if args.database_label() == "PostgreSQL" && args.count_turns > 0 => {
            eprintln!("teamster: {} turns through a counting relay to PostgreSQL...", args.count_turns);
            let counted = database::per_turn(&args.teamster, &args.fake_model, url, args.tokens, args.count_turns, &client, proc);
            Some(counted.await.context("counting the database's work per turn")?)
        }
        _ => None,
    };

    let report = Report {
        config: Config {
            tokens: args.tokens,
            warmup: args.warmup,
            turns: args.turns,
            concurrency: args.concurrency,
            parallel_warmup_secs: args.parallel_warmup_secs,
            duration_secs: args.duration_secs,
            cold_starts: args.cold_starts,
            driver_threads: args.driver_threads,
            ticks_per_second: proc.ticks_per_second(),
            database: args.database_label(),
            replicas: args.replicas,
        },
        cold,
        teamster: teamster_side,
        floor: floor_side,
        chained,
        direct_body,
        server_log_bytes,
        total_secs: started.elapsed().as_secs_f64(),
        load_average: [load_at_start, process::load_average()],
        cores: std::thread::available_parallelism().map_or(0, usize::from),
    };
    let (mut markdown, mut json) = (report.markdown(), report.json());
    if let Some(counted) = &counted {
        markdown.push_str(&counted.markdown());
        json["postgres_per_turn"] = counted.json();
    }
    publish(&markdown, &json, &args.json)
}

/// Prints the Markdown table and writes the JSON results to `path`.
fn publish(markdown: &str, json: &serde_json::Value, path: &std::path::Path) -> anyhow::Result<()> {
    println!("{markdown}");
    if let Some(parent) = path.parent().filter(|parent| !parent.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    }
    let json = serde_json::to_string_pretty(json)?;
    std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// Spawn-to-`/healthz`-200 times of Teamster (fresh database each) and of the fake model.
async fn cold_starts(args: &Args, client: &reqwest::Client) -> anyhow::Result<ColdStarts> {
    let mut cold = ColdStarts::default();
    for _ in 0..args.cold_starts {
        let dir = process::scratch_dir("cold")?;
        let port = process::free_port()?;
        let command =
            process::teamster_command(&args.teamster, &dir, &format!("127.0.0.1:{port}"), args.database.as_deref())?;
        let elapsed = process::cold_start(command, port, client).await;
        let _ = std::fs::remove_dir_all(&dir);
        cold.teamster.push(elapsed.context("teamster cold start")?);

        let port = process::free_port()?;
        let command = process::fake_model_command(&args.fake_model, &format!("127.0.0.1:{port}"));
        cold.floor.push(process::cold_start(command, port, client).await.context("fake-model cold start")?);
    }
    Ok(cold)
}

/// Runs every Teamster phase; returns its figures, the request body Teamster sends the model,
/// the chained-turn halves, and the size of the server's log.
async fn measure_teamster(
    args: &Args,
    client: &reqwest::Client,
    fresh_client: &reqwest::Client,
    proc: ProcReader,
) -> anyhow::Result<(Side, String, Option<[phases::SequentialRun; 2]>, u64)> {
    let dir = process::scratch_dir("serve")?;
    let upstream =
        process::spawn_served(process::fake_model_command(&args.fake_model, "127.0.0.1:0"), "fake-model").await?;
    let database = args.database.as_deref();
    let teamster =
        process::spawn_served(process::teamster_command(&args.teamster, &dir, "127.0.0.1:0", database)?, "teamster serve")
            .await?;
    let base = teamster.base_url.clone();
    wait_healthy(client, &base).await?;
    let idle_threads = proc.threads(Some(teamster.pid));

    client::configure_provider(client, &base, &upstream.base_url).await.context("configuring the provider")?;
    client::create_agent(client, &base, "bench").await.context("creating the agent")?;
    // A second replica starts once the provider is stored, so it loads it at start.
    let second_dir = process::scratch_dir("serve-2")?;
    let second = if args.replicas > 1 {
        let command = process::teamster_command(&args.teamster, &second_dir, "127.0.0.1:0", database)?;
        let served = process::spawn_served(command, "the second teamster serve").await?;
        wait_healthy(client, &served.base_url).await?;
        Some(served)
    } else {
        None
    };
    let replicas = second.as_ref().map(|second| RoundRobin::new(vec![base.clone(), second.base_url.clone()]));
    let probe = Probe { proc, server: teamster.pid, upstream: Some(upstream.pid), replica: second.as_ref().map(|s| s.pid) };
    let idle_rss = probe.server_rss()?;
    let mut session_urls = Vec::with_capacity(args.concurrency + 2);
    for _ in 0..args.concurrency + 2 {
        let id = client::create_session(client, &base, "bench").await.context("creating a session")?;
        session_urls.push(format!("{base}/api/v1/sessions/{id}/turns"));
    }
    let chained_url = session_urls.pop().context("no session")?;
    let sequential_url = session_urls.pop().context("no session")?;
    let setup_rss = probe.server_rss()?;

    let idle_cpu = probe.idle(IDLE_CPU_WINDOW).await?;
    let body = client::turn_body(args.tokens, "none");
    let target = Target { kind: Kind::Turn, urls: vec![sequential_url], body: body.clone(), replicas: replicas.clone() };

    eprintln!("teamster: {} warm-up turns...", args.warmup.max(1));
    check_clean(&sequential(&target, client, args.warmup.saturating_sub(1), &probe).await?, "warm-up")?;
    client::clear_recorded_requests(client, &upstream.base_url).await?;
    check_clean(&sequential(&target, client, 1, &probe).await?, "capture turn")?;
    let direct_body =
        client::only_recorded_request(client, &upstream.base_url).await.context("capturing the model request")?;
    let mut finished_turns = args.warmup.max(1);

    eprintln!("teamster: {} measured sequential turns...", args.turns);
    let measured = measured_run(args, client, &target, &probe, finished_turns).await?;
    finished_turns += args.turns;

    eprintln!("teamster: memory checkpoints...");
    let (checkpoints, repeat) =
        memory_checkpoints(args, client, &target, &probe, &mut finished_turns, &measured).await?;

    eprintln!("teamster: {} sequential turns on new connections...", args.fresh_connection_turns);
    let fresh = sequential(&target, fresh_client, args.fresh_connection_turns, &probe).await?;

    eprintln!("teamster: {} sessions in parallel for {} s...", args.concurrency, args.duration_secs);
    let parallel_target = Target { kind: Kind::Turn, urls: session_urls, body, replicas: replicas.clone() };
    let parallel = phases::parallel(
        &parallel_target,
        client,
        args.concurrency,
        Duration::from_secs(args.parallel_warmup_secs),
        Duration::from_secs(args.duration_secs),
        &probe,
    )
    .await?;
    let after_parallel_rss = probe.server_rss()?;
    let after_threads = proc.threads(Some(teamster.pid));

    let chained = if args.chained_turns >= 2 {
        eprintln!("teamster: {} chained turns...", args.chained_turns);
        let body = client::turn_body(args.tokens, "auto");
        let chained_target = Target { kind: Kind::Turn, urls: vec![chained_url], body, replicas: replicas.clone() };
        let half = args.chained_turns / 2;
        let first = sequential(&chained_target, client, half, &probe).await?;
        let second = sequential(&chained_target, client, half, &probe).await?;
        Some([first, second])
    } else {
        None
    };
    let log_bytes = [&dir, &second_dir]
        .iter()
        .map(|dir| std::fs::metadata(dir.join("server.log")).map(|meta| meta.len()).unwrap_or(0))
        .sum();

    if let Some(second) = second {
        second.stop().await;
    }
    teamster.stop().await;
    upstream.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&second_dir);
    let side = Side {
        idle_rss,
        idle_cpu,
        fresh,
        setup_rss: Some(setup_rss),
        idle_threads,
        after_threads,
        measured,
        repeat,
        checkpoints,
        parallel,
        after_parallel_rss,
    };
    Ok((side, direct_body, chained, log_bytes))
}

/// The floor: the same phases as direct calls to a fresh fake model with Teamster's request.
async fn measure_floor(
    args: &Args,
    client: &reqwest::Client,
    fresh_client: &reqwest::Client,
    proc: ProcReader,
    body: &str,
) -> anyhow::Result<Side> {
    let fake: Served =
        process::spawn_served(process::fake_model_command(&args.fake_model, "127.0.0.1:0"), "fake-model").await?;
    wait_healthy(client, &fake.base_url).await?;
    let idle_rss = proc.rss_bytes(Some(fake.pid))?;
    let idle_threads = proc.threads(Some(fake.pid));
    let probe = Probe { proc, server: fake.pid, upstream: None, replica: None };
    let idle_cpu = probe.idle(IDLE_CPU_WINDOW).await?;
    let url = format!("{}/v1/chat/completions", fake.base_url);
    let target = Target { kind: Kind::Direct, urls: vec![url], body: body.to_owned(), replicas: None };

    check_clean(&sequential(&target, client, args.warmup.max(1), &probe).await?, "floor warm-up")?;
    let mut finished = args.warmup.max(1);
    let measured = measured_run(args, client, &target, &probe, finished).await?;
    finished += args.turns;
    let (checkpoints, repeat) = memory_checkpoints(args, client, &target, &probe, &mut finished, &measured).await?;
    let fresh = sequential(&target, fresh_client, args.fresh_connection_turns, &probe).await?;
    let parallel = phases::parallel(
        &target,
        client,
        args.concurrency,
        Duration::from_secs(args.parallel_warmup_secs),
        Duration::from_secs(args.duration_secs),
        &probe,
    )
    .await?;
    let after_parallel_rss = proc.rss_bytes(Some(fake.pid))?;
    let after_threads = proc.threads(Some(fake.pid));
    fake.stop().await;
    Ok(Side {
        idle_rss,
        idle_cpu,
        fresh,
        setup_rss: None,
        idle_threads,
        after_threads,
        measured,
        repeat,
        checkpoints,
        parallel,
        after_parallel_rss,
    })
}

/// The measured sequential turns; when the first memory checkpoint (`memory_turns` finished
/// turns in all) falls among them, RSS is read right after that turn.
async fn measured_run(
    args: &Args,
    client: &reqwest::Client,
    target: &Target,
    probe: &Probe,
    finished: usize,
) -> anyhow::Result<phases::SequentialRun> {
    let rss_after = args.memory_turns.checked_sub(finished).filter(|turn| (1..=args.turns).contains(turn));
    phases::sequential_with_rss(target, client, args.turns, probe, rss_after).await
}

/// The two memory checkpoints: RSS after `memory_turns` finished turns (read during the measured
/// run, or after unmeasured turns up to it) and after `memory_turns` more. The turns after the
/// measured run are returned as a repeat of the CPU measurement.
async fn memory_checkpoints(
    args: &Args,
    client: &reqwest::Client,
    target: &Target,
    probe: &Probe,
    finished: &mut usize,
    measured: &phases::SequentialRun,
) -> anyhow::Result<([Checkpoint; 2], phases::SequentialRun)> {
    let first = match measured.rss_checkpoint {
        Some(rss) => Checkpoint { turns: args.memory_turns, rss },
        None => {
            let fill = args.memory_turns.saturating_sub(*finished);
            check_clean(&sequential(target, client, fill, probe).await?, "fill")?;
            *finished += fill;
            Checkpoint { turns: *finished, rss: probe.server_rss()? }
        }
    };
    let more = (first.turns + args.memory_turns).saturating_sub(*finished);
    let repeat = sequential(target, client, more, probe).await?;
    *finished += more;
    let second = Checkpoint { turns: *finished, rss: probe.server_rss()? };
    Ok(([first, second], repeat))
}

fn check_clean(run: &phases::SequentialRun, what: &str) -> anyhow::Result<()> {
    match run.errors.first() {
        Some(error) => bail!("{what}: {} failed requests, the first: {error}", run.errors.len()),
        None => Ok(()),
    }
}

/// Polls `GET /healthz` until 200, for at most ten seconds.
async fn wait_healthy(client: &reqwest::Client, base: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(response) = client.get(format!("{base}/healthz")).send().await
            && response.status().is_success()
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    bail!("{base}/healthz did not answer 200 within ten seconds")
}
