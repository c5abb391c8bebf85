//! `teamster-bench --overhead`: what authentication, tracing and metrics cost the server per
//! turn (issue 17, "What must be shown": at most 10% more CPU per turn with all three on).
//!
//! Two `teamster serve`s on fresh SQLite databases share one fake model:
//! - *off*: no authentication, no trace export, nobody reads `/metrics`;
//! - *on*: `--auth api-keys` (every request carries `Authorization: Bearer` with an admin key
//!   made by `teamster keys create`), `--otlp-endpoint` naming an OTLP/HTTP receiver this
//!   driver runs (it accepts `POST /v1/traces` and counts the requests and bytes), and
//!   `/metrics` read with the key at most once a second while the on server's turns run (the
//!   read is part of the measured block).
//!
//! The same turn (a fresh session, the fake model streaming `--tokens` chunks, read to
//! `turn.done`) runs on both in interleaved rounds: each round runs a block on each server, the
//! order alternating, so load from elsewhere on the machine falls on both alike. A server's CPU
//! is the sum over its blocks. Every turn is checked to carry all its text, the on server is
//! checked to refuse a request without the key, and every measured turn of the on server must
//! have reached the receiver as a trace.

use std::cell::Cell;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::client::{self, FrameBuffer, Sample};
use crate::phases::{self, Cpu, Probe, SequentialRun, percentile_ms};
use crate::process::{self, ProcReader, Served};
use crate::{Args, check_clean, wait_healthy};

/// The goal: CPU per turn with everything on at most this many times the CPU with it off.
const GOAL_RATIO: f64 = 1.10;

/// How often the on server's `/metrics` is read while its turns run (a Prometheus scrape
/// interval is usually 15 s or more; this is harsher).
const SCRAPE_EVERY: Duration = Duration::from_secs(1);

/// The two configurations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Setup {
    Off,
    On,
}

impl Setup {
    const ALL: [Setup; 2] = [Setup::Off, Setup::On];

    fn key(self) -> &'static str {
        match self {
            Setup::Off => "off",
            Setup::On => "on",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Setup::Off => "all off (no auth, no trace export, no scrapes)",
            Setup::On => "all on (API key auth, OTLP export, `/metrics` scraped each second)",
        }
    }

    fn index(self) -> usize {
        match self {
            Setup::Off => 0,
            Setup::On => 1,
        }
    }
}

/// What the OTLP receiver got.
#[derive(Default)]
struct Received {
    requests: AtomicU64,
    /// `ResourceSpans` entries of the requests: one per turn's trace (the server may send several
    /// turns' traces in one request).
    traces: AtomicU64,
    bytes: AtomicU64,
}

/// How many top-level `resource_spans` (field 1) an `ExportTraceServiceRequest` holds; `None`
/// when it is not well-formed protobuf of length-delimited fields.
fn resource_spans(mut body: &[u8]) -> Option<u64> {
    fn varint(bytes: &mut &[u8]) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = bytes.split_first()?;
            *bytes = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }
    let mut count = 0;
    while !body.is_empty() {
        let key = varint(&mut body)?;
        if key & 7 != 2 {
            return None;
        }
        let length = usize::try_from(varint(&mut body)?).ok()?;
        body = body.get(length..)?;
        count += u64::from(key >> 3 == 1);
    }
    Some(count)
}

/// A minimal OTLP/HTTP receiver: answers every `POST /v1/traces` with 200 and an empty
/// `ExportTraceServiceResponse` (zero bytes of protobuf), keeping connections alive, and counts
/// what it got. Anything else is a 404.
async fn receiver() -> anyhow::Result<(String, Arc<Received>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await.context("binding the OTLP receiver")?;
    let address = listener.local_addr()?;
    let received = Arc::new(Received::default());
    let counts = received.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve_otlp(stream, counts.clone()));
        }
    });
    Ok((format!("http://{address}"), received))
}

