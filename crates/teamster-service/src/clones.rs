//! Cloning a session: a new session with the same agent, mode, model, permissions, grants and
//! state, and a copy of the source's chain of turns up to a given turn (the last by default),
//! each turn with its whole event log and the stored files its input names. The copies get
//! new turn ids (rewritten in their `turn.created` events); every other byte of their logs is
//! the source's, so the clone replays what the source did up to that point, and the two
//! sessions diverge from there.

use std::collections::HashMap;
use std::sync::Arc;

use teamster_protocol::session::Session;
use teamster_protocol::{Event, TurnState, ids, timestamp};
use teamster_store::{ContentKinds, ContentQuery, LogWrite, SessionRecord, TurnRecord};

use crate::catalog::session_view;
use crate::error::{Result, ServiceError};
use crate::{Caller, Service, attachments};

/// The most turns a clone copies.
const MAX_CLONED_TURNS: usize = 1000;
/// Events read from the store at a time.
const PAGE: u32 = 1000;

/// What to clone: up to which turn, and the new session's title.
#[derive(Clone, Debug, Default)]
pub struct CloneSession {
    /// The last turn to copy; the source's last turn when absent.
    pub turn_id: Option<String>,
    /// The clone's title; the source's when absent.
    pub title: Option<String>,
}

impl Service {
    /// Clones a session up to a turn that has ended (409 for a running one).
    pub async fn clone_session(&self, caller: &Caller, session_id: &str, request: CloneSession) -> Result<Session> {
        crate::catalog::validate_title(&request.title)?;
        let source = self.catalog().owned_session(caller, session_id).await?;
        self.runtime().flush().await;
        let mut chain = Vec::new();
        let mut next = request.turn_id.clone().or_else(|| source.last_turn_id.clone());
        while let Some(turn_id) = next {
            if chain.len() == MAX_CLONED_TURNS {
                return Err(ServiceError::invalid(format!("a clone copies at most {MAX_CLONED_TURNS} turns")));
            }
            let turn = self.turn_record(session_id, &turn_id).await?;
            if chain.is_empty() && turn.state == TurnState::Running {
                return Err(ServiceError::turn_running(format!(
                    "turn {turn_id} is still running; clone the session once it has ended, or up to an earlier turn"
                )));
            }
            next = turn.previous_turn_id.clone();
            chain.push(turn);
        }
        chain.reverse();

        let now = timestamp::now();
        let clone = SessionRecord {
            resource_id: source.resource_id.clone(),
            id: ids::new_id("sess"),
            agent: source.agent.clone(),
            title: request.title.or_else(|| source.title.clone()),
            created_by: caller.subject.clone(),
            created_at: now.clone(),
            updated_at: now,
            last_turn_id: None,
            control: source.control.clone(),
        };
        self.stores().sessions.create_session(&clone).await?;
        if let Err(error) = self.copy_turns(&source, &clone, &chain).await {
            // Nothing half-made stays: the clone goes with its turns.
            if let Err(cleanup) = self.stores().sessions.delete_session(&clone.id).await {
                tracing::warn!(session = %clone.id, error = %cleanup, "a failed clone could not be removed");
            }
            return Err(error);
        }
        self.signals().notify_listed(&clone.id, &clone.created_by.subject_id);
        Ok(session_view(self.stores().sessions.get_session(&clone.id).await?))
    }

    /// Copies `chain` (oldest first) with its logs and files into the session `clone`.
    async fn copy_turns(&self, source: &SessionRecord, clone: &SessionRecord, chain: &[TurnRecord]) -> Result<()> {
        let mut new_ids: HashMap<&str, String> = HashMap::new();
        let mut last: Option<String> = None;
        for turn in chain {
            for digest in attachments::stored_files(&turn.input) {
                let mut file = self.stores().sessions.get_file(&source.id, digest).await?;
                file.session_id = clone.id.clone();
                self.stores().sessions.put_file(&file).await?;
            }
            let id = ids::new_id("turn");
            let previous = turn.previous_turn_id.as_deref().and_then(|previous| new_ids.get(previous)).cloned();
            let copy = TurnRecord { id: id.clone(), session_id: clone.id.clone(), previous_turn_id: previous.clone(), ..turn.clone() };
            let writes = self.copied_log(&turn.id, &id, previous.as_deref()).await?;
            self.stores().events.create_turn(&copy, last.as_deref(), &writes).await?;
            new_ids.insert(&turn.id, id.clone());
            last = Some(id);
        }
        Ok(())
    }

    /// The log writes that copy a turn's stream and content under the id `new_id`.
    async fn copied_log(&self, turn_id: &str, new_id: &str, previous: Option<&str>) -> Result<Vec<LogWrite>> {
        let turn: Arc<str> = new_id.into();
        // An event's kind (for content rows; none for what this version cannot read) and its
        // bytes, with the new turn's ids in `turn.created`.
        let rewrite = |data: &str| -> (Option<&'static str>, Arc<str>) {
            match serde_json::from_str::<Event>(data) {
                Ok(Event::TurnCreated(mut created)) => {
                    created.turn_id = new_id.to_owned();
                    created.previous_turn_id = previous.map(str::to_owned);
                    let created = Event::TurnCreated(created);
                    (Some(created.kind()), serde_json::to_string(&created).unwrap_or_else(|_| data.to_owned()).into())
                }
                Ok(event) => (Some(event.kind()), data.into()),
                Err(_) => (None, data.into()),
            }
        };
        let mut writes = Vec::new();
        let mut after = 0;
        loop {
            let page = self.stores().events.read_stream(turn_id, after, PAGE).await?;
            let full = page.len() == PAGE as usize;
            for event in page {
                after = event.sequence;
                writes.push(LogWrite::Stream { turn_id: turn.clone(), sequence: event.sequence, data: rewrite(&event.data).1 });
            }
            if !full {
                break;
            }
        }
        let mut after = None;
        loop {
            let query = ContentQuery { kinds: ContentKinds::All, descending: false, after, limit: PAGE };
            let page = self.stores().events.read_content(turn_id, &query).await?;
            let full = page.len() == PAGE as usize;
            for event in page {
                after = Some(event.sequence);
                let (Some(kind), data) = rewrite(&event.data) else { continue };
                writes.push(LogWrite::Content { turn_id: turn.clone(), sequence: event.sequence, kind, data });
            }
            if !full {
                break;
            }
        }
        Ok(writes)
    }
}
