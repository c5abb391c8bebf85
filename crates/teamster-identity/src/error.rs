//! What goes wrong with a key or a caller's rights, in terms the service maps to its own errors.

/// An error of the identity layer.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// The request is malformed (a bad name), with the parameter it names if any.
    #[error("{message}")]
    Invalid { message: String, param: Option<&'static str> },
    /// The caller may not do this.
    #[error("{0}")]
    Forbidden(String),
    /// No such key (or none the caller may see).
    #[error("{0}")]
    NotFound(String),
    /// The settings store failed.
    #[error(transparent)]
    Store(#[from] teamster_store::Error),
}

impl IdentityError {
    pub(crate) fn invalid(message: impl Into<String>) -> IdentityError {
        IdentityError::Invalid { message: message.into(), param: None }
    }

    pub(crate) fn invalid_param(param: &'static str, message: impl Into<String>) -> IdentityError {
        IdentityError::Invalid { message: message.into(), param: Some(param) }
    }
}
