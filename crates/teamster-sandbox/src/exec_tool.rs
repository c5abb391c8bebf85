//! The `exec` tool: a session's sandbox offered to the model as one system tool.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use teamster_protocol::ToolInfo;
use teamster_tools::{CallContext, Tool, ToolAnnotations, ToolGate, ToolOutput, ToolSource};

use crate::{ExecOutput, ExecRequest, OverQuota, SandboxProvider};
#[cfg(test)]
use crate::QuotaScope;

/// The tool's name, as the reference harness calls it.
pub const EXEC_TOOL: &str = "exec";

/// The arguments the model writes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExecArguments {
    command: String,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    timeout_seconds: Option<u64>,
}

/// `exec` on one session's sandbox.
pub struct ExecTool {
    provider: Arc<dyn SandboxProvider>,
    sandbox_id: String,
    network: bool,
}

impl ExecTool {
    /// The tool for the provisioned sandbox `sandbox_id`; `network` when the agent allows it.
    pub fn new(provider: Arc<dyn SandboxProvider>, sandbox_id: String, network: bool) -> ExecTool {
        ExecTool { provider, sandbox_id, network }
    }

    /// The tool as the model sees it.
    pub fn definition() -> Tool {
        Tool {
            name: EXEC_TOOL.to_owned(),
            description: "Runs a shell command (`/bin/sh -c`) in this session's sandbox, a Linux machine of its \
                own: /workspace (the working directory, kept for the whole session, where attached files are) \
                and /tmp are writable, the rest of the system is read-only, and the network is off unless \
                the agent allows it. Returns the exit code, stdout and stderr, and the files in /workspace the \
                command made or changed, which the user can download."
                .to_owned(),
            input_schema: serde_json::json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The shell command to run."},
                    "cwd": {"type": "string", "description": "The directory to run in, relative to /workspace or absolute; created if missing."},
                    "env": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Environment variables to set."},
                    "timeout_seconds": {"type": "integer", "minimum": 1, "description": "How long the command may run."},
                },
                "required": ["command"],
                "additionalProperties": false,
            }),
            info: ToolInfo::System { name: EXEC_TOOL.to_owned() },
            annotations: ToolAnnotations { read_only: false, destructive: false, idempotent: false },
            gate: ToolGate::None,
        }
    }
}

#[async_trait]
impl ToolSource for ExecTool {
    async fn list(&self) -> Result<Vec<Tool>, teamster_tools::Error> {
        Ok(vec![ExecTool::definition()])
    }

    async fn call(&self, name: &str, arguments: &str) -> ToolOutput {
        self.call_in(name, arguments, CallContext::NONE).await
    }

    /// Runs the command, its output going to the call's progress sink while it runs.
    async fn call_in(&self, name: &str, arguments: &str, context: CallContext<'_>) -> ToolOutput {
        if name != EXEC_TOOL {
            return ToolOutput::error(format!("unknown tool {name:?}"));
        }
        let arguments: ExecArguments = match serde_json::from_str(arguments) {
            Ok(arguments) => arguments,
            Err(error) => return ToolOutput::error(format!("invalid arguments for exec: {error}")),
        };
        let request = ExecRequest {
            command: arguments.command,
            cwd: arguments.cwd,
            env: arguments.env,
            timeout_seconds: arguments.timeout_seconds,
            network: self.network,
        };
        match self.provider.exec_streaming(&self.sandbox_id, request, context.progress).await {
            Ok(output) => render(&output),
            Err(error) => ToolOutput::error(format!("exec failed: {error}")),
        }
    }
}

