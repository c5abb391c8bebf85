//! A session's plans, for clients: folded from the logs of its chain of turns
//! (`teamster_control::plans`), each turn with the mode it ran in.

use teamster_control::{TurnEvents, mode_in_force, plans};
use teamster_protocol::control::Plan;

use crate::error::Result;
use crate::{Caller, Service};

/// The most turns, newest first, whose plans a session lists.
const MAX_TURNS: usize = 1000;

impl Service {
    /// The plans the agent submitted in a session, oldest first, as its turns left them.
    pub async fn session_plans(&self, caller: &Caller, session_id: &str) -> Result<Vec<Plan>> {
        let session = self.catalog().owned_session(caller, session_id).await?;
        let spec = self.catalog().session_spec(&session).await?;
        if spec.modes.is_none() {
            return Ok(Vec::new());
        }
        self.runtime().flush().await;
        let mut turns = Vec::new();
        let mut next = session.last_turn_id;
        while let Some(turn_id) = next
            && turns.len() < MAX_TURNS
        {
            let turn = self.turn_record(session_id, &turn_id).await?;
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
}
