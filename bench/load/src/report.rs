//! The results: the Markdown table (metric | Teamster | floor | ratio | target) with its details,
//! and the same figures, and a few more, as JSON.

use std::time::Duration;

use serde_json::{Value, json};

use crate::client::Sample;
use crate::phases::{Cpu, CpuSpent, ParallelRun, SequentialRun, median_ms, percentile_ms};

/// Targets from DESIGN.md, "Performance budget" (2 cores, 50 tokens, no delay).
const TARGET_CPU_MS: f64 = 1.0;
const TARGET_STARTUP_MS: f64 = 50.0;
const TARGET_IDLE_RSS_BYTES: f64 = 20e6;
const TARGET_TURNS_PER_SECOND: f64 = 1300.0;
/// Growth between the two memory checkpoints below this counts as "does not grow" (noise).
const FLAT_GROWTH_BYTES: f64 = 1e6;

/// The settings of the run.
pub struct Config {
    pub tokens: u32,
    pub warmup: usize,
    pub turns: usize,
    pub concurrency: usize,
    pub parallel_warmup_secs: u64,
    pub duration_secs: u64,
    pub cold_starts: usize,
    pub driver_threads: usize,
    pub ticks_per_second: f64,
    /// `SQLite` or `PostgreSQL`.
    pub database: &'static str,
    /// How many `teamster serve` replicas shared the database (requests in round robin).
    pub replicas: usize,
}

/// Spawn-to-`/healthz`-200 times.
#[derive(Default)]
pub struct ColdStarts {
    pub teamster: Vec<Duration>,
    /// The fake model, the floor.
    pub floor: Vec<Duration>,
}

/// RSS after a number of finished turns (or direct calls).
#[derive(Clone, Copy)]
pub struct Checkpoint {
    pub turns: usize,
    pub rss: u64,
}

/// Everything measured on one side: Teamster, or the fake model called directly.
pub struct Side {
    /// RSS after start-up, before any request (and, for Teamster, before any setup call).
    pub idle_rss: u64,
    /// CPU spent while idle for a couple of seconds (Teamster: after setup, before any turn).
    pub idle_cpu: CpuSpent,
    /// Sequential turns on a new connection each.
    pub fresh: SequentialRun,
    /// RSS after the provider, agent and sessions were created, before any turn.
    pub setup_rss: Option<u64>,
    pub idle_threads: Option<u64>,
    pub after_threads: Option<u64>,
    /// The measured sequential turns.
    pub measured: SequentialRun,
    /// The turns between the two memory checkpoints: a repeat of the CPU measurement.
    pub repeat: SequentialRun,
    pub checkpoints: [Checkpoint; 2],
    pub parallel: ParallelRun,
    pub after_parallel_rss: u64,
}

pub struct Report {
    pub config: Config,
    pub cold: ColdStarts,
    pub teamster: Side,
    pub floor: Side,
    /// Chained turns (`previous_turn_id: auto`) in two halves, when measured.
    pub chained: Option<[SequentialRun; 2]>,
    /// The request body Teamster sends the fake model, which the floor replays.
    pub direct_body: String,
    pub server_log_bytes: u64,
    pub total_secs: f64,
    /// `/proc/loadavg` at the start and at the end of the run.
    pub load_average: [String; 2],
    pub cores: usize,
}

fn cpu_ms_per(spent: f64, count: usize) -> f64 {
    if count == 0 { f64::NAN } else { spent * 1000.0 / count as f64 }
}

fn run_cpu_ms(run: &SequentialRun) -> f64 {
    cpu_ms_per(run.cpu.server.best(), run.samples.len() + run.errors.len())
}

