//! Subscribing to a turn's stream: replay what is stored or buffered after a cursor, then
//! follow live events until `turn.done`.
//!
//! A turn running in this process is followed in memory. Any other turn is read from the store:
//! replayed, and, while it runs on another replica, read again whenever the change feed
//! announces a write to it (or after a slow fallback poll), until `turn.done`. A turn that
//! leaves this process before its end (another replica took it over) is followed on from the
//! store after the last event sent, so its subscribers go on without re-subscribing, with no
//! gap and no duplicate. The store holds each event's exact JSON, so every replica streams the
//! same events; how they are framed on the wire is the HTTP layer's business.

use std::pin::Pin;
use std::time::Duration;

use futures_util::Stream;
use teamster_protocol::TurnState;
use tokio::sync::mpsc;

use teamster_store::TurnRecord;

use super::TurnRuntime;
use super::live::{StreamedEvent, TurnLog};
use super::replicas::store_poll;
use crate::error::{Result, RuntimeError};

/// The events of one turn after a cursor, in sequence order, ending after `turn.done`.
pub type EventStream = Pin<Box<dyn Stream<Item = StreamedEvent> + Send>>;

/// Events buffered per subscriber; a slow client only ever slows itself.
const SUBSCRIBER_BUFFER: usize = 256;
/// How long a subscriber's buffer may stay full before its stream is ended: a client that
/// reads nothing for this long is dropped, and resumes after the last event it read (its
/// `Last-Event-ID`), instead of holding the turn's log in memory for ever.
const STALLED_READER_LIMIT: Duration = Duration::from_secs(30);
const STORE_PAGE: u32 = 1000;

impl TurnRuntime {
    /// Subscribes to a turn's stream after sequence number `after` (0 = from the start).
    pub async fn subscribe(&self, turn: &TurnRecord, after: u64) -> Result<EventStream> {
        let (session_id, turn_id) = (turn.session_id.as_str(), turn.id.as_str());
        // A fenced turn may go on on another replica: it is followed through the store.
        if let Some(log) = self.inner.live.get(turn_id).filter(|log| !log.is_fenced()) {
            return Ok(self.follow(log, after));
        }
        if turn.state.is_terminal() && self.events().last_sequence(turn_id).await? == 0 {
            return Err(RuntimeError::StreamExpired { turn_id: turn_id.to_owned() });
        }
        Ok(self.follow_store(session_id.to_owned(), turn_id.to_owned(), after))
    }

    /// Streams a running turn's live log from `after`, and the store's once it leaves this
    /// process before its end.
    pub(crate) fn follow(&self, log: std::sync::Arc<TurnLog>, after: u64) -> EventStream {
        let (sender, receiver) = mpsc::channel(SUBSCRIBER_BUFFER);
        let runtime = self.clone();
        tokio::spawn(async move {
            let (session_id, turn_id) = (log.session_id.clone(), log.turn_id.to_string());
            if let Followed::Left { after } = forward_live(log, after, &sender).await {
                runtime.forward_stored(&session_id, &turn_id, after, &sender).await;
            }
        });
        receiver_stream(receiver)
    }

    /// Replays a turn from the store, and follows it there while it is still running in some
    /// other process: woken by the change feed, or after a slow poll.
    fn follow_store(&self, session_id: String, turn_id: String, after: u64) -> EventStream {
        let (sender, receiver) = mpsc::channel(SUBSCRIBER_BUFFER);
        let runtime = self.clone();
        tokio::spawn(async move { runtime.forward_stored(&session_id, &turn_id, after, &sender).await });
        receiver_stream(receiver)
    }

    /// Sends a turn's stored events after `after` until `turn.done` has been sent, the turn
    /// has ended or the receiver is gone; while the turn runs in this process, its live log
    /// (the same events, sooner).
    async fn forward_stored(&self, session_id: &str, turn_id: &str, mut after: u64, sender: &mpsc::Sender<StreamedEvent>) {
        // Registered before the first read, so every later write wakes it.
        let mut watch = self.watch_turn(turn_id);
        let poll = store_poll(watch.is_some());
        let mut check_state = true;
        loop {
            // A wake-up by the feed means new events; the state is checked on the others.
            let terminal = check_state
                && match self.events().get_turn(session_id, turn_id).await {
                    Ok(turn) => !matches!(turn.state, TurnState::Running),
                    Err(_) => return,
                };
            loop {
                let Ok(page) = self.events().read_stream(turn_id, after, STORE_PAGE).await else { return };
                for event in &page {
                    let streamed = StreamedEvent { sequence: event.sequence, json: event.data.as_str().into() };
                    if !deliver(sender, streamed, STALLED_READER_LIMIT).await {
                        return;
                    }
                    after = event.sequence;
                }
                if page.last().is_some_and(|event| is_turn_done(&event.data)) {
                    return;
                }
                if page.len() < STORE_PAGE as usize {
                    break;
                }
            }
            if terminal {
                return;
            }
            if let Some(log) = self.inner.live.get(turn_id).filter(|log| !log.is_fenced()) {
                match forward_live(log, after, sender).await {
                    Followed::Ended => return,
                    // Taken over again, by yet another process: back to the store.
                    Followed::Left { after: sent } => after = sent,
                }
            }
            check_state = match watch.as_mut() {
                Some(watch) => !watch.changed(poll).await,
                None => {
                    tokio::time::sleep(poll).await;
                    true
                }
            };
        }
    }
}

