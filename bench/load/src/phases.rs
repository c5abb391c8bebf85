//! The load phases: N sequential requests, and C workers back to back for a fixed time, each
//! bracketed by `/proc` readings of the process under test, its upstream and the driver.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;

use crate::client::{REQUEST_TIMEOUT, Sample, Target};
use crate::process::ProcReader;

/// How many failed requests a sequential phase tolerates before giving up.
const MAX_SEQUENTIAL_ERRORS: usize = 10;

/// The processes whose CPU time a phase measures.
#[derive(Clone, Copy)]
pub struct Probe {
    pub proc: ProcReader,
    /// The process under test (Teamster, or the fake model for the floor).
    pub server: u32,
    /// A second Teamster replica on the same database, whose CPU and memory count with the
    /// server's.
    pub replica: Option<u32>,
    /// The fake model behind Teamster, when measuring Teamster.
    pub upstream: Option<u32>,
}

/// Below this much CPU time, the clock ticks of `/proc/PID/stat` (10 ms each) are too coarse and
/// the per-thread `schedstat` sum is used instead.
const MIN_STAT_SECONDS: f64 = 1.0;

/// The CPU time of one process so far, both ways.
#[derive(Clone)]
struct CpuReading {
    /// `utime + stime` from `/proc/PID/stat`, in seconds.
    stat: f64,
    /// Per-thread on-CPU nanoseconds and times scheduled from `schedstat`.
    threads: HashMap<u32, (u64, u64)>,
}

impl CpuReading {
    fn read(proc: &ProcReader, pid: Option<u32>) -> anyhow::Result<CpuReading> {
        Ok(CpuReading { stat: proc.cpu_seconds(pid)?, threads: proc.thread_cpu_ns(pid)? })
    }

    /// The sum of two processes (thread ids are unique across processes).
    fn plus(mut self, other: CpuReading) -> CpuReading {
        self.stat += other.stat;
        self.threads.extend(other.threads);
        self
    }

    fn until(&self, end: &CpuReading) -> Cpu {
        // Exact only if no thread that existed at the start has exited since (its time is lost).
        let survivors = self.threads.keys().all(|tid| end.threads.contains_key(tid));
        let spent = |field: fn(&(u64, u64)) -> u64| -> u64 {
            let before = |tid: &u32| self.threads.get(tid).map_or(0, field);
            end.threads.iter().map(|(tid, reading)| field(reading).saturating_sub(before(tid))).sum()
        };
        let exact = survivors.then(|| spent(|reading| reading.0) as f64 / 1e9);
        let slices = survivors.then(|| spent(|reading| reading.1));
        Cpu { stat: end.stat - self.stat, exact, slices }
    }
}

/// CPU seconds one process spent between two marks.
#[derive(Clone, Copy, Debug, Default)]
pub struct Cpu {
    /// From `utime + stime` (10 ms ticks).
    pub stat: f64,
    /// From the per-thread `schedstat` sums; `None` when a thread exited in between.
    pub exact: Option<f64>,
    /// How many times the process's threads were put on a CPU (`schedstat`'s third field,
    /// summed): its wake-ups and thread hand-offs, whatever the machine's speed. `None` as
    /// `exact`.
    pub slices: Option<u64>,
}

impl Cpu {
    /// `stat` when it covers at least a second (quantisation ≤ 1%), else the exact figure.
    pub fn best(&self) -> f64 {
        match self.exact {
            Some(exact) if self.stat < MIN_STAT_SECONDS => exact,
            _ => self.stat,
        }
    }

    /// Which of the two [`Cpu::best`] used.
    pub fn source(&self) -> &'static str {
        match self.exact {
            Some(_) if self.stat < MIN_STAT_SECONDS => "schedstat",
            _ => "stat",
        }
    }
}

/// CPU readings of the processes of a phase, at one instant.
#[derive(Clone)]
struct CpuMark {
    at: Instant,
    server: CpuReading,
    upstream: Option<CpuReading>,
    driver: CpuReading,
    /// CPU seconds so far of every other process, by pid.
    others: HashMap<u32, f64>,
}

/// CPU seconds spent between two marks.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuSpent {
    pub wall: f64,
    pub server: Cpu,
    pub upstream: Option<Cpu>,
    pub driver: Cpu,
    /// CPU seconds taken by all other processes on the machine (other engineers' builds and
    /// tests): the noise indicator of a phase. Approximate: a process that exits without a
    /// living parent to reap it is missed.
    pub others: f64,
}

