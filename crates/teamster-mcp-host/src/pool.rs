//! The MCP connections of sessions: one per (session, user, server), opened the first time a
//! turn of the session needs the server and reused by its later turns, so a server's session
//! state (and a stdio server's process) lives as long as the conversation does. The user is part
//! of the key because a connection may carry the user's OAuth token: two users never share one.
//!
//! The pool is bounded: a connection idle for [`IDLE_TIMEOUT`] is closed, and beyond
//! [`MAX_CONNECTIONS`] the least recently used one is. A dead connection (`is_alive` false) or
//! one whose configuration changed is replaced on the next use, and a deleted session's
//! connections are closed. A turn holds its own reference, so closing never cuts a running
//! call short.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use teamster_mcp::{McpConnection, McpServerConfig, Transport};
use teamster_tools::Tool;

/// How long an unused connection stays open.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
/// The most connections kept open at once.
pub(crate) const MAX_CONNECTIONS: usize = 256;
/// How often idle connections are looked for.
pub(crate) const SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// An open connection and the tools it listed when it was opened.
#[derive(Clone)]
pub(crate) struct Pooled {
    pub connection: Arc<McpConnection>,
    pub tools: Arc<Vec<Tool>>,
}

struct Entry {
    pooled: Pooled,
    /// Hash of the configuration it was opened with.
    fingerprint: u64,
    last_used: Instant,
}

/// (session id, the user's `type:id`, the agent's name for the server).
type Key = (String, String, String);

/// Bounded connections by session and server.
pub(crate) struct McpPool {
    entries: Mutex<HashMap<Key, Entry>>,
    capacity: usize,
    idle: Duration,
}

impl Default for McpPool {
    fn default() -> McpPool {
        McpPool::new(MAX_CONNECTIONS, IDLE_TIMEOUT)
    }
}

impl McpPool {
    pub fn new(capacity: usize, idle: Duration) -> McpPool {
        McpPool { entries: Mutex::new(HashMap::new()), capacity: capacity.max(1), idle }
    }

    /// The session's open, live connection to the server for the user, if it was opened with
    /// the same configuration; marks it used. A dead or outdated one is closed.
    pub fn get(&self, session_id: &str, user: &str, server: &str, fingerprint: u64) -> Option<Pooled> {
        let key = (session_id.to_owned(), user.to_owned(), server.to_owned());
        let mut entries = self.lock();
        let entry = entries.get_mut(&key)?;
        if entry.fingerprint == fingerprint && entry.pooled.connection.is_alive() {
            entry.last_used = Instant::now();
            return Some(entry.pooled.clone());
        }
        let stale = entries.remove(&key);
        drop(entries);
        drop(stale);
        None
    }

    /// Keeps a new connection for the session, user and server, replacing any other, and closes
    /// the least recently used ones beyond the capacity.
    pub fn insert(&self, session_id: &str, user: &str, server: &str, fingerprint: u64, pooled: Pooled) {
        let key = (session_id.to_owned(), user.to_owned(), server.to_owned());
        let mut entries = self.lock();
        let mut closed = Vec::new();
        closed.extend(entries.insert(key, Entry { pooled, fingerprint, last_used: Instant::now() }));
        while entries.len() > self.capacity {
            let Some(oldest) = entries.iter().min_by_key(|(_, entry)| entry.last_used).map(|(key, _)| key.clone()) else {
                break;
            };
            closed.extend(entries.remove(&oldest));
        }
        // Connections close (stdio servers stop) outside the lock.
        drop(entries);
        drop(closed);
    }

    /// Closes every connection of a session.
    pub fn remove_session(&self, session_id: &str) {
        let mut entries = self.lock();
        let keys: Vec<Key> = entries.keys().filter(|(session, _, _)| session == session_id).cloned().collect();
        let closed: Vec<Entry> = keys.iter().filter_map(|key| entries.remove(key)).collect();
        drop(entries);
        drop(closed);
    }

    /// Closes every connection of a user to a server, in any session (the user's authorization
    /// of it changed).
    pub fn remove_user_server(&self, user: &str, server: &str) {
        let mut entries = self.lock();
        let keys: Vec<Key> =
            entries.keys().filter(|(_, owner, name)| owner == user && name == server).cloned().collect();
        let closed: Vec<Entry> = keys.iter().filter_map(|key| entries.remove(key)).collect();
        drop(entries);
        drop(closed);
    }

    /// Closes connections unused for longer than the idle timeout, and dead ones.
    pub fn sweep(&self) {
        let now = Instant::now();
        let mut entries = self.lock();
        let keys: Vec<Key> = entries
            .iter()
            .filter(|(_, entry)| now.duration_since(entry.last_used) > self.idle || !entry.pooled.connection.is_alive())
            .map(|(key, _)| key.clone())
            .collect();
        let closed: Vec<Entry> = keys.iter().filter_map(|key| entries.remove(key)).collect();
        drop(entries);
        drop(closed);
    }

