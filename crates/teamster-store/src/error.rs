//! Store errors, by fault.

/// What can go wrong in a store. Backends map their own errors into `Backend`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The addressed record does not exist.
    #[error("{0} not found")]
    NotFound(&'static str),
    /// A uniqueness or compare-and-set condition failed.
    #[error("conflict: {0}")]
    Conflict(String),
    /// Stored data could not be decoded.
    #[error("corrupt stored data: {0}")]
    Corrupt(String),
    /// The backend failed (I/O, connection, constraint the caller could not foresee).
    #[error("storage backend: {0}")]
    Backend(String),
}
