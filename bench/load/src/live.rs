//! `teamster-bench --live`: many subscribers on one session's live channel (issue 32).
//!
//! One fake model and one `teamster serve` on a fresh SQLite database. `--subscribers` clients
//! (default 1,000) open `GET /api/v1/sessions/{id}/live` on one session and wait for its first
//! `display_state_changed`; then one turn runs, the fake model streaming `--tokens` chunks 20 ms
//! apart. Every subscriber must receive `agent_start`, every `message_update` and `agent_end`,
//! and then a display state that shows no turn running. Reported: the server's CPU per
//! delivered event, its resident memory per open channel and at its peak, and the events one
//! turn gives a subscriber: how many display states the coalescing sent against the message
//! updates (one display state per update without it), and the turn's own stream events.
//!
//! Nothing here asserts a time: the run fails only when a channel misses an event.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use reqwest::header::CONTENT_TYPE;
use serde_json::{Value, json};

use crate::client::{self, FrameBuffer};
use crate::process::{self, ProcReader};
use crate::streams::{Reader, open_readers, open_stream};
use crate::{Args, wait_healthy};

/// The delay between the turn's chunks.
const CHUNK_DELAY_MS: u64 = 20;
/// The bound on every wait.
const PHASE_LIMIT: Duration = Duration::from_secs(300);
const MIB: f64 = 1024.0 * 1024.0;

/// What one subscriber heard of the turn.
#[derive(Debug, Default)]
struct Heard {
    /// Every event after the first snapshot.
    events: u64,
    /// `message_update` events.
    updates: u64,
    /// `display_state_changed` events after the first.
    displays: u64,
    /// Whether `agent_start` and `agent_end` came, in that order.
    started: bool,
    ended: bool,
}

/// Reads a channel until the turn has ended and a display state shows it; `opened` learns when
/// the first snapshot arrived.
async fn listen(client: &reqwest::Client, url: &str, opened: Box<dyn FnOnce() + Send>) -> anyhow::Result<Heard> {
    let mut response = open_stream(client, url).await?;
    let mut heard = Heard::default();
    let mut buffer = FrameBuffer::default();
    let mut opened = Some(opened);
    let mut settled = false;
    while let Some(chunk) = response.chunk().await.context("reading a channel")? {
        buffer.push(&chunk, |frame| {
            let data = client::frame_data(&String::from_utf8_lossy(frame));
            let Ok(event) = serde_json::from_str::<Value>(&data) else { return }; // A comment.
            if let Some(opened) = opened.take() {
                opened();
                return;
            }
            heard.events += 1;
            match event["type"].as_str() {
                Some("agent_start") => heard.started = true,
                Some("agent_end") if heard.started => heard.ended = true,
                Some("message_update") => heard.updates += 1,
                Some("display_state_changed") => {
                    heard.displays += 1;
                    settled = heard.ended && event["display"]["running_turn_id"].is_null();
                }
                _ => {}
            }
        });
        if settled {
            return Ok(heard);
        }
    }
    bail!("{url}: the channel ended before the turn did: {heard:?}")
}

struct Figures {
    subscribers: usize,
    events_each: u64,
    updates_each: u64,
    displays_each: u64,
    turn_events: u64,
    server_cpu: f64,
    rss_before: u64,
    rss_open: u64,
    rss_peak: u64,
    opening: f64,
    wall: f64,
}

pub async fn run(args: &Args) -> anyhow::Result<()> {
    let proc = ProcReader::new();
    let client = client::http_client(true)?;
    let dir = process::scratch_dir("live")?;
    let upstream =
        process::spawn_served(process::fake_model_command(&args.fake_model, "127.0.0.1:0"), "fake-model").await?;
    let mut command = process::teamster_command(&args.teamster, &dir, "127.0.0.1:0", args.database.as_deref())?;
    let connections = (args.subscribers + 1_000).to_string();
    command.args(["--max-connections", &connections]);
    let server = process::spawn_served(command, "teamster serve").await?;
    let result = async {
        wait_healthy(&client, &server.base_url).await?;
        client::configure_provider(&client, &server.base_url, &upstream.base_url).await.context("configuring the provider")?;
        client::create_agent(&client, &server.base_url, "bench").await.context("creating the agent")?;
        eprintln!("live: {} subscribers on one session's channel...", args.subscribers);
        measure(args, &client, &proc, &server.base_url, server.pid).await
    }
    .await;
    server.stop().await;
    upstream.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
    let figures = result?;
    crate::publish(&markdown(&figures), &json_report(&figures), &args.json)
}

