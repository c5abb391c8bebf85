//! The processes under test: spawning `teamster serve` and `fake-model`, reading the address
//! they print, and sampling their CPU time and resident memory from `/proc`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};

/// How long a process gets to print its `listening on` line.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(20);

/// Environment variables removed from every child, so that its HTTP clients never route the
/// loopback traffic of the benchmark anywhere else.
const PROXY_VARIABLES: [&str; 8] =
    ["HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"];

/// A child process that has announced its address. It is killed when dropped.
pub struct Served {
    /// The child; `kill_on_drop` is set.
    child: Child,
    /// The process id, for `/proc`.
    pub pid: u32,
    /// `http://ADDR`, from the `listening on` line.
    pub base_url: String,
}

impl Served {
    /// Kills the process and waits for it (bounded), so that it no longer competes for the CPU.
    pub async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
    }
}

/// `teamster serve` on `database`, or on a fresh SQLite database in `dir`, with its log
/// (standard error) in `dir/server.log`.
pub fn teamster_command(binary: &Path, dir: &Path, listen: &str, database: Option<&str>) -> anyhow::Result<Command> {
    let database = database.map_or_else(|| format!("sqlite://{}", dir.join("db.sqlite").display()), str::to_owned);
    let mut command = Command::new(binary);
    command.args(["serve", "--listen", listen, "--database", &database, "--no-example"]);
    let log = std::fs::File::create(dir.join("server.log")).context("creating the server log")?;
    command.stderr(Stdio::from(log));
    Ok(command)
}

/// `fake-model --listen LISTEN`.
pub fn fake_model_command(binary: &Path, listen: &str) -> Command {
    let mut command = Command::new(binary);
    command.args(["--listen", listen]).stderr(Stdio::null());
    command
}

/// Spawns `command` and waits (bounded) for its first line, `listening on http://ADDR`.
pub async fn spawn_served(mut command: Command, what: &str) -> anyhow::Result<Served> {
    for variable in PROXY_VARIABLES {
        command.env_remove(variable);
    }
    command.stdin(Stdio::null()).stdout(Stdio::piped()).kill_on_drop(true);
    let mut child = command.spawn().with_context(|| format!("spawning {what}"))?;
    let pid = child.id().context("the child has no pid")?;
    let stdout = child.stdout.take().context("no stdout pipe")?;
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    let read = tokio::time::timeout(STARTUP_TIMEOUT, reader.read_line(&mut line)).await;
    match read {
        Ok(Ok(n)) if n > 0 => {}
        Ok(Ok(_)) => bail!("{what} exited before printing its address"),
        Ok(Err(error)) => bail!("reading the output of {what}: {error}"),
        Err(_) => bail!("{what} did not print its address within {STARTUP_TIMEOUT:?}"),
    }
    let base_url = line
        .trim()
        .strip_prefix("listening on ")
        .with_context(|| format!("unexpected first line from {what}: {line:?}"))?
        .to_owned();
    // Keep draining standard output so that a later write never fails on a closed pipe.
    tokio::spawn(async move {
        let mut sink = Vec::new();
        let _ = reader.read_to_end(&mut sink).await;
    });
    Ok(Served { child, pid, base_url })
}

