//! Maps sqlx errors onto the store's [`Error`], by fault.

use sqlx::error::ErrorKind;
use teamster_store::Error;

/// Returns a mapper for errors of a statement about `what` (a record kind such as "turn").
///
/// A missing row or a failed foreign key means the record (or the one it refers to) does not
/// exist; a unique violation means it already does. Everything else is a backend failure.
pub(crate) fn on(what: &'static str) -> impl FnOnce(sqlx::Error) -> Error {
    move |error| match &error {
        sqlx::Error::RowNotFound => Error::NotFound(what),
        sqlx::Error::Database(database) => match database.kind() {
            ErrorKind::UniqueViolation => Error::Conflict(format!("{what} already exists ({})", database.message())),
            ErrorKind::ForeignKeyViolation => Error::NotFound(what),
            _ => Error::Backend(error.to_string()),
        },
        _ => Error::Backend(error.to_string()),
    }
}

/// Maps an error of a statement or transaction where no record-level fault is possible.
pub(crate) fn backend(error: sqlx::Error) -> Error {
    Error::Backend(error.to_string())
}
