//! A turn's history: the content events of its ancestors and its own `turn.created`, read from
//! the store or taken from a cache of conversation histories by turn id. A turn chained to a
//! cached one reads nothing of the chain from the store, so the cost of a turn does not grow
//! with the length of its session. When the previous turn ran on another replica, the chain
//! is walked back only to the nearest turn cached here (with turns round-robined over two
//! replicas, the one before the previous), and only the turns after it are read: the cost
//! stays flat across replicas too, without sticky routing.
//!
//! The cache is bounded in bytes (the events' JSON size) as well as in entries, so large turns
//! cannot make it hold more memory than [`MAX_BYTES`]. A history's size is measured once, and
//! a history that extends a cached one only measures what it adds. Caching a turn's history
//! drops its predecessor's: a session's next turn chains onto its newest.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use teamster_protocol::Event;
use teamster_store::{ContentKinds, ContentQuery, EventLog, TurnRecord};


/// The most histories kept; the oldest is dropped first.
const MAX_ENTRIES: usize = 256;
/// The most bytes (of the events' JSON) all histories together may take.
const MAX_BYTES: usize = 32 << 20;
/// Larger histories are not cached (they are rebuilt from the store when needed).
pub(super) const MAX_CACHED_HISTORY_BYTES: usize = 8 << 20;

#[derive(Default)]
pub(crate) struct HistoryCache {
    state: Mutex<State>,
}

struct Entry {
    events: Arc<Vec<Event>>,
    bytes: usize,
}

#[derive(Default)]
struct State {
    entries: HashMap<String, Entry>,
    /// Insertion order, oldest first; may name entries removed since.
    order: VecDeque<String>,
    /// The bytes of every entry.
    bytes: usize,
}

impl HistoryCache {
    pub fn get(&self, turn_id: &str) -> Option<Arc<Vec<Event>>> {
        self.lock().entries.get(turn_id).map(|entry| entry.events.clone())
    }

    /// Whether the history through `turn_id` is cached: the turn ended here, its end stored.
    pub fn contains(&self, turn_id: &str) -> bool {
        self.lock().entries.contains_key(turn_id)
    }

