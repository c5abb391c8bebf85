//! Running git on the host for the skill cache: the system's `git`, a cleared environment (a
//! private `HOME`, no system or user configuration, no prompts, only the `https`, `http` and
//! `git` transports), credentials as configuration in the environment (never on the command line,
//! never in a file), a time limit, and output kept to a bound. For a source a member named, the
//! configuration also pins git to the addresses the egress policy checked (see `cache.rs`).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

use super::SkillError;
use teamster_sandbox::{SYSTEM_PATH, capture, find_program};

/// The transports git may use (`GIT_ALLOW_PROTOCOL`): no `file`, `ssh` or `ext`.
const ALLOWED_PROTOCOLS: &str = "https:http:git";

/// Standard error kept of a git command: enough for its last words.
const MAX_STDERR_BYTES: usize = 64 * 1024;

/// How a git command failed.
pub(crate) enum Failure {
    /// It ran and failed; what it said on standard error (not yet redacted).
    Exited(String),
    /// It ran past the time limit and was killed.
    TimedOut,
    /// It could not be started or waited for.
    Io(std::io::Error),
}

/// The git of the host, set up for the cache.
pub(crate) struct Git {
    program: PathBuf,
    /// `HOME` and the working directory: private to the cache, holding no configuration.
    home: PathBuf,
    timeout: Duration,
    /// Configuration given to every command (`GIT_CONFIG_KEY_n`), e.g. the pinned addresses.
    config: Vec<(String, String)>,
}

impl Git {
    /// The system's git, run with `home` as its home and working directory.
    pub(crate) fn new(home: PathBuf, timeout: Duration) -> Result<Git, SkillError> {
        let program = find_program("git").ok_or_else(|| SkillError::Unavailable("`git` is not installed".to_owned()))?;
        Ok(Git { program, home, timeout, config: Vec::new() })
    }

    /// The same git with configuration entries (name, value) set for every command.
    pub(crate) fn with_config(mut self, config: Vec<(String, String)>) -> Git {
        self.config = config;
        self
    }

    /// The time limit of each command.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Runs `git` with `args` and returns its standard output, of which at most `max_stdout`
    /// bytes are kept (`None` when it wrote more). `header` is an HTTP header git sends with
    /// every request (credentials), passed as configuration in its environment.
    pub(crate) async fn run(
        &self,
        git_dir: Option<&Path>,
        args: &[&OsStr],
        header: Option<&str>,
        max_stdout: usize,
    ) -> Result<Option<Vec<u8>>, Failure> {
        let mut command = Command::new(&self.program);
        if let Some(git_dir) = git_dir {
            command.arg("--git-dir").arg(git_dir);
        }
        command
            .args(args)
            .env_clear()
            .env("PATH", SYSTEM_PATH)
            .env("HOME", &self.home)
            .env("LC_ALL", "C")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_ALLOW_PROTOCOL", ALLOWED_PROTOCOLS)
            .current_dir(&self.home)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let header = header.map(|header| ("http.extraHeader", header));
        let entries = self.config.iter().map(|(name, value)| (name.as_str(), value.as_str())).chain(header);
        let mut count = 0;
        for (index, (name, value)) in entries.enumerate() {
            command.env(format!("GIT_CONFIG_KEY_{index}"), name).env(format!("GIT_CONFIG_VALUE_{index}"), value);
            count = index + 1;
        }
        if count > 0 {
            command.env("GIT_CONFIG_COUNT", count.to_string());
        }
        let mut child = command.spawn().map_err(Failure::Io)?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");
        let finished =
            tokio::time::timeout(self.timeout, async { tokio::join!(child.wait(), capture(stdout, max_stdout), capture(stderr, MAX_STDERR_BYTES)) })
                .await;
        let Ok((status, stdout, stderr)) = finished else {
            let _ = child.start_kill();
            let _ = child.wait().await;
            return Err(Failure::TimedOut);
        };
        if !status.map_err(Failure::Io)?.success() {
            let mut text = stderr.text();
            if stderr.dropped > 0 {
                // The cut may split a secret, which redaction would then miss: drop the cut line.
                text.truncate(text.rfind('\n').unwrap_or(0));
            }
            return Err(Failure::Exited(text));
        }
        Ok((stdout.dropped == 0).then_some(stdout.kept))
    }
}
