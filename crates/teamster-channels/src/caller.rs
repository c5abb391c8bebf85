//! A caller's live channel: `thread_created`, `thread_changed` (its title) and
//! `thread_deleted` for the caller's own sessions, the ones `GET /sessions` lists, so that a
//! list of them stays current without polling (see the [module](super)).
//!
//! It knows the caller's newest sessions ([`KNOWN`] at most, by last update) and their titles.
//! A signal about one of the caller's sessions has it read that session; the fallback read
//! lists the newest page again, for changes made on another replica.

use std::collections::HashMap;

use teamster_live::LiveEvent;
use teamster_service::{Caller, Result, Service, ServiceError, SessionListQuery, SessionSignal as Signal};
use teamster_store::SessionOrder;
use tokio::sync::{broadcast, mpsc};

use crate::{Channels, key_revoked};

/// The most sessions a caller's channel lists (the newest).
const KNOWN: u32 = 100;
/// The most sessions it remembers, those created while it is open included.
const MAX_REMEMBERED: usize = 10_000;

/// The caller's newest sessions and their titles.
pub(super) type Known = HashMap<String, Option<String>>;

/// The caller's newest sessions, as the channel starts.
pub(super) async fn known_sessions(service: &Service, caller: &Caller) -> Result<Known> {
    let query =
        SessionListQuery { order_by: SessionOrder::UpdatedAt, descending: true, limit: KNOWN, ..SessionListQuery::default() };
    let (sessions, _) = service.catalog().list_sessions(caller, query).await?;
    Ok(sessions.into_iter().map(|session| (session.id, session.title)).collect())
}

/// Runs the caller's channel until the subscriber goes.
pub(super) async fn run(
    channels: Channels,
    caller: Caller,
    mut known: Known,
    sender: mpsc::Sender<LiveEvent>,
    mut signals: broadcast::Receiver<Signal>,
) {
    let fallback = channels.fallback_read();
    let service = channels.service();
    let subject = caller.subject.subject_id.clone();
    let revoked = key_revoked(service.clone(), caller.clone());
    tokio::pin!(revoked);
    loop {
        let events = tokio::select! {
            signal = signals.recv() => match signal {
                Ok(Signal::One { session_id, listed_for: Some(owner) }) if *owner == *subject => {
                    read_one(service, &caller, &mut known, &session_id).await
                }
                Ok(Signal::One { .. }) => continue,
                Ok(Signal::Every) | Err(broadcast::error::RecvError::Lagged(_)) => {
                    read_newest(service, &caller, &mut known).await
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
            () = tokio::time::sleep(fallback) => read_newest(service, &caller, &mut known).await,
            () = sender.closed() => return,
            () = &mut revoked => return,
        };
        for event in events {
            if sender.try_send(event).is_err() {
                return;
            }
        }
    }
}

/// What changed of one session the caller was signalled about.
async fn read_one(service: &Service, caller: &Caller, known: &mut Known, session_id: &str) -> Vec<LiveEvent> {
    match service.catalog().get_session(caller, session_id).await {
        Ok(session) if !known.contains_key(&session.id) => {
            if known.len() < MAX_REMEMBERED {
                known.insert(session.id.clone(), session.title.clone());
            }
            vec![LiveEvent::ThreadCreated { session: Box::new(session) }]
        }
        Ok(session) => match known.insert(session.id.clone(), session.title.clone()) {
            None => Vec::new(),
            Some(title) if title != session.title => {
                vec![LiveEvent::ThreadChanged { session_id: session.id, title: session.title }]
            }
            Some(_) => Vec::new(),
        },
        Err(ServiceError::NotFound(_)) => match known.remove(session_id) {
            Some(_) => vec![LiveEvent::ThreadDeleted { session_id: session_id.to_owned() }],
            None => Vec::new(),
        },
        Err(error) => {
            tracing::warn!(session = %session_id, %error, "a caller's live channel could not read a session");
            Vec::new()
        }
    }
}

/// What changed among the caller's newest sessions: those new, renamed, and (when all of them
/// fit in one page) deleted.
async fn read_newest(service: &Service, caller: &Caller, known: &mut Known) -> Vec<LiveEvent> {
    let query =
        SessionListQuery { order_by: SessionOrder::UpdatedAt, descending: true, limit: KNOWN, ..SessionListQuery::default() };
    let (sessions, next) = match service.catalog().list_sessions(caller, query).await {
        Ok(page) => page,
        Err(error) => {
            tracing::warn!(%error, "a caller's live channel could not list its sessions");
            return Vec::new();
        }
    };
    let mut events = Vec::new();
    if next.is_none() {
        let listed: std::collections::HashSet<&str> = sessions.iter().map(|session| session.id.as_str()).collect();
        let gone: Vec<String> = known.keys().filter(|id| !listed.contains(id.as_str())).cloned().collect();
        for session_id in gone {
            known.remove(&session_id);
            events.push(LiveEvent::ThreadDeleted { session_id });
        }
    }
    for session in sessions {
        match known.insert(session.id.clone(), session.title.clone()) {
            None => events.push(LiveEvent::ThreadCreated { session: Box::new(session) }),
            Some(title) if title != session.title => {
                events.push(LiveEvent::ThreadChanged { session_id: session.id, title: session.title })
            }
            Some(_) => {}
        }
    }
    events
}