/// One connection to the receiver: requests one after the other until it closes.
async fn serve_otlp(mut stream: TcpStream, received: Arc<Received>) {
    let mut buffer = Vec::new();
    loop {
        let Some(end) = find(&buffer, b"\r\n\r\n") else {
            let mut chunk = [0u8; 16 * 1024];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(read) => buffer.extend_from_slice(&chunk[..read]),
            }
            if buffer.len() > 64 * 1024 && find(&buffer, b"\r\n\r\n").is_none() {
                return;
            }
            continue;
        };
        let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
        let length = head
            .lines()
            .filter_map(|line| line.split_once(':'))
            .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
            .and_then(|(_, value)| value.trim().parse::<usize>().ok())
            .unwrap_or(0);
        let body_start = end + 4;
        while buffer.len() < body_start + length {
            let mut chunk = vec![0u8; (body_start + length - buffer.len()).min(256 * 1024)];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(read) => buffer.extend_from_slice(&chunk[..read]),
            }
        }
        let traces = head.starts_with("POST /v1/traces ");
        if traces {
            received.requests.fetch_add(1, Ordering::Relaxed);
            received.bytes.fetch_add(length as u64, Ordering::Relaxed);
            let spans = resource_spans(&buffer[body_start..body_start + length]).unwrap_or(0);
            received.traces.fetch_add(spans, Ordering::Relaxed);
        }
        let answer: &[u8] = if traces {
            b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n"
        } else {
            b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"
        };
        if stream.write_all(answer).await.is_err() {
            return;
        }
        buffer.drain(..body_start + length);
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|window| window == needle)
}

/// Makes an admin API key in the on server's database before it starts.
async fn create_key(teamster: &Path, dir: &Path, database: &str) -> anyhow::Result<String> {
    let output = tokio::process::Command::new(teamster)
        .args(["keys", "create", "--subject", "bench", "--tenant", "bench", "--role", "operator", "--database", database])
        .arg("--data-dir")
        .arg(dir)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .context("running teamster keys create")?;
    if !output.status.success() {
        bail!("teamster keys create failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    let key = String::from_utf8(output.stdout)?.trim().to_owned();
    if !key.starts_with("tsk_") {
        bail!("teamster keys create printed no key");
    }
    Ok(key)
}

/// One server under test, and how turns reach it.
struct Server<'a> {
    client: &'a reqwest::Client,
    base: &'a str,
    tokens: u32,
    /// When `/metrics` was last read; `None` for a server whose metrics nobody reads.
    last_scrape: Option<Cell<Instant>>,
    scrapes: Cell<u64>,
}

impl Server<'_> {
    /// Reads `/metrics` when it is due.
    async fn scrape_if_due(&self) -> anyhow::Result<()> {
        let Some(last) = &self.last_scrape else { return Ok(()) };
        if last.get().elapsed() < SCRAPE_EVERY {
            return Ok(());
        }
        last.set(Instant::now());
        let response = self.client.get(format!("{}/metrics", self.base)).send().await.context("GET /metrics")?;
        if !response.status().is_success() {
            bail!("GET /metrics: {}", response.status());
        }
        let text = response.text().await?;
        if !text.contains("# TYPE") {
            bail!("GET /metrics answered no metrics");
        }
        self.scrapes.set(self.scrapes.get() + 1);
        Ok(())
    }

    /// One turn in a fresh session, read to `turn.done`, timed from before the session is made.
    async fn turn(&self) -> anyhow::Result<Sample> {
        self.scrape_if_due().await?;
        let started = Instant::now();
        let session = client::create_session(self.client, self.base, "bench").await.context("creating a session")?;
        let url = format!("{}/api/v1/sessions/{session}/turns", self.base);
        let request = self.client.post(&url).header(CONTENT_TYPE, "application/json").header(ACCEPT, "text/event-stream");
        let mut response = request.body(client::turn_body(self.tokens, "none")).send().await.with_context(|| format!("POST {url}"))?;
        if !response.status().is_success() {
            let status = response.status();
            bail!("POST {url}: {status}: {}", response.text().await.unwrap_or_default());
        }
        let mut buffer = FrameBuffer::default();
        let (mut texts, mut done) = (0u32, None);
        let (mut first_event, mut first_text) = (None, None);
        while let Some(chunk) = response.chunk().await.with_context(|| format!("reading the stream of {url}"))? {
            let now = started.elapsed();
            buffer.push(&chunk, |frame| {
                if frame.is_empty() || frame.first() == Some(&b':') {
                    return;
                }
                first_event.get_or_insert(now);
                let data = client::frame_data(&String::from_utf8_lossy(frame));
                let Ok(event) = serde_json::from_str::<Value>(&data) else { return };
                match event["type"].as_str() {
                    Some("model.message.delta") if event["content"].as_str().is_some_and(|text| !text.is_empty()) => {
                        first_text.get_or_insert(now);
                        texts += 1;
                    }
                    Some("turn.done") => done = Some(event["state"]["status"].as_str().unwrap_or("").to_owned()),
                    _ => {}
                }
            });
        }
        let total = started.elapsed();
        match done.as_deref() {
            Some("done") => {}
            Some(status) => bail!("the turn at {url} ended {status}"),
            None => bail!("the stream of {url} ended without turn.done"),
        }
        if texts != self.tokens {
            bail!("the stream of {url} carried {texts} pieces of text, not {}", self.tokens);
        }
        Ok(Sample { total, first_event: first_event.context("no event")?, first_delta: first_text.unwrap_or(total), deltas: texts })
    }
}

