//! `teamster-bench --workspace`: what the workspace's file tools save over a shell, and what
//! streaming a command's output costs the server.
//!
//! 1. In this process, on the bubblewrap provider (a provisioned sandbox under a temporary
//!    root), one round trip of a 4 KiB text file two ways, each sequentially after a warm-up:
//!    `write_file` then `read_file` (no shell starts: the provider works on the files), against
//!    `exec` of `printf '%s' "$CONTENT" > file` then `exec` of `cat file` (two sandboxed
//!    shells). Every read is checked to carry the file back whole.
//! 2. Over HTTP, on a `teamster serve` with sandboxes: turns whose model calls `exec` on a
//!    command that prints 64 lines of 1 KiB, 10 ms apart (64 KiB, the most a call streams), read
//!    with `?include=shell.output`, against the same command printing to `/dev/null`. The
//!    difference of the server's CPU, over the KiB streamed, bounds the streaming's cost per KiB
//!    from above: it also holds the output's way into the tool result, to the model, and back in
//!    the fake model's answer (which echoes a tool result). The turns of both kinds alternate,
//!    and each streamed turn is checked to deliver its 64 KiB as `shell.output` events before the
//!    call's result.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use teamster_sandbox::{Bubblewrap, ExecTool, Limits, SandboxOwner, SandboxProvider};
use teamster_tools::ToolSource;
use teamster_workspace::FileTools;

use crate::client::{self, FrameBuffer};
use crate::phases::durations_percentile_ms;
use crate::process::{self, ProcReader};
use crate::sandbox::timed;
use crate::{Args, wait_healthy};

/// The goal: a file tool round trip at least this many times faster than the shell's.
const GOAL_SPEEDUP: f64 = 3.0;
/// The file of the round trips: 64 lines of 64 bytes.
const FILE_LINES: usize = 64;
/// The streamed command's output: this many lines of 1 KiB (1,023 characters and a newline).
const STREAMED_KIB: usize = 64;

pub async fn run(args: &Args) -> anyhow::Result<()> {
    let root = process::scratch_dir("workspace")?;
    let files = file_round_trips(args, &root).await;
    let _ = std::fs::remove_dir_all(&root);
    let files = files?;
    let streamed = streamed_output(args).await?;
    let markdown = format!("{}\n{}", files.0, streamed.0);
    let json = json!({"kind": "workspace", "file_round_trip": files.1, "streamed_output": streamed.1});
    crate::publish(&markdown, &json, &args.json)
}