fn fmt_ms(ms: f64) -> String {
    if ms.is_nan() {
        "n/a".into()
    } else if ms < 1.0 {
        format!("{ms:.3} ms")
    } else if ms < 100.0 {
        format!("{ms:.2} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

fn fmt_mb(bytes: f64) -> String {
    format!("{:.1} MB", bytes / 1e6)
}

fn fmt_ratio(ratio: f64) -> String {
    if ratio.is_finite() { format!("{ratio:.1}x") } else { "n/a".into() }
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "**missed**" }
}

fn p(samples: &[Sample], field: fn(&Sample) -> Duration, percentile: f64) -> f64 {
    percentile_ms(samples, field, percentile)
}

fn total(sample: &Sample) -> Duration {
    sample.total
}
fn first_event(sample: &Sample) -> Duration {
    sample.first_event
}
fn first_delta(sample: &Sample) -> Duration {
    sample.first_delta
}

impl Report {
    pub fn markdown(&self) -> String {
        let c = &self.config;
        let t = &self.teamster;
        let f = &self.floor;
        let mut out = String::new();
        let mut row = |metric: &str, teamster: String, floor: String, ratio: String, target: String| {
            out.push_str(&format!("| {metric} | {teamster} | {floor} | {ratio} | {target} |\n"));
        };

        let cpu = run_cpu_ms(&t.measured);
        let cpu_floor = run_cpu_ms(&f.measured);
        let servers = if c.replicas > 1 {
            format!("{} replicas of `teamster serve` on one {} database, requests in round robin (CPU and RSS summed)", c.replicas, c.database)
        } else {
            format!("one `teamster serve` on {}", c.database)
        };
        let head = format!(
            "{servers}. Fake model streaming {} tokens, no delay; {} sequential turns measured after {} warm-up turns; \
             {} sessions in parallel for {} s after {} s warm-up; cold start = median of {}. \
             Ratio = Teamster / floor (floor / Teamster for throughput): 1.0x is the floor.\n\n",
            c.tokens, c.turns, c.warmup, c.concurrency, c.duration_secs, c.parallel_warmup_secs, c.cold_starts
        );
        row("metric", "Teamster".into(), "floor".into(), "ratio".into(), "target (DESIGN.md)".into());
        row("---", "---".into(), "---".into(), "---".into(), "---".into());
        row(
            "Server CPU per simple turn",
            fmt_ms(cpu),
            format!("{} (fake-model CPU per direct call, {})", fmt_ms(cpu_floor), f.measured.cpu.server.source()),
            fmt_ratio(cpu / cpu_floor),
            format!("≤ 1 ms: {}", verdict(cpu <= TARGET_CPU_MS)),
        );
        for (name, field, floor_name) in [
            ("Turn latency", total as fn(&Sample) -> Duration, "direct call"),
            ("Time to first event", first_event, "first chunk"),
            ("Time to first model delta", first_delta, "first chunk"),
        ] {
            for percentile in [50.0, 99.0] {
                let ours = p(&t.measured.samples, field, percentile);
                let floor = p(&f.measured.samples, field, percentile);
                row(
                    &format!("{name} p{percentile:.0}"),
                    fmt_ms(ours),
                    format!("{} ({floor_name})", fmt_ms(floor)),
                    fmt_ratio(ours / floor),
                    "—".into(),
                );
            }
        }
        let throughput = t.parallel.per_second();
        let throughput_floor = f.parallel.per_second();
        row(
            &format!("Turns/s, {} sessions in parallel", c.concurrency),
            format!("{throughput:.0}/s"),
            format!("{throughput_floor:.0}/s (direct calls, {} in parallel)", c.concurrency),
            fmt_ratio(throughput_floor / throughput),
            format!("> 1,300/s: {}", verdict(throughput > TARGET_TURNS_PER_SECOND)),
        );
        row(
            "Idle RSS (after start-up, before any turn)",
            fmt_mb(t.idle_rss as f64),
            format!("{} (fake-model idle)", fmt_mb(f.idle_rss as f64)),
            fmt_ratio(t.idle_rss as f64 / f.idle_rss as f64),
            format!("≤ 20 MB: {}", verdict((t.idle_rss as f64) <= TARGET_IDLE_RSS_BYTES)),
        );
        let [first, second] = t.checkpoints;
        let [floor_first, floor_second] = f.checkpoints;
        row(
            &format!("RSS after {} turns", first.turns),
            fmt_mb(first.rss as f64),
            format!("{} (fake-model after {} calls)", fmt_mb(floor_first.rss as f64), floor_first.turns),
            fmt_ratio(first.rss as f64 / floor_first.rss as f64),
            format!("(+{} over idle)", fmt_mb(first.rss as f64 - t.idle_rss as f64)),
        );
        let growth = second.rss as f64 - first.rss as f64;
        row(
            &format!("RSS after {} turns", second.turns),
            fmt_mb(second.rss as f64),
            format!("{} (fake-model after {} calls)", fmt_mb(floor_second.rss as f64), floor_second.turns),
            fmt_ratio(second.rss as f64 / floor_second.rss as f64),
            format!(
                "no growth with finished turns: {} ({:+.1} MB over the last {} turns)",
                verdict(growth < FLAT_GROWTH_BYTES),
                growth / 1e6,
                second.turns - first.turns
            ),
        );
        let cold = median_ms(&self.cold.teamster);
        let cold_floor = median_ms(&self.cold.floor);
        row(
            "Cold start to /healthz 200 (median)",
            fmt_ms(cold),
            format!("{} (fake-model)", fmt_ms(cold_floor)),
            fmt_ratio(cold / cold_floor),
            format!("≤ 50 ms: {}", verdict(cold <= TARGET_STARTUP_MS)),
        );

        let mut text = head;
        text.push_str(&out);
        text.push_str(&self.details_markdown());
        text
    }

    fn details_markdown(&self) -> String {
        let c = &self.config;
        let t = &self.teamster;
        let f = &self.floor;
        let mut lines = Vec::new();
        lines.push(String::new());
        lines.push("Details:".into());
        lines.push(String::new());
        let completed = t.parallel.completed;
        lines.push(format!(
            "- Server CPU per turn, repeat batch of {} turns: {} (floor {}); under {}-way load: {} (floor {}).",
            t.repeat.samples.len(),
            fmt_ms(run_cpu_ms(&t.repeat)),
            fmt_ms(run_cpu_ms(&f.repeat)),
            c.concurrency,
            fmt_ms(cpu_ms_per(t.parallel.cpu.server.best(), completed)),
            fmt_ms(cpu_ms_per(f.parallel.cpu.server.best(), f.parallel.completed)),
        ));
        lines.push(format!(
            "- Fake model CPU per turn while serving Teamster: {} (sequential), {} (parallel); per direct call: {}.",
            fmt_ms(cpu_ms_per(t.measured.cpu.upstream.map_or(f64::NAN, |cpu| cpu.best()), t.measured.samples.len())),
            fmt_ms(cpu_ms_per(t.parallel.cpu.upstream.map_or(f64::NAN, |cpu| cpu.best()), completed)),
            fmt_ms(run_cpu_ms(&f.measured)),
        ));
        lines.push(format!(
            "- Client-side cost (driver CPU, {} runtime thread(s)): {} per Teamster turn, {} per direct call (sequential); \
             {} and {} under load.",
            c.driver_threads,
            fmt_ms(cpu_ms_per(t.measured.cpu.driver.best(), t.measured.samples.len())),
            fmt_ms(cpu_ms_per(f.measured.cpu.driver.best(), f.measured.samples.len())),
            fmt_ms(cpu_ms_per(t.parallel.cpu.driver.best(), completed)),
            fmt_ms(cpu_ms_per(f.parallel.cpu.driver.best(), f.parallel.completed)),
        ));
        lines.push(format!(
            "- Under {}-way load: turn latency p50 {} / p99 {}, first delta p50 {} (direct: {} / {}, first chunk {}); \
             server CPU use {:.0}% of one core.",
            c.concurrency,
            fmt_ms(p(&t.parallel.samples, total, 50.0)),
            fmt_ms(p(&t.parallel.samples, total, 99.0)),
            fmt_ms(p(&t.parallel.samples, first_delta, 50.0)),
            fmt_ms(p(&f.parallel.samples, total, 50.0)),
            fmt_ms(p(&f.parallel.samples, total, 99.0)),
            fmt_ms(p(&f.parallel.samples, first_delta, 50.0)),
            utilisation(&t.parallel.cpu),
        ));
        lines.push(format!(
            "- Sequential throughput: {:.0} turns/s (direct: {:.0} calls/s); mean turn {} (direct {}).",
            t.measured.samples.len() as f64 / t.measured.cpu.wall,
            f.measured.samples.len() as f64 / f.measured.cpu.wall,
            fmt_ms(mean_ms(&t.measured.samples)),
            fmt_ms(mean_ms(&f.measured.samples)),
        ));
        let per_turn = |cpu: &Cpu, turns: usize| cpu.slices.map_or("n/a".to_owned(), |slices| format!("{:.1}", slices as f64 / turns.max(1) as f64));
        lines.push(format!(
            "- Times the server's threads were put on a CPU (schedstat), per turn: {} sequential, {} under {}-way load (floor: {} per direct call).",
            per_turn(&t.measured.cpu.server, t.measured.samples.len()),
            per_turn(&t.parallel.cpu.server, completed),
            c.concurrency,
            per_turn(&f.measured.cpu.server, f.measured.samples.len()),
        ));
        lines.push(format!(
            "- Server CPU per sequential turn cross-check: utime+stime {} vs schedstat {} (floor: {} vs {}). \
             Idle: Teamster {} of CPU in {:.0} s before any turn, fake model {}.",
            fmt_ms(cpu_ms_per(t.measured.cpu.server.stat, t.measured.samples.len())),
            fmt_ms(t.measured.cpu.server.exact.map_or(f64::NAN, |exact| cpu_ms_per(exact, t.measured.samples.len()))),
            fmt_ms(cpu_ms_per(f.measured.cpu.server.stat, f.measured.samples.len())),
            fmt_ms(f.measured.cpu.server.exact.map_or(f64::NAN, |exact| cpu_ms_per(exact, f.measured.samples.len()))),
            fmt_ms(t.idle_cpu.server.best() * 1000.0),
            t.idle_cpu.wall,
            fmt_ms(f.idle_cpu.server.best() * 1000.0),
        ));
        lines.push(format!(
            "- New connection per turn ({} sequential turns, no keep-alive): latency p50 {} / p99 {}, first event p50 {}, \
             server CPU {} per turn (direct: p50 {}, first chunk {}, fake CPU {} per call).",
            t.fresh.samples.len(),
            fmt_ms(p(&t.fresh.samples, total, 50.0)),
            fmt_ms(p(&t.fresh.samples, total, 99.0)),
            fmt_ms(p(&t.fresh.samples, first_event, 50.0)),
            fmt_ms(run_cpu_ms(&t.fresh)),
            fmt_ms(p(&f.fresh.samples, total, 50.0)),
            fmt_ms(p(&f.fresh.samples, first_event, 50.0)),
            fmt_ms(run_cpu_ms(&f.fresh)),
        ));
        let setup = t.setup_rss.map_or("n/a".into(), |rss| fmt_mb(rss as f64));
        lines.push(format!(
            "- RSS: Teamster idle {}, after setup {}, after the parallel phase {}; threads {} idle, {} at the end \
             (fake model: {} after its parallel phase).",
            fmt_mb(t.idle_rss as f64),
            setup,
            fmt_mb(t.after_parallel_rss as f64),
            t.idle_threads.map_or("?".into(), |n| n.to_string()),
            t.after_threads.map_or("?".into(), |n| n.to_string()),
            fmt_mb(f.after_parallel_rss as f64),
        ));
        let wrong_deltas = t
            .measured
            .samples
            .iter()
            .chain(&t.repeat.samples)
            .chain(&t.parallel.samples)
            .filter(|sample| sample.deltas != c.tokens)
            .count();
        lines.push(format!(
            "- Errors: {} sequential, {} parallel (floor: {}, {}); turns whose delta count was not {}: {}. \
             Server log: {} bytes at the default log level.",
            t.measured.errors.len() + t.repeat.errors.len(),
            t.parallel.errors.len(),
            f.measured.errors.len() + f.repeat.errors.len(),
            f.parallel.errors.len(),
            c.tokens,
            wrong_deltas,
            self.server_log_bytes,
        ));
        lines.push(format!(
            "- Cold starts (ms), Teamster: {}; fake model: {}.",
            list_ms(&self.cold.teamster),
            list_ms(&self.cold.floor)
        ));
        if let Some([first, second]) = &self.chained {
            let half = first.samples.len();
            lines.push(format!(
                "- Chained turns (`previous_turn_id: auto`, one session, reported separately): turns 1–{half}: \
                 server CPU {} per turn, latency p50 {}; turns {}–{}: {} per turn, p50 {}.",
                fmt_ms(run_cpu_ms(first)),
                fmt_ms(p(&first.samples, total, 50.0)),
                half + 1,
                half + second.samples.len(),
                fmt_ms(run_cpu_ms(second)),
                fmt_ms(p(&second.samples, total, 50.0)),
            ));
        }
        // Under a second, 10 ms ticks make the figure meaningless.
        let busy = |cpu: &CpuSpent| {
            if cpu.wall >= 1.0 {
                format!("{:.0}%", cpu.others / cpu.wall * 100.0)
            } else {
                "n/a (window under 1 s)".into()
            }
        };
        lines.push(format!(
            "- Noise: other processes on the machine used {} of one core during the measured sequential turns, \
             {} during the parallel window ({} and {} during the floor's); load average {} at the start, {} at the end.",
            busy(&t.measured.cpu),
            busy(&t.parallel.cpu),
            busy(&f.measured.cpu),
            busy(&f.parallel.cpu),
            self.load_average[0],
            self.load_average[1],
        ));
        lines.push(format!(
            "- {} cores; CPU from /proc/PID/stat utime+stime at {} ticks/s; the run took {:.0} s.",
            self.cores, c.ticks_per_second, self.total_secs
        ));
        lines.join("\n") + "\n"
    }

    pub fn json(&self) -> Value {
        let c = &self.config;
        let chained = self.chained.as_ref().map(
            |[first, second]| json!({"first_half": sequential_json(first), "second_half": sequential_json(second)}),
        );
        json!({
            "config": {
                "tokens": c.tokens,
                "warmup_turns": c.warmup,
                "sequential_turns": c.turns,
                "concurrency": c.concurrency,
                "parallel_warmup_secs": c.parallel_warmup_secs,
                "parallel_duration_secs": c.duration_secs,
                "cold_starts": c.cold_starts,
                "driver_threads": c.driver_threads,
                "clock_ticks_per_second": c.ticks_per_second,
                "database": c.database,
                "replicas": c.replicas,
            },
            "targets": {
                "server_cpu_ms_per_turn": TARGET_CPU_MS,
                "cold_start_ms": TARGET_STARTUP_MS,
                "idle_rss_bytes": TARGET_IDLE_RSS_BYTES,
                "turns_per_second": TARGET_TURNS_PER_SECOND,
            },
            "cold_start_ms": {
                "teamster": self.cold.teamster.iter().map(|d| d.as_secs_f64() * 1000.0).collect::<Vec<_>>(),
                "teamster_median": median_ms(&self.cold.teamster),
                "floor": self.cold.floor.iter().map(|d| d.as_secs_f64() * 1000.0).collect::<Vec<_>>(),
                "floor_median": median_ms(&self.cold.floor),
            },
            "teamster": side_json(&self.teamster),
            "floor": side_json(&self.floor),
            "chained": chained,
            "direct_request_body": self.direct_body,
            "server_log_bytes": self.server_log_bytes,
            "total_secs": self.total_secs,
            "load_average": {"start": self.load_average[0], "end": self.load_average[1]},
            "cores": self.cores,
        })
    }
}

fn utilisation(cpu: &CpuSpent) -> f64 {
    if cpu.wall > 0.0 { cpu.server.best() / cpu.wall * 100.0 } else { f64::NAN }
}

fn mean_ms(samples: &[Sample]) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    samples.iter().map(|sample| sample.total.as_secs_f64()).sum::<f64>() * 1000.0 / samples.len() as f64
}

fn list_ms(values: &[Duration]) -> String {
    values.iter().map(|d| format!("{:.1}", d.as_secs_f64() * 1000.0)).collect::<Vec<_>>().join(", ")
}

fn latency_json(samples: &[Sample]) -> Value {
    let mut object = serde_json::Map::new();
    for (name, field) in
        [("total", total as fn(&Sample) -> Duration), ("first_event", first_event), ("first_delta", first_delta)]
    {
        for percentile in [50.0, 90.0, 99.0, 100.0] {
            object.insert(format!("{name}_p{percentile:.0}_ms"), json!(nan_to_null(p(samples, field, percentile))));
        }
    }
    object.insert("mean_total_ms".into(), json!(nan_to_null(mean_ms(samples))));
    Value::Object(object)
}

fn cpu_json(cpu: &CpuSpent, count: usize) -> Value {
    json!({
        "wall_secs": cpu.wall,
        "server": process_cpu_json(&cpu.server, count),
        "upstream": cpu.upstream.map(|upstream| process_cpu_json(&upstream, count)),
        "driver": process_cpu_json(&cpu.driver, count),
        "other_processes_secs": cpu.others,
    })
}

fn process_cpu_json(cpu: &Cpu, count: usize) -> Value {
    json!({
        "stat_secs": cpu.stat,
        "schedstat_secs": cpu.exact,
        "schedstat_slices": cpu.slices,
        "used": cpu.source(),
        "ms_per_request": nan_to_null(cpu_ms_per(cpu.best(), count)),
    })
}

fn sequential_json(run: &SequentialRun) -> Value {
    json!({
        "requests": run.samples.len(),
        "errors": run.errors,
        "cpu": cpu_json(&run.cpu, run.samples.len() + run.errors.len()),
        "latency": latency_json(&run.samples),
    })
}

fn side_json(side: &Side) -> Value {
    json!({
        "idle_rss_bytes": side.idle_rss,
        "idle_cpu": cpu_json(&side.idle_cpu, 1),
        "fresh_connections": sequential_json(&side.fresh),
        "setup_rss_bytes": side.setup_rss,
        "idle_threads": side.idle_threads,
        "end_threads": side.after_threads,
        "sequential": sequential_json(&side.measured),
        "repeat": sequential_json(&side.repeat),
        "rss_checkpoints": side.checkpoints.iter().map(|point| json!({"finished": point.turns, "rss_bytes": point.rss})).collect::<Vec<_>>(),
        "parallel": {
            "concurrency": side.parallel.concurrency,
            "completed": side.parallel.completed,
            "per_second": side.parallel.per_second(),
            "errors": side.parallel.errors.iter().take(20).collect::<Vec<_>>(),
            "error_count": side.parallel.errors.len(),
            "cpu": cpu_json(&side.parallel.cpu, side.parallel.completed),
            "latency": latency_json(&side.parallel.samples),
        },
        "after_parallel_rss_bytes": side.after_parallel_rss,
    })
}

fn nan_to_null(value: f64) -> Option<f64> {
    value.is_finite().then_some(value)
}