/// The result as the model reads it: JSON with the exit code and both streams, each saying
/// when it was cut, the `files` the command made or changed (which the user can download), and
/// an `error` when the command timed out or the sandbox is over its disk quota. A command that fails is a failed call.
fn render(output: &ExecOutput) -> ToolOutput {
    let stream = |text: &str, dropped: u64| {
        if dropped == 0 {
            text.to_owned()
        } else {
            format!("{text}\n[output cut: {dropped} more bytes were dropped]")
        }
    };
    let mut result = serde_json::json!({
        "exit_code": output.exit_code,
        "stdout": stream(&output.stdout, output.stdout_dropped),
        "stderr": stream(&output.stderr, output.stderr_dropped),
    });
    let mut errors = Vec::new();
    if output.timed_out {
        result["timed_out"] = true.into();
        errors.push(format!("the command ran past its timeout ({:.0} s) and was killed", output.duration.as_secs_f64()));
    } else if let Some(signal) = output.signal
        && !output.over_quota.is_some_and(|over| over.killed)
    {
        result["signal"] = signal.into();
    }
    if !output.files.is_empty() {
        let files: Vec<_> = output.files.iter().map(|file| serde_json::json!({"path": file.path, "size": file.size})).collect();
        result["files"] = files.into();
    }
    if let Some(over) = &output.over_quota {
        result["over_quota"] = true.into();
        errors.push(over_quota(over));
    }
    if !errors.is_empty() {
        result["error"] = errors.join("; ").into();
    }
    let content = result.to_string();
    if output.exit_code == Some(0) { ToolOutput::ok(content) } else { ToolOutput::error(content) }
}

/// What the model reads of a sandbox over its disk quota, or its owner's.
fn over_quota(over: &OverQuota) -> String {
    let (what_is, quota, remedy) = (over.scope.what_is(), over.describe(), over.scope.remedy());
    if over.killed {
        format!("the command was killed: {what_is} past the {quota}; {remedy}")
    } else {
        format!("this command could not write to files: {what_is} over the {quota}; {remedy}")
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn results_say_what_was_cut_and_what_failed() {
        let over = OverQuota { killed: false, scope: QuotaScope::Sandbox, used_bytes: 19 << 19, used_files: 12, max_bytes: 8 << 20, max_files: 1000 };
        let cases = [
            (ExecOutput { exit_code: Some(0), stdout: "hi\n".into(), ..ExecOutput::default() }, false, r#""stdout":"hi\n""#),
            (ExecOutput { exit_code: Some(2), stderr: "no\n".into(), ..ExecOutput::default() }, true, r#""exit_code":2"#),
            (
                ExecOutput { exit_code: Some(0), stdout: "x".into(), stdout_dropped: 10, ..ExecOutput::default() },
                false,
                "10 more bytes were dropped",
            ),
            (
                ExecOutput { timed_out: true, signal: Some(9), duration: Duration::from_secs(5), ..ExecOutput::default() },
                true,
                "ran past its timeout (5 s)",
            ),
            (
                ExecOutput { signal: Some(9), over_quota: Some(OverQuota { killed: true, ..over }), ..ExecOutput::default() },
                true,
                r#""over_quota":true"#,
            ),
            (
                ExecOutput { signal: Some(9), over_quota: Some(OverQuota { killed: true, ..over }), ..ExecOutput::default() },
                true,
                "killed: the sandbox is past the disk quota of 8 MiB and 1000 files (holding 9.5 MiB in 12 files); delete files",
            ),
            (
                ExecOutput {
                    exit_code: Some(0),
                    files: vec![crate::ChangedFile { path: "/workspace/a.csv".into(), size: 3 }],
                    ..ExecOutput::default()
                },
                false,
                r#""files":[{"path":"/workspace/a.csv","size":3}]"#,
            ),
            (
                ExecOutput { exit_code: Some(0), over_quota: Some(over), ..ExecOutput::default() },
                false,
                "could not write to files: the sandbox is over the disk quota of 8 MiB and 1000 files (holding 9.5 MiB in 12 files)",
            ),
            (
                ExecOutput {
                    exit_code: Some(0),
                    over_quota: Some(OverQuota { scope: QuotaScope::Subject, max_files: u64::MAX, ..over }),
                    ..ExecOutput::default()
                },
                false,
                "the sandboxes of this session's owner are together over the disk quota of 8 MiB (holding 9.5 MiB in 12 files); \
                 delete files, or sessions",
            ),
        ];
        for (output, is_error, expected) in cases {
            let rendered = render(&output);
            assert_eq!(rendered.is_error, is_error, "{rendered:?}");
            assert!(rendered.content.contains(expected), "{} lacks {expected}", rendered.content);
            let result: serde_json::Value = serde_json::from_str(&rendered.content).unwrap();
            assert_eq!(result.get("error").is_some(), output.timed_out || output.over_quota.is_some(), "{result}");
        }
    }
}
