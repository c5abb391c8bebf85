//! The runtime's errors: what its callers map to their own (the service to its statuses).

/// An error of the turn runtime.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// A finished turn's event stream was dropped after the retention window.
    #[error("the event stream of turn {turn_id:?} no longer exists")]
    StreamExpired { turn_id: String },
    /// The store failed or refused a read or write.
    #[error(transparent)]
    Store(#[from] teamster_store::Error),
}

pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;