impl Probe {
    fn mark(&self) -> anyhow::Result<CpuMark> {
        Ok(CpuMark {
            at: Instant::now(),
            server: match self.replica {
                Some(replica) => CpuReading::read(&self.proc, Some(self.server))?
                    .plus(CpuReading::read(&self.proc, Some(replica))?),
                None => CpuReading::read(&self.proc, Some(self.server))?,
            },
            upstream: self.upstream.map(|pid| CpuReading::read(&self.proc, Some(pid))).transpose()?,
            driver: CpuReading::read(&self.proc, None)?,
            others: self.proc.other_processes(&[
                self.server,
                self.upstream.unwrap_or(self.server),
                self.replica.unwrap_or(self.server),
            ]),
        })
    }

    /// The resident memory of the server (of every replica, summed).
    pub fn server_rss(&self) -> anyhow::Result<u64> {
        let replica = self.replica.map(|pid| self.proc.rss_bytes(Some(pid))).transpose()?.unwrap_or(0);
        Ok(self.proc.rss_bytes(Some(self.server))? + replica)
    }

    /// The CPU the processes spend during `duration` of doing nothing.
    pub async fn idle(&self, duration: Duration) -> anyhow::Result<CpuSpent> {
        let start = self.mark()?;
        tokio::time::sleep(duration).await;
        Ok(start.until(&self.mark()?))
    }
}

impl CpuMark {
    fn until(&self, end: &CpuMark) -> CpuSpent {
        CpuSpent {
            wall: end.at.duration_since(self.at).as_secs_f64(),
            server: self.server.until(&end.server),
            upstream: self.upstream.as_ref().zip(end.upstream.as_ref()).map(|(start, end)| start.until(end)),
            driver: self.driver.until(&end.driver),
            // Sum over all processes, including those that appeared or were reaped in between:
            // a reaped child's total moves into its parent's `cutime + cstime`, so subtracting
            // what it had at the start leaves only what it spent in the window.
            others: (end.others.values().sum::<f64>() - self.others.values().sum::<f64>()).max(0.0),
        }
    }
}

/// The result of N requests one after the other.
pub struct SequentialRun {
    pub samples: Vec<Sample>,
    pub errors: Vec<String>,
    pub cpu: CpuSpent,
    /// RSS of the server after the request asked for with `rss_after`.
    pub rss_checkpoint: Option<u64>,
}

/// Sends `count` requests one after the other from worker 0.
pub async fn sequential(
    target: &Target,
    client: &reqwest::Client,
    count: usize,
    probe: &Probe,
) -> anyhow::Result<SequentialRun> {
    sequential_with_rss(target, client, count, probe, None).await
}

/// Like [`sequential`], also reading the server's RSS right after request number `rss_after`
/// (1-based), which costs one small file read.
pub async fn sequential_with_rss(
    target: &Target,
    client: &reqwest::Client,
    count: usize,
    probe: &Probe,
    rss_after: Option<usize>,
) -> anyhow::Result<SequentialRun> {
    sequential_calls(count, probe, rss_after, || target.call(client, 0)).await
}

/// Makes `count` calls of `call` one after the other, between two CPU marks of `probe`; reads
/// the server's RSS right after call number `rss_after` (1-based).
pub async fn sequential_calls<F, Call>(
    count: usize,
    probe: &Probe,
    rss_after: Option<usize>,
    mut call: F,
) -> anyhow::Result<SequentialRun>
where
    F: FnMut() -> Call,
    Call: Future<Output = anyhow::Result<Sample>>,
{
    let mut samples = Vec::with_capacity(count);
    let mut errors = Vec::new();
    let mut rss_checkpoint = None;
    let start = probe.mark()?;
    for number in 1..=count {
        match call().await {
            Ok(sample) => samples.push(sample),
            Err(error) => {
                errors.push(format!("{error:#}"));
                if errors.len() > MAX_SEQUENTIAL_ERRORS {
                    bail!("too many failed requests; the last: {error:#}");
                }
            }
        }
        if rss_after == Some(number) {
            rss_checkpoint = Some(probe.server_rss()?);
        }
    }
    let end = probe.mark()?;
    Ok(SequentialRun { samples, errors, cpu: start.until(&end), rss_checkpoint })
}

/// The result of C workers running back to back; only requests that completed inside the
/// measurement window count.
pub struct ParallelRun {
    pub concurrency: usize,
    /// Requests completed inside the window.
    pub completed: usize,
    pub samples: Vec<Sample>,
    pub errors: Vec<String>,
    pub cpu: CpuSpent,
}

impl ParallelRun {
    pub fn per_second(&self) -> f64 {
        // Turns per second of wall time in the window.
        if self.cpu.wall > 0.0 { self.completed as f64 / self.cpu.wall } else { 0.0 }
    }
}

