//! Model errors, grouped by fault and retryability.

use std::time::Duration;

#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The provider asked us to slow down (429), possibly saying for how long.
    #[error("rate limited by the provider{}", retry_after.map(|d| format!(" (retry after {}s)", d.as_secs())).unwrap_or_default())]
    RateLimited { retry_after: Option<Duration> },
    /// The provider answered with an error status or an error event.
    #[error("provider answered {status}: {message}")]
    Provider { status: u16, message: String },
    /// The provider's answer could not be understood.
    #[error("could not decode the provider's answer: {0}")]
    Decode(String),
    /// The provider could not be reached, or the connection broke.
    #[error("could not reach the provider: {0}")]
    Transport(String),
}

impl Error {
    /// Whether trying again may succeed: rate limits, timeouts, overload and 5xx, broken
    /// connections.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::RateLimited { .. } | Error::Transport(_) => true,
            Error::Provider { status, .. } => matches!(status, 408 | 409 | 429 | 500..=599),
            Error::Decode(_) => false,
        }
    }
}