/// Part 1: the file tools against the shell, in this process.
async fn file_round_trips(args: &Args, root: &std::path::Path) -> anyhow::Result<(String, Value)> {
    let provider = Bubblewrap::start(root.join("sandboxes"), Limits::default())
        .await
        .context("starting the bubblewrap provider (is bubblewrap installed?)")?;
    let provider: Arc<dyn SandboxProvider> = Arc::new(provider);
    let sandbox = provider
        .provision("bench-session", &SandboxOwner::new("bench", "bench:driver"))
        .await
        .context("provisioning a sandbox")?;
    let tools = FileTools::new(provider.clone(), sandbox.sandbox_id.clone());
    let shell = ExecTool::new(provider.clone(), sandbox.sandbox_id.clone(), false);
    let content: String = (0..FILE_LINES).map(|line| format!("{line:04} {}\n", "x".repeat(58))).collect();
    let (first, last) = (content.lines().next().unwrap_or_default().to_owned(), content.lines().last().unwrap_or_default().to_owned());
    let check = |what: &str, output: &str| -> anyhow::Result<()> {
        if !(output.contains(&first) && output.contains(&last)) {
            bail!("{what} did not read the file back: {}", output.chars().take(300).collect::<String>());
        }
        Ok(())
    };

    let with_tools = timed(args, || async {
        let wrote = tools.call("write_file", &json!({"path": "tools.txt", "content": content}).to_string()).await;
        if wrote.is_error {
            bail!("write_file failed: {}", wrote.content);
        }
        let read = tools.call("read_file", &json!({"path": "tools.txt"}).to_string()).await;
        check("read_file", &read.content)
    })
    .await?;
    let with_shell = timed(args, || async {
        let write = json!({"command": "printf '%s' \"$CONTENT\" > shell.txt", "env": {"CONTENT": content}});
        let wrote = shell.call("exec", &write.to_string()).await;
        if wrote.is_error {
            bail!("exec printf failed: {}", wrote.content);
        }
        let read = shell.call("exec", &json!({"command": "cat shell.txt"}).to_string()).await;
        check("exec cat", &read.content)
    })
    .await?;
    provider.destroy("bench-session").await.context("removing the sandbox")?;

    let p = |runs: &[Duration], percentile: f64| durations_percentile_ms(runs.to_vec(), percentile);
    let speedup = p(&with_shell, 50.0) / p(&with_tools, 50.0);
    let verdict = if speedup >= GOAL_SPEEDUP { "met" } else { "missed" };
    let mut markdown = format!(
        "A round trip of a {} KiB text file (written, then read back whole), {} sequential runs of each kind after {} warm-up runs, in this process.\n\n\
         | round trip | p50 | p99 |\n| --- | --- | --- |\n",
        content.len() / 1024,
        args.turns,
        args.warmup
    );
    markdown.push_str(&format!("| `write_file` + `read_file` | {:.3} ms | {:.3} ms |\n", p(&with_tools, 50.0), p(&with_tools, 99.0)));
    markdown.push_str(&format!(
        "| `exec` of `printf > file` + `exec` of `cat file` | {:.3} ms | {:.3} ms |\n",
        p(&with_shell, 50.0),
        p(&with_shell, 99.0)
    ));
    markdown.push_str(&format!("\nThe file tools are {speedup:.1}x faster at p50 (goal ≥ {GOAL_SPEEDUP:.0}x: {verdict}).\n"));
    let json = json!({
        "runs": args.turns,
        "warmup": args.warmup,
        "file_tools_ms": {"p50": p(&with_tools, 50.0), "p99": p(&with_tools, 99.0)},
        "exec_ms": {"p50": p(&with_shell, 50.0), "p99": p(&with_shell, 99.0)},
        "speedup_p50": speedup,
        "goal_speedup": GOAL_SPEEDUP,
    });
    Ok((markdown, json))
}

