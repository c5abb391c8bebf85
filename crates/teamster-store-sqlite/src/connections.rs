//! The store's connections: one writer behind a lock, and a few read connections opened on
//! first use, each both as a sqlx connection and as a [`DirectConnection`] for the turn path.
//!
//! This is a small pool of our own rather than `sqlx::Pool`: sqlx's pool pings a connection
//! on every release (a round trip to the connection's worker thread) and spawns a task for it,
//! which costs more CPU than most of our statements. A SQLite connection never goes stale, so
//! none of that is needed here.
//!
//! A sqlx write command may open a transaction and commit it in one round trip. If the
//! caller's future is dropped while such a command is in flight, the transaction may be left
//! open; the writer remembers that and rolls back before its next use, direct or not. The
//! worker thread runs commands in order, so that rollback comes after whatever the dropped
//! command did.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
use sqlx::{ConnectOptions, Connection};
use teamster_store::{Error, Result};
use tokio::sync::{MappedMutexGuard, Mutex, MutexGuard, OwnedMutexGuard};

use teamster_store_sql::error;

use crate::direct::{DirectConnection, Target};

/// How many commits of the direct writer go between checkpoints: a simple turn commits
/// twice, writing some 30 pages in all, so about SQLite's default of 1,000 pages.
const COMMITS_PER_CHECKPOINT: usize = 64;

pub(crate) struct Connections {
    writer: Arc<Mutex<Writer>>,
    /// Read connections of a file database, `None` until first used. Empty for an in-memory
    /// database, whose one connection serves reads too.
    readers: Vec<Mutex<Option<SqliteConnection>>>,
    reader_options: SqliteConnectOptions,
    /// The free direct read connections of a file database (opened on first use, at most one
    /// per reader). Empty for an in-memory database, whose direct writer serves reads too.
    direct_readers: std::sync::Mutex<Vec<DirectConnection>>,
    target: Target,
    /// Commits of the direct writer since the last checkpoint began, and whether one runs.
    commits: AtomicUsize,
    checkpointing: AtomicBool,
    /// Where the search for a free reader starts when every reader is busy.
    next_reader: AtomicUsize,
    closed: AtomicBool,
}

struct Writer {
    /// `None` once the store is closed.
    connection: Option<SqliteConnection>,
    /// The writer of the turn path, on the same database; `None` once the store is closed.
    direct: Option<DirectConnection>,
    /// Whether a command that opened a transaction may not have ended it (its caller was
    /// cancelled mid-flight, or it failed).
    in_doubt: bool,
}

/// The locked direct writer, movable to another thread.
pub(crate) struct OwnedDirectWriter(OwnedMutexGuard<Writer>);

impl OwnedDirectWriter {
    pub(crate) fn direct(&mut self) -> Result<&mut DirectConnection> {
        self.0.direct.as_mut().ok_or_else(closed)
    }
}

/// The locked writer connection.
pub(crate) struct WriteGuard<'a>(MutexGuard<'a, Writer>);

impl Connections {
    /// Wraps an open writer; `readers` read connections are opened with `reader_options` when
    /// first needed (none for an in-memory database).
    pub(crate) fn new(
        writer: SqliteConnection,
        readers: usize,
        reader_options: SqliteConnectOptions,
        target: Target,
    ) -> Result<Connections> {
        let direct = DirectConnection::writer(&target)?;
        Ok(Connections {
            writer: Arc::new(Mutex::new(Writer { connection: Some(writer), direct: Some(direct), in_doubt: false })),
            readers: (0..readers).map(|_| Mutex::new(None)).collect(),
            reader_options,
            direct_readers: std::sync::Mutex::new(Vec::new()),
            target,
            commits: AtomicUsize::new(0),
            checkpointing: AtomicBool::new(false),
            next_reader: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
        })
    }

