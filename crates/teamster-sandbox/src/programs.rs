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