/// The measured turns of one setup, over all its blocks.
struct Measured {
    samples: Vec<Sample>,
    server: Cpu,
    /// Wall time and the CPU other processes took during the blocks, in seconds.
    wall: f64,
    others: f64,
    /// Server CPU seconds per turn of each block, by round.
    rounds: Vec<f64>,
}

impl Default for Measured {
    fn default() -> Measured {
        Measured { samples: Vec::new(), server: Cpu { stat: 0.0, exact: Some(0.0), slices: Some(0) }, wall: 0.0, others: 0.0, rounds: Vec::new() }
    }
}

impl Measured {
    fn add(&mut self, run: SequentialRun) {
        let turns = run.samples.len().max(1) as f64;
        self.rounds.push(run.cpu.server.best() / turns);
        let exact = self.server.exact.zip(run.cpu.server.exact).map(|(a, b)| a + b);
        let slices = self.server.slices.zip(run.cpu.server.slices).map(|(a, b)| a + b);
        self.server = Cpu { stat: self.server.stat + run.cpu.server.stat, exact, slices };
        self.wall += run.cpu.wall;
        self.others += run.cpu.others;
        self.samples.extend(run.samples);
    }

    /// Server CPU milliseconds per turn (the schedstat sum when every block had one).
    fn server_ms(&self) -> f64 {
        self.server.exact.unwrap_or(self.server.stat) * 1000.0 / self.samples.len().max(1) as f64
    }

    fn p(&self, percentile: f64) -> f64 {
        percentile_ms(&self.samples, |sample| sample.total, percentile)
    }

    /// The share of one core other processes used during the blocks, in percent.
    fn noise(&self) -> f64 {
        if self.wall > 0.0 { self.others / self.wall * 100.0 } else { 0.0 }
    }
}

pub async fn run(args: &Args) -> anyhow::Result<()> {
    let proc = ProcReader::new();
    let started = Instant::now();
    let load_at_start = process::load_average();
    let (off_dir, on_dir) = (process::scratch_dir("overhead-off")?, process::scratch_dir("overhead-on")?);
    let (sink, received) = receiver().await?;
    let upstream =
        process::spawn_served(process::fake_model_command(&args.fake_model, "127.0.0.1:0"), "fake-model").await?;
    let off = process::spawn_served(process::teamster_command(&args.teamster, &off_dir, "127.0.0.1:0", None)?, "teamster serve (off)").await;
    let on = async {
        let database = format!("sqlite://{}", on_dir.join("db.sqlite").display());
        let key = create_key(&args.teamster, &on_dir, &database).await?;
        let mut command = process::teamster_command(&args.teamster, &on_dir, "127.0.0.1:0", None)?;
        command.args(["--auth", "api-keys", "--otlp-endpoint", &sink]);
        anyhow::Ok((process::spawn_served(command, "teamster serve (on)").await?, key))
    }
    .await;
    let result = match (off, on) {
        (Ok(off), Ok((on, key))) => {
            let result = measure(args, proc, &upstream, &off, &on, &key, &received).await;
            off.stop().await;
            on.stop().await;
            result
        }
        (Err(error), _) | (_, Err(error)) => Err(error),
    };
    upstream.stop().await;
    let _ = std::fs::remove_dir_all(&off_dir);
    let _ = std::fs::remove_dir_all(&on_dir);
    let (measured, scrapes) = result?;
    let report = Report {
        args,
        rounds: args.measured_rounds(),
        measured: &measured,
        scrapes,
        requests: received.requests.load(Ordering::Relaxed),
        traces: received.traces.load(Ordering::Relaxed),
        trace_bytes: received.bytes.load(Ordering::Relaxed),
        total_secs: started.elapsed().as_secs_f64(),
        load_average: [load_at_start, process::load_average()],
    };
    crate::publish(&report.markdown(), &report.json(), &args.json)
}

