//! Turns and other replicas.
//!
//! **Turns running elsewhere**, seen through the store: whether the session's turn runs
//! elsewhere, asking it to stop, waiting for it to record its end, and cancel requests other
//! replicas made for the turns that run here. Readers are woken by the change feed (see
//! [`crate::cluster`]) and re-read the store on a slow timer in any case.
//!
//! **Taking over turns whose server stopped**: every replica looks, at start and then every
//! [`LeaseConfig::takeover_every`](crate::LeaseConfig), for running turns whose lease has
//! expired, claims them with compare-and-set (of racing replicas, one wins each turn), and
//! either resumes each from its log or ends it `cancelled` with reason `abandoned`.
//!
//! Resuming starts a runner for the existing turn whose live log begins with the turn's stored
//! stream, so every subscriber, on any replica, sees one gap-free sequence: events go on at the
//! next sequence number. The plan is rebuilt from the history as for any turn, then adjusted
//! (see `resume`). A turn is ended `abandoned` instead, after its last stored event, when
//! resuming it is not safe or not useful:
//! - it was taken over more than [`LeaseConfig::max_takeovers`](crate::LeaseConfig) times
//!   (it may be what stops its servers);
//! - it is older than the turn timeout (its time is up);
//! - its plan cannot be built (its agent version or model is gone, say), or a model step of it
//!   ended without finishing (it was already ending, for a reason the log does not hold).
//!
//! A turn that someone asked to cancel while nobody ran it ends `cancelled` with the reason
//! asked for. A turn whose `turn.done` was stored but whose state was not gets that state.
//! Turns waiting for a human (approvals, questions, MCP authorization) are `done` already:
//! nothing here touches them, and the next turn resumes them from the log wherever it runs.

use std::sync::Arc;
use std::time::Duration;

use teamster_protocol::event::TurnDone;
use teamster_protocol::{CancelReason, Event, MAIN_THREAD_ID, TurnState, ids, timestamp};
use teamster_store::{ContentKinds, ContentQuery, LogWrite, StreamEvent, TurnLease};
use tokio::time::Instant;

use super::TurnRuntime;
use super::clock::clock;
use super::live::TurnLog;
use super::metrics::metrics_from_content;
use crate::cluster::TurnWatch;
use crate::error::Result;

/// How long a reader woken by nothing re-reads the store anyway.
const FALLBACK_POLL: Duration = Duration::from_secs(1);
/// How often a reader of a store with no feed re-reads it (a turn of another process sharing
/// a SQLite file, which only happens around a restart).
const STORE_POLL: Duration = Duration::from_millis(250);

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

/// The most turns one scan claims; the next scan (on this replica or another) takes the rest.
const TAKEOVER_BATCH: u32 = 16;
/// Stream events read per store call when loading a turn's stream.
const STREAM_PAGE: u32 = 1000;

/// Starts looking for turns to take over, now and then periodically, for as long as the
/// service lives.
pub(crate) fn start_takeovers(runtime: &TurnRuntime) {
    let inner = Arc::downgrade(&runtime.inner);
    let every = runtime.inner.leases.config.takeover_every;
    tokio::spawn(async move {
        loop {
            {
                let Some(inner) = inner.upgrade() else { return };
                if let Err(error) = (TurnRuntime { inner }).take_over_expired().await {
                    tracing::warn!(%error, "looking for turns to take over failed");
                }
            }
            tokio::time::sleep(every).await;
        }
    });
}

impl TurnRuntime {
    /// Claims the running turns whose lease has expired (up to a batch) and takes each over.
    async fn take_over_expired(&self) -> Result<()> {
        let leases = &self.inner.leases;
        for expired in self.coordination().expired_leases(TAKEOVER_BATCH).await? {
            // Still stopping here (its hold ran out): it leaves memory first.
            if self.inner.live.get(&expired.turn_id).is_some() {
                continue;
            }
            let claimed_at = clock();
            let claim = self.coordination().claim_turn(&expired.turn_id, &leases.owner, leases.config.ttl, expired.claims);
            let Some(lease) = claim.await? else { continue };
            tracing::warn!(
                turn_id = %lease.turn_id,
                previous_owner = expired.owner.as_deref().unwrap_or("none"),
                takeovers = lease.claims.saturating_sub(1),
                "taking over a turn whose server stopped"
            );
            let turn_id = lease.turn_id.clone();
            if let Err(error) = self.take_over(&expired.session_id, lease, claimed_at).await {
                // The lease runs out again and the next takeover counts one more.
                tracing::error!(%turn_id, %error, "taking over the turn failed");
            }
        }
        Ok(())
    }

