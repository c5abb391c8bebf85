//! Subscribing to a turn's stream: replay what is stored or buffered after a cursor, then
//! follow live events until `turn.done`.
//!
//! A turn running in this process is followed in memory. Any other turn is read from the store:
//! replayed, and, while it runs on another replica, read again whenever the change feed
//! announces a write to it (or after a slow fallback poll), until `turn.done`. The store holds
//! each event's exact JSON, so every replica streams the same events; how they are framed on
//! the wire is the HTTP layer's business.

use std::pin::Pin;

use futures_util::Stream;
use teamster_protocol::TurnState;
use tokio::sync::mpsc;

use teamster_store::TurnRecord;

use super::TurnRuntime;
use super::live::{StreamedEvent, TurnLog};
use super::remote::store_poll;
use crate::error::{Result, ServiceError};

/// The events of one turn after a cursor, in sequence order, ending after `turn.done`.
pub type EventStream = Pin<Box<dyn Stream<Item = StreamedEvent> + Send>>;

/// Events buffered per subscriber; a slow client only ever slows itself.
const SUBSCRIBER_BUFFER: usize = 256;
const STORE_PAGE: u32 = 1000;

impl TurnRuntime {
    /// Subscribes to a turn's stream after sequence number `after` (0 = from the start).
    pub(crate) async fn subscribe(&self, turn: &TurnRecord, after: u64) -> Result<EventStream> {
        let (session_id, turn_id) = (turn.session_id.as_str(), turn.id.as_str());
        // A fenced turn may go on on another replica: it is followed through the store.
        if let Some(log) = self.inner.live.get(turn_id).filter(|log| !log.is_fenced()) {
            return Ok(follow_live(log, after));
        }
        if turn.state.is_terminal() && self.store().last_sequence(turn_id).await? == 0 {
            return Err(ServiceError::PreconditionFailed(format!("the event stream of turn {turn_id:?} no longer exists")));
        }
        Ok(self.follow_store(session_id.to_owned(), turn_id.to_owned(), after))
    }

    /// Streams a running turn's live log from `after`.
    pub(crate) fn follow(&self, log: std::sync::Arc<TurnLog>, after: u64) -> EventStream {
        follow_live(log, after)
    }

    /// Replays a turn from the store, and follows it there while it is still running in some
    /// other process: woken by the change feed, or after a slow poll.
    fn follow_store(&self, session_id: String, turn_id: String, mut after: u64) -> EventStream {
        let (sender, receiver) = mpsc::channel(SUBSCRIBER_BUFFER);
        let runtime = self.clone();
        tokio::spawn(async move {
            // Registered before the first read, so every later write wakes it.
            let mut watch = runtime.watch_turn(&turn_id);
            let poll = store_poll(watch.is_some());
            let mut check_state = true;
            loop {
                // A wake-up by the feed means new events; the state is checked on the others.
                let terminal = check_state
                    && match runtime.store().get_turn(&session_id, &turn_id).await {
                        Ok(turn) => !matches!(turn.state, TurnState::Running),
                        Err(_) => return,
                    };
                loop {
                    let Ok(page) = runtime.store().read_stream(&turn_id, after, STORE_PAGE).await else { return };
                    for event in &page {
                        let streamed = StreamedEvent { sequence: event.sequence, json: event.data.as_str().into() };
                        if sender.send(streamed).await.is_err() {
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
                if let Some(log) = runtime.inner.live.get(&turn_id).filter(|log| !log.is_fenced()) {
                    forward_live(log, after, sender).await;
                    return;
                }
                check_state = match watch.as_mut() {
                    Some(watch) => !watch.changed(poll).await,
                    None => {
                        tokio::time::sleep(poll).await;
                        true
                    }
                };
            }
        });
        receiver_stream(receiver)
    }
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

fn follow_live(log: std::sync::Arc<TurnLog>, after: u64) -> EventStream {
    let (sender, receiver) = mpsc::channel(SUBSCRIBER_BUFFER);
    tokio::spawn(forward_live(log, after, sender));
    receiver_stream(receiver)
}

/// Sends durable events after `after` until `turn.done` has been sent or the receiver is gone.
/// A turn that leaves this process without its end (another replica took it over) ends the
/// stream after its last durable event; the client re-subscribes from there.
async fn forward_live(log: std::sync::Arc<TurnLog>, mut after: u64, sender: mpsc::Sender<StreamedEvent>) {
    let mut durable = log.subscribe_durable();
    let mut finished = log.subscribe_finished();
    loop {
        let left = *finished.borrow_and_update();
        let committed = *durable.borrow_and_update();
        let (events, complete) = log.durable_events(after, committed);
        for event in events {
            if sender.send(event).await.is_err() {
                return;
            }
        }
        after = after.max(committed);
        if complete || left {
            return;
        }
        tokio::select! {
            changed = durable.changed() => if changed.is_err() { return },
            _ = finished.changed() => {}
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
    use super::is_turn_done;

    #[test]
    fn turn_done_is_recognised_by_the_type_of_the_event_alone() {
        assert!(is_turn_done(r#"{"type":"turn.done","id":"evt_1","state":{"status":"done"}}"#));
        assert!(!is_turn_done(r#"{"type":"model.message.delta","id":"m","content":"turn.done"}"#));
        assert!(!is_turn_done(r#"{"id":"evt_1","state":{"type":"turn.done"}}"#));
        assert!(!is_turn_done("not json"));
    }
}
