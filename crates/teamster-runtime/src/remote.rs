//! Turns of other replicas, seen through the store: whether the session's turn runs elsewhere,
//! asking it to stop, waiting for it to record its end, and cancel requests other replicas
//! made for the turns that run here. Readers are woken by the change feed (see
//! [`crate::cluster`]) and re-read the store on a slow timer in any case.

use std::sync::Arc;
use std::time::Duration;

use teamster_protocol::CancelReason;
use tokio::time::Instant;

use super::TurnRuntime;
use super::live::TurnLog;
use super::running::RunningTurn;
use crate::cluster::TurnWatch;
use crate::error::Result;

/// How long a reader woken by nothing re-reads the store anyway.
const FALLBACK_POLL: Duration = Duration::from_secs(1);
/// How often a reader of a store with no feed re-reads it (a turn of another process sharing
/// a SQLite file, which only happens around a restart).
const STORE_POLL: Duration = Duration::from_millis(250);

/// The turn a new turn waits for before it runs: the session's previous turn, being cancelled
/// for it.
pub enum EndingTurn {
    /// It runs in this process.
    Local(RunningTurn),
    /// It runs on another replica; its end is read from the store.
    Remote { session_id: String, turn_id: String },
}

impl EndingTurn {
    /// Waits, at most `limit`, until the turn has recorded its end.
    pub(crate) async fn wait(&self, runtime: &TurnRuntime, limit: Duration) {
        match self {
            EndingTurn::Local(log) => {
                let _ = tokio::time::timeout(limit, log.wait_finished()).await;
            }
            EndingTurn::Remote { session_id, turn_id } => {
                if let Err(error) = runtime.wait_stored_end(session_id, turn_id, limit).await {
                    tracing::warn!(%turn_id, %error, "could not wait for the previous turn to end");
                }
            }
        }
    }
}

impl TurnRuntime {
    /// Registers for wake-ups about a turn; `None` when the store has no feed.
    pub(crate) fn watch_turn(&self, turn_id: &str) -> Option<TurnWatch> {
        self.inner.cluster.as_ref().map(|cluster| cluster.watch(turn_id))
    }

    /// Whether other processes may share the store (it has a change feed).
    pub fn is_clustered(&self) -> bool {
        self.inner.cluster.is_some()
    }

    /// Cancels a turn if it runs in this process.
    pub fn cancel_local(&self, turn_id: &str, reason: CancelReason) {
        if let Some(log) = self.inner.live.get(turn_id) {
            tracing::debug!(%turn_id, ?reason, "cancelling a turn at another replica's request");
            log.request_cancel(reason);
        }
    }

    /// Tells the turns running here that another replica queued steering instructions for.
    pub async fn apply_steers(&self) {
        let running = self.inner.live.all();
        if running.is_empty() {
            return;
        }
        let sessions: Vec<&str> = running.iter().map(|log| log.session_id.as_str()).collect();
        match self.sessions().sessions_with_queued(&sessions, teamster_store::QueueKind::Steer).await {
            Ok(steered) => {
                for log in running.iter().filter(|log| steered.contains(&log.session_id)) {
                    log.mark_steered();
                }
            }
            Err(error) => tracing::warn!(%error, "could not look up steering instructions"),
        }
    }

    /// Cancels the turns running here that another replica asked to cancel.
    pub async fn apply_cancel_requests(&self) {
        let running: Vec<Arc<TurnLog>> =
            self.inner.live.all().into_iter().filter(|log| log.cancel_reason().is_none()).collect();
        if running.is_empty() {
            return;
        }
        let turn_ids: Vec<&str> = running.iter().map(|log| &*log.turn_id).collect();
        match self.coordination().cancel_requests(&turn_ids).await {
            Ok(requests) => {
                for (turn_id, reason) in requests {
                    self.cancel_local(&turn_id, reason);
                }
            }
            Err(error) => tracing::warn!(%error, "could not look up cancel requests"),
        }
    }

    /// Waits, at most `limit`, until a turn's stored state is terminal; `Ok(false)` if it is
    /// still running then. Woken by the feed, and re-reads on a slow timer in any case.
    pub async fn wait_stored_end(&self, session_id: &str, turn_id: &str, limit: Duration) -> Result<bool> {
        let deadline = Instant::now() + limit;
        let mut watch = self.watch_turn(turn_id);
        loop {
            if self.events().get_turn(session_id, turn_id).await?.state.is_terminal() {
                return Ok(true);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            match watch.as_mut() {
                Some(watch) => {
                    watch.changed(left.min(FALLBACK_POLL)).await;
                }
                None => tokio::time::sleep(left.min(STORE_POLL)).await,
            }
        }
    }

    /// The session's last turn, if the store has it running and it does not run in this
    /// process (or was fenced here): a turn another replica runs. Only asked when the store
    /// has a feed.
    pub async fn remote_running_turn(&self, session: &teamster_store::SessionRecord) -> Result<Option<String>> {
        let Some(last) = &session.last_turn_id else { return Ok(None) };
        if self.inner.live.get(last).is_some_and(|log| !log.is_fenced()) {
            return Ok(None);
        }
        // A turn whose history is cached here ended here (once stored, an end is final).
        if self.inner.history.contains(last) {
            return Ok(None);
        }
        let record = self.events().get_turn(&session.id, last).await?;
        Ok((record.state == teamster_protocol::TurnState::Running).then(|| last.clone()))
    }

    /// Asks the replica running a turn to cancel it, and waits, at most `limit`, until the turn
    /// has recorded its end; `Ok(false)` if it has not.
    pub async fn cancel_remote(
        &self,
        session_id: &str,
        turn_id: &str,
        reason: CancelReason,
        limit: Duration,
    ) -> Result<bool> {
        self.coordination().request_cancel(turn_id, reason).await?;
        self.wait_stored_end(session_id, turn_id, limit).await
    }
}

/// How often a subscriber following a turn through the store re-reads it when nothing woke it.
pub(crate) fn store_poll(clustered: bool) -> Duration {
    if clustered { FALLBACK_POLL } else { STORE_POLL }
}
