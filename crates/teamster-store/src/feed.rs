//! The change feed: what a store shared by several replicas announces after it commits, so
//! that the other replicas wake subscribers, deliver cancels and reload settings.
//!
//! A feed is a wake-up, never the data: whoever wakes reads what changed from the store. A
//! feed may lose announcements (a reconnect, a reader that fell behind); it then says so with
//! [`Change::Missed`], and readers re-check whatever they wait for. Readers also re-check on a
//! slow timer of their own, so a change missed without notice only delays them.

use std::sync::Arc;

use teamster_protocol::CancelReason;
use tokio::sync::broadcast;

/// One announced change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// A turn's log or state was written: its stream holds every event up to `last_sequence`
    /// (0 when the write stored no stream event, only content or the turn's state).
    Turn { turn_id: Arc<str>, last_sequence: u64 },
    /// Cancelling a running turn was requested ([`CoordinationStore::request_cancel`](crate::CoordinationStore::request_cancel));
    /// `reason` is the first reason recorded.
    CancelRequested { turn_id: Arc<str>, reason: CancelReason },
    /// A setting of `kind` was created, replaced or deleted.
    Setting { kind: String },
    /// A session was created, updated, renamed or deleted, or it got a turn or a change to its
    /// queued messages. `listed_for` is its creator's subject id when the change shows in
    /// session lists (created, updated, deleted).
    Session { session_id: Arc<str>, listed_for: Option<Arc<str>> },
    /// Changes may have been missed since the last one read: re-check everything waited for.
    Missed,
}

/// The sending side of a feed, kept by the backend; cheap to clone.
#[derive(Clone, Debug)]
pub struct ChangeSender {
    sender: broadcast::Sender<Change>,
}

impl ChangeSender {
    /// A feed that keeps at most `capacity` changes for a reader that has not read them yet;
    /// a reader further behind gets [`Change::Missed`] instead of the oldest ones.
    pub fn new(capacity: usize) -> ChangeSender {
        ChangeSender { sender: broadcast::Sender::new(capacity.max(1)) }
    }

    /// Announces a change to every reader; with no reader, it is dropped.
    pub fn send(&self, change: Change) {
        let _ = self.sender.send(change);
    }

    /// A reader of every change sent from now on.
    pub fn subscribe(&self) -> ChangeFeed {
        ChangeFeed { receiver: self.sender.subscribe() }
    }
}

/// The reading side of a feed: every change announced after it was made, in order.
#[derive(Debug)]
pub struct ChangeFeed {
    receiver: broadcast::Receiver<Change>,
}

impl ChangeFeed {
    /// The next change, waiting for one. [`Change::Missed`] when this reader fell so far behind
    /// that changes were dropped; `None` once the feed has stopped for good (its store is gone).
    pub async fn next(&mut self) -> Option<Change> {
        match self.receiver.recv().await {
            Ok(change) => Some(change),
            Err(broadcast::error::RecvError::Lagged(_)) => Some(Change::Missed),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_reader_that_falls_behind_is_told_it_missed_changes() {
        let sender = ChangeSender::new(2);
        let mut feed = sender.subscribe();
        for kind in ["a", "b", "c"] {
            sender.send(Change::Setting { kind: kind.to_owned() });
        }
        assert_eq!(feed.next().await, Some(Change::Missed));
        assert_eq!(feed.next().await, Some(Change::Setting { kind: "b".to_owned() }));
        assert_eq!(feed.next().await, Some(Change::Setting { kind: "c".to_owned() }));
        drop(sender);
        assert_eq!(feed.next().await, None, "a feed whose sender is gone ends");
    }
}