    /// Takes over a turn this replica has just claimed: finishes recording its end if it had
    /// one, ends it `abandoned` if resuming is not safe, or resumes it.
    async fn take_over(&self, session_id: &str, lease: TurnLease, claimed_at: u64) -> Result<()> {
        let turn = self.events().get_turn(session_id, &lease.turn_id).await?;
        if turn.state.is_terminal() {
            return Ok(());
        }
        let stream = self.read_whole_stream(&turn.id).await?;
        let last = stream.last().map_or(0, |event| event.sequence);
        if let Some(Ok(Event::TurnDone(done))) = stream.last().map(|event| serde_json::from_str::<Event>(&event.data)) {
            let state = LogWrite::TurnState { turn_id: turn.id.as_str().into(), state: done.state, at: timestamp::now() };
            return self.write_taken_over(&lease, &[state]).await;
        }
        // Asked to stop while nobody ran it: it stops now, as asked.
        if let Some((_, reason)) = self.coordination().cancel_requests(&[turn.id.as_str()]).await?.into_iter().next() {
            return self.end_unrun(&lease, last, reason).await;
        }
        let takeovers = lease.claims.saturating_sub(1);
        let age = age(&turn.created_at);
        let refusal = if takeovers > self.inner.leases.config.max_takeovers {
            Some(format!("it was taken over {takeovers} times"))
        } else if age >= self.inner.turn_timeout {
            Some("it is older than the turn timeout".to_owned())
        } else {
            None
        };
        if let Some(reason) = refusal {
            tracing::warn!(turn_id = %turn.id, "ending the turn as abandoned: {reason}");
            return self.end_unrun(&lease, last, CancelReason::Abandoned).await;
        }
        let session = self.sessions().get_session(session_id).await?;
        let events = stream.iter().map(|event| event.data.as_str().into()).collect();
        let log = TurnLog::new(&turn.id, session_id, events);
        let hold = self.inner.leases.hold_taken_over(&log, lease, claimed_at);
        self.inner.live.insert(log.clone());
        super::runner::spawn_resumed(self.clone(), log, hold, session, turn, self.inner.turn_timeout - age);
        Ok(())
    }

    /// Every stored stream event of a turn, in order.
    async fn read_whole_stream(&self, turn_id: &str) -> Result<Vec<StreamEvent>> {
        let mut events: Vec<StreamEvent> = Vec::new();
        loop {
            let after = events.last().map_or(0, |event| event.sequence);
            let page = self.events().read_stream(turn_id, after, STREAM_PAGE).await?;
            let full = page.len() == STREAM_PAGE as usize;
            events.extend(page);
            if !full {
                return Ok(events);
            }
        }
    }

    /// Writes a batch of a turn this replica has just claimed with `lease`, under that lease:
    /// if another replica has taken the turn over since, it writes nothing.
    async fn write_taken_over(&self, lease: &TurnLease, batch: &[LogWrite]) -> Result<()> {
        let refused = self.events().write_held(&self.inner.leases.owner, std::slice::from_ref(lease), batch).await?;
        if !refused.is_empty() {
            tracing::warn!(turn_id = %lease.turn_id, "another replica took the turn over before its end was recorded here");
        }
        Ok(())
    }

    /// Ends a turn nobody runs, held with `lease`, as `cancelled` with `reason`, after its last
    /// stored event (`last`), with the metrics of the model messages it recorded.
    async fn end_unrun(&self, lease: &TurnLease, last: u64, reason: CancelReason) -> Result<()> {
        let turn_id = lease.turn_id.as_str();
        let turn_key: Arc<str> = turn_id.into();
        let at = timestamp::now();
        let content = self
            .events()
            .read_content(turn_id, &ContentQuery { kinds: ContentKinds::All, descending: false, after: None, limit: u32::MAX })
            .await?;
        let state = TurnState::Cancelled {
            reason,
            completed_at: at.clone(),
            metrics: Some(metrics_from_content(&content)),
        };
        let done = Event::TurnDone(TurnDone {
            id: ids::new_id("evt"),
            state: state.clone(),
            created_at: at.clone(),
            thread_id: Some(MAIN_THREAD_ID.to_owned()),
        });
        let data: Arc<str> = serde_json::to_string(&done).unwrap_or_default().into();
        self.write_taken_over(lease, &[
            LogWrite::Stream { turn_id: turn_key.clone(), sequence: last + 1, data: data.clone() },
            LogWrite::Content { turn_id: turn_key.clone(), sequence: last + 1, kind: done.kind(), data },
            LogWrite::TurnState { turn_id: turn_key, state, at },
        ])
        .await
    }
}

/// How long ago a turn was created (zero if its timestamp does not parse).
fn age(created_at: &str) -> Duration {
    let (Some(created), Some(now)) = (timestamp::parse(created_at), timestamp::parse(&timestamp::now())) else {
        return Duration::ZERO;
    };
    Duration::from_millis(u64::try_from((now - created).whole_milliseconds()).unwrap_or(0))
}
