//! The monotonic clock leases are measured on.

use std::sync::LazyLock;
use std::time::{Duration, Instant};

/// Milliseconds on a monotonic clock that starts with the process.
pub(crate) fn clock() -> u64 {
    static START: LazyLock<Instant> = LazyLock::new(Instant::now);
    millis(START.elapsed())
}

/// A duration in whole milliseconds, saturating.
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
