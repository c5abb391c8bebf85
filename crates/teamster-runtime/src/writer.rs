//! The group-commit writer: one task that persists every log write of every turn in
//! batches, then advances each turn's durability watermark.
//!
//! Writers never wait for it: they queue and go on. The task takes everything queued (up to a
//! batch limit) and commits it in one transaction, so under load many events share one
//! commit. A failed commit is retried with back-off; nothing is dropped, except the writes of
//! turns this process no longer owns (their [`TurnLog`] is fenced, see `leases`), which are
//! left out of every commit attempt after the fence, queued ones included.
//!
//! Every write is fenced in the store too: a batch goes under this replica's lease of each of
//! its turns (`EventLog::write_held`), checked by the statement that writes it, so a write
//! that was in flight when this replica stalled cannot land after another replica took the
//! turn over. The store leaves such a turn's writes out and says so; the turn is then lost
//! here ([`Leases::lose_log`]) like one whose renewal failed.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use teamster_store::{EventLog, LogWrite, TurnLease};
use tokio::sync::{mpsc, oneshot};

use super::leases::Leases;
use super::live::TurnLog;
use teamster_telemetry::Telemetry;

const MAX_BATCH: usize = 4096;

enum Command {
    /// Writes of one turn that land in the same commit, in order.
    Write { writes: Vec<LogWrite>, log: Arc<TurnLog> },
    Flush(oneshot::Sender<()>),
}

/// A handle to the writer task; cheap to clone.
#[derive(Clone)]
pub struct EventWriter {
    sender: mpsc::UnboundedSender<Command>,
}

impl EventWriter {
    /// Starts the writer task on the current runtime, writing under the leases of `leases`.
    /// Each commit's duration goes to `telemetry`.
    pub(crate) fn start(store: Arc<dyn EventLog>, leases: Arc<Leases>, telemetry: Arc<Telemetry>) -> EventWriter {
        let (sender, receiver) = mpsc::unbounded_channel();
        tokio::spawn(run(store, leases, telemetry, receiver));
        EventWriter { sender }
    }

    /// Queues writes of one turn, whose live log is `log`, to be committed together (a burst
    /// of deltas; a turn's `turn.done` and its final state, so that no reader that has seen
    /// the one can find the other missing). The log's watermark advances once its stream
    /// writes are committed, and once the log is fenced its writes are dropped.
    pub fn write_together(&self, writes: Vec<LogWrite>, log: Arc<TurnLog>) {
        if self.sender.send(Command::Write { writes, log }).is_err() {
            tracing::error!("event writer has stopped; a write was lost");
        }
    }

    /// Waits until everything queued before this call is committed.
    pub async fn flush(&self) {
        let (done, wait) = oneshot::channel();
        if self.sender.send(Command::Flush(done)).is_ok() {
            let _ = wait.await;
        }
    }
}

async fn run(store: Arc<dyn EventLog>, leases: Arc<Leases>, telemetry: Arc<Telemetry>, mut receiver: mpsc::UnboundedReceiver<Command>) {
    let mut batch: Vec<LogWrite> = Vec::new();
    // The live log of each write in `batch`.
    let mut owners: Vec<Arc<TurnLog>> = Vec::new();
    let mut watermarks: HashMap<Arc<str>, (Arc<TurnLog>, u64)> = HashMap::new();
    let mut flushes: Vec<oneshot::Sender<()>> = Vec::new();
    while let Some(first) = receiver.recv().await {
        // Let the producers that woke us run once more, so one commit carries what they emit
        // next instead of each event getting a commit of its own.
        tokio::task::yield_now().await;
        let mut next = Some(first);
        while let Some(command) = next.take() {
            match command {
                Command::Write { writes, log } => {
                    for write in writes {
                        if let LogWrite::Stream { turn_id, sequence, .. } = &write {
                            let entry = watermarks.entry(turn_id.clone()).or_insert((log.clone(), 0));
                            entry.1 = entry.1.max(*sequence);
                        }
                        batch.push(write);
                        owners.push(log.clone());
                    }
                }
                Command::Flush(done) => flushes.push(done),
            }
            if batch.len() < MAX_BATCH {
                next = receiver.try_recv().ok();
            }
        }
        commit(store.as_ref(), &leases, &telemetry, &batch, &owners).await;
        batch.clear();
        owners.clear();
        for (_, (log, sequence)) in watermarks.drain() {
            if !log.is_fenced() {
                log.mark_durable(sequence);
            }
        }
        for done in flushes.drain(..) {
            let _ = done.send(());
        }
    }
}

/// Commits a batch under this replica's leases of its turns, retrying with back-off until the
/// store takes it. Each attempt leaves out the writes of turns fenced by then; the turns whose
/// writes the store refused are lost here.
async fn commit(store: &dyn EventLog, leases: &Leases, telemetry: &Telemetry, batch: &[LogWrite], owners: &[Arc<TurnLog>]) {
    let mut delay = Duration::from_millis(10);
    loop {
        let fenced = |index: usize| owners[index].is_fenced();
        let kept: Vec<LogWrite>;
        let batch = if (0..batch.len()).any(fenced) {
            kept = batch.iter().enumerate().filter(|(index, _)| !fenced(*index)).map(|(_, write)| write.clone()).collect();
            &kept[..]
        } else {
            batch
        };
        if batch.is_empty() {
            return;
        }
        let mut turns = HashSet::new();
        let held: Vec<TurnLease> = owners
            .iter()
            .filter(|log| turns.insert(&*log.turn_id))
            .map(|log| TurnLease { turn_id: log.turn_id.to_string(), claims: log.claims() })
            .collect();
        let started = Instant::now();
        let written = store.write_held(&leases.owner, &held, batch).await;
        telemetry.store_write(started.elapsed());
        match written {
            Ok(refused) => {
                for turn_id in refused {
                    if let Some(log) = owners.iter().find(|log| *log.turn_id == *turn_id) {
                        leases.lose_log(log);
                    }
                }
                return;
            }
            Err(error) => {
                tracing::error!(%error, writes = batch.len(), "event batch commit failed; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        }
    }
}
