//! What this process measures of itself, rendered for `/metrics` in the Prometheus text
//! exposition format (`exposition`).
//!
//! Every measurement is an atomic add on a counter or a fixed-bucket histogram: no lock, and on
//! the per-delta path only a relaxed load (the first delta of a turn also swaps a flag). Labels
//! carry bounded, non-secret values only: a turn's status, a token kind, a store operation and
//! tool names (`tools`, at most 256 of them); never a session, turn or user, nor any content.

mod exposition;
pub mod otlp;
mod tools;
pub mod traces;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use teamster_protocol::{TurnMetrics, TurnState};
use teamster_store::{SessionAgentRecord, SessionRecord, TurnRecord};

use exposition::{Histogram, Page};
use tools::ToolCounts;

/// Bounds of the turn latency histogram, in seconds.
const TURN_BOUNDS: &[f64] = &[0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0];
/// Bounds of the first-token latency histogram, in seconds.
const FIRST_TOKEN_BOUNDS: &[f64] = &[0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0];
/// Bounds of the store latency histograms, in seconds.
const STORE_BOUNDS: &[f64] = &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];

/// The statuses a turn ends in, as labelled.
const STATUSES: [&str; 3] = ["done", "cancelled", "error"];
/// The kinds of tokens counted, as labelled.
const TOKEN_KINDS: [&str; 5] = ["input", "output", "cache_read", "cache_write", "reasoning"];

/// The process's metrics; shared by the service, its turns and its streams.
pub struct Telemetry {
    /// Turns that ended here, by status (in [`STATUSES`] order).
    turns: [AtomicU64; 3],
    /// How long turns ran here, from their start (or takeover) to their end.
    turn_seconds: Histogram,
    /// How long turns took to their first streamed model delta.
    first_token_seconds: Histogram,
    /// Tokens of ended turns, by kind (in [`TOKEN_KINDS`] order).
    tokens: [AtomicU64; 5],
    /// The priced cost of ended turns, in billionths of a US dollar.
    cost_nano_usd: AtomicU64,
    tools: ToolCounts,
    /// Event streams open now.
    streams: AtomicU64,
    /// How long each commit of a batch of events took.
    store_write_seconds: Histogram,
    /// How long each readiness check of the store took.
    store_ready_seconds: Histogram,
    /// Where turns' traces go, when they are exported.
    traces: Option<otlp::OtlpExporter>,
}

impl Default for Telemetry {
    fn default() -> Telemetry {
        Telemetry {
            turns: Default::default(),
            turn_seconds: Histogram::new(TURN_BOUNDS),
            first_token_seconds: Histogram::new(FIRST_TOKEN_BOUNDS),
            tokens: Default::default(),
            cost_nano_usd: AtomicU64::new(0),
            tools: ToolCounts::default(),
            streams: AtomicU64::new(0),
            store_write_seconds: Histogram::new(STORE_BOUNDS),
            store_ready_seconds: Histogram::new(STORE_BOUNDS),
            traces: None,
        }
    }
}

impl Telemetry {
    /// Metrics, and traces exported to `traces` when set.
    pub fn with_traces(traces: Option<otlp::OtlpExporter>) -> Telemetry {
        Telemetry { traces, ..Telemetry::default() }
    }

    /// A trace for a turn starting now, when traces are exported; `parent` is the caller's.
    pub fn start_trace(&self, session: &SessionRecord, turn: &TurnRecord, parent: Option<traces::TraceParent>) -> Option<traces::TurnTrace> {
        self.traces.as_ref()?;
        let model = turn.control.model.as_deref().or(match &session.agent {
            SessionAgentRecord::Draft { spec, .. } => Some(spec.model.name.as_str()),
            SessionAgentRecord::Saved { .. } => None,
        });
        Some(traces::TurnTrace::new(parent, &session.id, &turn.id, model, random_ids(), unix_nanos()))
    }

    /// Sends a finished turn's trace.
    pub fn export_trace(&self, trace: traces::TurnTrace) {
        if let Some(exporter) = &self.traces {
            let trace_id = trace.trace_id;
            exporter.export(trace_id, &trace.finish(unix_nanos()));
        }
    }

    /// Counts a turn that ended here in `state` after running `elapsed`, with its usage.
    pub fn turn_ended(&self, state: &TurnState, elapsed: Duration) {
        let (status, metrics) = match state {
            TurnState::Running => return,
            TurnState::Done { metrics, .. } => (0, metrics),
            TurnState::Cancelled { metrics, .. } => (1, metrics),
            TurnState::Error { metrics, .. } => (2, metrics),
        };
        self.turns[status].fetch_add(1, Ordering::Relaxed);
        self.turn_seconds.observe(elapsed);
        if let Some(metrics) = metrics {
            self.add_usage(metrics);
        }
    }

