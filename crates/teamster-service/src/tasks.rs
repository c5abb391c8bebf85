//! A session's task list, for clients: folded from its log (`teamster_control::task_list`),
//! newest turn first, stopping at the first turn that changed it (versions only grow along a
//! session's chain of turns, so that turn holds the latest list).

use teamster_control::task_list;
use teamster_protocol::Event;
use teamster_protocol::control::TaskList;
use teamster_store::ContentQuery;

use crate::{Caller, Service};
use crate::error::Result;

/// Content events read from the store at a time.
const PAGE: u32 = 1000;

impl Service {
    /// The task list of a session, as its turns left it (the running one included).
    pub async fn session_tasks(&self, caller: &Caller, session_id: &str) -> Result<TaskList> {
        let session = self.catalog().owned_session(caller, session_id).await?;
        self.runtime().flush().await;
        let mut next = session.last_turn_id;
        while let Some(turn_id) = next {
            let turn = self.turn_record(session_id, &turn_id).await?;
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
            let page = self.stores().events.read_content(turn_id, &query).await?;
            let full = page.len() == PAGE as usize;
            after = page.last().map(|event| event.sequence);
            events.extend(page.into_iter().filter_map(|event| serde_json::from_str(&event.data).ok()));
            if !full {
                return Ok(events);
            }
        }
    }
}
