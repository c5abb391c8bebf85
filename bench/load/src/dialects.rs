//! `teamster-bench --dialects`: what the AI SDK dialects' translation costs the server per
//! turn and per event, against the native stream.
//!
//! One fake model and one `teamster serve` on a fresh SQLite database. The same turn (the fake
//! model streaming `--tokens` chunks, in a fresh session every time so that every kind does the
//! same work) is read three ways:
//! 1. native: `POST /api/v1/sessions`, then `POST /api/v1/sessions/{id}/turns` (streamed,
//!    `previous_turn_id: "none"`) read to `turn.done`;
//! 2. the data stream: the same with `?stream_format=data-stream`, read to its
//!    `data-latency-summary` part;
//! 3. the UI message stream: `POST /api/v1/chat` with a new chat id (the server makes the
//!    session) and `DefaultChatTransport`'s body, read to `data: [DONE]`.
//!
//! The kinds run in interleaved rounds: each round runs a block of every kind, in an order that
//! rotates from round to round, so load from elsewhere on the machine falls on all three alike.
//! A kind's server CPU is the sum over its blocks. Every turn is checked to carry all its text.

use std::cell::{Cell, RefCell};
use std::time::Instant;

use anyhow::{Context, bail};
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use serde_json::{Value, json};

use crate::client::{self, FrameBuffer, Sample, frame_data};
use crate::phases::{self, Cpu, Probe, SequentialRun, percentile_ms};
use crate::process::{self, ProcReader, Served};
use crate::{Args, check_clean, wait_healthy};

/// The goal: a dialect's server CPU per turn at most this many times the native stream's
/// (issue 15, "What must be shown").
const GOAL_RATIO: f64 = 1.10;

/// One way of reading a turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dialect {
    Native,
    DataStream,
    UiMessages,
}

impl Dialect {
    const ALL: [Dialect; 3] = [Dialect::Native, Dialect::DataStream, Dialect::UiMessages];

    fn label(self) -> &'static str {
        match self {
            Dialect::Native => "native events",
            Dialect::DataStream => "data stream (`?stream_format=data-stream`)",
            Dialect::UiMessages => "UI message stream (`POST /api/v1/chat`)",
        }
    }

    /// Its key in the JSON results.
    fn key(self) -> &'static str {
        match self {
            Dialect::Native => "native",
            Dialect::DataStream => "data_stream",
            Dialect::UiMessages => "ui_message_stream",
        }
    }

    /// What its events are called in the table.
    fn events(self) -> &'static str {
        match self {
            Dialect::Native => "events",
            Dialect::DataStream => "parts",
            Dialect::UiMessages => "chunks",
        }
    }

    fn index(self) -> usize {
        match self {
            Dialect::Native => 0,
            Dialect::DataStream => 1,
            Dialect::UiMessages => 2,
        }
    }
}

/// What one frame of a stream means to the driver.
#[derive(Debug, PartialEq, Eq)]
enum Frame {
    /// A piece of the answer's text.
    Text,
    /// The stream's last frame.
    End,
    /// The stream reports a failure.
    Error(String),
    Other,
}


/// What `data` (a frame's data) is in `dialect`.
fn classify(dialect: Dialect, data: &str) -> Frame {
    if dialect == Dialect::UiMessages && data == "[DONE]" {
        return Frame::End;
    }
    let Ok(value) = serde_json::from_str::<Value>(data) else { return Frame::Other };
    let text = |field: &str| value[field].as_str().is_some_and(|text| !text.is_empty());
    match (dialect, value["type"].as_str().unwrap_or("")) {
        // The last delta carries the finish reason and usage, not content.
        (Dialect::Native, "model.message.delta") if text("content") => Frame::Text,
        (Dialect::Native, "turn.done") => Frame::End,
        (Dialect::DataStream, "text") if text("text") => Frame::Text,
        (Dialect::DataStream, "data-latency-summary") => Frame::End,
        (Dialect::UiMessages, "text-delta") if text("delta") => Frame::Text,
        (Dialect::DataStream | Dialect::UiMessages, "error") => Frame::Error(value.to_string()),
        _ => Frame::Other,
    }
}

/// `DefaultChatTransport`'s body for a new chat whose one user message asks for `tokens` chunks.
fn chat_body(chat_id: &str, tokens: u32) -> String {
    json!({
        "id": chat_id,
        "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": format!("[tokens:{tokens}] hi")}]}],
        "trigger": "submit-message",
        "agent": "bench",
    })
    .to_string()
}