    /// The number of open connections.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Closes idle connections every [`SWEEP_INTERVAL`], until the host is dropped.
pub(super) fn start_sweeper(host: &Arc<super::McpHost>) {
    let host = Arc::downgrade(host);
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(SWEEP_INTERVAL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        loop {
            ticks.tick().await;
            let Some(host) = host.upgrade() else { return };
            host.pool.sweep();
        }
    });
}

/// A hash of everything that decides where a configuration connects and with which
/// credentials, so a changed setting opens a new connection. It stays in memory.
pub(crate) fn fingerprint(config: &McpServerConfig) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    config.id.hash(&mut hasher);
    match &config.transport {
        Transport::StreamableHttp(http) | Transport::Sse(http) => {
            matches!(config.transport, Transport::Sse(_)).hash(&mut hasher);
            http.url.hash(&mut hasher);
            http.headers.hash(&mut hasher);
        }
        Transport::Stdio(stdio) => {
            stdio.command.hash(&mut hasher);
            stdio.args.hash(&mut hasher);
            stdio.env.hash(&mut hasher);
        }
    }
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use teamster_mcp::{HttpTransport, StdioTransport};
    use teamster_tools::ToolSource;

    use super::*;

    /// A connection to the real test server over stdio (the interpreter comes from
    /// `TEAMSTER_TEST_PYTHON`, as in teamster-mcp's tests).
    async fn open() -> Pooled {
        let python = std::env::var("TEAMSTER_TEST_PYTHON")
            .expect("TEAMSTER_TEST_PYTHON must name a Python with the `mcp` package (scripts/test sets it)");
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/mcp_servers/tools_server.py");
        let config = McpServerConfig::new("id", "tools", Transport::Stdio(StdioTransport::new(python, [script])));
        let connection = McpConnection::connect(config).await.expect("the test server starts");
        let tools = connection.list().await.expect("the test server lists its tools");
        Pooled { connection: Arc::new(connection), tools: Arc::new(tools) }
    }

    #[tokio::test]
    async fn the_pool_reuses_replaces_and_bounds_connections() {
        let pool = McpPool::new(2, IDLE_TIMEOUT);
        let first = open().await;
        pool.insert("s1", "user:u", "a", 1, first.clone());
        let reused = pool.get("s1", "user:u", "a", 1).expect("reused");
        assert!(Arc::ptr_eq(&reused.connection, &first.connection));
        assert!(pool.get("s2", "user:u", "a", 1).is_none(), "connections are per session");
        assert!(pool.get("s1", "user:other", "a", 1).is_none(), "connections are per user");

        pool.insert("s1", "user:u", "b", 1, open().await);
        pool.insert("s2", "user:u", "a", 1, open().await);
        assert_eq!(pool.len(), 2);
        assert!(pool.get("s1", "user:u", "a", 1).is_none(), "the least recently used connection was closed");

        assert!(pool.get("s1", "user:u", "b", 2).is_none(), "a changed configuration is not reused");
        assert_eq!(pool.len(), 1);

        let dying = pool.get("s2", "user:u", "a", 1).expect("still open");
        let crashed = dying.connection.call("crash", "{}").await;
        assert!(crashed.is_error && !dying.connection.is_alive(), "{crashed:?}");
        assert!(pool.get("s2", "user:u", "a", 1).is_none(), "a dead connection is not reused");
        assert_eq!(pool.len(), 0);

        pool.insert("s3", "user:u", "a", 1, first.clone());
        pool.remove_session("s3");
        assert_eq!(pool.len(), 0);

        pool.insert("s4", "user:u", "a", 1, first.clone());
        pool.insert("s4", "user:v", "a", 1, first);
        pool.remove_user_server("user:u", "a");
        assert_eq!(pool.len(), 1, "only the other user's connection stays");
        assert!(pool.get("s4", "user:v", "a", 1).is_some());
    }

    #[tokio::test]
    async fn idle_connections_are_swept() {
        let pool = McpPool::new(8, Duration::from_millis(1));
        pool.insert("s", "user:u", "a", 1, open().await);
        tokio::time::sleep(Duration::from_millis(20)).await;
        pool.sweep();
        assert_eq!(pool.len(), 0);
    }

    #[test]
    fn fingerprints_follow_the_configuration() {
        let config = |url: &str, token: &str| {
            McpServerConfig::new("id", "name", Transport::StreamableHttp(HttpTransport::new(url).header("Authorization", token)))
        };
        assert_eq!(fingerprint(&config("http://a/mcp", "x")), fingerprint(&config("http://a/mcp", "x")));
        assert_ne!(fingerprint(&config("http://a/mcp", "x")), fingerprint(&config("http://a/mcp", "y")));
        assert_ne!(fingerprint(&config("http://a/mcp", "x")), fingerprint(&config("http://b/mcp", "x")));
    }
}