    /// Locks the writer, first ending any transaction a cancelled caller left open.
    pub(crate) async fn write(&self) -> Result<WriteGuard<'_>> {
        let mut guard = WriteGuard(self.writer.lock().await);
        if guard.0.in_doubt {
            guard.rollback().await;
        }
        Ok(guard)
    }

    /// Locks the direct writer for a command that runs on another thread (see
    /// [`Connections::write`]).
    pub(crate) async fn write_direct_owned(&self) -> Result<OwnedDirectWriter> {
        let mut guard = self.writer.clone().lock_owned().await;
        if guard.in_doubt {
            WriteGuard::rollback_writer(&mut guard).await;
        }
        if guard.direct.is_none() {
            return Err(closed());
        }
        Ok(OwnedDirectWriter(guard))
    }

    /// Locks a connection for reading: a free reader if there is one, else the next one in
    /// turn, or the writer of an in-memory database.
    pub(crate) async fn read(&self) -> Result<MappedMutexGuard<'_, SqliteConnection>> {
        if self.closed.load(Ordering::Acquire) {
            return Err(closed());
        }
        if self.readers.is_empty() {
            let guard = self.write().await?;
            return MutexGuard::try_map(guard.0, |writer| writer.connection.as_mut()).map_err(|_| closed());
        }
        let free = self.readers.iter().find_map(|reader| reader.try_lock().ok());
        let mut slot = match free {
            Some(slot) => slot,
            None => {
                let index = self.next_reader.fetch_add(1, Ordering::Relaxed) % self.readers.len();
                self.readers[index].lock().await
            }
        };
        if slot.is_none() {
            let connection = self.reader_options.connect().await.map_err(error::backend)?;
            *slot = Some(connection);
        }
        MutexGuard::try_map(slot, Option::as_mut).map_err(|_| closed())
    }

    /// Runs `read` on a direct read connection, on this thread: a free one, or a new one
    /// while fewer than the readers are open; on the direct writer of an in-memory database.
    pub(crate) async fn read_direct<T>(&self, read: impl FnOnce(&mut DirectConnection) -> Result<T>) -> Result<T> {
        if self.closed.load(Ordering::Acquire) {
            return Err(closed());
        }
        if self.readers.is_empty() {
            let mut guard = self.write().await?;
            return read(guard.direct()?);
        }
        let free = self.direct_readers.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pop();
        let mut connection = match free {
            Some(connection) => connection,
            None => DirectConnection::reader(&self.target)?,
        };
        let outcome = read(&mut connection);
        let mut free = self.direct_readers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if free.len() < self.readers.len() && !self.closed.load(Ordering::Acquire) {
            free.push(connection);
        }
        outcome
    }

    /// Counts a commit of the direct writer, which never checkpoints itself; returns whether a
    /// checkpoint is due ([`Connections::checkpoint`]), at most one at a time.
    pub(crate) fn count_commit(&self) -> bool {
        // An in-memory database has no write-ahead log.
        let due = self.commits.fetch_add(1, Ordering::Relaxed) + 1 >= COMMITS_PER_CHECKPOINT && !self.target.in_memory;
        due && !self.checkpointing.swap(true, Ordering::AcqRel)
    }

    /// Copies the write-ahead log into the database on the sqlx writer, so on that
    /// connection's thread, not the runtime's; this is where a file database syncs to disk.
    /// Writes wait meanwhile, as they would for a checkpoint run by a commit: a log
    /// checkpointed while commits go on would be restarted by none of them, and grow.
    pub(crate) async fn checkpoint(&self) {
        self.commits.store(0, Ordering::Relaxed);
        let outcome = match self.write().await {
            Ok(_) if self.closed.load(Ordering::Acquire) => Ok(()),
            Ok(mut writer) => match writer.connection() {
                Ok(connection) => {
                    sqlx::query("PRAGMA wal_checkpoint(PASSIVE)").execute(connection).await.map_err(error::backend).map(drop)
                }
                Err(error) => Err(error),
            },
            Err(error) => Err(error),
        };
        if let Err(error) = outcome {
            tracing::warn!(%error, "checkpointing the SQLite write-ahead log failed");
        }
        self.checkpointing.store(false, Ordering::Release);
    }

    /// Closes every connection; later calls fail.
    pub(crate) async fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.direct_readers.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
        for reader in &self.readers {
            if let Some(connection) = reader.lock().await.take() {
                let _ = connection.close().await;
            }
        }
        let mut writer = self.writer.lock().await;
        writer.direct = None;
        if let Some(connection) = writer.connection.take() {
            let _ = connection.close().await;
        }
    }
}

impl WriteGuard<'_> {
    /// The connection, for statements that do not open a transaction.
    pub(crate) fn connection(&mut self) -> Result<&mut SqliteConnection> {
        self.0.connection.as_mut().ok_or_else(closed)
    }

    /// The direct writer, for commands of the turn path (each ends its transaction before it
    /// returns).
    pub(crate) fn direct(&mut self) -> Result<&mut DirectConnection> {
        self.0.direct.as_mut().ok_or_else(closed)
    }

    /// The connection, for a command that opens a transaction. Until [`WriteGuard::settle`]
    /// or [`WriteGuard::rollback`], the transaction counts as possibly open.
    pub(crate) fn begin(&mut self) -> Result<&mut SqliteConnection> {
        self.0.in_doubt = true;
        self.connection()
    }

    /// Settles the outcome of a command that ended the transaction it opened: on success the
    /// transaction is over; on failure it is rolled back and the error mapped with `map`.
    pub(crate) async fn settle<T>(
        &mut self,
        outcome: Result<T, sqlx::Error>,
        map: impl FnOnce(sqlx::Error) -> Error,
    ) -> Result<T> {
        match outcome {
            Ok(value) => {
                self.0.in_doubt = false;
                Ok(value)
            }
            Err(failure) => {
                self.rollback().await;
                Err(map(failure))
            }
        }
    }

    /// Rolls back the open transaction, if any.
    pub(crate) async fn rollback(&mut self) {
        WriteGuard::rollback_writer(&mut self.0).await;
    }

    async fn rollback_writer(writer: &mut Writer) {
        if let Some(connection) = writer.connection.as_mut() {
            // Fails harmlessly when no transaction is open (the command got as far as COMMIT,
            // or failed before BEGIN).
            let _ = sqlx::query("ROLLBACK").execute(connection).await;
        }
        writer.in_doubt = false;
    }
}

fn closed() -> Error {
    Error::Backend("the SQLite store is closed".to_owned())
}