/// Runs turns against one server, each in a fresh session.
struct Reader<'a> {
    client: &'a reqwest::Client,
    base: &'a str,
    tokens: u32,
    /// The number of the next chat id.
    next_chat: Cell<u64>,
}

impl Reader<'_> {
    /// One turn read in `dialect`, timed from before its session is made; returns its timings
    /// and how many frames (events, parts or chunks; `[DONE]` not counted) its stream carried.
    async fn turn(&self, dialect: Dialect) -> anyhow::Result<(Sample, u32)> {
        let started = Instant::now();
        let (url, body) = match dialect {
            Dialect::Native | Dialect::DataStream => {
                let session = client::create_session(self.client, self.base, "bench").await.context("creating a session")?;
                let query = if dialect == Dialect::DataStream { "?stream_format=data-stream" } else { "" };
                (format!("{}/api/v1/sessions/{session}/turns{query}", self.base), client::turn_body(self.tokens, "none"))
            }
            Dialect::UiMessages => {
                let chat = self.next_chat.get();
                self.next_chat.set(chat + 1);
                (format!("{}/api/v1/chat", self.base), chat_body(&format!("bench-chat-{chat}"), self.tokens))
            }
        };
        let request = self.client.post(&url).header(CONTENT_TYPE, "application/json").header(ACCEPT, "text/event-stream");
        let mut response = request.body(body).send().await.with_context(|| format!("POST {url}"))?;
        if !response.status().is_success() {
            let status = response.status();
            bail!("POST {url}: {status}: {}", response.text().await.unwrap_or_default());
        }
        let mut buffer = FrameBuffer::default();
        let (mut frames, mut texts, mut ended) = (0u32, 0u32, false);
        let (mut first_event, mut first_text) = (None, None);
        let mut failure = None;
        while let Some(chunk) = response.chunk().await.with_context(|| format!("reading the stream of {url}"))? {
            let now = started.elapsed();
            buffer.push(&chunk, |frame| {
                if frame.is_empty() || frame.first() == Some(&b':') {
                    return; // A comment (heartbeat) is not an event.
                }
                first_event.get_or_insert(now);
                match classify(dialect, &frame_data(&String::from_utf8_lossy(frame))) {
                    Frame::End => {
                        ended = true;
                        // `[DONE]` ends the UI stream; it is no chunk.
                        if dialect != Dialect::UiMessages {
                            frames += 1;
                        }
                    }
                    Frame::Text => {
                        first_text.get_or_insert(now);
                        texts += 1;
                        frames += 1;
                    }
                    Frame::Error(error) => {
                        failure.get_or_insert(error);
                        frames += 1;
                    }
                    Frame::Other => frames += 1,
                }
            });
        }
        let total = started.elapsed();
        if let Some(error) = failure {
            bail!("the stream of {url} reported an error: {error}");
        }
        if !ended {
            bail!("the stream of {url} ended without its final frame");
        }
        if texts != self.tokens {
            bail!("the stream of {url} carried {texts} pieces of text, not {}", self.tokens);
        }
        let first_event = first_event.context("no event")?;
        Ok((Sample { total, first_event, first_delta: first_text.unwrap_or(total), deltas: texts }, frames))
    }
}

/// No CPU time, both ways.
const NO_CPU: Cpu = Cpu { stat: 0.0, exact: Some(0.0), slices: Some(0) };

/// The measured turns of one kind, over all its blocks.
struct Measured {
    samples: Vec<Sample>,
    /// The frames of every measured turn's stream.
    frames: Vec<u32>,
    server: Cpu,
    upstream: Cpu,
    driver: Cpu,
    /// Wall time and the CPU other processes took during the blocks, in seconds.
    wall: f64,
    others: f64,
    /// Server CPU seconds per turn of each block, by round.
    rounds: Vec<f64>,
}

impl Default for Measured {
    fn default() -> Measured {
        Measured {
            samples: Vec::new(),
            frames: Vec::new(),
            server: NO_CPU,
            upstream: NO_CPU,
            driver: NO_CPU,
            wall: 0.0,
            others: 0.0,
            rounds: Vec::new(),
        }
    }
}

impl Measured {
    fn add(&mut self, run: SequentialRun, frames: Vec<u32>) {
        let turns = run.samples.len().max(1) as f64;
        self.rounds.push(run.cpu.server.best() / turns);
        self.server = sum(self.server, run.cpu.server);
        self.upstream = sum(self.upstream, run.cpu.upstream.unwrap_or_default());
        self.driver = sum(self.driver, run.cpu.driver);
        self.wall += run.cpu.wall;
        self.others += run.cpu.others;
        self.samples.extend(run.samples);
        self.frames.extend(frames);
    }

