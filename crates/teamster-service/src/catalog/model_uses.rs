//! How often each tenant used each model (the model catalog's `use_count`), counted in memory
//! and added to the store in batches: a turn's creation costs no statement of its own, only an
//! increment here. A background task adds what was counted [`FLUSH`] after the first use since
//! its last batch (one statement per tenant and model counted since), so other replicas see a
//! use within about that, and an idle server runs no timer for it; this
//! replica's listings add what it has not stored yet, so they see it at once. Counts are best
//! effort: what a replica counted in its last [`FLUSH`] before it stops without shutting down
//! is lost, and a store that fails keeps the counts for the next attempt.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use teamster_store::UsageStore;
use tokio::sync::Notify;

use crate::error::Result;

/// How often counted uses are added to the store.
const FLUSH: Duration = Duration::from_secs(1);

/// The uses counted and not yet stored, by tenant and model.
type Pending = HashMap<(String, String), u64>;

/// Each tenant's uses of each model (see the [module](self)).
pub(super) struct ModelUses {
    store: Arc<dyn UsageStore>,
    pending: Mutex<Pending>,
    /// Wakes the flushing task when a first use is counted after a flush: an idle server has
    /// no timer running for it.
    counted: Arc<Notify>,
}

impl std::fmt::Debug for ModelUses {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("ModelUses").field("pending", &self.lock().len()).finish_non_exhaustive()
    }
}

impl ModelUses {
    /// Counts over `store`, adding to it [`FLUSH`] after the first use counted since the last
    /// time, while the counter lives (the task holds it weakly and stops once it is dropped).
    pub(super) fn start(store: Arc<dyn UsageStore>) -> Arc<ModelUses> {
        let counted = Arc::new(Notify::new());
        let uses = Arc::new(ModelUses { store, pending: Mutex::default(), counted: counted.clone() });
        let weak: Weak<ModelUses> = Arc::downgrade(&uses);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                loop {
                    // Woken by a first use, or by the counter's drop (then it finds it gone).
                    counted.notified().await;
                    tokio::time::sleep(FLUSH).await;
                    let Some(uses) = weak.upgrade() else { return };
                    uses.flush().await;
                }
            });
        }
        uses
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts one use of `model` by `tenant`.
    pub(super) fn count(&self, tenant: &str, model: &str) {
        let mut pending = self.lock();
        let first = pending.is_empty();
        *pending.entry((tenant.to_owned(), model.to_owned())).or_default() += 1;
        drop(pending);
        if first {
            // Kept for the task if it is not waiting yet (it is flushing, or just started).
            self.counted.notify_one();
        }
    }

    /// `tenant`'s uses of each model: the store's, and what this replica counted since.
    pub(super) async fn of(&self, tenant: &str) -> Result<BTreeMap<String, u64>> {
        let mut uses: BTreeMap<String, u64> = self.store.model_uses(tenant).await?.into_iter().collect();
        for ((counted_for, model), count) in self.lock().iter() {
            if counted_for == tenant {
                *uses.entry(model.clone()).or_default() += count;
            }
        }
        Ok(uses)
    }

    /// Adds what was counted to the store; what fails to be added is counted again for the
    /// next time.
    pub(super) async fn flush(&self) {
        let taken = std::mem::take(&mut *self.lock());
        for ((tenant, model), count) in taken {
            if let Err(error) = self.store.add_model_uses(&tenant, &model, count).await {
                tracing::warn!(%error, model, "model uses could not be stored; they are kept for the next attempt");
                *self.lock().entry((tenant, model)).or_default() += count;
                self.counted.notify_one();
            }
        }
    }
}

impl Drop for ModelUses {
    /// Wakes the task, which then finds the counter gone and ends.
    fn drop(&mut self) {
        self.counted.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn counts_show_at_once_and_reach_the_store_in_one_statement_each() {
        let store: Arc<dyn teamster_store::Store> =
            Arc::new(teamster_store_sqlite::SqliteStore::connect("sqlite::memory:").await.expect("an in-memory store"));
        let uses = ModelUses::start(store.clone());
        for (tenant, model) in [("acme", "a/x"), ("acme", "a/x"), ("acme", "b/y"), ("other", "a/x")] {
            uses.count(tenant, model);
        }
        let expected = BTreeMap::from([("a/x".to_owned(), 2), ("b/y".to_owned(), 1)]);
        assert_eq!(uses.of("acme").await.unwrap(), expected, "counted, not yet stored");
        assert_eq!(store.model_uses("acme").await.unwrap(), vec![]);
        uses.flush().await;
        assert_eq!(uses.of("acme").await.unwrap(), expected, "stored, not counted twice");
        assert_eq!(store.model_uses("other").await.unwrap(), vec![("a/x".to_owned(), 1)]);
        uses.count("acme", "a/x");
        assert_eq!(uses.of("acme").await.unwrap()["a/x"], 3);
    }

    #[tokio::test]
    async fn the_task_stores_a_batch_a_flush_after_the_first_use() {
        let store: Arc<dyn teamster_store::Store> =
            Arc::new(teamster_store_sqlite::SqliteStore::connect("sqlite::memory:").await.expect("an in-memory store"));
        let uses = ModelUses::start(store.clone());
        uses.count("acme", "a/x");
        uses.count("acme", "a/x");
        let deadline = tokio::time::Instant::now() + FLUSH * 10;
        while store.model_uses("acme").await.unwrap().is_empty() {
            assert!(tokio::time::Instant::now() < deadline, "not stored within ten flush periods");
            tokio::time::sleep(FLUSH / 10).await;
        }
        assert_eq!(store.model_uses("acme").await.unwrap(), vec![("a/x".to_owned(), 2)]);
        assert!(uses.lock().is_empty(), "nothing left pending once stored");
    }
}
