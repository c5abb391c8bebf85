//! `teamster-bench --library`: the `teamster` library's own cost per run.
//!
//! Three ways to get the same answer from one fake model, each measured over the same number of
//! sequential runs after a warm-up, in this process (a single-threaded runtime):
//! 1. `agent.run` of a `teamster::Agent` in-process (no store, no server);
//! 2. the floor: a direct streaming call to the fake model with the exact body the library sent
//!    it (recorded by the fake model), read to its end;
//! 3. the same turn over HTTP: `teamster serve` on a fresh SQLite database, its agent on the
//!    same fake model, one streamed turn per run.
//!
//! The library's overhead per run is its CPU minus the floor's, both in this process. The HTTP
//! turn's cost is the server's CPU plus this process's (the client's).

use std::time::Instant;

use anyhow::{Context, bail};
use serde_json::json;
use teamster::{Agent, AgentItem, AgentRequest, Model};

use crate::client::{self, FAKE_API_KEY, Kind, Sample, Target};
use crate::phases::{self, Probe, SequentialRun, percentile_ms};
use crate::process::{self, ProcReader};
use crate::{Args, check_clean, wait_healthy};

/// The goal for the library's own CPU per run (DESIGN.md, issue of the library face).
const GOAL_OVERHEAD_MS: f64 = 0.2;

/// The three measured runs.
struct Measured {
    library: SequentialRun,
    direct: SequentialRun,
    http: SequentialRun,
    library_body: String,
    server_body: String,
}

pub async fn run(args: &Args) -> anyhow::Result<()> {
    let proc = ProcReader::new();
    let client = client::http_client(true)?;
    let started = Instant::now();
    let upstream =
        process::spawn_served(process::fake_model_command(&args.fake_model, "127.0.0.1:0"), "fake-model").await?;
    wait_healthy(&client, &upstream.base_url).await?;
    let result = measure(args, &client, proc, &upstream).await;
    upstream.stop().await;
    let measured = result?;

    let report = Report { args, measured: &measured, total_secs: started.elapsed().as_secs_f64() };
    crate::publish(&report.markdown(), &report.json(), &args.json)
}

async fn measure(
    args: &Args,
    client: &reqwest::Client,
    proc: ProcReader,
    upstream: &process::Served,
) -> anyhow::Result<Measured> {
    // The fake model is the "server" of the in-process phases: its CPU is reported beside ours.
    let probe = Probe { proc, server: upstream.pid, upstream: None, replica: None };
    let model = Model::openai_compatible(&format!("{}/v1", upstream.base_url), FAKE_API_KEY, "fake-model")?;
    let agent: Agent<()> = Agent::builder("bench", model).build()?;
    let input = format!("[tokens:{}] hi", args.tokens);
    let expected_end = format!("tok{}", args.tokens);
    let library_run = || async {
        let request = AgentRequest { input: vec![AgentItem::user(input.as_str())], context: () };
        let sent = Instant::now();
        let response = agent.run(request).await?;
        let total = sent.elapsed();
        let text = response.text();
        if !text.trim_end().ends_with(&expected_end) {
            bail!("the answer does not end with {expected_end}: {text}");
        }
        Ok(Sample { total, first_event: total, first_delta: total, deltas: args.tokens })
    };

    eprintln!("library: {} warm-up runs...", args.warmup.max(1));
    check_clean(&phases::sequential_calls(args.warmup, &probe, None, library_run).await?, "library warm-up")?;
    client::clear_recorded_requests(client, &upstream.base_url).await?;
    check_clean(&phases::sequential_calls(1, &probe, None, library_run).await?, "library capture run")?;
    let library_body = client::only_recorded_request(client, &upstream.base_url).await?;
    eprintln!("library: {} measured runs...", args.turns);
    let library = phases::sequential_calls(args.turns, &probe, None, library_run).await?;
    check_clean(&library, "library runs")?;

    eprintln!("floor: {} direct calls with the library's request...", args.turns);
    let url = format!("{}/v1/chat/completions", upstream.base_url);
    let target = Target { kind: Kind::Direct, urls: vec![url], body: library_body.clone(), replicas: None };
    check_clean(&phases::sequential(&target, client, args.warmup, &probe).await?, "floor warm-up")?;
    let direct = phases::sequential(&target, client, args.turns, &probe).await?;
    check_clean(&direct, "direct calls")?;

    eprintln!("http: `teamster serve` on a fresh SQLite database, {} measured turns...", args.turns);
    let (http, server_body) = measure_http(args, client, proc, upstream).await?;
    Ok(Measured { library, direct, http, library_body, server_body })
}

/// The same turn through `teamster serve`; returns the run and the body the server sends the
/// model.
async fn measure_http(
    args: &Args,
    client: &reqwest::Client,
    proc: ProcReader,
    upstream: &process::Served,
) -> anyhow::Result<(SequentialRun, String)> {
    let dir = process::scratch_dir("library-http")?;
    let command = process::teamster_command(&args.teamster, &dir, "127.0.0.1:0", None)?;
    let teamster = process::spawn_served(command, "teamster serve").await?;
    let outcome = async {
        let base = teamster.base_url.clone();
        wait_healthy(client, &base).await?;
        client::configure_provider(client, &base, &upstream.base_url).await.context("configuring the provider")?;
        client::create_agent(client, &base, "bench").await.context("creating the agent")?;
        let session = client::create_session(client, &base, "bench").await?;
        let url = format!("{base}/api/v1/sessions/{session}/turns");
        let target = Target { kind: Kind::Turn, urls: vec![url], body: client::turn_body(args.tokens, "none"), replicas: None };
        let probe = Probe { proc, server: teamster.pid, upstream: Some(upstream.pid), replica: None };
        check_clean(&phases::sequential(&target, client, args.warmup, &probe).await?, "http warm-up")?;
        client::clear_recorded_requests(client, &upstream.base_url).await?;
        check_clean(&phases::sequential(&target, client, 1, &probe).await?, "http capture turn")?;
        let body = client::only_recorded_request(client, &upstream.base_url).await?;
        let run = phases::sequential(&target, client, args.turns, &probe).await?;
        check_clean(&run, "http turns")?;
        Ok((run, body))
    }
    .await;
    teamster.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
    outcome
}