    fn turns(&self) -> f64 {
        self.samples.len().max(1) as f64
    }

    /// Server CPU milliseconds per turn.
    fn server_ms(&self) -> f64 {
        precise(&self.server) * 1000.0 / self.turns()
    }

    fn frames_per_turn(&self) -> f64 {
        self.frames.iter().map(|&frames| f64::from(frames)).sum::<f64>() / self.frames.len().max(1) as f64
    }

    fn p(&self, percentile: f64) -> f64 {
        percentile_ms(&self.samples, |sample| sample.total, percentile)
    }
}

/// Two CPU figures added; the schedstat sum only when both have one.
fn sum(a: Cpu, b: Cpu) -> Cpu {
    let exact = match (a.exact, b.exact) {
        (Some(a), Some(b)) => Some(a + b),
        _ => None,
    };
    let slices = a.slices.zip(b.slices).map(|(a, b)| a + b);
    Cpu { stat: a.stat + b.stat, exact, slices }
}

/// The schedstat sum when every block had one (exact to the nanosecond, where summing many
/// blocks' 10 ms ticks would add up their rounding), else `utime + stime`.
fn precise(cpu: &Cpu) -> f64 {
    cpu.exact.unwrap_or(cpu.stat)
}

fn source(cpu: &Cpu) -> &'static str {
    if cpu.exact.is_some() { "schedstat" } else { "stat" }
}

pub async fn run(args: &Args) -> anyhow::Result<()> {
    let proc = ProcReader::new();
    let client = client::http_client(true)?;
    let started = Instant::now();
    let load_at_start = process::load_average();
    let dir = process::scratch_dir("dialects")?;
    let upstream =
        process::spawn_served(process::fake_model_command(&args.fake_model, "127.0.0.1:0"), "fake-model").await?;
    let command = process::teamster_command(&args.teamster, &dir, "127.0.0.1:0", None)?;
    let teamster = process::spawn_served(command, "teamster serve").await?;
    let result = measure(args, &client, proc, &teamster, &upstream).await;
    teamster.stop().await;
    upstream.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
    let measured = result?;
    let report = Report {
        args,
        rounds: args.measured_rounds(),
        measured: &measured,
        total_secs: started.elapsed().as_secs_f64(),
        load_average: [load_at_start, process::load_average()],
    };
    crate::publish(&report.markdown(), &report.json(), &args.json)
}

async fn measure(
    args: &Args,
    client: &reqwest::Client,
    proc: ProcReader,
    teamster: &Served,
    upstream: &Served,
) -> anyhow::Result<[Measured; 3]> {
    let base = teamster.base_url.as_str();
    wait_healthy(client, base).await?;
    wait_healthy(client, &upstream.base_url).await?;
    client::configure_provider(client, base, &upstream.base_url).await.context("configuring the provider")?;
    client::create_agent(client, base, "bench").await.context("creating the agent")?;
    let probe = Probe { proc, server: teamster.pid, upstream: Some(upstream.pid), replica: None };
    let reader = Reader { client, base, tokens: args.tokens, next_chat: Cell::new(0) };

    // Runs `count` turns of `dialect` between two CPU marks; returns them and their frame counts.
    let block = async |dialect: Dialect, count: usize| -> anyhow::Result<(SequentialRun, Vec<u32>)> {
        let frames = RefCell::new(Vec::with_capacity(count));
        let (reader, frames_ref) = (&reader, &frames);
        let run = phases::sequential_calls(count, &probe, None, || async move {
            let (sample, frames) = reader.turn(dialect).await?;
            frames_ref.borrow_mut().push(frames);
            Ok(sample)
        })
        .await?;
        check_clean(&run, dialect.key())?;
        Ok((run, frames.into_inner()))
    };

    for dialect in Dialect::ALL {
        eprintln!("dialects: {} warm-up turns of the {}...", args.warmup, dialect.key());
        block(dialect, args.warmup).await.with_context(|| format!("{} warm-up", dialect.key()))?;
    }
    let rounds = args.measured_rounds();
    eprintln!("dialects: {} measured turns of each kind in {rounds} interleaved rounds...", args.turns);
    let mut measured: [Measured; 3] = Default::default();
    for round in 0..rounds {
        let count = args.turns / rounds + usize::from(round < args.turns % rounds);
        for offset in 0..Dialect::ALL.len() {
            let dialect = Dialect::ALL[(round + offset) % Dialect::ALL.len()];
            let (run, frames) = block(dialect, count).await?;
            measured[dialect.index()].add(run, frames);
        }
    }
    Ok(measured)
}

