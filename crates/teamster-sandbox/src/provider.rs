//! The provider seam: what the harness asks of a sandbox, whoever runs it.

use std::collections::BTreeMap;
use std::path::Path;
use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use teamster_tools::ProgressSink;
use tokio::io::AsyncRead;

use crate::{Listing, QuotaScope, SandboxError, SandboxOwner};

/// A session's sandbox, as [`SandboxProvider::provision`] found or made it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Provisioned {
    /// The sandbox's id: stable for the session, the same on every replica.
    pub sandbox_id: String,
    /// Whether this call made it (so `sandbox.created` is announced once per session).
    pub created: bool,
}

/// A session's workspace, as its provider finds it ([`SandboxProvider::workspace`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkspaceState {
    /// Never provisioned, or removed with its session.
    Absent,
    /// Destroyed by [`SandboxProvider::reset`]; the session's next provision makes a fresh one.
    Destroyed,
    /// Provisioned and usable.
    Ready {
        sandbox_id: String,
        /// What its files took at the last measurement (allocated bytes and entries), when one
        /// was made on this replica.
        used: Option<(u64, u64)>,
        /// Its disk quota in bytes; `u64::MAX` for none.
        quota_bytes: u64,
    },
}

/// A command to run in a sandbox.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecRequest {
    /// Run by `/bin/sh -c` in the workspace.
    pub command: String,
    /// The directory to run in, relative to the workspace or absolute (created if missing); the
    /// workspace itself when `None`.
    pub cwd: Option<String>,
    /// Variables set for the command, on top of a minimal environment (`PATH`, `HOME`, `LANG`).
    pub env: BTreeMap<String, String>,
    /// Seconds the command may run; the provider's default when `None`, clamped to its maximum.
    pub timeout_seconds: Option<u64>,
    /// Whether the command may reach the network (only when the agent opts in).
    pub network: bool,
}

/// What a command did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecOutput {
    /// The exit code; `None` when a signal ended it (the timeout's among them).
    pub exit_code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    /// Whether it ran past its timeout and was killed, with everything it started.
    pub timed_out: bool,
    /// Standard output, lossily decoded, cut at the output limit.
    pub stdout: String,
    /// Standard error, likewise.
    pub stderr: String,
    /// Bytes of standard output beyond the limit, read and dropped.
    pub stdout_dropped: u64,
    /// Bytes of standard error beyond the limit, read and dropped.
    pub stderr_dropped: u64,
    /// How long it ran.
    pub duration: Duration,
    /// Set when the sandbox was over its disk quota: when the command started (it could not
    /// write to files), or while it ran (it was killed).
    pub over_quota: Option<OverQuota>,
    /// The workspace's regular files the command made or changed (at most
    /// [`MAX_CHANGED_FILES`]), which can now be downloaded.
    pub files: Vec<ChangedFile>,
}

/// The most changed files an [`ExecOutput`] lists.
pub const MAX_CHANGED_FILES: usize = 20;

/// A file a command made or changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChangedFile {
    /// Its path in the sandbox (`/workspace/...`).
    pub path: String,
    /// Its size in bytes when the command ended.
    pub size: u64,
}

/// A file of a sandbox, opened for reading.
pub struct OpenedFile {
    /// Its length when it was opened; the reader gives at most this many bytes.
    pub len: u64,
    pub reader: Pin<Box<dyn AsyncRead + Send>>,
}

impl std::fmt::Debug for OpenedFile {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("OpenedFile").field("len", &self.len).finish_non_exhaustive()
    }
}

/// A sandbox over its disk quota (or its owner's), as a command found it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OverQuota {
    /// Whether the command was killed for growing the sandbox past the quota; otherwise the
    /// sandbox was over it when the command started, and the command could not write to files.
    pub killed: bool,
    /// Which quota: the sandbox's own, or its owner's or tenant's sandboxes' together.
    pub scope: QuotaScope,
    /// What the files of `scope` took at the last measurements: allocated bytes, and entries.
    pub used_bytes: u64,
    pub used_files: u64,
    /// The quota of `scope` (for the sandbox, [`crate::Limits::max_workspace_bytes`] and
    /// [`crate::Limits::max_workspace_files`]).
    pub max_bytes: u64,
    pub max_files: u64,
}

impl OverQuota {
    /// The quota and what is used of it, as people read it ("disk quota of 8 MiB and 1000
    /// files (holding 9.5 MiB in 12 files)"); a bound of `u64::MAX` is none.
    pub fn describe(&self) -> String {
        describe_quota(self.max_bytes, self.max_files, self.used_bytes, self.used_files)
    }
}

/// See [`OverQuota::describe`].
pub(crate) fn describe_quota(max_bytes: u64, max_files: u64, used_bytes: u64, used_files: u64) -> String {
    let bound = match (max_bytes, max_files) {
        (u64::MAX, files) => format!("{files} files"),
        (bytes, u64::MAX) => format!("{} MiB", crate::mib(bytes)),
        (bytes, files) => format!("{} MiB and {files} files", crate::mib(bytes)),
    };
    format!("disk quota of {bound} (holding {} MiB in {used_files} files)", crate::mib(used_bytes))
}

