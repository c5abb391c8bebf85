//! Turn leases: this replica's hold on the turns it runs.
//!
//! Every running turn is owned through a lease in the store (owner: this replica's id, made at
//! start; expiry on the store's clock). A new turn starts with an unclaimed lease that protects
//! it for a grace period; this replica's first renewal claims it. One task, the keeper, renews
//! the leases this replica holds in batches: every [`LeaseConfig::renew_every`], and a new
//! turn's first renewal a fifth of that after it starts (turns that end sooner cost the store
//! nothing). A turn taken over from a stopped replica (see `replicas`) is held from its claim.
//!
//! A hold is lost when the store says another replica took the turn over, or when this replica
//! could not renew it in time: [`Hold::is_valid`] ends a margin ([`LeaseConfig::margin`])
//! before the store's expiry, so this replica stops acting before any other may start. A lost
//! turn is fenced and stopped: the writer drops its writes, including those already queued;
//! it records no end, and its subscribers here are let go, to re-subscribe wherever the turn
//! now runs. The engine asks ([`Hold::is_valid`], through the sink's checkpoint) before it
//! starts tool calls, so no call starts on a hold that may have run out.
//!
//! The store enforces the same: the writer writes each turn under its hold's lease, and the
//! store writes nothing of a turn whose lease another replica has taken (see `writer`). Such
//! a refusal loses the hold too ([`Leases::lose_log`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use teamster_protocol::{CancelReason, ids};
use teamster_store::codec::UNCLAIMED_LEASE_GRACE_MS;
use teamster_store::{CoordinationStore, TurnLease};

use super::TurnRuntime;
use super::clock::{clock, millis};
use super::live::TurnLog;

/// How turns are leased and taken over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// How long a lease lasts without renewal; another replica may take the turn over once it
    /// has expired.
    pub ttl: Duration,
    /// How often held leases are renewed; well under `ttl`, so that a renewal or two may fail
    /// without losing the lease.
    pub renew_every: Duration,
    /// How often each replica looks for running turns whose lease has expired.
    pub takeover_every: Duration,
    /// How many times one turn may be taken over and resumed; a turn taken over more often
    /// (it keeps stopping its servers, say) ends `abandoned` instead.
    pub max_takeovers: u64,
}

impl Default for LeaseConfig {
    fn default() -> LeaseConfig {
        LeaseConfig {
            ttl: Duration::from_secs(15),
            renew_every: Duration::from_secs(5),
            takeover_every: Duration::from_secs(5),
            max_takeovers: 3,
        }
    }
}

impl LeaseConfig {
    /// How much sooner than the store a replica considers its hold ended: a quarter of the
    /// lease, so that a write committing when the hold runs out lands before any other replica
    /// may take over.
    pub fn margin(&self) -> Duration {
        self.ttl / 4
    }

    /// How often the keeper wakes: a fifth of the renewal period, between 10 ms and 1 s.
    fn tick(&self) -> Duration {
        (self.renew_every / 5).clamp(Duration::from_millis(10), Duration::from_secs(1))
    }
}

/// The leases this replica holds, by turn id.
pub(crate) struct Leases {
    /// This replica's id: the owner of its leases.
    pub(crate) owner: Arc<str>,
    pub(crate) config: LeaseConfig,
    holds: Mutex<HashMap<Arc<str>, Arc<Hold>>>,
}

/// This replica's hold on one running turn.
pub(crate) struct Hold {
    pub(crate) lease: TurnLease,
    log: Arc<TurnLog>,
    /// When the keeper renews the lease next, in milliseconds of [`clock`].
    next_renewal: AtomicU64,
    /// The registry holding it, where a hold that ran out is let go.
    leases: Weak<Leases>,
}

impl Hold {
    /// Whether this replica may still act on the turn: the hold has not run out. Its end is
    /// kept on the turn's log, so the writer stops writing the turn at once when it passes.
    pub(crate) fn is_valid(&self) -> bool {
        clock() < self.log.owned_until()
    }

    /// Whether this replica still owns the turn: the hold has not run out (one that has is let
    /// go at once) and the turn was not fenced.
    pub(crate) fn still_owned(self: &Arc<Hold>) -> bool {
        if !self.is_valid()
            && let Some(leases) = self.leases.upgrade()
        {
            leases.lose(self, "its lease ran out before a tool call");
        }
        self.is_valid() && !self.log.is_fenced()
    }
}

impl Leases {
    /// The leases of a replica with a new id.
    pub(crate) fn new(config: LeaseConfig) -> Leases {
        Leases { owner: ids::new_id("replica").into(), config, holds: Mutex::default() }
    }

    /// Holds a turn this replica has just created: its lease is unclaimed, protected for the
    /// store's grace period from creation (which was before now), until the first renewal.
    pub(crate) fn hold_new(self: &Arc<Leases>, log: &Arc<TurnLog>) -> Arc<Hold> {
        let now = clock();
        let grace = Duration::from_millis(UNCLAIMED_LEASE_GRACE_MS.unsigned_abs());
        log.set_owned_until(now + millis(grace.saturating_sub(self.config.margin())), false);
        let hold = Hold {
            lease: TurnLease { turn_id: log.turn_id.to_string(), claims: 1 },
            log: log.clone(),
            next_renewal: AtomicU64::new(now + millis(self.config.tick())),
            leases: Arc::downgrade(self),
        };
        self.insert(hold)
    }

