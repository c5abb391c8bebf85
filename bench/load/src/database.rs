//! What one simple turn costs the PostgreSQL database: round trips, statements, transactions,
//! rows and WAL bytes. Unlike times, these hold on any machine.
//!
//! A server runs through the counting relay of `wire.rs` twice on the bench's database: once
//! running `turns` sequential turns, once idle for as long as those took. Each lifetime is read
//! whole (the relay's counts, and `pg_stat_database` and the WAL position once the server has
//! exited and its backends have reported their statistics), so the difference divided by
//! `turns` is the cost of one turn, with start-up, shutdown and background timers (lease
//! recovery, retention) cancelled out. Set-up and warm-up happen in a lifetime of their own
//! before both.

use std::path::Path;
use std::process::Command as StdCommand;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::client::{self, Kind, Target};
use crate::phases::{Probe, sequential};
use crate::process::{self, ProcReader};
use crate::wire::{self, Reading};

/// The agent the counting phase makes (the main phases' `bench` exists already).
const AGENT: &str = "bench-count";
/// Warm-up turns before the counted lifetimes (in a lifetime of their own).
const WARMUP: usize = 20;

/// The database's cumulative statistics of one database, and the WAL position.
#[derive(Clone, Copy, Debug, Default)]
struct Stats {
    commits: i64,
    rollbacks: i64,
    inserted: i64,
    updated: i64,
    deleted: i64,
    /// `pg_current_wal_insert_lsn()` in bytes: cluster-wide, so other databases' writes count.
    wal: i64,
}

impl Stats {
    fn since(&self, earlier: &Stats) -> Stats {
        Stats {
            commits: self.commits - earlier.commits,
            rollbacks: self.rollbacks - earlier.rollbacks,
            inserted: self.inserted - earlier.inserted,
            updated: self.updated - earlier.updated,
            deleted: self.deleted - earlier.deleted,
            wal: self.wal - earlier.wal,
        }
    }
}

/// One lifetime of a server: the relay's counts and the database's statistics over it.
#[derive(Clone, Copy, Debug, Default)]
struct Lifetime {
    wire: Reading,
    stats: Stats,
}

/// The cost of one turn, and the two lifetimes it comes from.
pub struct PerTurn {
    pub turns: usize,
    busy: Lifetime,
    idle: Lifetime,
    pub busy_secs: f64,
}

impl PerTurn {
    fn per_turn(&self, busy: i64, idle: i64) -> f64 {
        (busy - idle) as f64 / self.turns as f64
    }

