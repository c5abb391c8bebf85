//! The engine's event sink for a running turn: serialise once, append to the log, queue for the writer.
//!
//! A burst of model deltas (what one read of the model's stream held) goes to the writer as one
//! command: the deltas are held back until the engine is about to wait for more
//! ([`EventSink::pause`]) or emits anything else, which takes them along first, so the writer
//! receives every turn's writes in sequence order and commits a burst together.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use teamster_engine::EventSink;
use teamster_protocol::Event;
use teamster_store::LogWrite;

use super::history::{MAX_CACHED_HISTORY_BYTES, Written};
use super::leases::Hold;
use super::live::TurnLog;
use super::running::RunningTurn;
use super::writer::EventWriter;
use teamster_telemetry::traces::TurnTrace;
use teamster_telemetry::{Telemetry, unix_nanos};

/// Where a running turn's events go (the engine's [`EventSink`]); the planner emits the
/// content of planning itself (such as `mcp.initialize`) to it too.
pub struct TurnSink {
    pub(crate) log: Arc<TurnLog>,
    pub(crate) writer: EventWriter,
    /// This replica's hold on the turn, checked before side effects; `None` for a sink that
    /// only emits an event of a turn that runs here.
    pub(crate) hold: Option<Arc<Hold>>,
    /// The process's metrics: the turn's first delta, tool calls and, at its end, the turn.
    pub(crate) telemetry: Arc<Telemetry>,
    /// When the turn started (or was taken over) here.
    pub(crate) started: Instant,
    /// Whether a model delta of the turn has been streamed yet.
    pub(crate) streamed: AtomicBool,
    /// The turn's trace, built from its events, when traces are exported (taken at its end).
    trace: Option<Mutex<Option<TurnTrace>>>,
    /// Stream writes of deltas held back for the writer, in sequence order. Writes are pushed
    /// while the log's lock is held, and every hand-off to the writer takes this lock, so
    /// the writer receives them in sequence order.
    held: Mutex<Vec<LogWrite>>,
    /// The content the turn wrote, when the sink is to keep it ([`TurnSink::mirrored`]).
    recorded: Option<Mutex<Recorded>>,
}

/// The content a turn wrote, by sequence number (a later write to a sequence replaces the
/// earlier one, as in the store), as long as it stays small enough to cache.
#[derive(Default)]
struct Recorded {
    content: BTreeMap<u64, Arc<str>>,
    bytes: usize,
    /// More than a cached history may hold was written: nothing is kept.
    overflowed: bool,
}

impl Recorded {
    /// Keeps a content write; once what is kept exceeds `limit` bytes, keeps nothing (the
    /// turn's history is then too large to cache).
    fn keep(&mut self, sequence: u64, data: &Arc<str>, limit: usize) {
        if self.overflowed {
            return;
        }
        self.bytes += data.len();
        if let Some(replaced) = self.content.insert(sequence, data.clone()) {
            self.bytes -= replaced.len();
        }
        if self.bytes > limit {
            *self = Recorded { overflowed: true, ..Recorded::default() };
        }
    }

    /// What was kept, in sequence order, handed over (the record is left empty).
    fn take(&mut self) -> Written {
        if self.overflowed {
            return Written::TooLarge;
        }
        self.bytes = 0;
        Written::Kept(std::mem::take(&mut self.content).into_iter().collect())
    }
}

/// Deltas held back at most; more are handed on even while the burst goes on.
const MAX_HELD: usize = 256;

impl TurnSink {
    /// The turn this sink writes for.
    pub fn running(&self) -> RunningTurn {
        RunningTurn::new(self.log.clone())
    }

    pub(crate) fn new(log: Arc<TurnLog>, writer: EventWriter, hold: Option<Arc<Hold>>, telemetry: Arc<Telemetry>) -> TurnSink {
        TurnSink {
            log,
            writer,
            hold,
            telemetry,
            started: Instant::now(),
            streamed: AtomicBool::new(false),
            trace: None,
            held: Mutex::new(Vec::new()),
            recorded: None,
        }
    }

    /// The sink, keeping the content the turn writes so that its history needs no read back.
    pub(crate) fn mirrored(mut self) -> TurnSink {
        self.recorded = Some(Mutex::new(Recorded::default()));
        self
    }

    /// The content written through this sink, if it keeps it, handed over once the turn has
    /// ended (the sink keeps no copy).
    pub(crate) fn take_recorded(&self) -> Option<Written> {
        Some(self.recorded.as_ref()?.lock().unwrap_or_else(PoisonError::into_inner).take())
    }

    /// Keeps a content write, if the sink keeps them.
    fn keep(&self, sequence: u64, data: &Arc<str>) {
        if let Some(recorded) = &self.recorded {
            recorded.lock().unwrap_or_else(PoisonError::into_inner).keep(sequence, data, MAX_CACHED_HISTORY_BYTES);
        }
    }

    /// The sink, building `trace` from the turn's events.
    pub(crate) fn traced(mut self, trace: Option<TurnTrace>) -> TurnSink {
        self.trace = trace.map(|trace| Mutex::new(Some(trace)));
        self
    }

    /// Hands an event to the turn's trace, if it has one; deltas never (see `traces`).
    fn trace(&self, event: &Event) {
        if matches!(event, Event::ModelMessageDelta(_)) {
            return;
        }
        if let Some(trace) = &self.trace
            && let Some(trace) = trace.lock().unwrap_or_else(PoisonError::into_inner).as_mut()
        {
            trace.observe(event, unix_nanos());
        }
    }

