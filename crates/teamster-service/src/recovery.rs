//! Recovery after a crash: turns a previous process left running are ended as `abandoned`.
//!
//! Nothing is re-run: a model call or tool call that may have started is never repeated.
//! Every event already in the log stays replayable, and `turn.done` is appended after it. A
//! turn whose `turn.done` was written but whose state was not gets that state.

use teamster_protocol::event::TurnDone;
use teamster_protocol::{CancelReason, Event, MAIN_THREAD_ID, TurnState, ids, timestamp};
use teamster_store::{ContentQuery, LogWrite};

use crate::Service;
use crate::engine_metrics::metrics_from_content;
use crate::error::Result;

impl Service {
    async fn abandon(&self, turn_id: &str) -> Result<()> {
        let store = self.store();
        let last = store.last_sequence(turn_id).await?;
        let tail = store.read_stream(turn_id, last.saturating_sub(1), 1).await?;
        let turn_key: std::sync::Arc<str> = turn_id.into();
        let at = timestamp::now();
        if let Some(Ok(Event::TurnDone(done))) = tail.first().map(|event| serde_json::from_str::<Event>(&event.data)) {
            store.write(&[LogWrite::TurnState { turn_id: turn_key, state: done.state, at }]).await?;
            return Ok(());
        }
        let content = store
            .read_content(turn_id, &ContentQuery { only_turn_content: false, descending: false, after: None, limit: u32::MAX })
            .await?;
        let state = TurnState::Cancelled {
            reason: CancelReason::Abandoned,
            completed_at: at.clone(),
            metrics: Some(metrics_from_content(&content)),
        };
        let done = Event::TurnDone(TurnDone {
            id: ids::new_id("evt"),
            state: state.clone(),
            created_at: at.clone(),
            thread_id: Some(MAIN_THREAD_ID.to_owned()),
        });
        let data: std::sync::Arc<str> = serde_json::to_string(&done).unwrap_or_default().into();
        store
            .write(&[
                LogWrite::Stream { turn_id: turn_key.clone(), sequence: last + 1, data: data.clone() },
                LogWrite::Content { turn_id: turn_key.clone(), sequence: last + 1, kind: done.kind(), data },
                LogWrite::TurnState { turn_id: turn_key, state, at },
            ])
            .await?;
        Ok(())
    }
}

/// Ends every turn the store still shows as running. Called once at start, before this
/// process runs any turn of its own.
pub(crate) async fn abandon_orphaned_turns(service: &Service) -> Result<()> {
    for turn in service.store().running_turns().await? {
        tracing::warn!(turn_id = %turn.id, "ending a turn left running by a previous process as abandoned");
        service.abandon(&turn.id).await?;
    }
    Ok(())
}
