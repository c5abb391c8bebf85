//! [`SharedEvent`]: one live event as the many channels that send it share it. A session's
//! subscribers all receive the same event; its JSON is made once, by the first that asks.

use std::sync::OnceLock;

use crate::LiveEvent;

/// One event, shared by the channels that send it, with its JSON made at most once.
#[derive(Debug)]
pub struct SharedEvent {
    event: LiveEvent,
    json: OnceLock<String>,
}

impl SharedEvent {
    /// The event, not yet serialized.
    pub fn new(event: LiveEvent) -> SharedEvent {
        SharedEvent { event, json: OnceLock::new() }
    }

    /// The event.
    pub fn event(&self) -> &LiveEvent {
        &self.event
    }

    /// The event's JSON (`type` included), made by the first caller.
    pub fn json(&self) -> &str {
        self.json.get_or_init(|| serde_json::to_string(&self.event).unwrap_or_default())
    }
}

impl From<LiveEvent> for SharedEvent {
    fn from(event: LiveEvent) -> SharedEvent {
        SharedEvent::new(event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_json_is_the_events_own() {
        let event = LiveEvent::AgentStart { turn_id: "t1".to_owned() };
        let shared = SharedEvent::new(event.clone());
        assert_eq!(shared.json(), serde_json::to_string(&event).expect("serializes"));
        assert!(std::ptr::eq(shared.json(), shared.json()), "made once");
        assert_eq!(shared.event(), &event);
    }
}
