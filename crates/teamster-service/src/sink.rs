//! The engine's event sink for a running turn: serialise once, frame, queue for the writer.

use std::sync::Arc;

use teamster_engine::EventSink;
use teamster_protocol::Event;
use teamster_store::LogWrite;

use crate::live::TurnLog;
use crate::writer::EventWriter;

pub struct TurnSink {
    pub log: Arc<TurnLog>,
    pub writer: EventWriter,
}

fn to_json(event: &Event) -> Arc<str> {
    // Serialising our own types cannot fail: they have string keys and no fallible impls.
    serde_json::to_string(event).unwrap_or_default().into()
}

impl EventSink for TurnSink {
    fn emit(&self, event: &Event) -> u64 {
        let data = to_json(event);
        let is_done = matches!(event, Event::TurnDone(_));
        self.log.append(&data, is_done, |sequence| {
            self.writer.write(
                LogWrite::Stream { turn_id: self.log.turn_id.clone(), sequence, data: data.clone() },
                Some(self.log.clone()),
            );
        })
    }

    fn record(&self, sequence: u64, event: &Event) {
        self.writer.write(
            LogWrite::Content {
                turn_id: self.log.turn_id.clone(),
                sequence,
                kind: event.kind(),
                data: to_json(event),
            },
            None,
        );
    }
}
