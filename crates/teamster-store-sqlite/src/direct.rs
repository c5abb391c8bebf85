//! Connections of the turn path that run their statements on the calling thread.
//!
//! Through sqlx, every statement is a hand-off to the connection's worker thread and back,
//! one thread wake-up each way, and each statement of a command sends its own result, which
//! can wake the caller again. On the two-core machines the benchmarks run on, those wake-ups
//! cost more CPU than the SQL itself (bench/README.md, "Statements on the calling thread").
//! The statements a simple turn runs (its session and agent, its creation, its log batches)
//! therefore go through connections of this module instead: they open the same database with
//! the same settings and run each command synchronously, on the runtime's thread, under the
//! same locks as the sqlx connections (the writer's lock for writes), so the one-writer rule
//! holds across both kinds.
//!
//! A command here never waits on a lock of another process (the lock file keeps other
//! processes off the database) and never syncs to disk: in WAL mode with `synchronous=NORMAL`
//! a commit writes pages to the operating system's cache, and this writer leaves
//! checkpoints (which sync) to the sqlx writer's thread, so no turn's thread waits for a disk.

use rusqlite::types::{FromSql, ToSql};
use rusqlite::{Connection, OpenFlags, Row};
use teamster_store::{Error, Result, codec};

/// How many prepared statements each connection keeps: every statement of the turn path, with
/// room to spare.
const STATEMENT_CACHE: usize = 64;

/// One connection of the turn path.
pub(crate) struct DirectConnection {
    connection: Connection,
}

impl std::fmt::Debug for DirectConnection {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("DirectConnection").finish_non_exhaustive()
    }
}

/// Where the connections of this module open the database: a file, or the in-memory database
/// of that name, which its connections share through a shared cache.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    pub(crate) path: std::path::PathBuf,
    pub(crate) in_memory: bool,
}

impl DirectConnection {
    /// Opens the writer: foreign keys on, `synchronous=NORMAL`, overwritten content zeroed,
    /// and no automatic checkpoints (the store's checkpointer runs them off this thread).
    pub(crate) fn writer(target: &Target) -> Result<DirectConnection> {
        let connection = DirectConnection::open(target)?;
        connection
            .connection
            .execute_batch("PRAGMA secure_delete = FAST; PRAGMA wal_autocheckpoint = 0;")
            .map_err(backend)?;
        Ok(connection)
    }

    /// Opens a reader, which cannot write (`query_only`).
    pub(crate) fn reader(target: &Target) -> Result<DirectConnection> {
        let connection = DirectConnection::open(target)?;
        connection.connection.execute_batch("PRAGMA query_only = ON;").map_err(backend)?;
        Ok(connection)
    }

    fn open(target: &Target) -> Result<DirectConnection> {
        // The flags sqlx opens with, so that an in-memory database's name finds sqlx's one.
        let mut flags =
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI;
        if target.in_memory {
            flags |= OpenFlags::SQLITE_OPEN_MEMORY | OpenFlags::SQLITE_OPEN_SHARED_CACHE;
        }
        let connection = Connection::open_with_flags(&target.path, flags).map_err(backend)?;
        connection.busy_timeout(crate::BUSY_TIMEOUT).map_err(backend)?;
        connection.execute_batch("PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL;").map_err(backend)?;
        connection.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        Ok(DirectConnection { connection })
    }

    /// Runs `statements` in one immediate transaction, binding each statement's `$N` to
    /// `arguments[N - 1]`, and returns the first column of the rows the statements return.
    /// On any failure the transaction is rolled back.
    pub(crate) fn transaction<T: FromSql>(
        &mut self,
        statements: &[String],
        arguments: &[&dyn ToSql],
    ) -> rusqlite::Result<Vec<T>> {
        self.roll_back_if_open()?;
        // `BEGIN` and `COMMIT` are prepared once, like the statements between them.
        self.connection.prepare_cached("BEGIN IMMEDIATE")?.raw_execute()?;
        let outcome = self.statements(statements, arguments).and_then(|values| {
            self.connection.prepare_cached("COMMIT")?.raw_execute()?;
            Ok(values)
        });
        if outcome.is_err() {
            // The command's own error is the one to report; a rollback that fails here is
            // tried again before the next transaction.
            let _ = self.roll_back_if_open();
        }
        outcome
    }

