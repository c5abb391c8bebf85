//! The host programs this crate runs (`bwrap`, `prlimit`, `setpriv`, `git`), found in the
//! system's program directories: the harness's own `PATH` does not decide what runs.

use std::path::{Path, PathBuf};

/// The system's program directories, searched in this order.
const SYSTEM_DIRS: [&str; 5] = ["/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin"];

/// The `PATH` of the programs the harness runs on the host (the same directories, in order).
pub const SYSTEM_PATH: &str = "/usr/bin:/bin:/usr/sbin:/sbin:/usr/local/bin";

/// The program `name` in the system's program directories.
pub fn find_program(name: &str) -> Option<PathBuf> {
    SYSTEM_DIRS.into_iter().map(|dir| Path::new(dir).join(name)).find(|candidate| candidate.is_file())
}

/// Whether this process's effective user is root (from `/proc/self/status`).
pub(crate) fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status").ok().is_some_and(|status| {
        status
            .lines()
            .find_map(|line| line.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1).map(|effective| effective == "0"))
            .unwrap_or(false)
    })
}
