//! Keeps the server's memory bounded after large requests, on glibc.
//!
//! glibc's malloc serves large blocks with `mmap` and gives them back on `free`, but after the
//! first such block is freed it raises its threshold to that block's size (up to 32 MiB): later
//! multi-megabyte request bodies and attachments then come from its arenas, which it rarely
//! gives back, and resident memory stays tens of megabytes higher after a burst of large turns.
//! Setting the threshold with `mallopt(M_MMAP_THRESHOLD)` fixes it (glibc stops adjusting it),
//! exactly as `MALLOC_MMAP_THRESHOLD_` does. `teamster serve` sets it first thing, before any
//! thread starts. An operator's own `MALLOC_MMAP_THRESHOLD_` is kept. Other C libraries are left
//! alone.

/// The fixed threshold: glibc's initial default, 128 KiB.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: libc::c_int = 128 * 1024;

/// Fixes glibc's mmap threshold at 128 KiB, unless `MALLOC_MMAP_THRESHOLD_` sets it already.
/// Call it before starting threads (`mallopt` is not meant to race with allocations).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub fn pin_mmap_threshold() {
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_some() {
        return;
    }
    // SAFETY: mallopt only changes malloc's parameters; it is called on the main thread before
    // any other thread exists.
    if unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) } != 1 {
        eprintln!("warning: could not fix malloc's mmap threshold; memory may stay high after large requests");
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn pin_mmap_threshold() {}
