//! The earlier turns a stream folds before its own (the data stream's and the UI message
//! stream's translators alike): the turn's input may answer calls
//! they left waiting, carry their sub-agents on, or settle their plans, and the parts need
//! those calls' names and arguments. They are the chain of turns back to the one that started
//! what is still open (each resuming the one before), read from the store, so every replica
//! and every replay folds the same ones.

use teamster_protocol::{Event, Turn, TurnInput, TurnState};
use teamster_service::{Caller, ListOrder, Service, ServiceError, TurnEventsQuery};

use super::Translator;

/// The most earlier turns a stream folds.
const MAX_TURNS: usize = 64;
/// The page size of reading an earlier turn's events.
const PAGE: u32 = 100;

/// A translator that folds earlier turns silently before it streams a turn.
pub trait Fold: Default {
    /// Folds an earlier turn: its input, its content events and its end.
    fn settle(&mut self, input: &[TurnInput], events: &[Event], state: &TurnState);
}

impl Fold for Translator {
    fn settle(&mut self, input: &[TurnInput], events: &[Event], state: &TurnState) {
        Translator::settle(self, input, events, state);
    }
}

/// A translator for `turn` that has folded the earlier turns `turn` may go on from.
pub async fn translator<T: Fold>(service: &Service, caller: &Caller, session_id: &str, turn: &Turn) -> Result<T, ServiceError> {
    let mut chain = Vec::new();
    let mut answers_earlier = has_decisions(&turn.input);
    let mut previous = turn.previous_turn_id.clone();
    while let Some(turn_id) = previous
        && chain.len() < MAX_TURNS
    {
        let earlier = service.get_turn(caller, session_id, &turn_id).await?;
        let waited = matches!(&earlier.state, TurnState::Done { required_actions, .. } if !required_actions.is_empty());
        if !answers_earlier && !waited {
            break;
        }
        answers_earlier = has_decisions(&earlier.input);
        previous = earlier.previous_turn_id.clone();
        chain.push(earlier);
    }
    let mut translator = T::default();
    for earlier in chain.iter().rev() {
        let events = content(service, caller, session_id, &earlier.id).await?;
        translator.settle(&earlier.input, &events, &earlier.state);
    }
    Ok(translator)
}

fn has_decisions(input: &[TurnInput]) -> bool {
    input.iter().any(|item| !matches!(item, TurnInput::Message { .. }))
}

/// Every content event of a finished turn, oldest first.
async fn content(service: &Service, caller: &Caller, session_id: &str, turn_id: &str) -> Result<Vec<Event>, ServiceError> {
    let mut events = Vec::new();
    let mut page_token = None;
    loop {
        let query = TurnEventsQuery { limit: PAGE, order: ListOrder::Ascending, page_token, require_terminal: false };
        let (page, next) = service.events().turn_events(caller, session_id, turn_id, query).await?;
        // Events this build cannot read (none today) have no part to contribute.
        events.extend(page.iter().filter_map(|raw| serde_json::from_str::<Event>(raw.get()).ok()));
        match next {
            Some(token) => page_token = Some(token),
            None => return Ok(events),
        }
    }
}