async fn measure(
    args: &Args,
    proc: ProcReader,
    upstream: &Served,
    off: &Served,
    on: &Served,
    key: &str,
    received: &Received,
) -> anyhow::Result<([Measured; 2], u64)> {
    let off_client = client::http_client(true)?;
    let mut headers = HeaderMap::new();
    headers.insert(AUTHORIZATION, HeaderValue::from_str(&format!("Bearer {key}")).context("the key")?);
    let on_client = reqwest::Client::builder()
        .no_proxy()
        .default_headers(headers)
        .timeout(Duration::from_secs(60))
        .tcp_nodelay(true)
        .build()
        .context("building the HTTP client")?;
    wait_healthy(&off_client, &upstream.base_url).await?;
    for (client, served) in [(&off_client, off), (&on_client, on)] {
        wait_healthy(client, &served.base_url).await?;
        client::configure_provider(client, &served.base_url, &upstream.base_url).await.context("configuring the provider")?;
        client::create_agent(client, &served.base_url, "bench").await.context("creating the agent")?;
    }
    // The on server authenticates: no key, no agents.
    let refused = off_client.get(format!("{}/api/v1/agents", on.base_url)).send().await?.status();
    if refused != reqwest::StatusCode::UNAUTHORIZED {
        bail!("the on server answered {refused} to a request without a key, not 401");
    }
    let servers = [
        Server { client: &off_client, base: &off.base_url, tokens: args.tokens, last_scrape: None, scrapes: Cell::new(0) },
        Server {
            client: &on_client,
            base: &on.base_url,
            tokens: args.tokens,
            last_scrape: Some(Cell::new(Instant::now() - SCRAPE_EVERY)),
            scrapes: Cell::new(0),
        },
    ];
    let probes = [off, on].map(|served| Probe { proc, server: served.pid, upstream: Some(upstream.pid), replica: None });

    let block = async |setup: Setup, count: usize| -> anyhow::Result<SequentialRun> {
        let server = &servers[setup.index()];
        let run = phases::sequential_calls(count, &probes[setup.index()], None, || server.turn()).await?;
        check_clean(&run, setup.key())?;
        Ok(run)
    };
    for setup in Setup::ALL {
        eprintln!("overhead: {} warm-up turns with everything {}...", args.warmup, setup.key());
        block(setup, args.warmup).await.with_context(|| format!("warm-up ({})", setup.key()))?;
    }
    let rounds = args.measured_rounds();
    eprintln!("overhead: {} measured turns of each in {rounds} interleaved rounds...", args.turns);
    let mut measured: [Measured; 2] = Default::default();
    for round in 0..rounds {
        let count = args.turns / rounds + usize::from(round < args.turns % rounds);
        for offset in 0..Setup::ALL.len() {
            let setup = Setup::ALL[(round + offset) % Setup::ALL.len()];
            measured[setup.index()].add(block(setup, count).await?);
        }
    }
    // Every turn of the on server is exported as one trace, in the background: wait (bounded)
    // for the last ones.
    let expected = (args.warmup + args.turns) as u64;
    let deadline = Instant::now() + Duration::from_secs(10);
    while received.traces.load(Ordering::Relaxed) < expected && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let traces = received.traces.load(Ordering::Relaxed);
    if traces < expected {
        bail!("the OTLP receiver got {traces} traces for {expected} turns");
    }
    Ok((measured, servers[1].scrapes.get()))
}

/// The figures of both setups.
struct Report<'a> {
    args: &'a Args,
    rounds: usize,
    measured: &'a [Measured; 2],
    scrapes: u64,
    /// Export requests, and the turns' traces they carried.
    requests: u64,
    traces: u64,
    trace_bytes: u64,
    total_secs: f64,
    load_average: [String; 2],
}

