//! [`Coalescer`]: when a `display_state_changed` goes out. One follows every other event, but
//! while text streams (high-frequency events) at most one per interval: the others are folded
//! into the next, which is due at the interval's end however quiet the stream has gone, so the
//! snapshot a UI holds is always current once nothing moves.

use std::time::{Duration, Instant};

/// The least time between two snapshots sent after high-frequency events.
pub const DISPLAY_INTERVAL: Duration = Duration::from_millis(50);

/// Decides when the display state is sent (see the [module](self)).
#[derive(Debug)]
pub struct Coalescer {
    interval: Duration,
    last_sent: Option<Instant>,
    /// A snapshot is owed, due at this time.
    due: Option<Instant>,
}

impl Default for Coalescer {
    fn default() -> Coalescer {
        Coalescer::new(DISPLAY_INTERVAL)
    }
}

impl Coalescer {
    /// A coalescer that sends at most one snapshot per `interval` while events stream.
    pub fn new(interval: Duration) -> Coalescer {
        Coalescer { interval, last_sent: None, due: None }
    }

    /// After an event was sent at `now`: whether the snapshot goes out now. When it does not,
    /// [`Coalescer::due`] says when it must.
    pub fn after_event(&mut self, high_frequency: bool, now: Instant) -> bool {
        let next_allowed = self.last_sent.map(|sent| sent + self.interval);
        match next_allowed {
            Some(allowed) if high_frequency && now < allowed => {
                self.due.get_or_insert(allowed);
                false
            }
            _ => true,
        }
    }

    /// When an owed snapshot must go out; `None` when none is owed.
    pub fn due(&self) -> Option<Instant> {
        self.due
    }

    /// The snapshot went out at `now`.
    pub fn sent(&mut self, now: Instant) {
        self.last_sent = Some(now);
        self.due = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_events_share_a_snapshot_per_interval_and_the_last_is_owed() {
        let start = Instant::now();
        let mut coalescer = Coalescer::new(Duration::from_millis(50));
        assert!(coalescer.after_event(true, start), "the first snapshot goes at once");
        coalescer.sent(start);
        let soon = start + Duration::from_millis(10);
        assert!(!coalescer.after_event(true, soon));
        assert!(!coalescer.after_event(true, soon + Duration::from_millis(5)));
        assert_eq!(coalescer.due(), Some(start + Duration::from_millis(50)), "owed at the interval's end");
        assert!(coalescer.after_event(false, soon), "a low-frequency event's snapshot is never held");
        coalescer.sent(soon);
        assert_eq!(coalescer.due(), None);
        assert!(coalescer.after_event(true, soon + Duration::from_millis(60)), "past the interval it goes at once");
    }
}
