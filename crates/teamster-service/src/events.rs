//! Reading events: subscribing to a turn's stream, listing a turn's content events, and a
//! session's events across turns ([`Events`]; the views folded from them are in `views.rs`).


use serde_json::value::RawValue;
use teamster_protocol::api::SessionEventItem;
use teamster_store::{ContentKinds, ContentQuery};

use crate::cursor;
use crate::error::{Result, ServiceError};
use teamster_runtime::EventStream;
use crate::{Caller, Service};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ListOrder {
    #[default]
    Ascending,
    Descending,
}

/// Which of a turn's content events to list.
#[derive(Clone, Debug)]
pub struct TurnEventsQuery {
    pub limit: u32,
    pub order: ListOrder,
    pub page_token: Option<String>,
    /// Refuse (409) while the turn runs, as the gateway dialect does.
    pub require_terminal: bool,
}

/// Which of a session's events to list, newest first.
#[derive(Clone, Debug)]
pub struct SessionEventsQuery {
    pub limit: u32,
    pub page_token: Option<String>,
    pub last_turn_id: Option<String>,
    /// List what a running anchor turn has persisted so far (native) instead of starting at
    /// its parent (gateway).
    pub include_running_tip: bool,
}

fn raw(data: String) -> Result<Box<RawValue>> {
    RawValue::from_string(data).map_err(|error| ServiceError::Store(teamster_store::Error::Corrupt(error.to_string())))
}

fn parse_sequence(text: &str) -> Result<u64> {
    text.parse().map_err(|_| ServiceError::invalid_param("page_token", "page_token is not a valid page token"))
}

/// A session's events, read by its creator ([`Service::events`]).
pub struct Events<'a> {
    pub(crate) service: &'a Service,
}

impl Events<'_> {
    /// Subscribes to a turn's stream after sequence number `after` (0 = from the start).
    pub async fn subscribe(&self, caller: &Caller, session_id: &str, turn_id: &str, after: u64) -> Result<EventStream> {
        self.service.catalog().owned_session(caller, session_id).await?;
        let turn = self.service.turn_record(session_id, turn_id).await?;
        Ok(self.service.runtime().subscribe(&turn, after).await?)
    }

    /// One page of a turn's content events (no `turn.created`, `turn.done` or deltas).
    pub async fn turn_events(
        &self,
        caller: &Caller,
        session_id: &str,
        turn_id: &str,
        query: TurnEventsQuery,
    ) -> Result<(Vec<Box<RawValue>>, Option<String>)> {
        self.service.catalog().owned_session(caller, session_id).await?;
        let turn = self.service.turn_record(session_id, turn_id).await?;
        if query.require_terminal && !turn.state.is_terminal() {
            return Err(ServiceError::Conflict {
                code: "turn_running",
                message: format!("turn {turn_id:?} is still running; list its events once it has ended, or subscribe"),
            });
        }
        let after = match &query.page_token {
            Some(token) => Some(parse_sequence(&cursor::decode(token, 1)?[0])?),
            None => None,
        };
        // Content lands in the store through the writer; flush so a just-finished turn lists whole.
        self.service.runtime().flush().await;
        let mut page = self
            .service
            .stores()
            .events
            .read_content(
                turn_id,
                &ContentQuery {
                    kinds: ContentKinds::TurnContent,
                    descending: query.order == ListOrder::Descending,
                    after,
                    limit: query.limit + 1,
                },
            )
            .await?;
        let next = if page.len() > query.limit as usize {
            page.truncate(query.limit as usize);
            page.last().map(|last| cursor::encode(&[&last.sequence.to_string()]))
        } else {
            None
        };
        let events = page.into_iter().map(|event| raw(event.data)).collect::<Result<Vec<_>>>()?;
        Ok((events, next))
    }

    /// One page of a session's events, newest first, across the chain of turns ending at the
    /// anchor turn.
    pub async fn session_events(
        &self,
        caller: &Caller,
        session_id: &str,
        query: SessionEventsQuery,
    ) -> Result<(Vec<SessionEventItem>, Option<String>)> {
        let session = self.service.catalog().owned_session(caller, session_id).await?;
        let (mut next_turn, mut before) = match &query.page_token {
            Some(token) => {
                let parts = cursor::decode(token, 2)?;
                let turn = self.service.stores().events.get_turn(session_id, &parts[0]).await.map_err(|_| {
                    ServiceError::invalid_param("page_token", "page_token is not a valid page token for this session")
                })?;
                (Some(turn), Some(parse_sequence(&parts[1])?))
            }
            None => {
                let anchor = match query.last_turn_id.as_deref().or(session.last_turn_id.as_deref()) {
                    Some(id) => Some(self.service.turn_record(session_id, id).await?),
                    None => None,
                };
                match anchor {
                    Some(turn)
                        if !query.include_running_tip && !turn.state.is_terminal() =>
                    {
                        let parent = match &turn.previous_turn_id {
                            Some(id) => Some(self.service.turn_record(session_id, id).await?),
                            None => None,
                        };
                        (parent, None)
                    }
                    other => (other, None),
                }
            }
        };
        self.service.runtime().flush().await;
        let mut items = Vec::new();
        while let Some(turn) = next_turn.take() {
            let wanted = query.limit as usize + 1 - items.len();
            let page = self
                .service
                .stores()
                .events
                .read_content(
                    &turn.id,
                    &ContentQuery { kinds: ContentKinds::All, descending: true, after: before.take(), limit: wanted as u32 },
                )
                .await?;
            for event in page {
                if items.len() == query.limit as usize {
                    let (last_turn, last_sequence): &(String, u64) = &items_key(&items);
                    return Ok((
                        items.into_iter().map(|(_, _, item)| item).collect(),
                        Some(cursor::encode(&[last_turn, &last_sequence.to_string()])),
                    ));
                }
                items.push((turn.id.clone(), event.sequence, SessionEventItem { turn_id: turn.id.clone(), event: raw(event.data)? }));
            }
            if let Some(previous) = &turn.previous_turn_id {
                next_turn = Some(self.service.turn_record(session_id, previous).await?);
            }
        }
        Ok((items.into_iter().map(|(_, _, item)| item).collect(), None))
    }
}

fn items_key(items: &[(String, u64, SessionEventItem)]) -> (String, u64) {
    items.last().map(|(turn, sequence, _)| (turn.clone(), *sequence)).unwrap_or_default()
}
