//! Helpers shared by the engine's integration tests.

use std::sync::Mutex;

use teamster_engine::EventSink;
use teamster_protocol::Event;

/// Every emitted event in order; recorded (folded) events replace their placeholders.
#[derive(Default)]
pub struct Recorder {
    pub events: Mutex<Vec<Event>>,
}

impl EventSink for Recorder {
    fn emit(&self, event: &Event) -> u64 {
        let mut events = self.events.lock().unwrap();
        events.push(event.clone());
        events.len() as u64
    }

    fn record(&self, sequence: u64, event: &Event) {
        self.events.lock().unwrap()[sequence as usize - 1] = event.clone();
    }
}