    fn add_usage(&self, metrics: &TurnMetrics) {
        let counts = [
            metrics.total_input_tokens,
            metrics.total_output_tokens,
            metrics.total_cache_read_tokens.unwrap_or_default(),
            metrics.total_cache_write_tokens.unwrap_or_default(),
            metrics.total_reasoning_tokens.unwrap_or_default(),
        ];
        for (counter, count) in self.tokens.iter().zip(counts) {
            counter.fetch_add(count, Ordering::Relaxed);
        }
        if let Some(cost) = metrics.total_cost_in_usd.filter(|cost| cost.is_finite() && *cost > 0.0) {
            self.cost_nano_usd.fetch_add((cost * 1e9).round() as u64, Ordering::Relaxed);
        }
    }

    /// Records how long a turn took to its first streamed model delta.
    pub fn first_token(&self, elapsed: Duration) {
        self.first_token_seconds.observe(elapsed);
    }

    /// Counts a call of the tool `name`, and a failure when it failed.
    pub fn tool_called(&self, name: &str, is_error: bool) {
        self.tools.count(name, is_error);
    }

    /// Records how long a commit of events took.
    pub fn store_write(&self, elapsed: Duration) {
        self.store_write_seconds.observe(elapsed);
    }

    /// Records how long a readiness check of the store took.
    pub fn store_ready_check(&self, elapsed: Duration) {
        self.store_ready_seconds.observe(elapsed);
    }

    /// Counts an event stream as open until the guard is dropped.
    pub fn stream_opened(self: &Arc<Self>) -> StreamGuard {
        self.streams.fetch_add(1, Ordering::Relaxed);
        StreamGuard { telemetry: self.clone() }
    }

    /// The metrics page, with `running_turns` (the turns running here now).
    pub fn render(&self, running_turns: usize) -> String {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed) as f64;
        let mut page = Page::default();
        page.family("teamster_turns", "counter", "Turns that ended on this server, by status.");
        for (status, count) in STATUSES.iter().zip(&self.turns) {
            page.sample("teamster_turns_total", &[("status", status)], load(count));
        }
        page.family("teamster_turn_duration_seconds", "histogram", "How long turns ran on this server, from start or takeover to end.")
            .histogram("teamster_turn_duration_seconds", &[], &self.turn_seconds);
        page.family("teamster_turn_first_token_seconds", "histogram", "How long turns took to their first streamed model delta.")
            .histogram("teamster_turn_first_token_seconds", &[], &self.first_token_seconds);
        page.family("teamster_tokens", "counter", "Tokens of ended turns by kind (input counts the whole prompt, cached parts included).");
        for (kind, count) in TOKEN_KINDS.iter().zip(&self.tokens) {
            page.sample("teamster_tokens_total", &[("kind", kind)], load(count));
        }
        page.family("teamster_cost_usd", "counter", "The priced cost of ended turns, in US dollars (models without prices count nothing).")
            .sample("teamster_cost_usd_total", &[], load(&self.cost_nano_usd) / 1e9);
        page.family("teamster_tool_calls", "counter", "Tool calls answered, by tool.");
        let tools: Vec<_> = self.tools.each().collect();
        for (tool, calls, _) in &tools {
            page.sample("teamster_tool_calls_total", &[("tool", tool)], *calls as f64);
        }
        page.family("teamster_tool_errors", "counter", "Tool calls that failed, by tool.");
        for (tool, _, errors) in &tools {
            page.sample("teamster_tool_errors_total", &[("tool", tool)], *errors as f64);
        }
        page.family("teamster_active_streams", "gauge", "Event streams open to clients now.")
            .sample("teamster_active_streams", &[], load(&self.streams));
        page.family("teamster_running_turns", "gauge", "Turns running on this server now.")
            .sample("teamster_running_turns", &[], running_turns as f64);
        let workers = tokio::runtime::Handle::try_current().map_or(0, |runtime| runtime.metrics().num_workers());
        page.family("teamster_runtime_worker_threads", "gauge", "Threads that run this server's tasks.")
            .sample("teamster_runtime_worker_threads", &[], workers as f64);
        page.family("teamster_store_duration_seconds", "histogram", "How long store operations took: event commits and readiness checks.")
            .histogram("teamster_store_duration_seconds", &[("operation", "write_events")], &self.store_write_seconds)
            .histogram("teamster_store_duration_seconds", &[("operation", "ready_check")], &self.store_ready_seconds);
        page.family("teamster_provider_retries", "counter", "Model calls retried after a transient provider failure.")
            .sample("teamster_provider_retries_total", &[], teamster_llm::retry::retries() as f64);
        page.into_text()
    }
}

/// An open event stream, counted until dropped.
pub struct StreamGuard {
    telemetry: Arc<Telemetry>,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.telemetry.streams.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Now, in nanoseconds since the Unix epoch.
pub fn unix_nanos() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
}

/// Sixteen random bytes: a trace id, and the seed of its span ids.
fn random_ids() -> [u8; 16] {
    use ring::rand::SecureRandom;
    let mut ids = [0u8; 16];
    // The system's generator does not fail on Linux; a zero id would only be a poor trace id.
    let _ = ring::rand::SystemRandom::new().fill(&mut ids);
    ids
}
