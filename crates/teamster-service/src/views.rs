//! Views folded from a session's events, for clients: its plans (`teamster_control::plans`,
//! from the logs of its chain of turns, each turn with the mode it ran in) and its task list
//! (`teamster_control::task_list`, newest turn first, stopping at the first turn that changed
//! it: versions only grow along a session's chain of turns, so that turn holds the latest list).

use teamster_control::{TurnEvents, mode_in_force, plans, task_list};
use teamster_protocol::Event;
use teamster_protocol::control::{Plan, TaskList};
use teamster_store::ContentQuery;

use crate::Caller;
use crate::error::Result;
use crate::events::Events;

/// The most turns, newest first, whose plans a session lists.
const MAX_TURNS: usize = 1000;
/// Content events read from the store at a time.
const PAGE: u32 = 1000;

impl Events<'_> {
    /// The plans the agent submitted in a session, oldest first, as its turns left them.
    pub async fn plans(&self, caller: &Caller, session_id: &str) -> Result<Vec<Plan>> {
        let session = self.service.catalog().owned_session(caller, session_id).await?;
        let spec = self.service.catalog().session_spec(&session).await?;
        if spec.modes.is_none() {
            return Ok(Vec::new());
        }
        self.service.runtime().flush().await;
        let mut turns = Vec::new();
        let mut next = session.last_turn_id;
        while let Some(turn_id) = next
            && turns.len() < MAX_TURNS
        {
            let turn = self.service.turn_record(session_id, &turn_id).await?;
            let events = self.turn_content(&turn.id).await?;
            next = turn.previous_turn_id.clone();
            turns.push((turn, events));
        }
        turns.reverse();
        let folded: Vec<TurnEvents<'_>> = turns
            .iter()
            .map(|(turn, events)| {
                let mode = mode_in_force(&spec, turn.control.mode.as_deref());
                TurnEvents {
                    turn_id: &turn.id,
                    input: &turn.input,
                    state: &turn.state,
                    mode: mode.map_or("", |mode| mode.id.as_str()),
                    transitions_to: mode.and_then(|mode| mode.transitions_to.as_deref()).unwrap_or(""),
                    events,
                }
            })
            .collect();
        Ok(plans(&folded))
    }

    /// The task list of a session, as its turns left it (the running one included).
    pub async fn tasks(&self, caller: &Caller, session_id: &str) -> Result<TaskList> {
        let session = self.service.catalog().owned_session(caller, session_id).await?;
        self.service.runtime().flush().await;
        let mut next = session.last_turn_id;
        while let Some(turn_id) = next {
            let turn = self.service.turn_record(session_id, &turn_id).await?;
            let list = task_list(&self.turn_content(&turn.id).await?);
            if list.version > 0 {
                return Ok(list);
            }
            next = turn.previous_turn_id;
        }
        Ok(TaskList::default())
    }

    /// Every content event of a turn, oldest first (events this version cannot read skipped).
    pub(crate) async fn turn_content(&self, turn_id: &str) -> Result<Vec<Event>> {
        let mut events = Vec::new();
        let mut after = None;
        loop {
            let query = ContentQuery { only_turn_content: true, descending: false, after, limit: PAGE };
            let page = self.service.stores().events.read_content(turn_id, &query).await?;
            let full = page.len() == PAGE as usize;
            after = page.last().map(|event| event.sequence);
            events.extend(page.into_iter().filter_map(|event| serde_json::from_str(&event.data).ok()));
            if !full {
                return Ok(events);
            }
        }
    }
}