async fn measure(args: &Args, client: &reqwest::Client, proc: &ProcReader, base: &str, pid: u32) -> anyhow::Result<Figures> {
    let session = client::create_session(client, base, "bench").await.context("creating a session")?;
    let url = format!("{base}/api/v1/sessions/{session}/live");
    let rss_before = proc.rss_bytes(Some(pid))?;
    let reader: Reader<Heard> = |client, url, opened| Box::pin(async move { listen(&client, &url, opened).await });
    let (mut listeners, opening) = open_readers(client, &url, args.subscribers, reader).await?;
    let rss_open = proc.rss_bytes(Some(pid))?;
    let cpu_before = proc.cpu_seconds(Some(pid))?;
    let (stop, sampler) = crate::streams::sample_peak_rss(*proc, pid);
    let turn_started = Instant::now();
    let text = format!("[tokens:{}][delay:{CHUNK_DELAY_MS}] live", args.tokens);
    let body = json!({"input": [{"type": "user.message", "content": text}], "stream": false});
    let turns = format!("{base}/api/v1/sessions/{session}/turns");
    let response = client.post(&turns).header(CONTENT_TYPE, "application/json").body(body.to_string()).send().await?;
    let answer: Value = response.json().await.context("the turn's answer")?;
    let turn = answer["data"]["id"].as_str().with_context(|| format!("no data.id in {answer}"))?.to_owned();
    let mut heard = Vec::with_capacity(args.subscribers);
    while let Some(joined) = tokio::time::timeout(PHASE_LIMIT, listeners.join_next()).await.context("the channels took too long")? {
        heard.push(joined.context("a subscriber panicked")??);
    }
    let wall = turn_started.elapsed().as_secs_f64();
    let server_cpu = proc.cpu_seconds(Some(pid))? - cpu_before;
    let _ = stop.send(true);
    let rss_peak = sampler.await?;
    let first = &heard[0];
    for one in &heard {
        if !(one.started && one.ended) || one.updates != first.updates {
            bail!("subscribers heard different turns: {one:?} and {first:?}");
        }
    }
    if first.updates == 0 {
        bail!("no message_update reached the channels: {first:?}");
    }
    let stream = client.get(format!("{base}/api/v1/sessions/{session}/turns/{turn}/subscribe")).send().await?.text().await?;
    let turn_events = stream.lines().filter(|line| line.starts_with("id:")).count() as u64;
    let average = |field: fn(&Heard) -> u64| heard.iter().map(field).sum::<u64>() / heard.len() as u64;
    Ok(Figures {
        subscribers: heard.len(),
        events_each: average(|one| one.events),
        updates_each: first.updates,
        displays_each: average(|one| one.displays),
        turn_events,
        server_cpu,
        rss_before,
        rss_open,
        rss_peak: rss_peak.max(rss_open),
        opening,
        wall,
    })
}

fn markdown(figures: &Figures) -> String {
    let delivered = figures.subscribers as f64 * figures.events_each as f64;
    let per_channel = figures.rss_open.saturating_sub(figures.rss_before) as f64 / figures.subscribers as f64;
    format!(
        "| figure | value |\n|---|---|\n\
         | channels on one session, opened in | {} in {:.2} s |\n\
         | events per subscriber for one turn ({} chunks 20 ms apart) | {} ({} `message_update`, {} `display_state_changed`; the turn's own stream: {} events) |\n\
         | display states per message update (coalescing; 1.0 without it) | {:.2} |\n\
         | server CPU for the turn | {:.3} s, **{:.2} µs per delivered event** ({:.0} events) |\n\
         | server RSS before / with every channel open / peak | {:.1} / {:.1} / {:.1} MiB, **{:.1} KiB per channel** |\n\
         | wall time of the turn, to the last subscriber's settled display | {:.2} s |\n",
        figures.subscribers,
        figures.opening,
        figures.updates_each,
        figures.events_each,
        figures.updates_each,
        figures.displays_each,
        figures.turn_events,
        figures.displays_each as f64 / figures.updates_each.max(1) as f64,
        figures.server_cpu,
        figures.server_cpu * 1e6 / delivered,
        delivered,
        figures.rss_before as f64 / MIB,
        figures.rss_open as f64 / MIB,
        figures.rss_peak as f64 / MIB,
        per_channel / 1024.0,
        figures.wall,
    )
}

fn json_report(figures: &Figures) -> Value {
    json!({
        "live": {
            "subscribers": figures.subscribers,
            "events_each": figures.events_each,
            "message_updates_each": figures.updates_each,
            "display_states_each": figures.displays_each,
            "turn_stream_events": figures.turn_events,
            "server_cpu_secs": figures.server_cpu,
            "rss_before_bytes": figures.rss_before,
            "rss_open_bytes": figures.rss_open,
            "rss_peak_bytes": figures.rss_peak,
            "opening_secs": figures.opening,
            "wall_secs": figures.wall,
        },
    })
}
