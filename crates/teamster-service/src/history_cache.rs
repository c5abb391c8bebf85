//! A bounded cache of conversation histories by turn id: the content events of a turn and all
//! its ancestors. A turn chained to a cached one reads nothing of the chain from the store, so
//! the cost of a turn does not grow with the length of its session.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use teamster_protocol::Event;

/// The most histories kept; the oldest is dropped first.
const MAX_ENTRIES: usize = 256;
/// Longer histories are not cached (they are rebuilt from the store when needed).
const MAX_EVENTS: usize = 20_000;

#[derive(Default)]
pub(crate) struct HistoryCache {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    entries: HashMap<String, Arc<Vec<Event>>>,
    /// Insertion order, oldest first.
    order: VecDeque<String>,
}

impl HistoryCache {
    pub fn get(&self, turn_id: &str) -> Option<Arc<Vec<Event>>> {
        self.lock().entries.get(turn_id).cloned()
    }

    pub fn insert(&self, turn_id: &str, history: Vec<Event>) {
        if history.len() > MAX_EVENTS {
            return;
        }
        let mut state = self.lock();
        if state.entries.insert(turn_id.to_owned(), Arc::new(history)).is_none() {
            state.order.push_back(turn_id.to_owned());
        }
        while state.order.len() > MAX_ENTRIES {
            if let Some(oldest) = state.order.pop_front() {
                state.entries.remove(&oldest);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_entries_within_bounds() {
        let cache = HistoryCache::default();
        for index in 0..MAX_ENTRIES + 10 {
            cache.insert(&format!("turn_{index}"), Vec::new());
        }
        assert!(cache.get("turn_0").is_none());
        assert!(cache.get(&format!("turn_{}", MAX_ENTRIES + 9)).is_some());
        assert_eq!(cache.lock().entries.len(), MAX_ENTRIES);
        assert_eq!(cache.lock().order.len(), MAX_ENTRIES);
    }
}
