//! Stream retention: a finished turn keeps its whole stream (deltas included, for replays and
//! resumed subscriptions) for [`RuntimeConfig::stream_retention`](crate::RuntimeConfig), then
//! loses it; subscribing to it then answers 412, while its folded content events stay listable
//! until its session is deleted.
//!
//! Every replica runs a sweeper that deletes expired streams in bounded batches (a few turns per
//! store call, with a pause between calls), so a backlog never holds the store for long.
//! Replicas sweeping at once skip each other's turns.

use std::sync::Arc;
use std::time::Duration;

use teamster_protocol::timestamp;
use teamster_store::EventLog;

use super::TurnRuntime;

/// Turns whose streams one store call deletes.
const SWEEP_BATCH: u32 = 64;
/// The pause between two batches of one sweep, so other writers get their turn.
const BATCH_PAUSE: Duration = Duration::from_millis(50);
/// The longest time between two sweeps.
const MAX_SWEEP_INTERVAL: Duration = Duration::from_secs(600);
/// The shortest time between two sweeps.
const MIN_SWEEP_INTERVAL: Duration = Duration::from_millis(100);

/// Starts the sweeper; it ends with the runtime. It sweeps every tenth of the retention time
/// (between 100 ms and 10 minutes), so a stream outlives its retention by at most that much.
pub(crate) fn start_sweeper(runtime: &TurnRuntime) {
    let inner = Arc::downgrade(&runtime.inner);
    let retention = runtime.inner.stream_retention;
    let every = (retention / 10).clamp(MIN_SWEEP_INTERVAL, MAX_SWEEP_INTERVAL);
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            let Some(inner) = inner.upgrade() else { return };
            sweep_streams(inner.stores.events.as_ref(), retention).await;
        }
    });
}

/// Deletes the streams of turns that finished more than `retention` ago, batch by batch,
/// until none is left or a batch fails (the next sweep goes on).
async fn sweep_streams(log: &dyn EventLog, retention: Duration) {
    let seconds = i64::try_from(retention.as_secs()).unwrap_or(i64::MAX);
    let Some(cutoff) = timestamp::shift(&timestamp::now(), -seconds) else { return };
    let mut deleted = 0_u64;
    loop {
        match log.delete_expired_streams(&cutoff, SWEEP_BATCH).await {
            Ok(count) => {
                deleted += u64::from(count);
                if count < SWEEP_BATCH {
                    break;
                }
            }
            Err(error) => {
                tracing::warn!(%error, "deleting expired event streams failed; the next sweep retries");
                break;
            }
        }
        tokio::time::sleep(BATCH_PAUSE).await;
    }
    if deleted > 0 {
        tracing::debug!(turns = deleted, "deleted the event streams of turns past their retention");
    }
}
