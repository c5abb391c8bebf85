//! `teamster-bench --streams`: many event streams on one server (issue 18, item 5).
//!
//! One fake model and one `teamster serve` on a fresh SQLite database, then two phases:
//! 1. Fan-out: `--subscribers` clients (default 1,000) subscribe to one running turn, the fake
//!    model streaming `--tokens` chunks 20 ms apart. Every subscriber must receive the whole
//!    stream, `id` 1 to the last without a gap or a duplicate, ending in `turn.done`. Reported:
//!    the server's CPU per delivered event, its peak resident memory, and how far apart the
//!    subscribers received `turn.done`.
//! 2. Idle: `--idle-streams` clients (default 10,000) subscribe to a turn whose model has not
//!    answered yet, and wait. Reported: the server's resident memory and open files before and
//!    with every stream open (the difference per stream), and its CPU while they idle (heartbeat
//!    comments included). The turn is then cancelled, and every stream must end with
//!    `turn.done`.
//!
//! Connections are opened at most [`OPENING_AT_ONCE`] at a time. Nothing here asserts a time:
//! the run fails only when a stream is incomplete or wrong.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use serde_json::{Value, json};
use tokio::sync::{Semaphore, watch};

use crate::client::{self, FrameBuffer};
use crate::process::{self, ProcReader, Served};
use crate::{Args, wait_healthy};

/// Connection attempts in flight at once.
const OPENING_AT_ONCE: usize = 256;
/// The delay between the fan-out turn's chunks.
const FAN_OUT_DELAY_MS: u64 = 20;
/// How long the idle streams are left open before the turn is cancelled: past one heartbeat.
const IDLE_FOR: Duration = Duration::from_secs(20);
/// The bound on every phase's waits.
const PHASE_LIMIT: Duration = Duration::from_secs(300);

/// What one subscriber received.
#[derive(Debug, Default)]
struct Received {
    /// The `id` of every event, in order.
    ids: Vec<u64>,
    /// Its model deltas with content.
    deltas: u32,
    /// When `turn.done` arrived, if it did.
    done_at: Option<Instant>,
}

/// Opens an event stream: the answer to `GET url`, which must be a success.
pub(crate) async fn open_stream(client: &reqwest::Client, url: &str) -> anyhow::Result<reqwest::Response> {
    let response = client.get(url).header(ACCEPT, "text/event-stream").send().await.with_context(|| format!("GET {url}"))?;
    if !response.status().is_success() {
        bail!("GET {url}: {}", response.status());
    }
    Ok(response)
}

/// Reads one turn's stream to `turn.done`; `opened` learns when the first event arrived.
async fn subscribe(client: &reqwest::Client, url: &str, opened: impl FnOnce()) -> anyhow::Result<Received> {
    let mut response = open_stream(client, url).await?;
    let mut received = Received::default();
    let mut buffer = FrameBuffer::default();
    let mut opened = Some(opened);
    let mut failure = None;
    while let Some(chunk) = response.chunk().await.context("reading a stream")? {
        buffer.push(&chunk, |frame| {
            if frame.is_empty() || frame.first() == Some(&b':') {
                return; // A heartbeat comment.
            }
            let text = String::from_utf8_lossy(frame);
            let id = text.lines().find_map(|line| line.strip_prefix("id:")).and_then(|id| id.trim().parse::<u64>().ok());
            let data = client::frame_data(&text);
            match (id, serde_json::from_str::<Value>(&data)) {
                (Some(id), Ok(event)) => {
                    received.ids.push(id);
                    match event["type"].as_str() {
                        Some("model.message.delta") if event["content"].as_str().is_some_and(|text| !text.is_empty()) => {
                            received.deltas += 1
                        }
                        Some("turn.done") => received.done_at = Some(Instant::now()),
                        _ => {}
                    }
                }
                _ => {
                    failure.get_or_insert_with(|| format!("a frame without an id or JSON data: {text}"));
                }
            }
            if let Some(opened) = opened.take() {
                opened();
            }
        });
        if received.done_at.is_some() {
            break;
        }
    }
    if let Some(failure) = failure {
        bail!("{url}: {failure}");
    }
    Ok(received)
}