/// The figures of the three runs.
struct Report<'a> {
    args: &'a Args,
    measured: &'a Measured,
    total_secs: f64,
}

/// CPU milliseconds per run of one side of a run.
fn per_run_ms(run: &SequentialRun, cpu: impl Fn(&phases::CpuSpent) -> f64) -> f64 {
    cpu(&run.cpu) * 1000.0 / run.samples.len().max(1) as f64
}

fn p(run: &SequentialRun, percentile: f64) -> f64 {
    percentile_ms(&run.samples, |sample| sample.total, percentile)
}

impl Report<'_> {
    fn markdown(&self) -> String {
        let Measured { library, direct, http, library_body, server_body } = self.measured;
        let driver = |run: &SequentialRun| per_run_ms(run, |cpu| cpu.driver.best());
        let (library_cpu, direct_cpu, client_cpu) = (driver(library), driver(direct), driver(http));
        let server_cpu = per_run_ms(http, |cpu| cpu.server.best());
        let overhead = library_cpu - direct_cpu;
        let http_overhead = client_cpu + server_cpu - direct_cpu;
        let verdict = if overhead <= GOAL_OVERHEAD_MS { "met" } else { "missed" };
        let mut out = format!(
            "One fake model streaming {} tokens, no delay; {} sequential runs of each kind after {} warm-up runs, \
             measured in this process (single-threaded runtime) and, for HTTP, in `teamster serve` (SQLite) too.\n\n",
            self.args.tokens, self.args.turns, self.args.warmup
        );
        out.push_str("| run | CPU per run, this process | CPU per run, server | p50 | p99 |\n| --- | --- | --- | --- | --- |\n");
        let mut row = |name: &str, own: f64, server: Option<f64>, run: &SequentialRun| {
            let server = server.map_or_else(|| "—".to_owned(), |ms| format!("{ms:.3} ms"));
            out.push_str(&format!("| {name} | {own:.3} ms | {server} | {:.3} ms | {:.3} ms |\n", p(run, 50.0), p(run, 99.0)));
        };
        row("`agent.run` in-process", library_cpu, None, library);
        row("direct call to the fake model (floor)", direct_cpu, None, direct);
        row("the same turn over HTTP (`teamster serve`)", client_cpu, Some(server_cpu), http);
        out.push_str(&format!(
            "\nThe library's own CPU per run: {overhead:.3} ms ({:.0} µs; goal ≤ {:.0} µs: {verdict}). \
             Over HTTP, server and client together: {http_overhead:.3} ms above the floor, {:.1}x the library's.\n",
            overhead * 1000.0,
            GOAL_OVERHEAD_MS * 1000.0,
            http_overhead / overhead.max(f64::EPSILON),
        ));
        let fake = |run: &SequentialRun, upstream: bool| {
            let cpu = if upstream { run.cpu.upstream.map_or(f64::NAN, |cpu| cpu.best()) } else { run.cpu.server.best() };
            cpu * 1000.0 / run.samples.len().max(1) as f64
        };
        out.push_str(&format!(
            "\nDetails: the fake model's CPU per call was {:.3} ms (library), {:.3} ms (direct) and {:.3} ms (HTTP); \
             the request bodies were {} bytes (library) and {} bytes (server); CPU sources: library {}, direct {}, \
             client {}, server {}; other processes used {:.1}% / {:.1}% / {:.1}% of one core during the three runs; \
             {:.0} s in all.\n",
            fake(library, false),
            fake(direct, false),
            fake(http, true),
            library_body.len(),
            server_body.len(),
            library.cpu.driver.source(),
            direct.cpu.driver.source(),
            http.cpu.driver.source(),
            http.cpu.server.source(),
            noise(library),
            noise(direct),
            noise(http),
            self.total_secs,
        ));
        out
    }

    fn json(&self) -> serde_json::Value {
        let Measured { library, direct, http, library_body, server_body } = self.measured;
        let run = |run: &SequentialRun| {
            let runs = run.samples.len().max(1) as f64;
            json!({
                "runs": run.samples.len(),
                "cpu_ms_per_run": {
                    "this_process": run.cpu.driver.best() * 1000.0 / runs,
                    "server": run.cpu.server.best() * 1000.0 / runs,
                    "upstream": run.cpu.upstream.map(|cpu| cpu.best() * 1000.0 / runs),
                },
                "latency_ms": {"p50": p(run, 50.0), "p90": p(run, 90.0), "p99": p(run, 99.0)},
                "wall_secs": run.cpu.wall,
                "other_processes_cpu_secs": run.cpu.others,
            })
        };
        json!({
            "config": {"tokens": self.args.tokens, "warmup": self.args.warmup, "runs": self.args.turns},
            "library": run(library),
            "direct": run(direct),
            "http": run(http),
            "library_request_bytes": library_body.len(),
            "server_request_bytes": server_body.len(),
            "total_secs": self.total_secs,
        })
    }
}

/// The share of one core other processes used during a run, in percent.
fn noise(run: &SequentialRun) -> f64 {
    if run.cpu.wall > 0.0 { run.cpu.others / run.cpu.wall * 100.0 } else { 0.0 }
}
