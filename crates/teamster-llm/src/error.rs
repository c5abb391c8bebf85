//! Model errors, grouped by fault and retryability.

use std::time::Duration;

#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The provider asked us to slow down (429), possibly saying for how long, and what it said.
    #[error("rate limited by the provider{}: {message}", retry_after_note(*retry_after))]
    RateLimited { retry_after: Option<Duration>, message: String },
    /// The provider answered with an error status or an error event.
    #[error("provider answered {status}: {message}")]
    Provider { status: u16, message: String },
    /// The provider's answer could not be understood.
    #[error("could not decode the provider's answer: {0}")]
    Decode(String),
    /// The provider could not be reached, or the connection broke.
    #[error("could not reach the provider: {0}")]
    Transport(String),
    /// The retry layer stopped retrying a transient failure; `last` is the provider's last answer.
    #[error("{last} ({reason})")]
    GaveUp { last: Box<Error>, reason: GiveUpReason },
}

/// Why the retry layer stopped retrying.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum GiveUpReason {
    /// Every allowed attempt failed.
    #[error("after {0} attempts")]
    AttemptsExhausted(u32),
    /// The provider asked for a longer wait than the retry policy allows.
    #[error("not retried: the provider's wait is longer than the {0:?} limit")]
    WaitTooLong(Duration),
}

impl Error {
    /// Whether trying again may succeed: rate limits, timeouts, overload and 5xx, broken
    /// connections. An error the retry layer gave up on keeps the nature of its last failure.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::RateLimited { .. } | Error::Transport(_) => true,
            Error::Provider { status, .. } => matches!(status, 408 | 409 | 429 | 500..=599),
            Error::Decode(_) => false,
            Error::GaveUp { last, .. } => last.is_transient(),
        }
    }

    /// The HTTP status the provider answered with, when it answered with one.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::RateLimited { .. } => Some(429),
            Error::Provider { status, .. } => Some(*status),
            Error::Decode(_) | Error::Transport(_) => None,
            Error::GaveUp { last, .. } => last.status(),
        }
    }
}

/// ` (retry after 1.5s)`, or nothing when the provider did not say.
fn retry_after_note(retry_after: Option<Duration>) -> String {
    retry_after.map(|wait| format!(" (retry after {wait:?})")).unwrap_or_default()
}
