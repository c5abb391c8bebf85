//! Where the engine sends events.

use std::future::Future;
use std::pin::Pin;

use teamster_protocol::Event;

/// Receives a turn's events as they happen. Implementations assign sequence numbers, persist
/// and fan out; they must not block (the engine calls them from inside the model stream).
pub trait EventSink: Send + Sync {
    /// Appends an event to the turn's stream and returns its sequence number.
    fn emit(&self, event: &Event) -> u64;
    /// Records the folded, list-visible form of the event streamed at `sequence`.
    fn record(&self, sequence: u64, event: &Event);

    /// Appends a model delta like [`EventSink::emit`], but lets the sink hold its write back
    /// until [`EventSink::pause`] or the next event of any other kind, so the deltas of one
    /// burst of model output cost one write. By default the same as `emit`.
    fn emit_delta(&self, event: &Event) -> u64 {
        self.emit(event)
    }

    /// Says that the engine is about to wait for the model's next output: the deltas
    /// [`EventSink::emit_delta`] held back are to be handed on now. Nothing by default.
    fn pause(&self) {}

    /// Waits until everything emitted so far is durable, and says whether the turn may go on
    /// to side effects: false when the turn must stop instead (its server no longer owns it).
    /// The engine calls it before it starts tool calls, so a call is in the log before it can
    /// have any effect, and a server that takes the turn over knows the call may have started
    /// (see [`crate::resume_turn`]). The default suits sinks with nothing to wait for.
    fn checkpoint(&self) -> Pin<Box<dyn Future<Output = bool> + Send + '_>> {
        Box::pin(std::future::ready(true))
    }

    /// Hears that the tool `name` answered a call, and whether it failed; nothing by default
    /// (the server counts calls for its metrics). Not an event: it is never stored.
    fn tool_called(&self, _name: &str, _is_error: bool) {}

    /// Streams an event and records it as content (events that are never folded).
    fn emit_content(&self, event: &Event) -> u64 {
        let sequence = self.emit(event);
        self.record(sequence, event);
        sequence
    }
}