/// Checks a subscriber's stream: ids 1..=n in order, `turn.done` received.
fn check_complete(received: &Received) -> anyhow::Result<u64> {
    let expected: Vec<u64> = (1..=received.ids.len() as u64).collect();
    if received.ids != expected {
        bail!("a stream's ids are not 1..{}: {:?}", received.ids.len(), received.ids);
    }
    if received.done_at.is_none() {
        bail!("a stream ended without turn.done");
    }
    Ok(received.ids.len() as u64)
}

/// Starts a turn without streaming it; returns its subscribe URL.
async fn start_turn(client: &reqwest::Client, base: &str, text: &str) -> anyhow::Result<(String, String)> {
    let session = client::create_session(client, base, "bench").await.context("creating a session")?;
    let body = json!({"input": [{"type": "user.message", "content": text}], "stream": false, "previous_turn_id": "none"});
    let url = format!("{base}/api/v1/sessions/{session}/turns");
    let response = client.post(&url).header(CONTENT_TYPE, "application/json").body(body.to_string()).send().await?;
    let status = response.status();
    let answer: Value = response.json().await.with_context(|| format!("POST {url}: not JSON"))?;
    if !status.is_success() {
        bail!("POST {url}: {status}: {answer}");
    }
    let turn = answer["data"]["id"].as_str().with_context(|| format!("no data.id in {answer}"))?;
    Ok((session.clone(), format!("{base}/api/v1/sessions/{session}/turns/{turn}/subscribe")))
}

/// A reader of one stream: given the client, the URL and what to call once its first event
/// arrived, it reads the stream to its end.
pub(crate) type Reader<T> =
    fn(reqwest::Client, String, Box<dyn FnOnce() + Send>) -> std::pin::Pin<Box<dyn Future<Output = anyhow::Result<T>> + Send>>;

