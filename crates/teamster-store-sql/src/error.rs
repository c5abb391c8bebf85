//! Maps sqlx errors onto the store's [`Error`], by fault, for both backends.
//!
//! Messages of `NotFound` and `Conflict` reach API users, so they name the record and never
//! carry the database's own words (constraint names, SQL). `Backend` errors are logged and
//! answered with a generic error; they keep the database's error code and message for
//! operators.

use sqlx::error::ErrorKind;
use teamster_store::Error;

/// Returns a mapper for errors of a statement about `what` (a record kind such as "turn").
///
/// A missing row or a failed foreign key means the record (or the one it refers to) does not
/// exist; a unique violation means it already does. Everything else is a backend failure.
pub fn on(what: &'static str) -> impl FnOnce(sqlx::Error) -> Error {
    move |error| match &error {
        sqlx::Error::RowNotFound => Error::NotFound(what),
        sqlx::Error::Database(database) => match database.kind() {
            ErrorKind::UniqueViolation => Error::Conflict(format!("{what} already exists")),
            ErrorKind::ForeignKeyViolation => Error::NotFound(what),
            _ => backend(error),
        },
        _ => backend(error),
    }
}

/// Maps an error of a statement or transaction where no record-level fault is possible.
pub fn backend(error: sqlx::Error) -> Error {
    match &error {
        sqlx::Error::Database(database) => match database.code() {
            Some(code) => Error::Backend(format!("database error {code}: {}", database.message())),
            None => Error::Backend(format!("database error: {}", database.message())),
        },
        _ => Error::Backend(format!("database: {error}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_rows_are_not_found_and_other_failures_are_backend_errors() {
        assert!(matches!(on("turn")(sqlx::Error::RowNotFound), Error::NotFound("turn")));
        assert!(matches!(on("turn")(sqlx::Error::PoolTimedOut), Error::Backend(_)));
        assert!(matches!(backend(sqlx::Error::PoolClosed), Error::Backend(message) if message.starts_with("database")));
    }
}