/// The figures of the three kinds.
struct Report<'a> {
    args: &'a Args,
    rounds: usize,
    measured: &'a [Measured; 3],
    total_secs: f64,
    load_average: [String; 2],
}

/// How one dialect compares with the native stream.
struct Comparison {
    /// Server CPU per turn, dialect ÷ native.
    ratio: f64,
    /// The extra server CPU per native event of a turn, in µs.
    extra_us_per_event: f64,
    /// The ratio of each round's blocks: smallest, median, largest.
    round_ratios: [f64; 3],
}

impl Report<'_> {
    fn get(&self, dialect: Dialect) -> &Measured {
        &self.measured[dialect.index()]
    }

    fn compare(&self, dialect: Dialect) -> Comparison {
        let (native, other) = (self.get(Dialect::Native), self.get(dialect));
        let ratio = other.server_ms() / native.server_ms();
        let extra_us_per_event = (other.server_ms() - native.server_ms()) * 1000.0 / native.frames_per_turn();
        let mut ratios: Vec<f64> = other.rounds.iter().zip(&native.rounds).map(|(other, native)| other / native).collect();
        ratios.sort_by(f64::total_cmp);
        let round_ratios = match ratios.as_slice() {
            [] => [f64::NAN; 3],
            all => [all[0], all[all.len() / 2], all[all.len() - 1]],
        };
        Comparison { ratio, extra_us_per_event, round_ratios }
    }

    fn markdown(&self) -> String {
        let native = self.get(Dialect::Native);
        let mut out = format!(
            "The same turn (the fake model streams {} tokens, no delay; a fresh session every time) read three ways \
             from one `teamster serve` (SQLite): {} measured turns of each kind after {} warm-up turns each, in {} \
             interleaved rounds (a block of each kind per round, the order rotating).\n\n",
            self.args.tokens, self.args.turns, self.args.warmup, self.rounds
        );
        out.push_str(
            "| stream | server CPU per turn | p50 latency | events per turn | extra CPU per native event | \
             CPU per turn ÷ native (goal ≤ 1.10) |\n| --- | --- | --- | --- | --- | --- |\n",
        );
        for dialect in Dialect::ALL {
            let kind = self.get(dialect);
            let (extra, ratio) = if dialect == Dialect::Native {
                ("—".to_owned(), "1.00".to_owned())
            } else {
                let comparison = self.compare(dialect);
                let verdict = if comparison.ratio <= GOAL_RATIO { "met" } else { "**missed**" };
                (format!("{:+.1} µs", comparison.extra_us_per_event), format!("{:.3}: {verdict}", comparison.ratio))
            };
            out.push_str(&format!(
                "| {} | {:.3} ms | {:.3} ms | {:.1} {} | {extra} | {ratio} |\n",
                dialect.label(),
                kind.server_ms(),
                kind.p(50.0),
                kind.frames_per_turn(),
                dialect.events(),
            ));
        }
        out.push_str(&format!(
            "\nThe extra CPU per event is the dialect's server CPU per turn minus the native stream's, divided by the \
             {:.1} native events of one turn (its SSE frames). A turn's latency runs from its session's creation \
             (a request of its own for the native and data streams, inside the chat request for the UI stream) to \
             the end of its stream.\n\nDetails:\n\n",
            native.frames_per_turn()
        ));
        for dialect in [Dialect::DataStream, Dialect::UiMessages] {
            let [low, median, high] = self.compare(dialect).round_ratios;
            out.push_str(&format!(
                "- {}: ÷ native by round {low:.3} / {median:.3} / {high:.3} (lowest, median, highest of {}).\n",
                dialect.key(),
                self.rounds
            ));
        }
        let per_turn = |cpu: &Cpu, kind: &Measured| precise(cpu) * 1000.0 / kind.turns();
        let each = |figure: &dyn Fn(&Measured) -> String| {
            Dialect::ALL.map(|dialect| figure(self.get(dialect))).join(" / ")
        };
        out.push_str(&format!(
            "- Native / data stream / UI message stream: fake model CPU per turn {} ms; driver CPU per turn {} ms; \
             latency p99 {} ms; server CPU from {}.\n",
            each(&|kind| format!("{:.3}", per_turn(&kind.upstream, kind))),
            each(&|kind| format!("{:.3}", per_turn(&kind.driver, kind))),
            each(&|kind| format!("{:.3}", kind.p(99.0))),
            each(&|kind| source(&kind.server).to_owned()),
        ));
        out.push_str(&format!(
            "- Noise: other processes used {}% of one core during the three kinds' blocks; load average {} at the \
             start, {} at the end; {:.0} s in all.\n",
            each(&|kind| format!("{:.1}", noise(kind))),
            self.load_average[0],
            self.load_average[1],
            self.total_secs,
        ));
        out
    }

    fn json(&self) -> serde_json::Value {
        let kind = |dialect: Dialect| {
            let measured = self.get(dialect);
            let turns = measured.turns();
            let mut value = json!({
                "turns": measured.samples.len(),
                "events_per_turn": measured.frames_per_turn(),
                "cpu_ms_per_turn": {
                    "server": measured.server_ms(),
                    "server_source": source(&measured.server),
                    "server_stat": measured.server.stat * 1000.0 / turns,
                    "upstream": precise(&measured.upstream) * 1000.0 / turns,
                    "driver": precise(&measured.driver) * 1000.0 / turns,
                },
                "server_cpu_ms_per_turn_by_round": measured.rounds.iter().map(|cpu| cpu * 1000.0).collect::<Vec<_>>(),
                "latency_ms": {"p50": measured.p(50.0), "p90": measured.p(90.0), "p99": measured.p(99.0)},
                "wall_secs": measured.wall,
                "other_processes_cpu_secs": measured.others,
            });
            if dialect != Dialect::Native {
                let comparison = self.compare(dialect);
                value["ratio_to_native"] = json!(comparison.ratio);
                value["extra_us_per_native_event"] = json!(comparison.extra_us_per_event);
                value["ratio_by_round"] = json!({
                    "lowest": comparison.round_ratios[0],
                    "median": comparison.round_ratios[1],
                    "highest": comparison.round_ratios[2],
                });
                value["goal_met"] = json!(comparison.ratio <= GOAL_RATIO);
            }
            value
        };
        json!({
            "kind": "dialects",
            "config": {"tokens": self.args.tokens, "warmup": self.args.warmup, "turns": self.args.turns, "rounds": self.rounds},
            "goal_ratio": GOAL_RATIO,
            "native": kind(Dialect::Native),
            "data_stream": kind(Dialect::DataStream),
            "ui_message_stream": kind(Dialect::UiMessages),
            "load_average": self.load_average,
            "total_secs": self.total_secs,
        })
    }
}

