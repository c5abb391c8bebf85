//! `teamster-bench --sandbox`: the cost of one `exec` round trip in a session's sandbox.
//!
//! The same command (`true`) run two ways, each sequentially after a warm-up, in this process:
//! 1. the floor: `/bin/sh -c true` spawned directly and waited for;
//! 2. `SandboxProvider::exec` on the bubblewrap provider: a `bwrap` with fresh namespaces, the
//!    limits and the output capture, in a provisioned sandbox under a temporary root.
//!
//! The overhead is the difference of the medians (and of the 99th percentiles).

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::json;
use teamster_sandbox::{Bubblewrap, ExecRequest, Limits, SandboxProvider};

use crate::Args;
use crate::phases::durations_percentile_ms;
use crate::process;

/// The goal for the sandbox's p50 overhead over a direct spawn (issue of the sandbox).
const GOAL_OVERHEAD_MS: f64 = 10.0;

pub async fn run(args: &Args) -> anyhow::Result<()> {
    let root = process::scratch_dir("sandbox")?;
    let result = measure(args, &root).await;
    let _ = std::fs::remove_dir_all(&root);
    result
}

async fn measure(args: &Args, root: &std::path::Path) -> anyhow::Result<()> {
    let provider = Bubblewrap::start(root.join("sandboxes"), Limits::default())
        .await
        .context("starting the bubblewrap provider (is bubblewrap installed?)")?;
    let sandbox = provider.provision("bench-session", &teamster_sandbox::SandboxOwner::new("bench", "bench:driver")).await.context("provisioning a sandbox")?;
    let started = Instant::now();

    let direct = timed(args, || async {
        let status = tokio::process::Command::new("/bin/sh").args(["-c", "true"]).status().await?;
        if !status.success() {
            bail!("`sh -c true` failed: {status}");
        }
        Ok(())
    })
    .await?;
    let sandboxed = timed(args, || async {
        let request = ExecRequest { command: "true".to_owned(), ..ExecRequest::default() };
        let output = provider.exec(&sandbox.sandbox_id, request).await?;
        if output.exit_code != Some(0) {
            bail!("`true` in the sandbox failed: {output:?}");
        }
        Ok(())
    })
    .await?;
    provider.destroy("bench-session").await.context("removing the sandbox")?;

    let p = |runs: &[Duration], percentile: f64| durations_percentile_ms(runs.to_vec(), percentile);
    let (p50, p99) = (p, p);
    let overhead_p50 = p50(&sandboxed, 50.0) - p50(&direct, 50.0);
    let overhead_p99 = p99(&sandboxed, 99.0) - p99(&direct, 99.0);
    let verdict = if overhead_p50 <= GOAL_OVERHEAD_MS { "met" } else { "missed" };
    let mut markdown = format!(
        "One command (`true`), {} sequential runs of each kind after {} warm-up runs, in this process.\n\n\
         | run | p50 | p99 |\n| --- | --- | --- |\n",
        args.turns, args.warmup
    );
    markdown.push_str(&format!("| `/bin/sh -c true` spawned directly (floor) | {:.3} ms | {:.3} ms |\n", p50(&direct, 50.0), p99(&direct, 99.0)));
    markdown.push_str(&format!(
        "| `exec` in a bubblewrap sandbox | {:.3} ms | {:.3} ms |\n",
        p50(&sandboxed, 50.0),
        p99(&sandboxed, 99.0)
    ));
    markdown.push_str(&format!(
        "\nThe sandbox's overhead per command: {overhead_p50:.3} ms at p50 (goal ≤ {GOAL_OVERHEAD_MS:.0} ms: {verdict}), \
         {overhead_p99:.3} ms at p99; {:.0} s in all.\n",
        started.elapsed().as_secs_f64()
    ));
    let json = json!({
        "kind": "sandbox",
        "runs": args.turns,
        "warmup": args.warmup,
        "direct_ms": {"p50": p50(&direct, 50.0), "p99": p99(&direct, 99.0)},
        "sandbox_ms": {"p50": p50(&sandboxed, 50.0), "p99": p99(&sandboxed, 99.0)},
        "overhead_ms": {"p50": overhead_p50, "p99": overhead_p99},
        "goal_overhead_p50_ms": GOAL_OVERHEAD_MS,
    });
    crate::publish(&markdown, &json, &args.json)
}

/// The durations of `args.turns` sequential runs of `once`, after `args.warmup` unmeasured ones.
pub(crate) async fn timed<F, Fut>(args: &Args, once: F) -> anyhow::Result<Vec<Duration>>
where
    F: Fn() -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    for _ in 0..args.warmup {
        once().await?;
    }
    let mut runs = Vec::with_capacity(args.turns);
    for _ in 0..args.turns {
        let start = Instant::now();
        once().await?;
        runs.push(start.elapsed());
    }
    Ok(runs)
}