/// Opens `count` readers of `url`, at most [`OPENING_AT_ONCE`] connecting at a time, and waits
/// until each has received its first event; answers them, still reading, and how long the
/// opening took.
pub(crate) async fn open_readers<T: Send + 'static>(
    client: &reqwest::Client,
    url: &str,
    count: usize,
    read: Reader<T>,
) -> anyhow::Result<(tokio::task::JoinSet<anyhow::Result<T>>, f64)> {
    let started = Instant::now();
    let opened = Arc::new(AtomicU64::new(0));
    let gate = Arc::new(Semaphore::new(OPENING_AT_ONCE));
    let mut readers = tokio::task::JoinSet::new();
    for _ in 0..count {
        let (opened, permit) = (opened.clone(), gate.clone().acquire_owned().await?);
        let mut permit = Some(permit);
        readers.spawn(read(
            client.clone(),
            url.to_owned(),
            Box::new(move || {
                opened.fetch_add(1, Ordering::Relaxed);
                drop(permit.take());
            }),
        ));
    }
    let deadline = Instant::now() + PHASE_LIMIT;
    while opened.load(Ordering::Relaxed) < count as u64 {
        if Instant::now() > deadline || readers.try_join_next().is_some() {
            bail!("only {} of {count} streams opened", opened.load(Ordering::Relaxed));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok((readers, started.elapsed().as_secs_f64()))
}

/// Samples the server's resident memory every 50 ms until told to stop; answers the peak.
pub(crate) fn sample_peak_rss(proc: ProcReader, pid: u32) -> (watch::Sender<bool>, tokio::task::JoinHandle<u64>) {
    let (stop, mut stopped) = watch::channel(false);
    let sampler = tokio::spawn(async move {
        let mut peak = 0;
        loop {
            peak = peak.max(proc.rss_bytes(Some(pid)).unwrap_or(0));
            tokio::select! {
                _ = stopped.changed() => return peak,
                () = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
    });
    (stop, sampler)
}

fn open_files(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
}

const MIB: f64 = 1024.0 * 1024.0;

/// The fan-out phase's figures.
struct FanOut {
    subscribers: usize,
    events_each: u64,
    deltas_each: u32,
    server_cpu: f64,
    rss_before: u64,
    rss_peak: u64,
    /// Seconds from the first subscriber's `turn.done` to the median's and to the last's.
    done_spread: [f64; 2],
    wall: f64,
}

async fn fan_out(args: &Args, client: &reqwest::Client, proc: &ProcReader, server: &Served) -> anyhow::Result<FanOut> {
    let text = format!("[tokens:{}][delay:{FAN_OUT_DELAY_MS}] fan-out", args.tokens);
    let (_, url) = start_turn(client, &server.base_url, &text).await?;
    let rss_before = proc.rss_bytes(Some(server.pid))?;
    let cpu_before = proc.cpu_seconds(Some(server.pid))?;
    let (stop, sampler) = sample_peak_rss(*proc, server.pid);
    let started = Instant::now();
    let gate = Arc::new(Semaphore::new(OPENING_AT_ONCE));
    let mut readers = tokio::task::JoinSet::new();
    for _ in 0..args.subscribers {
        let (client, url, gate) = (client.clone(), url.clone(), gate.clone());
        let permit = gate.acquire_owned().await?;
        readers.spawn(async move {
            let mut permit = Some(permit);
            subscribe(&client, &url, move || drop(permit.take())).await
        });
    }
    let mut received = Vec::with_capacity(args.subscribers);
    while let Some(joined) = tokio::time::timeout(PHASE_LIMIT, readers.join_next()).await.context("the fan-out took too long")? {
        received.push(joined.context("a subscriber panicked")??);
    }
    let wall = started.elapsed().as_secs_f64();
    let server_cpu = proc.cpu_seconds(Some(server.pid))? - cpu_before;
    let _ = stop.send(true);
    let rss_peak = sampler.await?;
    let events_each = check_complete(&received[0])?;
    for one in &received {
        if check_complete(one)? != events_each || one.deltas != args.tokens {
            bail!("subscribers received different streams: {} events, {} deltas", one.ids.len(), one.deltas);
        }
    }
    let mut done: Vec<Instant> = received.iter().filter_map(|one| one.done_at).collect();
    done.sort();
    let spread = |index: usize| done[index].duration_since(done[0]).as_secs_f64();
    Ok(FanOut {
        subscribers: received.len(),
        events_each,
        deltas_each: args.tokens,
        server_cpu,
        rss_before,
        rss_peak: rss_peak.max(rss_before),
        done_spread: [spread(done.len() / 2), spread(done.len() - 1)],
        wall,
    })
}

/// The idle phase's figures.
struct Idle {
    streams: usize,
    rss_before: u64,
    rss_open: u64,
    files_before: usize,
    files_open: usize,
    /// Server CPU seconds while every stream idled for [`IDLE_FOR`].
    idle_cpu: f64,
    /// Seconds to open every stream.
    opening: f64,
}

async fn idle(args: &Args, client: &reqwest::Client, proc: &ProcReader, server: &Served) -> anyhow::Result<Idle> {
    // The model answers after ten minutes: the turn runs, silent, until it is cancelled.
    let (session, url) = start_turn(client, &server.base_url, "[tokens:1][delay:600000] idle").await?;
    let rss_before = proc.rss_bytes(Some(server.pid))?;
    let files_before = open_files(server.pid);
    let reader: Reader<Received> = |client, url, opened| Box::pin(async move { subscribe(&client, &url, opened).await });
    let (mut readers, opening) = open_readers(client, &url, args.idle_streams, reader).await?;
    let rss_open = proc.rss_bytes(Some(server.pid))?;
    let files_open = open_files(server.pid);
    let cpu_before = proc.cpu_seconds(Some(server.pid))?;
    tokio::time::sleep(IDLE_FOR).await;
    let idle_cpu = proc.cpu_seconds(Some(server.pid))? - cpu_before;

    let cancel = format!("{}/api/v1/sessions/{session}/cancel", server.base_url);
    let response = client.post(&cancel).header(CONTENT_TYPE, "application/json").body("{}").send().await?;
    if !response.status().is_success() {
        bail!("POST {cancel}: {}: {}", response.status(), response.text().await.unwrap_or_default());
    }
    let mut ended = 0;
    while let Some(joined) = tokio::time::timeout(PHASE_LIMIT, readers.join_next()).await.context("the idle streams did not end")? {
        check_complete(&joined.context("a subscriber panicked")??)?;
        ended += 1;
    }
    if ended != args.idle_streams {
        bail!("{ended} of {} idle streams ended with turn.done", args.idle_streams);
    }
    Ok(Idle { streams: ended, rss_before, rss_open, files_before, files_open, idle_cpu, opening })
}

pub async fn run(args: &Args) -> anyhow::Result<()> {
    let proc = ProcReader::new();
    let client = client::http_client(true)?;
    let dir = process::scratch_dir("streams")?;
    let upstream =
        process::spawn_served(process::fake_model_command(&args.fake_model, "127.0.0.1:0"), "fake-model").await?;
    let mut command = process::teamster_command(&args.teamster, &dir, "127.0.0.1:0", args.database.as_deref())?;
    let connections = (args.subscribers.max(args.idle_streams) + 1_000).to_string();
    command.args(["--max-connections", &connections]);
    let server = process::spawn_served(command, "teamster serve").await?;
    let result = async {
        wait_healthy(&client, &server.base_url).await?;
        client::configure_provider(&client, &server.base_url, &upstream.base_url).await.context("configuring the provider")?;
        client::create_agent(&client, &server.base_url, "bench").await.context("creating the agent")?;
        eprintln!("streams: {} subscribers on one running turn...", args.subscribers);
        let fan = fan_out(args, &client, &proc, &server).await?;
        eprintln!("streams: {} idle streams...", args.idle_streams);
        let idle = idle(args, &client, &proc, &server).await?;
        anyhow::Ok((fan, idle))
    }
    .await;
    server.stop().await;
    upstream.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
    let (fan, idle) = result?;
    crate::publish(&markdown(&fan, &idle), &json_report(&fan, &idle), &args.json)
}

fn markdown(fan: &FanOut, idle: &Idle) -> String {
    let delivered = fan.subscribers as f64 * fan.events_each as f64;
    let per_stream = (idle.rss_open.saturating_sub(idle.rss_before)) as f64 / idle.streams as f64;
    format!(
        "| phase | figure |\n|---|---|\n\
         | fan-out: {} subscribers on one turn ({} events each, {} deltas 20 ms apart) | all complete, ids 1..{} without gap or duplicate |\n\
         | fan-out: server CPU | {:.3} s in all, {:.2} µs per delivered event ({:.0} events) |\n\
         | fan-out: server RSS before / peak | {:.1} / {:.1} MiB |\n\
         | fan-out: `turn.done` spread (first → median / last subscriber) | {:.1} / {:.1} ms |\n\
         | fan-out: wall time | {:.2} s |\n\
         | idle: {} open streams on one silent turn, opened in | {:.2} s |\n\
         | idle: server RSS before / with every stream open | {:.1} / {:.1} MiB, **{:.1} KiB per stream** |\n\
         | idle: server open files before / with every stream open | {} / {} |\n\
         | idle: server CPU while they idle {} s (heartbeats included) | {:.3} s ({:.1}% of a core) |\n\
         | idle: after a cancel | all {} streams ended with `turn.done` |\n",
        fan.subscribers,
        fan.events_each,
        fan.deltas_each,
        fan.events_each,
        fan.server_cpu,
        fan.server_cpu * 1e6 / delivered,
        delivered,
        fan.rss_before as f64 / MIB,
        fan.rss_peak as f64 / MIB,
        fan.done_spread[0] * 1000.0,
        fan.done_spread[1] * 1000.0,
        fan.wall,
        idle.streams,
        idle.opening,
        idle.rss_before as f64 / MIB,
        idle.rss_open as f64 / MIB,
        per_stream / 1024.0,
        idle.files_before,
        idle.files_open,
        IDLE_FOR.as_secs(),
        idle.idle_cpu,
        idle.idle_cpu * 100.0 / IDLE_FOR.as_secs_f64(),
        idle.streams,
    )
}

fn json_report(fan: &FanOut, idle: &Idle) -> Value {
    json!({
        "fan_out": {
            "subscribers": fan.subscribers,
            "events_each": fan.events_each,
            "server_cpu_secs": fan.server_cpu,
            "rss_before_bytes": fan.rss_before,
            "rss_peak_bytes": fan.rss_peak,
            "turn_done_spread_secs": {"median": fan.done_spread[0], "last": fan.done_spread[1]},
            "wall_secs": fan.wall,
        },
        "idle": {
            "streams": idle.streams,
            "rss_before_bytes": idle.rss_before,
            "rss_open_bytes": idle.rss_open,
            "open_files_before": idle.files_before,
            "open_files_open": idle.files_open,
            "idle_cpu_secs": idle.idle_cpu,
            "idle_secs": IDLE_FOR.as_secs_f64(),
            "opening_secs": idle.opening,
        },
    })
}