/// Cold start: spawns `command` (which must listen on `port`) and polls `GET /healthz` every
/// millisecond until it answers 200. Returns the wall time from just before the spawn.
pub async fn cold_start(mut command: Command, port: u16, client: &reqwest::Client) -> anyhow::Result<Duration> {
    for variable in PROXY_VARIABLES {
        command.env_remove(variable);
    }
    command.stdin(Stdio::null()).stdout(Stdio::null()).kill_on_drop(true);
    let url = format!("http://127.0.0.1:{port}/healthz");
    let started = Instant::now();
    let mut child = command.spawn().context("spawning for the cold start")?;
    let result = loop {
        if started.elapsed() > STARTUP_TIMEOUT {
            break Err(anyhow::anyhow!("no 200 from {url} within {STARTUP_TIMEOUT:?}"));
        }
        if let Ok(response) = client.get(&url).timeout(Duration::from_secs(2)).send().await
            && response.status() == reqwest::StatusCode::OK
        {
            break Ok(started.elapsed());
        }
        if let Ok(Some(status)) = child.try_wait() {
            break Err(anyhow::anyhow!("the process exited during the cold start: {status}"));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    let _ = child.start_kill();
    let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
    result
}

/// A free loopback port (bound and released; a race with another process is possible but rare).
pub fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(listener.local_addr()?.port())
}

/// A fresh scratch directory under the system temporary directory.
pub fn scratch_dir(label: &str) -> anyhow::Result<PathBuf> {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let dir = std::env::temp_dir().join(format!("teamster-bench-{}-{label}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// Reads `/proc` for one process (or for the driver itself, with `None`).
#[derive(Clone, Copy)]
pub struct ProcReader {
    /// Clock ticks per second (`getconf CLK_TCK`), the unit of `utime` and `stime`.
    ticks_per_second: f64,
}

impl ProcReader {
    pub fn new() -> ProcReader {
        let ticks = std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|output| String::from_utf8(output.stdout).ok())
            .and_then(|text| text.trim().parse::<f64>().ok())
            .filter(|ticks| *ticks > 0.0)
            .unwrap_or(100.0);
        ProcReader { ticks_per_second: ticks }
    }

    pub fn ticks_per_second(&self) -> f64 {
        self.ticks_per_second
    }

    /// `utime + stime` in seconds, all threads of the process (`/proc/PID/stat` fields 14 and 15).
    pub fn cpu_seconds(&self, pid: Option<u32>) -> anyhow::Result<f64> {
        let path = proc_path(pid, "stat");
        let stat = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        // The command name (field 2) is in parentheses and may contain spaces: split after it.
        let after_name = stat.rsplit_once(')').map(|(_, rest)| rest).context("malformed stat")?;
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        // `fields[0]` is field 3 (state), so field N is `fields[N - 3]`.
        let utime: f64 = fields.get(11).context("no utime")?.parse()?;
        let stime: f64 = fields.get(12).context("no stime")?.parse()?;
        Ok((utime + stime) / self.ticks_per_second)
    }

    /// On-CPU nanoseconds and times scheduled onto a CPU of every live thread, by thread id
    /// (the first and third fields of `/proc/PID/task/TID/schedstat`). Exact, unlike the clock
    /// ticks of `stat`, but threads that have exited are no longer counted.
    pub fn thread_cpu_ns(&self, pid: Option<u32>) -> anyhow::Result<HashMap<u32, (u64, u64)>> {
        let dir = proc_path(pid, "task");
        let mut threads = HashMap::new();
        for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {dir}"))? {
            let entry = entry?;
            let Some(tid) = entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok()) else { continue };
            // A thread may exit between the listing and the read: skip it.
            let Ok(text) = std::fs::read_to_string(entry.path().join("schedstat")) else { continue };
            let fields: Vec<u64> = text.split_whitespace().filter_map(|field| field.parse().ok()).collect();
            if let [nanos, _, slices] = fields[..] {
                threads.insert(tid, (nanos, slices));
            }
        }
        Ok(threads)
    }

    /// CPU seconds of every process on the machine except `excluded`, by pid: its own
    /// `utime + stime` plus that of its reaped children (`cutime + cstime`), so that a build's
    /// short-lived compiler processes still show up in their parent. The noise indicator.
    pub fn other_processes(&self, excluded: &[u32]) -> HashMap<u32, f64> {
        let mut processes = HashMap::new();
        let Ok(entries) = std::fs::read_dir("/proc") else { return processes };
        for entry in entries.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok()) else { continue };
            if excluded.contains(&pid) || pid == std::process::id() {
                continue;
            }
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
            let Some((_, rest)) = stat.rsplit_once(')') else { continue };
            let fields: Vec<f64> =
                rest.split_whitespace().skip(11).take(4).filter_map(|field| field.parse().ok()).collect();
            if fields.len() == 4 {
                processes.insert(pid, fields.iter().sum::<f64>() / self.ticks_per_second);
            }
        }
        processes
    }

    /// `VmRSS` in bytes (`/proc/PID/status`).
    pub fn rss_bytes(&self, pid: Option<u32>) -> anyhow::Result<u64> {
        let path = proc_path(pid, "status");
        let status = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        let line = status.lines().find(|line| line.starts_with("VmRSS:")).context("no VmRSS")?;
        let kilobytes: u64 = line.trim_start_matches("VmRSS:").trim().trim_end_matches("kB").trim().parse()?;
        Ok(kilobytes * 1024)
    }

    /// The number of threads (`/proc/PID/status`), for the notes.
    pub fn threads(&self, pid: Option<u32>) -> Option<u64> {
        let status = std::fs::read_to_string(proc_path(pid, "status")).ok()?;
        status.lines().find_map(|line| line.strip_prefix("Threads:")).and_then(|value| value.trim().parse().ok())
    }
}

/// The first line of `/proc/loadavg`, for the notes.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").map(|text| text.trim().to_owned()).unwrap_or_default()
}

fn proc_path(pid: Option<u32>, file: &str) -> String {
    match pid {
        Some(pid) => format!("/proc/{pid}/{file}"),
        None => format!("/proc/self/{file}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let proc = ProcReader::new();
        assert!(proc.cpu_seconds(None).unwrap() >= 0.0);
        assert!(proc.rss_bytes(None).unwrap() > 0);
        assert!(!proc.thread_cpu_ns(None).unwrap().is_empty());
        assert!(proc.threads(None).unwrap() >= 1);
    }
}