    /// Holds a turn this replica took over with `lease`, claimed by a call that started at
    /// `claimed_at` (a [`clock`] reading).
    pub(crate) fn hold_taken_over(self: &Arc<Leases>, log: &Arc<TurnLog>, lease: TurnLease, claimed_at: u64) -> Arc<Hold> {
        log.set_owned_until(claimed_at + self.valid_for(), false);
        let hold = Hold {
            lease,
            log: log.clone(),
            next_renewal: AtomicU64::new(claimed_at + millis(self.config.renew_every)),
            leases: Arc::downgrade(self),
        };
        self.insert(hold)
    }

    fn insert(&self, hold: Hold) -> Arc<Hold> {
        hold.log.set_claims(hold.lease.claims);
        let hold = Arc::new(hold);
        lock(&self.holds).insert(hold.log.turn_id.clone(), hold.clone());
        hold
    }

    /// Lets go of a turn that has recorded its end: a finished turn's lease needs no renewal.
    pub(crate) fn release_hold(&self, turn_id: &str) {
        lock(&self.holds).remove(turn_id);
    }

    /// How long a renewal that started at some moment keeps a hold valid.
    fn valid_for(&self) -> u64 {
        millis(self.config.ttl.saturating_sub(self.config.margin()))
    }

    /// Renews the leases that are due, and lets go of the holds that ran out or were taken
    /// over. One store call for all of them.
    async fn keep(&self, store: &dyn CoordinationStore) {
        let now = clock();
        let holds: Vec<Arc<Hold>> = lock(&self.holds).values().cloned().collect();
        let mut due = Vec::new();
        for hold in holds {
            if !hold.is_valid() {
                self.lose(&hold, "its lease could not be renewed in time");
            } else if hold.next_renewal.load(Ordering::Acquire) <= now {
                due.push(hold);
            }
        }
        if due.is_empty() {
            return;
        }
        let leases: Vec<TurnLease> = due.iter().map(|hold| hold.lease.clone()).collect();
        let started = clock();
        match store.renew_leases(&self.owner, &leases, self.config.ttl).await {
            Ok(renewed) => {
                for hold in due {
                    if renewed.iter().any(|turn_id| *turn_id == hold.lease.turn_id) {
                        hold.log.set_owned_until(started + self.valid_for(), true);
                        hold.next_renewal.store(started + millis(self.config.renew_every), Ordering::Release);
                    } else if hold.log.final_state().is_some() {
                        // The turn has ended (the store no longer lists it as running).
                        self.release_hold(&hold.log.turn_id);
                    } else {
                        self.lose(&hold, "another replica took it over");
                    }
                }
            }
            Err(error) => {
                tracing::warn!(%error, leases = leases.len(), "renewing turn leases failed; retrying");
                for hold in due {
                    hold.next_renewal.store(clock() + millis(self.config.tick()), Ordering::Release);
                }
            }
        }
    }

    /// Stops acting on a turn this replica no longer owns: fences it (nothing more of it is
    /// written here) and stops it. Does nothing if the hold has been let go already.
    pub(crate) fn lose(&self, hold: &Arc<Hold>, why: &str) {
        {
            let mut holds = lock(&self.holds);
            match holds.get(&*hold.log.turn_id) {
                Some(held) if Arc::ptr_eq(held, hold) => holds.remove(&*hold.log.turn_id),
                _ => return,
            };
        }
        tracing::warn!(turn_id = %hold.log.turn_id, "this replica no longer owns the turn: {why}");
        stop(&hold.log);
    }

    /// Stops acting on a turn whose writes the store refused (see `writer`): another replica
    /// took it over, or it is gone. Like [`Leases::lose`], and fences the log even if its hold
    /// has been let go already.
    pub(crate) fn lose_log(&self, log: &TurnLog) {
        let hold = lock(&self.holds).get(&*log.turn_id).filter(|hold| std::ptr::eq(&*hold.log, log)).cloned();
        match hold {
            Some(hold) => self.lose(&hold, "the store refused its writes: another replica took it over"),
            None => stop(log),
        }
    }

    /// Hands every held turn over (on shutdown): fences and stops them here, and returns their
    /// leases so that the caller can release them once their last writes are settled.
    pub(crate) fn hand_over_all(&self) -> Vec<TurnLease> {
        let holds: Vec<Arc<Hold>> = lock(&self.holds).drain().map(|(_, hold)| hold).collect();
        for hold in &holds {
            stop(&hold.log);
        }
        holds.iter().map(|hold| hold.lease.clone()).collect()
    }
}

/// Starts the keeper: the task that renews this replica's leases. It ends with the runtime.
pub(super) fn start_keeper(runtime: &TurnRuntime) {
    let inner = Arc::downgrade(&runtime.inner);
    let config = runtime.inner.leases.config;
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(config.tick()).await;
            let Some(inner) = inner.upgrade() else { return };
            inner.leases.keep(inner.stores.coordination.as_ref()).await;
        }
    });
}

/// Fences a turn this replica no longer owns (nothing more of it is written here) and stops it.
fn stop(log: &TurnLog) {
    log.fence();
    log.request_cancel(CancelReason::Abandoned);
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
