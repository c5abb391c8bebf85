//! Keeps the server's memory bounded after large requests, on glibc.
//!
//! glibc's malloc serves large blocks with `mmap` and gives them back on `free`, but after the
//! first such block is freed it raises its threshold to that block's size (up to 32 MiB): later
//! multi-megabyte request bodies and attachments then come from its arenas, which it rarely
//! gives back, and resident memory stays tens of megabytes higher after a burst of large turns.
//! Setting `MALLOC_MMAP_THRESHOLD_` fixes the threshold, and glibc reads it only at start-up, so
//! `teamster serve` starts itself again with it set (once: the variable is then present). An
//! operator's own setting is kept. Other C libraries ignore the variable.

/// The fixed threshold: glibc's initial default, 128 KiB.
const MMAP_THRESHOLD: &str = "131072";
const VARIABLE: &str = "MALLOC_MMAP_THRESHOLD_";

/// Replaces this process with itself, `MALLOC_MMAP_THRESHOLD_` set, unless it is set already.
/// Returns only if it is set, or if the restart failed (the server then runs as it is).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn pin_mmap_threshold() {
    use std::os::unix::process::CommandExt;
    if std::env::var_os(VARIABLE).is_some() {
        return;
    }
    let Ok(executable) = std::env::current_exe() else { return };
    let error = std::process::Command::new(executable)
        .args(std::env::args_os().skip(1))
        .env(VARIABLE, MMAP_THRESHOLD)
        .exec();
    eprintln!("warning: could not restart with {VARIABLE} set ({error}); memory may stay high after large requests");
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn pin_mmap_threshold() {}