    /// Ends a transaction that a failed command left open.
    fn roll_back_if_open(&mut self) -> rusqlite::Result<()> {
        if self.connection.is_autocommit() { Ok(()) } else { self.connection.execute_batch("ROLLBACK") }
    }

    /// Runs `statements` in the transaction the caller opened (see
    /// [`DirectConnection::transaction`]).
    fn statements<T: FromSql>(&mut self, statements: &[String], arguments: &[&dyn ToSql]) -> rusqlite::Result<Vec<T>> {
        let mut values = Vec::new();
        for sql in statements {
            let mut statement = self.connection.prepare_cached(sql)?;
            bind(&mut statement, arguments)?;
            if statement.column_count() == 0 {
                statement.raw_execute()?;
            } else {
                let mut rows = statement.raw_query();
                while let Some(row) = rows.next()? {
                    values.push(row.get(0)?);
                }
            }
        }
        Ok(values)
    }

    /// Runs one statement outside any transaction and maps its first row, if any, with `map`.
    pub(crate) fn query_row<T>(
        &mut self,
        sql: &str,
        arguments: &[&dyn ToSql],
        map: impl FnOnce(&Row<'_>) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<Option<T>> {
        let mut statement = self.connection.prepare_cached(sql)?;
        bind(&mut statement, arguments)?;
        let mut rows = statement.raw_query();
        match rows.next()? {
            Some(row) => map(row).map(Some),
            None => Ok(None),
        }
    }
}

/// An agent row ([`codec::AgentRow`]) of a query selecting `AGENT_COLUMNS`.
pub(crate) fn agent_row(row: &Row<'_>) -> rusqlite::Result<codec::AgentRow> {
    Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?, row.get(5)?, row.get(6)?, row.get(7)?))
}

/// A session row ([`codec::SessionRow`]) of a query selecting `SESSION_COLUMNS`.
pub(crate) fn session_row(row: &Row<'_>) -> rusqlite::Result<codec::SessionRow> {
    Ok((
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(4)?,
        row.get(5)?,
        row.get(6)?,
        row.get(7)?,
        row.get(8)?,
        row.get(9)?,
        row.get(10)?,
        row.get(11)?,
        row.get(12)?,
    ))
}

/// Binds every `$N` of `statement` to `arguments[N - 1]`.
fn bind(statement: &mut rusqlite::Statement<'_>, arguments: &[&dyn ToSql]) -> rusqlite::Result<()> {
    for index in 1..=statement.parameter_count() {
        let argument = statement
            .parameter_name(index)
            .and_then(|name| name.strip_prefix('$'))
            .and_then(|number| number.parse::<usize>().ok())
            .and_then(|number| arguments.get(number.checked_sub(1)?));
        match argument {
            Some(argument) => statement.raw_bind_parameter(index, argument)?,
            None => {
                return Err(rusqlite::Error::InvalidParameterName(format!("parameter {index}")));
            }
        }
    }
    Ok(())
}

/// Whether `error` is a NOT NULL constraint failure (how a failed compare-and-set of a new
/// turn shows).
pub(crate) fn is_not_null_violation(error: &rusqlite::Error) -> bool {
    matches!(
        error,
        rusqlite::Error::SqliteFailure(failure, _)
            if failure.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_NOTNULL
    )
}

/// Maps an error where no record-level fault is possible, as `teamster_store_sql::error`
/// does for sqlx.
pub(crate) fn backend(error: rusqlite::Error) -> Error {
    match &error {
        rusqlite::Error::SqliteFailure(failure, message) => Error::Backend(format!(
            "database error {}: {}",
            failure.extended_code,
            message.as_deref().unwrap_or("no message")
        )),
        _ => Error::Backend(format!("database: {error}")),
    }
}

/// Maps an error of a statement about `what`: a failed foreign key means the record it refers
/// to does not exist, a unique violation that the record already does.
pub(crate) fn on(what: &'static str) -> impl FnOnce(rusqlite::Error) -> Error {
    move |error| match &error {
        rusqlite::Error::SqliteFailure(failure, _) => match failure.extended_code {
            rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE | rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY => {
                Error::Conflict(format!("{what} already exists"))
            }
            rusqlite::ffi::SQLITE_CONSTRAINT_FOREIGNKEY => Error::NotFound(what),
            _ => backend(error),
        },
        _ => backend(error),
    }
}