/// The share of one core other processes used during a kind's blocks, in percent.
fn noise(kind: &Measured) -> f64 {
    if kind.wall > 0.0 { kind.others / kind.wall * 100.0 } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_data_joins_data_lines() {
        assert_eq!(frame_data("id: 7\ndata: {\"a\":\ndata: 1}"), "{\"a\":\n1}");
        assert_eq!(frame_data("data:[DONE]"), "[DONE]");
    }

    #[test]
    fn text_and_ends_of_each_dialect() {
        use Dialect::*;
        assert_eq!(classify(Native, r#"{"type":"model.message.delta","id":"m","content":"tok1"}"#), Frame::Text);
        assert_eq!(classify(Native, r#"{"type":"model.message.delta","id":"m","finish_reason":"stop"}"#), Frame::Other);
        assert_eq!(classify(Native, r#"{"type":"turn.done"}"#), Frame::End);
        assert_eq!(classify(DataStream, r#"{"type":"text","text":"tok1"}"#), Frame::Text);
        assert_eq!(classify(DataStream, r#"{"type":"data-latency-summary","data":{}}"#), Frame::End);
        assert!(matches!(classify(DataStream, r#"{"type":"error","error":"x"}"#), Frame::Error(_)));
        assert_eq!(classify(UiMessages, r#"{"type":"text-delta","id":"t","delta":"tok1"}"#), Frame::Text);
        assert_eq!(classify(UiMessages, "[DONE]"), Frame::End);
        assert_eq!(classify(UiMessages, r#"{"type":"finish"}"#), Frame::Other);
    }

    #[test]
    fn chat_body_is_default_chat_transport_s() {
        let body: Value = serde_json::from_str(&chat_body("c1", 50)).unwrap();
        assert_eq!(body["id"], "c1");
        assert_eq!(body["messages"][0]["parts"][0]["text"], "[tokens:50] hi");
        assert_eq!(body["trigger"], "submit-message");
        assert_eq!(body["agent"], "bench");
    }

    #[test]
    fn cpu_sums_keep_schedstat_only_when_every_block_has_it() {
        let a = Cpu { stat: 0.1, exact: Some(0.12), slices: None };
        let b = Cpu { stat: 0.2, exact: Some(0.18), slices: None };
        assert_eq!(precise(&sum(a, b)), 0.12 + 0.18);
        let lost = Cpu { stat: 0.2, exact: None, slices: None };
        assert_eq!(precise(&sum(a, lost)), 0.1 + 0.2);
    }
}
