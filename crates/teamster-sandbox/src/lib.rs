//! Sandboxes for the code agents run.
//!
//! [`SandboxProvider`] is the seam: provision a session's sandbox, run a command in it, read and
//! write its files, mount a skill into it, destroy it. [`Bubblewrap`] is the local provider: one workspace directory per
//! session under a root (which may be shared storage, for several replicas), each command run by
//! `bwrap` in fresh namespaces with no network, the system read-only, the workspace the only
//! writable place besides the sandbox's own `/tmp` (kept for the session like the workspace), no view of the host's files, environment or
//! credentials, and limits on processes, memory, file size, output and time. A remote provider
//! (a Kubernetes pod, Daytona, E2B) implements the same trait.
//!
//! [`ExecTool`] offers a session's sandbox to the model as the `exec` tool. `limits.rs` holds
//! the bounds, `workspace.rs` the safe resolution of paths a caller names, `listing.rs` the
//! listing of a directory's files from the host, never following a link,
//! `command.rs` the `bwrap` command line, `output.rs` the capped capture of a command's output, `gates.rs` the stopping of a sandbox's
//! commands when its workspace is destroyed, `relay.rs` a running command's output handed on as it comes,
//! `programs.rs` where the host programs are found, `quota.rs` the disk quota, `owners.rs` whose a
//! sandbox is and the quota of one subject's or tenant's sandboxes together, `seccomp.rs` the
//! seccomp filter every command runs under (after Docker's default profile: no new namespaces,
//! `io_uring`, key ring, `bpf`, `ptrace` or mounts; `fallocate` fails, so no call allocates blocks
//! the file size limit does not count), `cgroup.rs` the control group bounding each command's
//! processes together (memory with tmpfs pages, processes, CPU) where the host allows one.
//!
//! A sandbox's workspace and `/tmp` together may take [`Limits::max_workspace_bytes`] (allocated
//! blocks) in [`Limits::max_workspace_files`] entries, measured by walking them on the host
//! (never following a link). No walk is on a command's path: a command starts from the
//! sandbox's last measurement, and over the quota it runs with a file size limit of 0 (it can
//! read, list and delete files, not write to them); a watchdog measures every 250 ms while it
//! runs and kills it when the sandbox is over the quota and grew since the measurement before;
//! once it ends, the sandbox is measured in the background (a command starting while that
//! measurement is under way waits for it). Its result says when the sandbox was over the quota
//! ([`ExecOutput::over_quota`]), and [`SandboxProvider::write_file`] refuses a file that would
//! not fit. A command overshoots the quota by at most what it writes in 250 ms plus one file of
//! [`Limits::max_file_bytes`].
//!
//! Skills (directories with a `SKILL.md`, which `teamster-skills` fetches and reads) are shown
//! read-only by [`SandboxProvider::mount_skill`] at `/workspace/skills/<name>` ([`SKILLS_DIR`])
//! to every later command of a sandbox. [`find_program`] and [`capture`] are the process helpers
//! the sandbox runs its programs with, which the skills fetcher runs git with too.

mod bubblewrap;
mod cgroup;
mod command;
mod exec_tool;
mod gates;
mod inherited;
mod limits;
mod listing;
mod network;
mod output;
mod owners;
mod programs;
mod provider;
mod quota;
mod relay;
mod seccomp;
mod skill_mounts;
mod workspace;

pub use bubblewrap::Bubblewrap;
pub use exec_tool::{EXEC_TOOL, ExecTool};
pub use limits::{CgroupPolicy, Limits};
pub use listing::{FileKind, ListedFile, Listing};
pub use owners::{QuotaScope, SandboxOwner};
pub use provider::{ChangedFile, ExecOutput, ExecRequest, MAX_CHANGED_FILES, OpenedFile, OverQuota, Provisioned, SandboxProvider, WorkspaceState};
pub use output::{Captured, capture};
pub use programs::{SYSTEM_PATH, find_program};
pub use skill_mounts::{SKILLS_DIR, is_skill_name};
pub use workspace::{TMP_DIR, WORKSPACE_DIR};

/// Why a sandbox operation failed. A command that runs and fails is not an error: its exit code
/// and output are an [`ExecOutput`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// The provider cannot run sandboxes on this machine (no `bwrap`, no user namespaces).
    #[error("sandboxes are unavailable: {0}")]
    Unavailable(String),
    /// The session's sandbox does not exist (never provisioned, or removed).
    #[error("sandbox {0} does not exist")]
    NotFound(String),
    /// The workspace was destroyed while the command ran; the command was killed.
    #[error("the workspace was destroyed while the command ran (sandbox {0}); the command was killed")]
    Destroyed(String),
    /// A path names something outside the workspace, or is malformed.
    #[error("invalid path {path:?}: {reason}")]
    InvalidPath { path: String, reason: String },
    /// No file at the path.
    #[error("no file at {0:?}")]
    NoSuchFile(String),
    /// A file or a request is over its limit.
    #[error("{what} is over the limit of {limit} bytes")]
    TooLarge { what: String, limit: u64 },
    /// Writing a file would take the sandbox past its disk quota, or its owner's.
    #[error("writing {path} ({bytes} bytes) would go past a quota: {} over the {}; {}", over.scope.what_is(), over.describe(), over.scope.remedy())]
    QuotaExceeded { path: String, bytes: u64, over: OverQuota },
    /// The request itself is malformed (an empty command, a bad variable name).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The host failed (a directory that cannot be created, a process that cannot be started).
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

/// Bytes as mebibytes, with one decimal when not whole.
pub(crate) fn mib(bytes: u64) -> String {
    const MIB: u64 = 1024 * 1024;
    if bytes.is_multiple_of(MIB) { (bytes / MIB).to_string() } else { format!("{:.1}", bytes as f64 / MIB as f64) }
}

impl SandboxError {
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> SandboxError {
        let context = context.into();
        move |source| SandboxError::Io { context, source }
    }
}