    fn figures(&self) -> [(&'static str, f64); 9] {
        let (b, i) = (&self.busy, &self.idle);
        let wire = |field: fn(&Reading) -> u64| self.per_turn(field(&b.wire) as i64, field(&i.wire) as i64);
        let stats = |field: fn(&Stats) -> i64| self.per_turn(field(&b.stats), field(&i.stats));
        [
            ("round trips (Sync + Query messages)", wire(|r| r.round_trips)),
            ("statements (Execute + Query messages)", wire(|r| r.statements)),
            ("transactions committed", stats(|s| s.commits)),
            ("transactions rolled back", stats(|s| s.rollbacks)),
            ("rows inserted", stats(|s| s.inserted)),
            ("rows updated", stats(|s| s.updated)),
            ("WAL bytes", stats(|s| s.wal)),
            ("bytes sent to PostgreSQL", wire(|r| r.to_server)),
            ("bytes received from PostgreSQL", wire(|r| r.from_server)),
        ]
    }

    pub fn markdown(&self) -> String {
        let mut text = format!(
            "\nPostgreSQL per simple turn ({} sequential turns through a counting relay, minus an idle lifetime of the same {:.1} s; goal for round trips ≤ 6):\n\n| per turn | count |\n| --- | --- |\n",
            self.turns, self.busy_secs
        );
        for (name, value) in self.figures() {
            text.push_str(&format!("| {name} | {value:.1} |\n"));
        }
        text
    }

    pub fn json(&self) -> Value {
        let figures: serde_json::Map<String, Value> =
            self.figures().iter().map(|(name, value)| ((*name).to_owned(), json!(value))).collect();
        json!({
            "turns": self.turns,
            "busy_secs": self.busy_secs,
            "per_turn": figures,
            "busy": format!("{:?}", self.busy),
            "idle": format!("{:?}", self.idle),
        })
    }
}

/// Counts a simple turn's database work on `database` (a PostgreSQL URL), with `tokens` per
/// answer; the servers run `teamster` against a fresh `fake_model`.
pub async fn per_turn(
    teamster: &Path,
    fake_model: &Path,
    database: &str,
    tokens: u32,
    turns: usize,
    http: &reqwest::Client,
    proc: ProcReader,
) -> anyhow::Result<PerTurn> {
    let (upstream_address, relayed_url) = relayed(database)?;
    let relay = wire::start(&upstream_address)?;
    let relayed_url = relayed_url.replace("{relay}", &relay.address);
    let fake = process::spawn_served(process::fake_model_command(fake_model, "127.0.0.1:0"), "fake-model").await?;

    // Set-up and warm-up, uncounted.
    let dir = process::scratch_dir("count")?;
    let start = || async {
        let command = process::teamster_command(teamster, &dir, "127.0.0.1:0", Some(&relayed_url))?;
        let served = process::spawn_served(command, "teamster serve (counted)").await?;
        crate::wait_healthy(http, &served.base_url).await?;
        anyhow::Ok(served)
    };
    let server = start().await?;
    client::configure_provider(http, &server.base_url, &fake.base_url).await?;
    client::create_agent(http, &server.base_url, AGENT).await?;
    let session = client::create_session(http, &server.base_url, AGENT).await?;
    let path = format!("/api/v1/sessions/{session}/turns");
    let target = |base: &str| Target {
        kind: Kind::Turn,
        urls: vec![format!("{base}{path}")],
        body: client::turn_body(tokens, "none"),
        replicas: None,
    };
    let probe = |pid| Probe { proc, server: pid, upstream: None, replica: None };
    crate::check_clean(&sequential(&target(&server.base_url), http, WARMUP, &probe(server.pid)).await?, "counting warm-up")?;
    server.stop().await;

    let settle = || tokio::time::sleep(Duration::from_secs(1));
    settle().await;
    let before = (relay.counts.read(), stats(database)?);
    let server = start().await?;
    let began = Instant::now();
    crate::check_clean(&sequential(&target(&server.base_url), http, turns, &probe(server.pid)).await?, "counted turns")?;
    let busy_secs = began.elapsed().as_secs_f64();
    server.stop().await;
    settle().await;
    let middle = (relay.counts.read(), stats(database)?);
    let server = start().await?;
    tokio::time::sleep(Duration::from_secs_f64(busy_secs)).await;
    server.stop().await;
    settle().await;
    let after = (relay.counts.read(), stats(database)?);
    fake.stop().await;
    let _ = std::fs::remove_dir_all(&dir);

    let lifetime = |from: &(Reading, Stats), to: &(Reading, Stats)| Lifetime { wire: to.0.since(&from.0), stats: to.1.since(&from.1) };
    Ok(PerTurn { turns, busy: lifetime(&before, &middle), idle: lifetime(&middle, &after), busy_secs })
}

/// The database's `host:port`, and its URL with `{relay}` in their place.
fn relayed(database: &str) -> anyhow::Result<(String, String)> {
    let (scheme, rest) = database.split_once("://").context("the database URL has no scheme")?;
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (user, host) = match authority.rsplit_once('@') {
        Some((user, host)) => (format!("{user}@"), host),
        None => (String::new(), authority),
    };
    if host.is_empty() || host.starts_with('[') {
        bail!("the database URL needs a host:port of the form 127.0.0.1:5432");
    }
    let upstream = if host.contains(':') { host.to_owned() } else { format!("{host}:5432") };
    Ok((upstream, format!("{scheme}://{user}{{relay}}{tail}")))
}

/// The statistics of `database`, read with `psql` (from `PATH`, else PostgreSQL 15's).
fn stats(database: &str) -> anyhow::Result<Stats> {
    let psql = which_psql();
    let query = "SELECT xact_commit, xact_rollback, tup_inserted, tup_updated, tup_deleted, \
                 pg_current_wal_insert_lsn() - '0/0'::pg_lsn \
                 FROM pg_stat_database WHERE datname = current_database()";
    let output = StdCommand::new(&psql)
        .args([database, "-X", "-q", "-A", "-t", "-F", " ", "-c", query])
        .output()
        .with_context(|| format!("running {psql}"))?;
    if !output.status.success() {
        bail!("psql: {}", String::from_utf8_lossy(&output.stderr).trim());
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let numbers: Vec<i64> = text
        .split_whitespace()
        .map(|word| word.parse::<f64>().map(|value| value as i64))
        .collect::<Result<_, _>>()
        .with_context(|| format!("reading pg_stat_database: {text:?}"))?;
    let [commits, rollbacks, inserted, updated, deleted, wal] = numbers[..] else {
        bail!("reading pg_stat_database: {text:?}");
    };
    Ok(Stats { commits, rollbacks, inserted, updated, deleted, wal })
}

fn which_psql() -> String {
    let on_path = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).map(|dir| dir.join("psql")).any(|candidate| candidate.is_file()))
        .unwrap_or(false);
    if on_path { "psql".to_owned() } else { format!("{}/psql", std::env::var("PG_BIN").unwrap_or_else(|_| "/usr/lib/postgresql/15/bin".to_owned())) }
}

#[cfg(test)]
mod tests {
    use super::relayed;

    #[test]
    fn the_relay_takes_the_place_of_host_and_port() {
        let (upstream, url) = relayed("postgres://postgres@127.0.0.1:55432/bench_1?pool_size=4").unwrap();
        assert_eq!(upstream, "127.0.0.1:55432");
        assert_eq!(url, "postgres://postgres@{relay}/bench_1?pool_size=4");
        let (upstream, url) = relayed("postgres://localhost/db").unwrap();
        assert_eq!((upstream.as_str(), url.as_str()), ("localhost:5432", "postgres://{relay}/db"));
    }
}