/// How following a live log ended.
enum Followed {
    /// `turn.done` was sent, or the receiver is gone.
    Ended,
    /// The turn left this process before its end; every durable event up to `after` was sent.
    Left { after: u64 },
}

/// Whether stored event JSON is a `turn.done`, the last event of every turn.
fn is_turn_done(data: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Kind<'a> {
        #[serde(rename = "type", borrow)]
        kind: std::borrow::Cow<'a, str>,
    }
    serde_json::from_str::<Kind<'_>>(data).is_ok_and(|event| event.kind == "turn.done")
}

/// Sends durable events after `after` until `turn.done` has been sent, the receiver is gone,
/// or the turn leaves this process without its end (another replica took it over): then the
/// caller follows it on from the store.
async fn forward_live(log: std::sync::Arc<TurnLog>, mut after: u64, sender: &mpsc::Sender<StreamedEvent>) -> Followed {
    let mut durable = log.subscribe_durable();
    let mut finished = log.subscribe_finished();
    loop {
        let left = *finished.borrow_and_update();
        let committed = *durable.borrow_and_update();
        let (events, complete) = log.durable_events(after, committed);
        for event in events {
            let sequence = event.sequence;
            if !deliver(sender, event, STALLED_READER_LIMIT).await {
                return Followed::Ended;
            }
            after = sequence;
        }
        if complete {
            return Followed::Ended;
        }
        if left {
            return Followed::Left { after };
        }
        tokio::select! {
            changed = durable.changed() => if changed.is_err() { return Followed::Left { after } },
            _ = finished.changed() => {}
        }
    }
}

/// Hands an event to a subscriber: `false` when it is gone, or its buffer stayed full for
/// `limit` (then its stream ends here).
async fn deliver(sender: &mpsc::Sender<StreamedEvent>, event: StreamedEvent, limit: Duration) -> bool {
    match tokio::time::timeout(limit, sender.send(event)).await {
        Ok(sent) => sent.is_ok(),
        Err(_) => {
            tracing::warn!(?limit, "ending the event stream of a subscriber that stopped reading");
            false
        }
    }
}

fn receiver_stream(receiver: mpsc::Receiver<StreamedEvent>) -> EventStream {
    Box::pin(futures_util::stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.map(|event| (event, receiver))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_subscriber_that_stops_reading_is_dropped_and_a_reading_one_is_not() {
        let event = |sequence| StreamedEvent { sequence, json: "{}".into() };
        let (sender, mut receiver) = mpsc::channel(1);
        let generous = Duration::from_secs(30);
        assert!(deliver(&sender, event(1), generous).await);
        // Nobody reads: the buffer stays full past the limit, and the stream is given up.
        assert!(!deliver(&sender, event(2), Duration::from_millis(50)).await);
        // A reader that takes its events keeps its stream.
        let reader = tokio::spawn(async move {
            let first = receiver.recv().await.map(|event| event.sequence);
            let second = receiver.recv().await.map(|event| event.sequence);
            (first, second)
        });
        assert!(deliver(&sender, event(3), generous).await);
        drop(sender);
        assert_eq!(reader.await.unwrap(), (Some(1), Some(3)));
    }

    #[test]
    fn turn_done_is_recognised_by_the_type_of_the_event_alone() {
        assert!(is_turn_done(r#"{"type":"turn.done","id":"evt_1","state":{"status":"done"}}"#));
        assert!(!is_turn_done(r#"{"type":"model.message.delta","id":"m","content":"turn.done"}"#));
        assert!(!is_turn_done(r#"{"id":"evt_1","state":{"type":"turn.done"}}"#));
        assert!(!is_turn_done("not json"));
    }
}
