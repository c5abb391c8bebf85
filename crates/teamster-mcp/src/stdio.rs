//! The stdio transport's process: spawning the server, draining its stderr, reaping it, and
//! stopping it when the connection goes away.

use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::process::{ChildStdin, ChildStdout, Command};
use tokio::sync::{oneshot, watch};

use crate::McpError;
use crate::config::StdioTransport;

/// Variables a server inherits from this process; everything else must be configured.
const INHERITED_ENV: &[&str] = &["PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "TMPDIR"];

/// How long a server may take to exit on its own once its stdin is closed.
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// A running server process. Dropping it closes nothing by itself; it asks the reaper task to
/// stop the process (after a grace period for a clean exit once stdin is closed).
pub(crate) struct ServerProcess {
    /// Dropped to tell the reaper to stop the process.
    _stop: oneshot::Sender<()>,
    /// The exit status once the process has exited.
    exit: watch::Receiver<Option<ExitStatus>>,
}

impl ServerProcess {
    /// Starts the server and returns its stdout and stdin for the transport.
    pub(crate) fn spawn(
        server_name: &str,
        config: &StdioTransport,
    ) -> Result<(ServerProcess, ChildStdout, ChildStdin), McpError> {
        let mut command = Command::new(&config.command);
        command.args(&config.args).env_clear();
        for name in INHERITED_ENV {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        command.envs(&config.env);
        if let Some(cwd) = &config.cwd {
            command.current_dir(cwd);
        }
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
        let mut child = command.spawn().map_err(|error| McpError::Spawn {
            command: config.command.clone(),
            message: error.to_string(),
        })?;
        let (Some(stdout), Some(stdin), Some(stderr)) =
            (child.stdout.take(), child.stdin.take(), child.stderr.take())
        else {
            return Err(McpError::Spawn {
                command: config.command.clone(),
                message: "no stdio pipes".to_owned(),
            });
        };
        tokio::spawn(drain_stderr(server_name.to_owned(), stderr));

        let (stop_sender, stop) = oneshot::channel::<()>();
        let (exit_sender, exit) = watch::channel(None);
        let server = server_name.to_owned();
        tokio::spawn(async move {
            let status = tokio::select! {
                status = child.wait() => status,
                _ = stop => match tokio::time::timeout(EXIT_GRACE, child.wait()).await {
                    Ok(status) => status,
                    Err(_) => {
                        tracing::debug!(server, "MCP server did not exit after stdin closed; killing it");
                        let _ = child.start_kill();
                        child.wait().await
                    }
                },
            };
            match status {
                Ok(status) => {
                    tracing::debug!(server, %status, "MCP server process exited");
                    let _ = exit_sender.send(Some(status));
                }
                Err(error) => tracing::warn!(server, %error, "cannot wait for MCP server process"),
            }
        });
        Ok((ServerProcess { _stop: stop_sender, exit }, stdout, stdin))
    }

    /// The exit status, waiting up to `patience` for the process to exit.
    pub(crate) async fn exit_status(&self, patience: Duration) -> Option<ExitStatus> {
        let mut exit = self.exit.clone();
        let waited = tokio::time::timeout(patience, exit.wait_for(Option::is_some)).await;
        match waited {
            Ok(Ok(status)) => *status,
            _ => None,
        }
    }
}

/// Reads the server's stderr to its end in bounded chunks and logs them, so a chatty server
/// never blocks on a full pipe.
async fn drain_stderr(server: String, mut stderr: tokio::process::ChildStderr) {
    let mut buffer = vec![0u8; 8192];
    loop {
        match stderr.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => {
                let text = String::from_utf8_lossy(&buffer[..read]);
                tracing::debug!(server, stderr = %text.trim_end(), "MCP server stderr");
            }
        }
    }
}
