//! Live channels ([`Channels`]): streams of the control layer's events (`teamster-live`) that a
//! UI subscribes to once instead of polling, over the service's public operations. A session's
//! channel (`session.rs`) opens with `display_state_changed` carrying the whole display state,
//! then sends what happens: each turn's events as it runs, translated, and the changes of the
//! session's title, mode, model, state, tasks, plans and follow-ups, each followed by the
//! display state (coalesced while text streams). A caller's channel (`caller.rs`) sends
//! `thread_created`, `thread_changed` and `thread_deleted` for the caller's sessions.
//!
//! A session has one follower per replica however many channels are open on it (`hub.rs`):
//! it reads, translates and folds once, and its channels share each event (and its JSON). It
//! learns of changes at once (the service's session signals: raised by the operations that
//! change a session on this replica, and by the store's change feed for those made on another),
//! and re-reads every [`FALLBACK_READ`] for what no announcement covers or a lost one (every
//! 30 s when no other replica shares the store). A channel's buffer is bounded: a subscriber
//! that stops reading is dropped, never holds a turn or the other channels up, and may open a
//! channel again (which starts from a fresh snapshot). A channel opened with an API key ends
//! once the key is revoked (within the key cache's bound).
//!
//! This crate knows the service's operations and the live vocabulary, nothing of HTTP, the
//! store's SQL or how turns run: it reads sessions as their callers may.

mod caller;
mod hub;
mod session;

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::stream::BoxStream;
use futures_util::{Stream, StreamExt};
use teamster_live::{DisplayState, LiveEvent, SharedEvent};
use teamster_service::{Caller, Result, Service, ServiceError};
use tokio::sync::mpsc;

use crate::hub::Hubs;

/// How often a session's follower re-reads it when nothing told it of a change (one made on
/// another replica).
pub const FALLBACK_READ: Duration = Duration::from_secs(1);
/// The same for a store no other replica shares (no change feed): only another process on
/// the same SQLite file, around a restart, changes a session unsignalled.
pub const ALONE_FALLBACK_READ: Duration = Duration::from_secs(30);
/// How many events a subscriber may fall behind before it is dropped.
const BUFFER: usize = 1024;
/// How often a channel opened with an API key checks that the key is still in force (through
/// the key cache, so a check costs no store read while the key's record is cached).
const KEY_CHECK: Duration = Duration::from_secs(1);

/// The sessions' live channels on this replica: one follower per followed session, shared by
/// its channels. Cheap to clone; clones share the followers.
#[derive(Clone)]
pub struct Channels {
    inner: Arc<Inner>,
}

struct Inner {
    service: Service,
    hubs: Hubs,
    /// How often a follower re-reads unsignalled; `None` for [`FALLBACK_READ`] when clustered,
    /// else [`ALONE_FALLBACK_READ`].
    reread: Option<Duration>,
}

impl std::fmt::Debug for Channels {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Channels").field("hubs", &self.inner.hubs).field("reread", &self.inner.reread).finish_non_exhaustive()
    }
}

impl Channels {
    /// The channels of `service`'s sessions, re-read unsignalled every `reread` (by default,
    /// [`FALLBACK_READ`] when replicas share the store, else [`ALONE_FALLBACK_READ`]).
    pub fn new(service: Service, reread: Option<Duration>) -> Channels {
        Channels { inner: Arc::new(Inner { service, hubs: Hubs::default(), reread }) }
    }

    fn service(&self) -> &Service {
        &self.inner.service
    }

    /// How long a follower waits for a signal before it reads again anyway.
    fn fallback_read(&self) -> Duration {
        match self.inner.reread {
            Some(every) => every,
            None if self.service().is_clustered() => FALLBACK_READ,
            None => ALONE_FALLBACK_READ,
        }
    }