impl Report<'_> {
    fn get(&self, setup: Setup) -> &Measured {
        &self.measured[setup.index()]
    }

    fn ratio(&self) -> f64 {
        self.get(Setup::On).server_ms() / self.get(Setup::Off).server_ms()
    }

    /// The ratio of each round's blocks: smallest, median, largest.
    fn round_ratios(&self) -> [f64; 3] {
        let (off, on) = (self.get(Setup::Off), self.get(Setup::On));
        let mut ratios: Vec<f64> = on.rounds.iter().zip(&off.rounds).map(|(on, off)| on / off).collect();
        ratios.sort_by(f64::total_cmp);
        match ratios.as_slice() {
            [] => [f64::NAN; 3],
            all => [all[0], all[all.len() / 2], all[all.len() - 1]],
        }
    }

    fn markdown(&self) -> String {
        let mut out = format!(
            "The same turn (the fake model streams {} tokens, no delay; a fresh session every time) on two \
             `teamster serve`s (SQLite), one with authentication, tracing and metrics all on and one with them all off: \
             {} measured turns on each after {} warm-up turns each, in {} interleaved rounds (a block on each per round, \
             the order alternating).\n\n",
            self.args.tokens, self.args.turns, self.args.warmup, self.rounds
        );
        out.push_str("| setup | server CPU per turn | p50 latency | p99 latency |\n| --- | --- | --- | --- |\n");
        for setup in Setup::ALL {
            let measured = self.get(setup);
            out.push_str(&format!(
                "| {} | {:.3} ms | {:.3} ms | {:.3} ms |\n",
                setup.label(),
                measured.server_ms(),
                measured.p(50.0),
                measured.p(99.0)
            ));
        }
        let ratio = self.ratio();
        let verdict = if ratio <= GOAL_RATIO { "met" } else { "**missed**" };
        let [low, median, high] = self.round_ratios();
        out.push_str(&format!(
            "\nCPU per turn, on ÷ off: **{ratio:.3}** (goal ≤ {GOAL_RATIO:.2}: {verdict}); by round {low:.3} / {median:.3} / \
             {high:.3} (lowest, median, highest of {}).\n\nDetails: the OTLP receiver got {} traces in {} requests ({:.1} KiB \
             per trace on average); `/metrics` was read {} times; other processes used {:.1}% / {:.1}% of one core during the off / on \
             blocks; load average {} at the start, {} at the end; {:.0} s in all.\n",
            self.rounds,
            self.traces,
            self.requests,
            self.trace_bytes as f64 / 1024.0 / self.traces.max(1) as f64,
            self.scrapes,
            self.get(Setup::Off).noise(),
            self.get(Setup::On).noise(),
            self.load_average[0],
            self.load_average[1],
            self.total_secs,
        ));
        out
    }

    fn json(&self) -> Value {
        let setup = |setup: Setup| {
            let measured = self.get(setup);
            json!({
                "turns": measured.samples.len(),
                "server_cpu_ms_per_turn": measured.server_ms(),
                "server_cpu_ms_per_turn_by_round": measured.rounds.iter().map(|cpu| cpu * 1000.0).collect::<Vec<_>>(),
                "latency_ms": {"p50": measured.p(50.0), "p90": measured.p(90.0), "p99": measured.p(99.0)},
                "wall_secs": measured.wall,
                "other_processes_cpu_secs": measured.others,
            })
        };
        let [low, median, high] = self.round_ratios();
        json!({
            "kind": "overhead",
            "config": {"tokens": self.args.tokens, "warmup": self.args.warmup, "turns": self.args.turns, "rounds": self.rounds},
            "goal_ratio": GOAL_RATIO,
            "off": setup(Setup::Off),
            "on": setup(Setup::On),
            "ratio": self.ratio(),
            "ratio_by_round": {"lowest": low, "median": median, "highest": high},
            "goal_met": self.ratio() <= GOAL_RATIO,
            "traces_received": self.traces,
            "export_requests": self.requests,
            "trace_bytes": self.trace_bytes,
            "metrics_scrapes": self.scrapes,
            "load_average": self.load_average,
            "total_secs": self.total_secs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_receiver_accepts_traces_on_a_kept_alive_connection() {
        let (base, received) = receiver().await.unwrap();
        let client = client::http_client(true).unwrap();
        // Two requests: one of two traces (two `resource_spans` of 3 and 70,000 bytes), one of one.
        let mut big = vec![0x0a, 3, 1, 2, 3, 0x0a, 0xf0, 0xa2, 0x04];
        big.extend(vec![7u8; 70_000]);
        for body in [vec![0x0a, 1, 9], big] {
            let response = client.post(format!("{base}/v1/traces")).body(body).send().await.unwrap();
            assert_eq!(response.status(), 200);
            assert!(response.bytes().await.unwrap().is_empty());
        }
        assert_eq!(client.get(format!("{base}/other")).send().await.unwrap().status(), 404);
        assert_eq!(received.requests.load(Ordering::Relaxed), 2);
        assert_eq!(received.traces.load(Ordering::Relaxed), 3);
        assert_eq!(received.bytes.load(Ordering::Relaxed), 3 + 9 + 70_000);
    }

    #[test]
    fn resource_spans_are_counted_and_bad_protobuf_refused() {
        assert_eq!(resource_spans(&[]), Some(0));
        assert_eq!(resource_spans(&[0x0a, 0, 0x0a, 1, 5, 0x12, 0]), Some(2));
        assert_eq!(resource_spans(&[0x0a, 5, 1]), None, "cut short");
        assert_eq!(resource_spans(&[0x08, 1]), None, "not length-delimited");
    }
}