/// Runs sandboxes: one per session, created on first use and reused by every later turn and
/// every sub-agent of the session.
///
/// A command is killed, with every process it started, when its timeout passes and when the
/// future of [`SandboxProvider::exec`] is dropped (a cancelled turn).
#[async_trait]
pub trait SandboxProvider: Send + Sync {
    /// Finds or makes the sandbox of `session_id`, whose files count toward `owner`'s disk
    /// quota (and its tenant's).
    async fn provision(&self, session_id: &str, owner: &SandboxOwner) -> Result<Provisioned, SandboxError>;

    /// Runs a command in a provisioned sandbox.
    async fn exec(&self, sandbox_id: &str, request: ExecRequest) -> Result<ExecOutput, SandboxError>;

    /// Runs a command like [`SandboxProvider::exec`], handing what it prints to `output` while
    /// it runs (at most what its result keeps of each stream). Providers that cannot stream
    /// output give it all in the result alone.
    async fn exec_streaming(&self, sandbox_id: &str, request: ExecRequest, output: &dyn ProgressSink) -> Result<ExecOutput, SandboxError> {
        let _ = output;
        self.exec(sandbox_id, request).await
    }

    /// Opens a file of the sandbox (`path` under `/workspace` or `/tmp`) for reading, if it is
    /// within the provider's transfer limit: a download streams it from there.
    async fn open_file(&self, sandbox_id: &str, path: &str) -> Result<OpenedFile, SandboxError>;

    /// Reads a whole file of the sandbox, as [`SandboxProvider::open_file`] finds it.
    async fn read_file(&self, sandbox_id: &str, path: &str) -> Result<Vec<u8>, SandboxError> {
        use tokio::io::AsyncReadExt;
        let mut opened = self.open_file(sandbox_id, path).await?;
        let mut contents = Vec::with_capacity(opened.len.min(1024 * 1024) as usize);
        opened.reader.read_to_end(&mut contents).await.map_err(SandboxError::io(format!("reading {path}")))?;
        Ok(contents)
    }

    /// Writes a file of the workspace (`path` relative to it), creating its directories.
    /// Refused with [`SandboxError::QuotaExceeded`] when the file would take the sandbox past
    /// its disk quota.
    async fn write_file(&self, sandbox_id: &str, path: &str, contents: &[u8]) -> Result<(), SandboxError>;

    /// Lists the files under a directory of the sandbox (`path` under `/workspace` or `/tmp`;
    /// the workspace itself when empty) to `depth` levels, at most `max_entries` of them, never
    /// following a symbolic link (one is listed as a link).
    async fn list_files(&self, sandbox_id: &str, path: &str, depth: u32, max_entries: usize) -> Result<Listing, SandboxError> {
        let _ = (sandbox_id, path, depth, max_entries);
        Err(SandboxError::Unavailable("this provider cannot list files".to_owned()))
    }

    /// Removes the sandbox of `session_id` and everything in it; nothing when there is none.
    async fn destroy(&self, session_id: &str) -> Result<(), SandboxError>;

    /// The provider's name, as users read it (`bubblewrap`).
    fn name(&self) -> &'static str {
        "custom"
    }

    /// The state of the workspace of `session_id`.
    async fn workspace(&self, session_id: &str) -> Result<WorkspaceState, SandboxError> {
        let _ = session_id;
        Err(SandboxError::Unavailable("this provider cannot report a workspace".to_owned()))
    }

    /// Destroys the workspace of `session_id` while its session goes on: its running commands
    /// are killed first (their [`SandboxProvider::exec`] answers [`SandboxError::Destroyed`]),
    /// then its files are removed, and it reads [`WorkspaceState::Destroyed`] until the next
    /// [`SandboxProvider::provision`] makes a fresh one.
    async fn reset(&self, session_id: &str) -> Result<(), SandboxError> {
        let _ = session_id;
        Err(SandboxError::Unavailable("this provider cannot destroy a workspace".to_owned()))
    }

    /// Mounts a skill into a provisioned sandbox: the files of `dir` (a directory on the host,
    /// from [`crate::SkillCache`]) appear read-only at `/workspace/skills/<name>`
    /// ([`crate::SKILLS_DIR`]) for every later command of the sandbox, on every replica. Mounting
    /// a name again replaces what it showed. A remote provider uploads the files instead.
    ///
    /// Providers that cannot mount skills answer [`SandboxError::Unavailable`].
    async fn mount_skill(&self, sandbox_id: &str, name: &str, dir: &Path) -> Result<(), SandboxError> {
        let _ = (sandbox_id, name, dir);
        Err(SandboxError::Unavailable("this provider cannot mount skills".to_owned()))
    }
}