/// Runs `concurrency` workers back to back for `warmup + duration`, measuring the last `duration`.
pub async fn parallel(
    target: &Target,
    client: &reqwest::Client,
    concurrency: usize,
    warmup: Duration,
    duration: Duration,
    probe: &Probe,
) -> anyhow::Result<ParallelRun> {
    let target = Arc::new(target.clone());
    let started = Instant::now();
    let stop_at = started + warmup + duration;
    let mut workers = Vec::with_capacity(concurrency);
    for worker in 0..concurrency {
        let target = Arc::clone(&target);
        let client = client.clone();
        workers.push(tokio::spawn(async move {
            let mut results: Vec<(Instant, Result<Sample, String>)> = Vec::new();
            while Instant::now() < stop_at {
                let result = target.call(&client, worker).await.map_err(|error| format!("{error:#}"));
                let failed = result.is_err();
                results.push((Instant::now(), result));
                if failed {
                    // Do not spin on a failing server; the deadline still bounds the loop.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            results
        }));
    }
    tokio::time::sleep_until((started + warmup).into()).await;
    let window_start = probe.mark()?;
    tokio::time::sleep_until(stop_at.into()).await;
    let window_end = probe.mark()?;

    let mut run = ParallelRun {
        concurrency,
        completed: 0,
        samples: Vec::new(),
        errors: Vec::new(),
        cpu: window_start.until(&window_end),
    };
    let join_deadline = stop_at + REQUEST_TIMEOUT + Duration::from_secs(5);
    for worker in workers {
        let remaining = join_deadline.saturating_duration_since(Instant::now());
        let results = match tokio::time::timeout(remaining, worker).await {
            Ok(Ok(results)) => results,
            Ok(Err(error)) => bail!("a worker failed: {error}"),
            Err(_) => bail!("a worker did not finish by its deadline"),
        };
        for (finished_at, result) in results {
            if finished_at < window_start.at || finished_at > window_end.at {
                continue;
            }
            match result {
                Ok(sample) => {
                    run.completed += 1;
                    run.samples.push(sample);
                }
                Err(error) => run.errors.push(error),
            }
        }
    }
    Ok(run)
}

/// Latency percentiles (nearest rank) of one field of the samples, in milliseconds.
pub fn percentile_ms(samples: &[Sample], field: impl Fn(&Sample) -> Duration, percentile: f64) -> f64 {
    durations_percentile_ms(samples.iter().map(field).collect(), percentile)
}

/// A percentile (nearest rank) of some durations, in milliseconds.
pub fn durations_percentile_ms(mut values: Vec<Duration>, percentile: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_unstable();
    let rank = ((percentile / 100.0) * values.len() as f64).ceil() as usize;
    values[rank.clamp(1, values.len()) - 1].as_secs_f64() * 1000.0
}

/// The median of some durations, in milliseconds.
pub fn median_ms(values: &[Duration]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut values = values.to_vec();
    values.sort_unstable();
    let middle = values.len() / 2;
    let median = if values.len() % 2 == 1 { values[middle] } else { (values[middle - 1] + values[middle]) / 2 };
    median.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(total_ms: u64) -> Sample {
        let total = Duration::from_millis(total_ms);
        Sample { total, first_event: total, first_delta: total, deltas: 0 }
    }

    #[test]
    fn nearest_rank_percentiles() {
        let samples: Vec<Sample> = (1..=100).rev().map(sample).collect();
        assert_eq!(percentile_ms(&samples, |s| s.total, 50.0), 50.0);
        assert_eq!(percentile_ms(&samples, |s| s.total, 99.0), 99.0);
        assert_eq!(percentile_ms(&samples, |s| s.total, 100.0), 100.0);
        assert!(percentile_ms(&[], |s| s.total, 50.0).is_nan());
    }

    #[test]
    fn medians() {
        let odd = [3, 1, 2].map(Duration::from_millis);
        let even = [4, 1, 3, 2].map(Duration::from_millis);
        assert_eq!(median_ms(&odd), 2.0);
        assert_eq!(median_ms(&even), 2.5);
    }

    #[test]
    fn stat_is_used_only_when_it_covers_a_second() {
        let coarse = Cpu { stat: 0.02, exact: Some(0.0234), slices: None };
        assert_eq!(coarse.best(), 0.0234);
        assert_eq!(coarse.source(), "schedstat");
        let long = Cpu { stat: 2.3, exact: Some(2.31), slices: None };
        assert_eq!(long.best(), 2.3);
        let lost_thread = Cpu { stat: 0.02, exact: None, slices: None };
        assert_eq!(lost_thread.best(), 0.02);
    }
}
