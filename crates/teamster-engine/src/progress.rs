//! A running tool call's progress reports, recorded as `tool.progress` events of its thread,
//! and what a running command prints, as `shell.output` events.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use teamster_protocol::event::{ShellOutput, ToolProgress as ProgressEvent};
use teamster_protocol::{Event, ids, timestamp};
use teamster_tools::{OutputStream, ProgressSink, ToolProgress};

use crate::sink::EventSink;

/// The most progress events one call records; later reports are dropped, so a chatty tool
/// cannot grow the log without bound.
const MAX_PROGRESS_EVENTS: usize = 200;
/// The most output of one call streamed as `shell.output` (both streams together); the rest is
/// in the call's result only, up to its own limit.
pub const MAX_STREAMED_OUTPUT_BYTES: usize = 64 * 1024;

/// Records one call's reports in the turn's stream (streamed and durable, never listed).
pub(crate) struct CallProgress<'a> {
    pub sink: &'a dyn EventSink,
    pub thread_id: &'a str,
    pub tool_call_id: &'a str,
    pub tool_name: &'a str,
    recorded: AtomicUsize,
    /// Bytes streamed so far of stdout and stderr.
    streamed: Mutex<[u64; 2]>,
}

impl<'a> CallProgress<'a> {
    pub fn new(sink: &'a dyn EventSink, thread_id: &'a str, tool_call_id: &'a str, tool_name: &'a str) -> CallProgress<'a> {
        CallProgress { sink, thread_id, tool_call_id, tool_name, recorded: AtomicUsize::new(0), streamed: Mutex::default() }
    }
}

impl ProgressSink for CallProgress<'_> {
    fn report(&self, progress: ToolProgress) {
        if self.recorded.fetch_add(1, Ordering::Relaxed) >= MAX_PROGRESS_EVENTS {
            return;
        }
        self.sink.emit(&Event::ToolProgress(ProgressEvent {
            id: ids::new_id("evt"),
            thread_id: self.thread_id.to_owned(),
            created_at: timestamp::now(),
            tool_call_id: self.tool_call_id.to_owned(),
            tool_name: self.tool_name.to_owned(),
            progress: progress.progress,
            total: progress.total,
            message: progress.message,
        }));
    }

    fn output(&self, stream: OutputStream, text: &str) {
        let (text, offset, truncated) = {
            let mut offsets = self.streamed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            // Within a character of the cap nothing more fits: the piece that got there was the last.
            let room = |offsets: &[u64; 2]| MAX_STREAMED_OUTPUT_BYTES.saturating_sub((offsets[0] + offsets[1]) as usize);
            if room(&offsets) < 4 || text.is_empty() {
                return;
            }
            let mut cut = room(&offsets).min(text.len());
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            let kept = &text[..cut];
            let index = usize::from(stream == OutputStream::Stderr);
            let offset = offsets[index];
            offsets[index] += kept.len() as u64;
            (kept.to_owned(), offset, room(&offsets) < 4)
        };
        self.sink.emit(&Event::ShellOutput(ShellOutput {
            id: ids::new_id("evt"),
            thread_id: self.thread_id.to_owned(),
            created_at: timestamp::now(),
            tool_call_id: self.tool_call_id.to_owned(),
            tool_name: self.tool_name.to_owned(),
            stream: stream.as_str().to_owned(),
            text,
            offset,
            truncated,
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Recorded(Mutex<Vec<Event>>);

    impl EventSink for Recorded {
        fn emit(&self, event: &Event) -> u64 {
            let mut events = self.0.lock().unwrap();
            events.push(event.clone());
            events.len() as u64
        }

        fn record(&self, _sequence: u64, _event: &Event) {}
    }

    #[test]
    fn a_calls_output_is_streamed_up_to_its_cap_then_marked_truncated() {
        let sink = Recorded::default();
        let progress = CallProgress::new(&sink, "main", "call_1", "exec");
        progress.output(OutputStream::Stdout, "one\n");
        progress.output(OutputStream::Stderr, "warn\n");
        progress.output(OutputStream::Stdout, &"é".repeat(MAX_STREAMED_OUTPUT_BYTES));
        progress.output(OutputStream::Stdout, "never\n");
        let pieces: Vec<ShellOutput> = sink.0.into_inner().unwrap().into_iter().map(|event| match event {
            Event::ShellOutput(piece) => piece,
            other => panic!("{other:?}"),
        }).collect();
        let summary: Vec<(&str, u64, bool)> = pieces.iter().map(|piece| (piece.stream.as_str(), piece.offset, piece.truncated)).collect();
        assert_eq!(summary, vec![("stdout", 0, false), ("stderr", 0, false), ("stdout", 4, true)]);
        let total: usize = pieces.iter().map(|piece| piece.text.len()).sum();
        assert!(total <= MAX_STREAMED_OUTPUT_BYTES && total > MAX_STREAMED_OUTPUT_BYTES - 2, "{total}");
        assert!(pieces[2].text.chars().all(|c| c == 'é'), "cut at a character boundary");
    }
}
