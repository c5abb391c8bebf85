//! Tool calls and failed calls counted by tool name, without a lock: a fixed table of slots,
//! each claimed once by the first name that hashes to it (open addressing). The table bounds
//! the metrics' cardinality: once it is full, further names are counted as [`OTHER`].

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// How many tool names get counters of their own.
const MAX_TOOLS: usize = 256;

/// The name the calls of tools beyond [`MAX_TOOLS`] are counted under.
pub(crate) const OTHER: &str = "_other";

#[derive(Default)]
struct Slot {
    /// The tool counted here, set once.
    name: OnceLock<Box<str>>,
    calls: AtomicU64,
    errors: AtomicU64,
}

/// The counters of every tool.
pub(crate) struct ToolCounts {
    slots: Box<[Slot]>,
    other: Slot,
}

impl Default for ToolCounts {
    fn default() -> ToolCounts {
        ToolCounts { slots: (0..MAX_TOOLS).map(|_| Slot::default()).collect(), other: Slot::default() }
    }
}

impl ToolCounts {
    /// Counts a call of `name`, and a failure when it failed.
    pub(crate) fn count(&self, name: &str, is_error: bool) {
        let slot = self.slot(name);
        slot.calls.fetch_add(1, Ordering::Relaxed);
        if is_error {
            slot.errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Each counted tool's name, calls and failed calls.
    pub(crate) fn each(&self) -> impl Iterator<Item = (&str, u64, u64)> {
        let named = self.slots.iter().filter_map(|slot| slot.name.get().map(|name| (&**name, slot)));
        let other = Some((OTHER, &self.other)).filter(|(_, slot)| slot.calls.load(Ordering::Relaxed) > 0);
        named.chain(other).map(|(name, slot)| (name, slot.calls.load(Ordering::Relaxed), slot.errors.load(Ordering::Relaxed)))
    }

    /// The slot of `name`: the first one from its hash that holds it or that it claims.
    fn slot(&self, name: &str) -> &Slot {
        let mut hasher = DefaultHasher::new();
        name.hash(&mut hasher);
        let start = usize::try_from(hasher.finish() % MAX_TOOLS as u64).unwrap_or_default();
        (0..MAX_TOOLS)
            .map(|offset| &self.slots[(start + offset) % MAX_TOOLS])
            .find(|slot| **slot.name.get_or_init(|| name.into()) == *name)
            .unwrap_or(&self.other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_past_the_table_are_counted_together() {
        let counts = ToolCounts::default();
        for index in 0..MAX_TOOLS + 2 {
            counts.count(&format!("tool{index}"), index % 2 == 0);
        }
        counts.count("tool0", false);
        let all: Vec<_> = counts.each().collect();
        assert_eq!(all.len(), MAX_TOOLS + 1);
        assert!(all.contains(&("tool0", 2, 1)), "{all:?}");
        assert!(all.contains(&(OTHER, 2, 1)), "{all:?}");
        assert_eq!(all.iter().map(|(_, calls, _)| calls).sum::<u64>(), MAX_TOOLS as u64 + 3);
    }
}