    /// Emits `turn.done` (streamed and recorded) and queues `state`, the turn's final state, to
    /// be committed with it: a client that has seen `turn.done`, on any replica, finds the turn
    /// ended.
    pub(crate) fn emit_done(&self, done: &Event, state: LogWrite) {
        self.trace(done);
        if let Some(trace) = self.trace.as_ref().and_then(|trace| trace.lock().unwrap_or_else(PoisonError::into_inner).take()) {
            self.telemetry.export_trace(trace);
        }
        let data = to_json(done);
        self.log.append(&data, true, |sequence| {
            self.keep(sequence, &data);
            let turn_id = self.log.turn_id.clone();
            self.hand_on([
                LogWrite::Stream { turn_id: turn_id.clone(), sequence, data: data.clone() },
                LogWrite::Content { turn_id, sequence, kind: done.kind(), data: data.clone() },
                state,
            ]);
        });
    }

    /// Queues `writes` for the writer after the deltas held back, all to be committed together.
    fn hand_on<const N: usize>(&self, writes: [LogWrite; N]) {
        // Sent while the lock is held, so no later write overtakes the held ones.
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let mut batch = std::mem::take(&mut *held);
        batch.extend(writes);
        if !batch.is_empty() {
            self.writer.write_together(batch, self.log.clone());
        }
    }

    /// Appends `event` to the log and queues its stream write, held back when `hold_back`.
    fn append(&self, event: &Event, hold_back: bool) -> u64 {
        // Invariant: a delta costs one relaxed load here, but the turn's first.
        if let Event::ModelMessageDelta(delta) = event
            && !self.streamed.load(Ordering::Relaxed)
            && produced(delta)
            && !self.streamed.swap(true, Ordering::Relaxed)
        {
            self.telemetry.first_token(self.started.elapsed());
        }
        self.trace(event);
        let data = to_json(event);
        let is_done = matches!(event, Event::TurnDone(_));
        self.log.append(&data, is_done, |sequence| {
            let write = LogWrite::Stream { turn_id: self.log.turn_id.clone(), sequence, data: data.clone() };
            if hold_back {
                let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
                held.push(write);
                if held.len() >= MAX_HELD {
                    let batch = std::mem::take(&mut *held);
                    self.writer.write_together(batch, self.log.clone());
                }
            } else {
                self.hand_on([write]);
            }
        })
    }
}

/// Whether a delta carries something the model produced (not only a finish reason or usage).
fn produced(delta: &teamster_protocol::event::ModelMessageDelta) -> bool {
    delta.content.is_some()
        || delta.reasoning_content.is_some()
        || delta.refusal.is_some()
        || delta.tool_calls.is_some()
        || delta.thinking_blocks.is_some()
}

fn to_json(event: &Event) -> Arc<str> {
    // Serialising our own types cannot fail: they have string keys and no fallible impls.
    serde_json::to_string(event).unwrap_or_default().into()
}

impl EventSink for TurnSink {
    fn emit(&self, event: &Event) -> u64 {
        self.append(event, false)
    }

    fn emit_delta(&self, event: &Event) -> u64 {
        self.append(event, true)
    }

    fn pause(&self) {
        self.hand_on([]);
    }

    fn record(&self, sequence: u64, event: &Event) {
        if let (Event::ModelMessage(message), Some(trace)) = (event, &self.trace)
            && let Some(trace) = trace.lock().unwrap_or_else(PoisonError::into_inner).as_mut()
        {
            trace.message_recorded(message, unix_nanos());
        }
        let data = to_json(event);
        self.keep(sequence, &data);
        self.hand_on([LogWrite::Content { turn_id: self.log.turn_id.clone(), sequence, kind: event.kind(), data }]);
    }

    fn tool_called(&self, name: &str, is_error: bool) {
        self.telemetry.tool_called(name, is_error);
    }

    /// Waits until everything queued is committed, then says whether this replica still owns
    /// the turn (its hold has not run out and it was not fenced).
    fn checkpoint(&self) -> Pin<Box<dyn Future<Output = bool> + Send + '_>> {
        Box::pin(async move {
            self.pause();
            self.writer.flush().await;
            self.hold.as_ref().is_some_and(Hold::still_owned)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_content_is_the_last_write_per_sequence_in_order_until_it_overflows() {
        let kept = |recorded: &mut Recorded| match recorded.take() {
            Written::Kept(content) => Some(content.into_iter().map(|(sequence, data)| (sequence, data.to_string())).collect::<Vec<_>>()),
            Written::TooLarge => None,
        };
        let mut recorded = Recorded::default();
        recorded.keep(3, &Arc::from("c"), 16);
        recorded.keep(2, &Arc::from("b"), 16);
        for _ in 0..20 {
            recorded.keep(3, &Arc::from("C"), 16);
        }
        assert_eq!(kept(&mut recorded), Some(vec![(2, "b".to_owned()), (3, "C".to_owned())]), "a rewrite replaces, and counts once");
        assert_eq!(kept(&mut recorded), Some(vec![]), "what was taken is no longer kept");
        recorded.keep(2, &Arc::from("b"), 16);
        recorded.keep(4, &Arc::from("0123456789abcdef"), 16);
        assert_eq!(kept(&mut recorded), None, "more than the limit is not kept");
        recorded.keep(5, &Arc::from("e"), 16);
        assert_eq!(kept(&mut recorded), None, "an overflowed record stays empty");
    }
}
