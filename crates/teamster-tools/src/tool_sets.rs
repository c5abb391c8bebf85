//! In-process tool sets: tools a program serves from its own code, registered by name with the
//! service when it is built, and named by agents as they name a configured MCP server
//! (`{"name": "orders"}` in `mcp_servers`).
//!
//! A set is opened once per turn with the turn's [`ToolScope`] (who runs it, in which session)
//! and answers a [`ToolSource`]; from there its tools go through the same selectors
//! (`enable_tools`, `disable_tools`, `preload_tools`, `require_approval_for_tools`) and the
//! same session permissions as an MCP server's. Nothing here is durable: a waiting approval
//! resumes in a later turn, which opens the set again, so a program that reopens a store must
//! register its sets again before it resumes turns.

use std::collections::BTreeMap;
use std::sync::Arc;

use teamster_protocol::{RequestContext, Subject};

use crate::ToolSource;

/// A set of tools served in-process, opened for each turn that uses it.
pub trait ToolSet: Send + Sync {
    /// The set's tools for one turn. Listing and calling may use `scope` (whose session,
    /// which user) as a context.
    fn open(&self, scope: &ToolScope) -> Arc<dyn ToolSource>;
}

/// The turn a [`ToolSet`] is opened for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolScope {
    /// The session the turn belongs to.
    pub session_id: String,
    /// The turn.
    pub turn_id: String,
    /// Who started the turn.
    pub user: Subject,
    /// The application's context the turn was created with.
    pub request_context: Option<RequestContext>,
}

/// In-process tool sets by name. Cheap to clone; empty by default.
#[derive(Clone, Default)]
pub struct ToolSets {
    sets: BTreeMap<String, Arc<dyn ToolSet>>,
}

impl std::fmt::Debug for ToolSets {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_set().entries(self.sets.keys()).finish()
    }
}

impl ToolSets {
    /// Adds `set` under `name`, replacing a set of that name.
    pub fn insert(&mut self, name: impl Into<String>, set: Arc<dyn ToolSet>) {
        self.sets.insert(name.into(), set);
    }

    /// The set named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn ToolSet>> {
        self.sets.get(name)
    }

    /// Whether a set is named `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.sets.contains_key(name)
    }

    /// The sets' names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.sets.keys().map(String::as_str)
    }

    /// Whether there is no set.
    pub fn is_empty(&self) -> bool {
        self.sets.is_empty()
    }
}