    /// Caches the history through `turn_id`, which extends the cached history through
    /// `extends` (an ancestor's, when there was one); the latter leaves the cache.
    pub fn insert(&self, turn_id: &str, extends: Option<&str>, history: Vec<Event>) {
        let known = extends.and_then(|ancestor| {
            let state = self.lock();
            state.entries.get(ancestor).map(|entry| (entry.events.len(), entry.bytes))
        });
        let bytes = match known {
            Some((length, bytes)) if length <= history.len() => bytes + json_bytes(&history[length..]),
            _ => json_bytes(&history),
        };
        let mut state = self.lock();
        if let Some(ancestor) = extends {
            state.remove(ancestor);
        }
        if bytes > MAX_CACHED_HISTORY_BYTES {
            return;
        }
        state.remove(turn_id);
        state.entries.insert(turn_id.to_owned(), Entry { events: Arc::new(history), bytes });
        state.order.push_back(turn_id.to_owned());
        state.bytes += bytes;
        while state.entries.len() > MAX_ENTRIES || state.bytes > MAX_BYTES {
            let Some(oldest) = state.order.pop_front() else { break };
            state.remove(&oldest);
        }
        // Names of entries removed out of order are dropped once they are many.
        if state.order.len() > 2 * MAX_ENTRIES {
            let State { entries, order, .. } = &mut *state;
            order.retain(|id| entries.contains_key(id));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl State {
    fn remove(&mut self, turn_id: &str) {
        if let Some(entry) = self.entries.remove(turn_id) {
            self.bytes -= entry.bytes;
        }
    }
}

/// The size of events as JSON, without building the text.
fn json_bytes(events: &[Event]) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    for event in events {
        // Writing our own types to a counter cannot fail.
        let _ = serde_json::to_writer(&mut counter, event);
    }
    counter.0
}

/// Content events read per store call when rebuilding history.
const HISTORY_PAGE: u32 = 1000;

/// The content a turn wrote, as its sink kept it.
pub(crate) enum Written {
    /// Every content write, in sequence order, as stored.
    Kept(Vec<(u64, Arc<str>)>),
    /// More than a cached history may hold.
    TooLarge,
}

/// The history a turn was planned with, and the cached history it extends.
pub(super) struct History {
    pub events: Vec<Event>,
    /// The nearest ancestor whose cached history `events` begins with.
    extends: Option<String>,
}

impl HistoryCache {
    /// Caches the history through a finished turn: what it was planned with, plus what it
    /// recorded (everything after its `turn.created`): `written`, the content its sink kept
    /// as stored, else (a turn taken over) read back from the store.
    pub(super) async fn cache(&self, log: &dyn EventLog, turn: &TurnRecord, history: History, written: Option<Written>) {
        let History { mut events, extends } = history;
        let recorded = match written {
            Some(Written::Kept(content)) => {
                let after_created = content.iter().filter(|(sequence, _)| *sequence > 1);
                Ok(parse(&turn.id, after_created.map(|(sequence, data)| (*sequence, &**data))))
            }
            // Too large to cache: the next turn reads it from the store.
            Some(Written::TooLarge) => return,
            None => content_events(log, &turn.id, Some(1)).await,
        };
        match recorded {
            Ok(recorded) => {
                events.extend(recorded);
                self.insert(&turn.id, extends.as_deref(), events);
            }
            Err(error) => tracing::warn!(turn_id = %turn.id, %error, "history not cached"),
        }
    }

    /// The content events of the turn's ancestors, oldest first, then the turn's own:
    /// `own_created`, its `turn.created` as stored, for a turn just created (its only content
    /// yet), else read from the store. The chain is read back only to the nearest ancestor
    /// cached here.
    pub(super) async fn history(
        &self,
        log: &dyn EventLog,
        turn: &TurnRecord,
        own_created: Option<&str>,
    ) -> Result<History, teamster_store::Error> {
        // Ancestors not cached here, newest first.
        let mut uncached = Vec::new();
        let mut cached = None;
        let mut next = turn.previous_turn_id.clone();
        while let Some(id) = next {
            if let Some(history) = self.get(&id) {
                cached = Some((id, history));
                break;
            }
            let ancestor = log.get_turn(&turn.session_id, &id).await?;
            next = ancestor.previous_turn_id;
            uncached.push(id);
        }
        let (extends, mut events) = match cached {
            Some((id, history)) => (Some(id), history.as_ref().clone()),
            None => (None, Vec::new()),
        };
        for turn_id in uncached.iter().rev() {
            events.extend(content_events(log, turn_id, None).await?);
        }
        match own_created {
            Some(created) => events.extend(parse(&turn.id, [(1, created)])),
            None => events.extend(content_events(log, &turn.id, None).await?),
        }
        Ok(History { events, extends })
    }
}

/// A turn's content events after sequence number `after`, parsed.
async fn content_events(log: &dyn EventLog, turn_id: &str, mut after: Option<u64>) -> Result<Vec<Event>, teamster_store::Error> {
    let mut events = Vec::new();
    loop {
        let query = ContentQuery { kinds: ContentKinds::All, descending: false, after, limit: HISTORY_PAGE };
        let page = log.read_content(turn_id, &query).await?;
        events.extend(parse(turn_id, page.iter().map(|stored| (stored.sequence, &*stored.data))));
        match page.last() {
            Some(last) if page.len() == HISTORY_PAGE as usize => after = Some(last.sequence),
            _ => return Ok(events),
        }
    }
}

/// Stored content events, parsed; one that does not parse is skipped with a warning.
fn parse<'a>(turn_id: &str, stored: impl IntoIterator<Item = (u64, &'a str)>) -> Vec<Event> {
    let parsed = stored.into_iter().filter_map(|(sequence, data)| match serde_json::from_str::<Event>(data) {
        Ok(event) => Some(event),
        Err(error) => {
            tracing::warn!(%turn_id, sequence, %error, "unreadable stored event skipped");
            None
        }
    });
    parsed.collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use teamster_protocol::event::ToolResponse;

    fn response(content_bytes: usize) -> Event {
        Event::ToolResponse(ToolResponse {
            id: "evt".into(),
            thread_id: "main".into(),
            created_at: "2025-01-01T00:00:00.000Z".into(),
            tool_call_id: "c".into(),
            content: "x".repeat(content_bytes),
        })
    }

    #[test]
    fn keeps_the_newest_entries_within_bounds() {
        let cache = HistoryCache::default();
        for index in 0..MAX_ENTRIES + 10 {
            cache.insert(&format!("turn_{index}"), None, Vec::new());
        }
        assert!(cache.get("turn_0").is_none());
        assert!(cache.get(&format!("turn_{}", MAX_ENTRIES + 9)).is_some());
        assert_eq!(cache.lock().entries.len(), MAX_ENTRIES);
        assert_eq!(cache.lock().order.len(), MAX_ENTRIES);
    }

    #[test]
    fn bytes_are_bounded_and_counted_once_per_chain() {
        let cache = HistoryCache::default();
        // Forty sessions of 1 MiB histories: only as many as fit in the byte budget stay.
        for session in 0..40 {
            cache.insert(&format!("turn_{session}"), None, vec![response(1 << 20)]);
        }
        let state = cache.lock();
        assert!(state.bytes <= MAX_BYTES, "{} bytes cached", state.bytes);
        assert_eq!(state.bytes, state.entries.values().map(|entry| entry.bytes).sum::<usize>());
        assert!(state.entries.len() < 40 && state.entries.contains_key("turn_39"));
        drop(state);

        // A chain: each turn's history replaces its predecessor's and adds only its own bytes.
        let cache = HistoryCache::default();
        let mut history = vec![response(1000)];
        cache.insert("t1", None, history.clone());
        history.push(response(2000));
        cache.insert("t2", Some("t1"), history.clone());
        assert!(cache.get("t1").is_none());
        assert_eq!(cache.lock().bytes, json_bytes(&history));
        // A history over the entry limit is not kept.
        cache.insert("t3", Some("t2"), vec![response(MAX_CACHED_HISTORY_BYTES)]);
        assert!(cache.get("t3").is_none() && cache.get("t2").is_none());
        assert_eq!(cache.lock().bytes, 0);
    }
}
