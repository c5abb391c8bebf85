//! The store's connections: one writer behind a lock, and a few read connections opened on
//! first use.
//!
//! This is a small pool of our own rather than `sqlx::Pool`: sqlx's pool pings a connection
//! on every release (a round trip to the connection's worker thread) and spawns a task for it,
//! which costs more CPU than most of our statements. A SQLite connection never goes stale, so
//! none of that is needed here.
//!
//! A write command may open a transaction and commit it in one round trip. If the caller's
//! future is dropped while such a command is in flight, the transaction may be left open; the
//! writer remembers that and rolls back before its next use. The worker thread runs commands
//! in order, so that rollback comes after whatever the dropped command did.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
use sqlx::{ConnectOptions, Connection};
use teamster_store::{Error, Result};
use tokio::sync::{MappedMutexGuard, Mutex, MutexGuard};

use teamster_store_sql::error;

pub(crate) struct Connections {
    writer: Mutex<Writer>,
    /// Read connections of a file database, `None` until first used. Empty for an in-memory
    /// database, whose one connection serves reads too.
    readers: Vec<Mutex<Option<SqliteConnection>>>,
    reader_options: SqliteConnectOptions,
    /// Where the search for a free reader starts when every reader is busy.
    next_reader: AtomicUsize,
    closed: AtomicBool,
}

struct Writer {
    /// `None` once the store is closed.
    connection: Option<SqliteConnection>,
    /// Whether a command that opened a transaction may not have ended it (its caller was
    /// cancelled mid-flight, or it failed).
    in_doubt: bool,
}

/// The locked writer connection.
pub(crate) struct WriteGuard<'a>(MutexGuard<'a, Writer>);

impl Connections {
    /// Wraps an open writer; `readers` read connections are opened with `reader_options` when
    /// first needed (none for an in-memory database).
    pub(crate) fn new(writer: SqliteConnection, readers: usize, reader_options: SqliteConnectOptions) -> Connections {
        Connections {
            writer: Mutex::new(Writer { connection: Some(writer), in_doubt: false }),
            readers: (0..readers).map(|_| Mutex::new(None)).collect(),
            reader_options,
            next_reader: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
        }
    }

    /// Locks the writer, first ending any transaction a cancelled caller left open.
    pub(crate) async fn write(&self) -> Result<WriteGuard<'_>> {
        let mut guard = WriteGuard(self.writer.lock().await);
        if guard.0.in_doubt {
            guard.rollback().await;
        }
        Ok(guard)
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

    /// Closes every connection; later calls fail.
    pub(crate) async fn close(&self) {
        self.closed.store(true, Ordering::Release);
        for reader in &self.readers {
            if let Some(connection) = reader.lock().await.take() {
                let _ = connection.close().await;
            }
        }
        if let Some(connection) = self.writer.lock().await.connection.take() {
            let _ = connection.close().await;
        }
    }
}

impl WriteGuard<'_> {
    /// The connection, for statements that do not open a transaction.
    pub(crate) fn connection(&mut self) -> Result<&mut SqliteConnection> {
        self.0.connection.as_mut().ok_or_else(closed)
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
        if let Some(connection) = self.0.connection.as_mut() {
            // Fails harmlessly when no transaction is open (the command got as far as COMMIT,
            // or failed before BEGIN).
            let _ = sqlx::query("ROLLBACK").execute(connection).await;
        }
        self.0.in_doubt = false;
    }
}

fn closed() -> Error {
    Error::Backend("the SQLite store is closed".to_owned())
}
