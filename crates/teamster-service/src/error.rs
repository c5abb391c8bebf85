//! Service errors: what went wrong with a request, in terms both HTTP dialects can map to a
//! status code and an error body without knowing the internals.

/// An error of the service layer. Each variant maps to one HTTP status in `teamster-server`.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The request is malformed or breaks a rule (400).
    #[error("{message}")]
    Invalid { message: String, param: Option<&'static str> },
    /// The caller may not touch this resource (403).
    #[error("{0}")]
    Forbidden(String),
    /// The addressed resource does not exist (404).
    #[error("{0}")]
    NotFound(String),
    /// Part of the request is larger than this server accepts (413).
    #[error("{0}")]
    TooLarge(String),
    /// The request conflicts with current state: a name is taken, or a turn is running (409).
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    /// The resource exists but cannot serve this request any more, e.g. an expired stream (412).
    #[error("{0}")]
    PreconditionFailed(String),
    /// The resource existed and was removed, e.g. a deleted session's sandbox (410).
    #[error("{0}")]
    Gone(String),
    /// A bounded queue or quota is full (429).
    #[error("{0}")]
    TooMany(String),
    /// Well-formed, but it needs something this server does not provide (422).
    #[error("{0}")]
    Unprocessable(String),
    /// The request needs a user's authorization with another service first, e.g. an MCP
    /// server's OAuth (422).
    #[error("{0}")]
    AuthRequired(String),
    /// An authorization server refused or failed a step this request needs, such as dynamic
    /// client registration (424).
    #[error("{0}")]
    FailedDependency(String),
    /// A server this one depends on, such as an MCP server, failed or could not be reached
    /// (502).
    #[error("{0}")]
    Upstream(String),
    /// This server cannot serve now, e.g. its store does not answer (503).
    #[error("{0}")]
    Unavailable(String),
    /// Storage failed; the details are logged, not shown (500).
    #[error("internal storage error")]
    Store(#[source] teamster_store::Error),
}

impl ServiceError {
    pub fn invalid(message: impl Into<String>) -> ServiceError {
        ServiceError::Invalid { message: message.into(), param: None }
    }

    pub fn invalid_param(param: &'static str, message: impl Into<String>) -> ServiceError {
        ServiceError::Invalid { message: message.into(), param: Some(param) }
    }

    pub fn turn_running(message: impl Into<String>) -> ServiceError {
        ServiceError::Conflict { code: "turn_running", message: message.into() }
    }
}

impl From<teamster_store::Error> for ServiceError {
    fn from(error: teamster_store::Error) -> ServiceError {
        match error {
            teamster_store::Error::NotFound(what) => ServiceError::NotFound(format!("{what} not found")),
            teamster_store::Error::Conflict(message) => ServiceError::Conflict { code: "conflict", message },
            other => ServiceError::Store(other),
        }
    }
}

impl From<teamster_limits::LimitError> for ServiceError {
    fn from(error: teamster_limits::LimitError) -> ServiceError {
        match error {
            teamster_limits::LimitError::Quota(refused) => ServiceError::TooMany(refused.to_string()),
            teamster_limits::LimitError::Store(error) => error.into(),
        }
    }
}

impl From<teamster_mcp_host::McpHostError> for ServiceError {
    fn from(error: teamster_mcp_host::McpHostError) -> ServiceError {
        use teamster_mcp_host::McpHostError;
        match error {
            McpHostError::Invalid { message, param } => ServiceError::Invalid { message, param },
            McpHostError::Forbidden(message) => ServiceError::Forbidden(message),
            McpHostError::NotFound(message) => ServiceError::NotFound(message),
            McpHostError::Conflict { code, message } => ServiceError::Conflict { code, message },
            McpHostError::Unprocessable(message) => ServiceError::Unprocessable(message),
            McpHostError::AuthRequired(message) => ServiceError::AuthRequired(message),
            McpHostError::FailedDependency(message) => ServiceError::FailedDependency(message),
            McpHostError::Upstream(message) => ServiceError::Upstream(message),
            McpHostError::Unavailable(message) => ServiceError::Unavailable(message),
            McpHostError::Store(error) => error.into(),
        }
    }
}

impl From<teamster_sealed::SealedError> for ServiceError {
    fn from(error: teamster_sealed::SealedError) -> ServiceError {
        match error {
            teamster_sealed::SealedError::Invalid(message) => ServiceError::invalid(message),
            teamster_sealed::SealedError::Unreadable(message) => ServiceError::Unavailable(message),
            teamster_sealed::SealedError::Store(error) => error.into(),
        }
    }
}

impl From<teamster_runtime::RuntimeError> for ServiceError {
    fn from(error: teamster_runtime::RuntimeError) -> ServiceError {
        match error {
            expired @ teamster_runtime::RuntimeError::StreamExpired { .. } => ServiceError::PreconditionFailed(expired.to_string()),
            teamster_runtime::RuntimeError::Store(error) => error.into(),
        }
    }
}

impl From<teamster_identity::IdentityError> for ServiceError {
    fn from(error: teamster_identity::IdentityError) -> ServiceError {
        use teamster_identity::IdentityError;
        match error {
            IdentityError::Invalid { message, param } => ServiceError::Invalid { message, param },
            IdentityError::Forbidden(message) => ServiceError::Forbidden(message),
            IdentityError::NotFound(message) => ServiceError::NotFound(message),
            IdentityError::Store(error) => error.into(),
        }
    }
}

pub type Result<T, E = ServiceError> = std::result::Result<T, E>;
