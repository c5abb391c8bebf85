//! The bounds every sandboxed command runs under, and whether its control group must be there.

use std::time::Duration;

/// Limits of one command, and of a workspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// How long a command runs when the call does not say (`timeout_seconds`).
    pub default_timeout: Duration,
    /// The longest timeout a call may ask for.
    pub max_timeout: Duration,
    /// Bytes of standard output, and as many of standard error, kept per command; the rest is
    /// read and dropped, and the result says so.
    pub max_output_bytes: usize,
    /// Processes (and threads) the sandbox's user may have at once (`RLIMIT_NPROC`), and a
    /// command's processes together (`pids.max` of its control group).
    pub max_processes: u64,
    /// Address space of each process (`RLIMIT_AS`), if less than
    /// [`Limits::max_command_memory_bytes`].
    pub max_memory_bytes: u64,
    /// Memory of a command's processes together, with the tmpfs and shared memory pages they
    /// write (its control group's `memory.max`; swap is not granted on top).
    pub max_command_memory_bytes: u64,
    /// CPU time a command's processes may take together per wall-clock time, in thousandths of
    /// a CPU (its control group's `cpu.max`).
    pub max_command_cpu_millis: u64,
    /// The size of the sandbox's `/dev/shm`, a tmpfs of its own (host memory, and so bounded
    /// even without a control group). The rest of the sandbox's tmpfs mounts are read-only.
    pub max_shm_bytes: u64,
    /// Whether commands run in control groups of their own.
    pub cgroups: CgroupPolicy,
    /// The largest file a command may write (`RLIMIT_FSIZE`).
    pub max_file_bytes: u64,
    /// Open files per process (`RLIMIT_NOFILE`).
    pub max_open_files: u64,
    /// The most a file read from or written to the workspace by the harness may hold.
    pub max_transfer_bytes: u64,
    /// The disk space the files of a sandbox's workspace and `/tmp` may take together
    /// (allocated blocks). Over it, commands cannot write to files, and one that grows the
    /// sandbox further is killed.
    pub max_workspace_bytes: u64,
    /// The most entries (files, directories, links) a sandbox's workspace and `/tmp` may hold
    /// together, enforced like [`Limits::max_workspace_bytes`].
    pub max_workspace_files: u64,
    /// The disk space the sandboxes of one subject (a session's creator) may take together,
    /// enforced like [`Limits::max_workspace_bytes`] for each of them (`owners.rs`);
    /// `u64::MAX` for no bound.
    pub max_subject_bytes: u64,
    /// The most entries the sandboxes of one subject may hold together.
    pub max_subject_files: u64,
    /// The disk space the sandboxes of one tenant's subjects may take together; `u64::MAX`
    /// for no bound.
    pub max_tenant_bytes: u64,
    /// The most entries the sandboxes of one tenant may hold together.
    pub max_tenant_files: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            default_timeout: Duration::from_secs(120),
            max_timeout: Duration::from_secs(600),
            max_output_bytes: 64 * 1024,
            max_processes: 256,
            max_memory_bytes: 2 * 1024 * 1024 * 1024,
            max_command_memory_bytes: 1024 * 1024 * 1024,
            max_command_cpu_millis: 1000,
            max_shm_bytes: 64 * 1024 * 1024,
            cgroups: CgroupPolicy::Auto,
            max_file_bytes: 256 * 1024 * 1024,
            max_open_files: 1024,
            max_transfer_bytes: 64 * 1024 * 1024,
            max_workspace_bytes: 1024 * 1024 * 1024,
            max_workspace_files: 100_000,
            max_subject_bytes: 4 * 1024 * 1024 * 1024,
            max_subject_files: 400_000,
            max_tenant_bytes: u64::MAX,
            max_tenant_files: u64::MAX,
        }
    }
}

/// Whether commands run in control groups of their own, bounding memory, processes and CPU
/// (`cgroup.rs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CgroupPolicy {
    /// Where the host lets the harness make them; otherwise commands run without, and the log says so.
    #[default]
    Auto,
    /// Always: the provider does not start where the host does not let the harness make them.
    Required,
    /// Never.
    Off,
}

impl Limits {
    /// The timeout of a call that asks for `requested` seconds: the default when it asks for
    /// none, at most [`Limits::max_timeout`], at least one second.
    pub fn timeout(&self, requested: Option<u64>) -> Duration {
        match requested {
            None => self.default_timeout.min(self.max_timeout),
            Some(seconds) => Duration::from_secs(seconds.max(1)).min(self.max_timeout),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_clamped() {
        let limits = Limits::default();
        let cases = [(None, 120), (Some(0), 1), (Some(5), 5), (Some(600), 600), (Some(86_400), 600)];
        for (requested, seconds) in cases {
            assert_eq!(limits.timeout(requested), Duration::from_secs(seconds), "{requested:?}");
        }
    }
}
