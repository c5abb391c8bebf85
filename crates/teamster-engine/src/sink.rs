//! Where the engine sends events.

use teamster_protocol::Event;

/// Receives a turn's events as they happen. Implementations assign sequence numbers, persist
/// and fan out; they must not block (the engine calls them from inside the model stream).
pub trait EventSink: Send + Sync {
    /// Appends an event to the turn's stream and returns its sequence number.
    fn emit(&self, event: &Event) -> u64;
    /// Records the folded, list-visible form of the event streamed at `sequence`.
    fn record(&self, sequence: u64, event: &Event);

    /// Streams an event and records it as content (events that are never folded).
    fn emit_content(&self, event: &Event) -> u64 {
        let sequence = self.emit(event);
        self.record(sequence, event);
        sequence
    }
}
