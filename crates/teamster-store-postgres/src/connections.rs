//! The store's connections: a small pool of plain `PgConnection`s of our own.
//!
//! This is not `sqlx::Pool`: sqlx 0.8's pool pings every connection it takes back (a `Sync`
//! and its answer, a round trip per statement), and has no option to leave that out. This pool
//! checks nothing on release, so a call costs exactly its own statements' round trips. It
//! keeps connections clean another way:
//!
//! - A call hands its connection back with its outcome ([`Held::release`]). A connection whose
//!   call failed with a backend error (the server went away, or a statement failed in a way the
//!   store does not map onto a record) is closed, not reused.
//! - A connection whose caller was cancelled mid-call (its future dropped with the connection
//!   held) is in doubt: a statement may still be in flight and a transaction open. It is
//!   closed, not repaired; the server rolls back whatever it left open when the socket closes.
//! - A backend error also makes the idle connections suspect (the server may have restarted,
//!   or an operator ended backends): each is checked with a ping before its next use and
//!   replaced if that fails, as is one idle for longer than [`CHECK_IDLE_AFTER`]. So a server
//!   restart fails the calls under way and the first call to find its connection dead, not one
//!   call per pooled connection.
//!
//! Connections are opened on first need, up to the pool's size, and reused most recently used
//! first, so a quiet replica keeps few open. Waiting for a connection, checking it and opening
//! a new one share one deadline ([`crate::ACQUIRE_TIMEOUT`]).

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{ConnectOptions, Connection};
use teamster_store::{Error, Result};
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::time::{Instant, timeout_at};

use teamster_store_sql::error;

use crate::ACQUIRE_TIMEOUT;

/// An idle connection unused for this long is checked with a ping before its next use: a
/// server restart or a firewall's idle timeout may have ended it meanwhile.
const CHECK_IDLE_AFTER: Duration = Duration::from_secs(60);

pub(crate) struct Connections {
    /// How to open a connection.
    options: PgConnectOptions,
    /// One permit per connection the pool may hold (idle or in use); closed with the store.
    permits: Semaphore,
    /// The connections not in use, the most recently used last.
    idle: Mutex<Vec<Idle>>,
    /// How many calls have failed with a backend error: idle connections handed back before
    /// the latest failure are checked before their next use.
    failures: AtomicU64,
}

/// A connection in the pool, not in use.
struct Idle {
    connection: PgConnection,
    /// [`Connections::failures`] when it was handed back.
    failures: u64,
    /// When it was handed back.
    since: Instant,
}

/// A connection taken from the pool for one call. Hand it back with [`Held::release`];
/// dropped without that (its caller was cancelled), it is closed.
pub(crate) struct Held<'a> {
    pool: &'a Connections,
    /// `None` only once released.
    connection: Option<PgConnection>,
    /// Returned to the pool when the call ends, after the connection.
    _permit: SemaphorePermit<'a>,
}

impl Connections {
    /// A pool of at most `size` connections opened with `options`, starting with `first` (the
    /// connection that migrated the schema).
    pub(crate) fn new(options: PgConnectOptions, size: u32, first: PgConnection) -> Connections {
        let size = usize::try_from(size.max(1)).unwrap_or(usize::MAX).min(Semaphore::MAX_PERMITS);
        Connections {
            options,
            permits: Semaphore::new(size),
            idle: Mutex::new(vec![Idle { connection: first, failures: 0, since: Instant::now() }]),
            failures: AtomicU64::new(0),
        }
    }

    /// Takes a connection: an idle one (checked first if it is suspect), or a new one when none
    /// is idle and the pool is not full; otherwise waits for one to be handed back.
    pub(crate) async fn acquire(&self) -> Result<Held<'_>> {
        let deadline = Instant::now() + ACQUIRE_TIMEOUT;
        let permit = timeout_at(deadline, self.permits.acquire())
            .await
            .map_err(|_| Error::Backend("timed out waiting for a free PostgreSQL connection".to_owned()))?
            .map_err(|_| closed())?;
        while let Some(mut idle) = self.take_idle() {
            let suspect = idle.failures != self.failures.load(Ordering::Acquire) || idle.since.elapsed() >= CHECK_IDLE_AFTER;
            if !suspect {
                return Ok(Held { pool: self, connection: Some(idle.connection), _permit: permit });
            }
            match timeout_at(deadline, idle.connection.ping()).await {
                Ok(Ok(())) => return Ok(Held { pool: self, connection: Some(idle.connection), _permit: permit }),
                Ok(Err(failure)) => tracing::debug!(error = %failure, "replacing a PostgreSQL connection that failed its check"),
                Err(_) => tracing::debug!("replacing a PostgreSQL connection that did not answer its check"),
            }
        }
        let connection = timeout_at(deadline, self.options.connect())
            .await
            .map_err(|_| Error::Backend("timed out connecting to PostgreSQL".to_owned()))?
            .map_err(error::backend)?;
        Ok(Held { pool: self, connection: Some(connection), _permit: permit })
    }

    /// Closes the idle connections; later calls fail, and the connections of calls in flight
    /// are closed as those calls end.
    pub(crate) async fn close(&self) {
        self.permits.close();
        let idle = std::mem::take(&mut *self.idle.lock().unwrap_or_else(PoisonError::into_inner));
        for idle in idle {
            let _ = idle.connection.close().await;
        }
    }

    /// The most recently used idle connection.
    fn take_idle(&self) -> Option<Idle> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner).pop()
    }

    /// Puts a connection whose call ended cleanly back among the idle ones (or drops it, once
    /// the store is closed).
    fn put_back(&self, connection: PgConnection) {
        let idle = Idle { connection, failures: self.failures.load(Ordering::Acquire), since: Instant::now() };
        let mut idle_ones = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        // Checked under the lock, which `close` takes after closing the permits: a connection
        // is either put back before `close` takes the idle ones, or dropped here.
        if !self.permits.is_closed() {
            idle_ones.push(idle);
        }
    }
}

impl Held<'_> {
    /// Hands the connection back with its call's outcome, which it returns: reused after a
    /// success or a record-level error (not found, conflict), closed after a backend error.
    pub(crate) fn release<T>(mut self, outcome: Result<T>) -> Result<T> {
        if let Some(connection) = self.connection.take() {
            if matches!(outcome, Err(Error::Backend(_))) {
                self.pool.failures.fetch_add(1, Ordering::AcqRel);
            } else {
                self.pool.put_back(connection);
            }
        }
        outcome
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if self.connection.take().is_some() {
            tracing::debug!("closing a PostgreSQL connection whose call was cancelled");
        }
    }
}

impl Deref for Held<'_> {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        // Invariant: `connection` is `Some` until `release` consumes the guard.
        self.connection.as_ref().unwrap_or_else(|| unreachable!("a held connection is present until released"))
    }
}

impl DerefMut for Held<'_> {
    fn deref_mut(&mut self) -> &mut PgConnection {
        self.connection.as_mut().unwrap_or_else(|| unreachable!("a held connection is present until released"))
    }
}

fn closed() -> Error {
    Error::Backend("the PostgreSQL store is closed".to_owned())
}
