//! A running tool call's progress reports, recorded as `tool.progress` events of its thread.

use std::sync::atomic::{AtomicUsize, Ordering};

use teamster_protocol::event::ToolProgress as ProgressEvent;
use teamster_protocol::{Event, ids, timestamp};
use teamster_tools::{ProgressSink, ToolProgress};

use crate::sink::EventSink;

/// The most progress events one call records; later reports are dropped, so a chatty tool
/// cannot grow the log without bound.
const MAX_PROGRESS_EVENTS: usize = 200;

/// Records one call's reports in the turn's stream (streamed and durable, never listed).
pub(crate) struct CallProgress<'a> {
    pub sink: &'a dyn EventSink,
    pub thread_id: &'a str,
    pub tool_call_id: &'a str,
    pub tool_name: &'a str,
    recorded: AtomicUsize,
}

impl<'a> CallProgress<'a> {
    pub fn new(sink: &'a dyn EventSink, thread_id: &'a str, tool_call_id: &'a str, tool_name: &'a str) -> CallProgress<'a> {
        CallProgress { sink, thread_id, tool_call_id, tool_name, recorded: AtomicUsize::new(0) }
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
}