/// Part 2: the server's CPU for a command's streamed output, per KiB.
async fn streamed_output(args: &Args) -> anyhow::Result<(String, Value)> {
    let dir = process::scratch_dir("serve-workspace")?;
    let upstream = process::spawn_served(process::fake_model_command(&args.fake_model, "127.0.0.1:0"), "fake-model").await?;
    let teamster = process::spawn_served(process::teamster_command(&args.teamster, &dir, "127.0.0.1:0", None)?, "teamster serve").await?;
    let client = client::http_client(true)?;
    let base = teamster.base_url.clone();
    wait_healthy(&client, &base).await?;
    client::configure_provider(&client, &base, &upstream.base_url).await.context("configuring the provider")?;
    let agent = json!({"name": "shell", "manifest": {"model": {"name": "fake/fake-model"}, "config": {"sandbox": {"enabled": true}}}});
    client.post(format!("{base}/api/v1/agents")).json(&agent).send().await?.error_for_status().context("creating the agent")?;
    let session = client::create_session(&client, &base, "shell").await?;

    let line = "y".repeat(1023);
    let printing = format!("for i in $(seq {STREAMED_KIB}); do echo {line}; sleep 0.01; done");
    let silent = format!("for i in $(seq {STREAMED_KIB}); do echo {line} > /dev/null; sleep 0.01; done");
    let proc = ProcReader::new();
    let turns = args.turns.clamp(1, 200);
    let warmup = args.warmup.min(10);
    let mut cpu = [0.0_f64; 2];
    let mut streamed_bytes = 0_u64;
    for index in 0..(warmup + turns) * 2 {
        let streams = index % 2 == 0;
        let command = if streams { &printing } else { &silent };
        let before = proc.cpu_seconds(Some(teamster.pid))?;
        let streamed = one_turn(&client, &base, &session, command).await?;
        let spent = proc.cpu_seconds(Some(teamster.pid))? - before;
        if streams && streamed < (STREAMED_KIB * 1024) as u64 {
            bail!("a streamed turn delivered {streamed} bytes of shell.output, not {} KiB", STREAMED_KIB);
        }
        if !streams && streamed > 0 {
            bail!("a silent turn streamed {streamed} bytes");
        }
        if index >= warmup * 2 {
            cpu[usize::from(!streams)] += spent;
            if streams {
                streamed_bytes += streamed;
            }
        }
    }
    teamster.stop().await;
    upstream.stop().await;
    let _ = std::fs::remove_dir_all(&dir);

    let per_turn = cpu.map(|total| total / turns as f64 * 1000.0);
    let kib_per_turn = streamed_bytes as f64 / turns as f64 / 1024.0;
    let per_kib_us = (per_turn[0] - per_turn[1]) / kib_per_turn * 1000.0;
    let markdown = format!(
        "A command printing {STREAMED_KIB} lines of 1 KiB 10 ms apart, read with `?include=shell.output` ({kib_per_turn:.0} KiB of `shell.output` per turn), against the same command printing to `/dev/null`; {turns} turns of each, alternating, after {warmup} of each.\n\n\
         | turn | server CPU per turn |\n| --- | --- |\n\
         | output streamed | {:.2} ms |\n| output to `/dev/null` | {:.2} ms |\n\n\
         Streaming costs the server at most {per_kib_us:.1} µs of CPU per KiB of output: the difference also holds the output's way into the tool result, to the model and back in the fake model's echo of it.\n",
        per_turn[0], per_turn[1]
    );
    let json = json!({
        "turns": turns,
        "warmup": warmup,
        "server_cpu_ms_per_turn": {"streamed": per_turn[0], "silent": per_turn[1]},
        "streamed_kib_per_turn": kib_per_turn,
        "server_cpu_us_per_kib": per_kib_us,
    });
    Ok((markdown, json))
}

/// Runs one turn whose model calls `exec` on `command`, read natively with the shell output
/// included; returns the bytes of `shell.output` text that came before the call's result.
async fn one_turn(client: &reqwest::Client, base: &str, session: &str, command: &str) -> anyhow::Result<u64> {
    let call = json!({"command": command, "timeout_seconds": 30});
    let body = json!({
        "input": [{"type": "user.message", "content": format!("[tool:exec {call}]")}],
        "stream": true,
        "previous_turn_id": "auto",
    });
    let response = client
        .post(format!("{base}/api/v1/sessions/{session}/turns?include=shell.output"))
        .json(&body)
        .send()
        .await?
        .error_for_status()
        .context("starting a turn")?;
    let mut frames = FrameBuffer::default();
    let (mut streamed, mut answered, mut done) = (0_u64, false, false);
    let mut stream = response;
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Some(chunk) = tokio::time::timeout_at(deadline.into(), stream.chunk()).await.context("a turn took over 60 s")?? {
        frames.push(&chunk, |frame| {
            let data = client::frame_data(std::str::from_utf8(frame).unwrap_or_default());
            let Ok(event) = serde_json::from_str::<Value>(&data) else { return };
            match event["type"].as_str() {
                Some("shell.output") if !answered => streamed += event["text"].as_str().map_or(0, str::len) as u64,
                Some("tool.response") => answered = true,
                Some("turn.done") => done = true,
                _ => {}
            }
        });
    }
    if !(answered && done) {
        bail!("a turn ended without its tool result or turn.done");
    }
    Ok(streamed)
}