    /// The display state of one of the caller's sessions now: what a channel opened now starts
    /// with.
    pub async fn display(&self, caller: &Caller, session_id: &str) -> Result<DisplayState> {
        self.service().catalog().owned_session(caller, session_id).await?;
        let joined = self.join(caller, session_id, false);
        if let Some(display) = joined.first {
            return Ok(display);
        }
        let mut receiver = joined.receiver;
        match receiver.recv().await.as_deref().map(SharedEvent::event) {
            Ok(LiveEvent::DisplayStateChanged { display }) => Ok((**display).clone()),
            _ => Err(ServiceError::Unavailable("the session's display state could not be read now".to_owned())),
        }
    }

    /// Opens the live channel of one of the caller's sessions (404 as for reading it).
    pub async fn open(&self, caller: &Caller, session_id: &str) -> Result<LiveChannel> {
        self.open_session(caller, session_id, false).await
    }

    /// Opens a session's channel that also sends each turn event as it was stored
    /// (`LiveEvent::TurnEvent`), before what it translates into: the library's harness.
    pub async fn open_with_turn_events(&self, caller: &Caller, session_id: &str) -> Result<LiveChannel> {
        self.open_session(caller, session_id, true).await
    }

    async fn open_session(&self, caller: &Caller, session_id: &str, turn_events: bool) -> Result<LiveChannel> {
        self.service().catalog().owned_session(caller, session_id).await?;
        let joined = self.join(caller, session_id, turn_events);
        let first = joined.first.map(|display| Arc::new(SharedEvent::new(LiveEvent::DisplayStateChanged { display: Box::new(display) })));
        let revoked = Box::pin(key_revoked(self.service().clone(), caller.clone()));
        let received = futures_util::stream::unfold((joined.receiver, revoked), |(mut receiver, mut revoked)| async move {
            tokio::select! {
                // One that fell too far behind (lagged) is dropped, as is one whose key went.
                received = receiver.recv() => received.ok().map(|event| (event, (receiver, revoked))),
                () = &mut revoked => None,
            }
        });
        Ok(LiveChannel { events: futures_util::stream::iter(first).chain(received).boxed() })
    }

    /// Joins the session's hub on this replica, starting its follower (reading as `caller`)
    /// when joining made it.
    fn join(&self, caller: &Caller, session_id: &str, turn_events: bool) -> hub::Joined {
        let mut joined = self.inner.hubs.join(session_id, turn_events);
        if let Some(hub) = joined.started.take() {
            tokio::spawn(session::run(self.clone(), caller.clone(), hub));
        }
        joined
    }

    /// Opens the caller's channel: its sessions created, renamed and deleted.
    pub async fn open_caller(&self, caller: &Caller) -> Result<LiveChannel> {
        let (sender, receiver) = mpsc::channel(BUFFER);
        let signals = self.service().session_signals();
        let known = caller::known_sessions(self.service(), caller).await?;
        tokio::spawn(caller::run(self.clone(), caller.clone(), known, sender, signals));
        let events = futures_util::stream::unfold(receiver, |mut receiver| async move {
            receiver.recv().await.map(|event| (Arc::new(SharedEvent::new(event)), receiver))
        });
        Ok(LiveChannel { events: events.boxed() })
    }
}

/// Resolves once the API key `caller` opened a channel with is revoked (or unknown); never
/// for a caller without a key. A store that fails to answer is not a revocation.
async fn key_revoked(service: Service, caller: Caller) {
    let Some(key_id) = &caller.key_id else { return std::future::pending().await };
    loop {
        tokio::time::sleep(KEY_CHECK).await;
        match service.api_keys().still_in_force(key_id).await {
            Ok(false) => return,
            Ok(true) => {}
            Err(error) => tracing::warn!(%error, "a live channel could not check its API key"),
        }
    }
}


/// The events of a live channel, as they happen, each shared with the session's other
/// channels; a session's ends when the session is deleted; either ends when the subscriber
/// fell too far behind.
pub struct LiveChannel {
    events: BoxStream<'static, Arc<SharedEvent>>,
}

impl std::fmt::Debug for LiveChannel {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("LiveChannel").finish_non_exhaustive()
    }
}

impl Stream for LiveChannel {
    type Item = Arc<SharedEvent>;

    fn poll_next(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Option<Arc<SharedEvent>>> {
        self.events.poll_next_unpin(context)
    }
}
