//! [`StoreParts`]: a store as its six parts, each behind a trait object of its own, so that each
//! room of the service is given the parts it uses rather than the whole store.

use std::sync::Arc;

use crate::{AgentStore, CoordinationStore, EventLog, SessionStore, SettingsStore, Store, UsageStore};

/// One store's parts; cheap to clone (every part is the same store).
#[derive(Clone)]
pub struct StoreParts {
    pub agents: Arc<dyn AgentStore>,
    pub sessions: Arc<dyn SessionStore>,
    pub events: Arc<dyn EventLog>,
    pub coordination: Arc<dyn CoordinationStore>,
    pub settings: Arc<dyn SettingsStore>,
    pub usage: Arc<dyn UsageStore>,
}

impl From<Arc<dyn Store>> for StoreParts {
    fn from(store: Arc<dyn Store>) -> StoreParts {
        StoreParts {
            agents: store.clone(),
            sessions: store.clone(),
            events: store.clone(),
            coordination: store.clone(),
            settings: store.clone(),
            usage: store,
        }
    }
}

impl<S: Store> From<Arc<S>> for StoreParts {
    fn from(store: Arc<S>) -> StoreParts {
        StoreParts::from(store as Arc<dyn Store>)
    }
}
