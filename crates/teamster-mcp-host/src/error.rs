//! The MCP host's errors, in kinds the service maps one to one onto its own (and so onto
//! statuses): the host knows no HTTP.

/// An error of the MCP host.
#[derive(Debug, thiserror::Error)]
pub enum McpHostError {
    /// The request is malformed or breaks a rule; `param` names the field when one is at fault.
    #[error("{message}")]
    Invalid { message: String, param: Option<&'static str> },
    /// The caller may not do this.
    #[error("{0}")]
    Forbidden(String),
    /// The named server (or authorization) does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The request conflicts with what exists, e.g. a name that is taken.
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    /// Well-formed, but this server cannot do it (a stdio server where none are allowed, say).
    #[error("{0}")]
    Unprocessable(String),
    /// The user must authorize with the MCP server first.
    #[error("{0}")]
    AuthRequired(String),
    /// An authorization server refused or failed a step, such as client registration.
    #[error("{0}")]
    FailedDependency(String),
    /// The MCP server failed or could not be reached.
    #[error("{0}")]
    Upstream(String),
    /// Stored settings cannot be read (sealed under another key).
    #[error("{0}")]
    Unavailable(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] teamster_store::Error),
}

impl McpHostError {
    pub fn invalid(message: impl Into<String>) -> McpHostError {
        McpHostError::Invalid { message: message.into(), param: None }
    }

    pub fn invalid_param(param: &'static str, message: impl Into<String>) -> McpHostError {
        McpHostError::Invalid { message: message.into(), param: Some(param) }
    }
}

impl From<teamster_sealed::SealedError> for McpHostError {
    fn from(error: teamster_sealed::SealedError) -> McpHostError {
        match error {
            teamster_sealed::SealedError::Invalid(message) => McpHostError::invalid(message),
            teamster_sealed::SealedError::Unreadable(message) => McpHostError::Unavailable(message),
            teamster_sealed::SealedError::Store(error) => McpHostError::Store(error),
        }
    }
}

pub type Result<T, E = McpHostError> = std::result::Result<T, E>;
