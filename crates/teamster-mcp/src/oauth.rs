//! OAuth for MCP servers, as the MCP authorization spec (2025-06-18, 2025-11-25) asks of a
//! client: discovery from a 401, dynamic client registration, the authorization code flow with
//! PKCE, refresh, a [`BearerTokenProvider`](crate::BearerTokenProvider) over stored tokens, and
//! the sealed form tokens are stored in.
//!
//! # The intended flow in a server
//!
//! 1. [`McpConnection::connect`](crate::McpConnection::connect) fails with
//!    [`McpError::Unauthorized`](crate::McpError::Unauthorized) and the server's
//!    `WWW-Authenticate` challenge.
//! 2. [`discover`] reads the protected resource metadata (RFC 9728) the challenge names, or the
//!    well-known one on the MCP server's origin, then the authorization server's metadata
//!    (RFC 8414, or OpenID Connect discovery). The [`Discovery`] is serializable, so it can be
//!    kept per MCP server.
//! 3. Without a configured client, [`register`] registers one (RFC 7591) with the server's
//!    callback URL as redirect URI; the [`ClientCredentials`] are kept per MCP server (sealed:
//!    they may hold a secret).
//! 4. [`OAuthClient::begin`] makes an [`AuthorizationRequest`]. The caller keeps its `state` and
//!    `code_verifier` (per user and server, briefly) and shows `authorize_url` to the user, e.g.
//!    in an `mcp.auth_required` event.
//! 5. The user's browser comes back to the callback with `code` and `state`;
//!    [`AuthorizationResponse::from_query`] reads them, the caller finds its pending request by
//!    `state`, and [`OAuthClient::finish_response`] exchanges the code for a [`TokenSet`].
//! 6. The caller stores the token set per (user, server), sealed with a [`TokenCipher`] whose
//!    [`TokenKey`] comes from the environment or a key file, and binds the sealed text to its
//!    row with the `context` argument.
//! 7. Later connections for that user get an [`OAuthTokenProvider`] over a [`TokenStore`] of
//!    that row as their `bearer_token`; it refreshes expiring tokens, once for concurrent
//!    requests, and saves the new ones.
//!
//! Every request here has a timeout and a bounded answer, follows only same-origin redirects,
//! and goes only to `https` URLs or to loopback hosts. Errors carry the authorization server's
//! `error` and `error_description`, never a token, code, verifier or secret; neither do the
//! `Debug` forms of the types that hold them.

mod cipher;
mod discovery;
mod fetch;
mod flow;
mod pkce;
mod provider;
mod tokens;

pub use cipher::{CipherError, KeyError, TokenCipher, TokenKey};
pub use discovery::{AuthorizationServerMetadata, Challenge, Discovery, ProtectedResourceMetadata, discover};
pub use flow::{
    AuthorizationRequest, AuthorizationResponse, ClientCredentials, OAuthClient, TokenEndpointAuth, register,
};
pub use provider::{DEFAULT_REFRESH_SKEW, OAuthTokenProvider, TokenStore};
pub use tokens::TokenSet;

/// Why an OAuth step failed.
#[derive(Debug, thiserror::Error)]
pub enum OAuthError {
    /// A URL is malformed, or plain `http` to a host that is not loopback.
    #[error("invalid URL {url:?}: {reason}")]
    InvalidUrl { url: String, reason: &'static str },
    /// No metadata document was found at any of the URLs tried.
    #[error("no {document} found (tried {})", .tried.join(", "))]
    MetadataNotFound { document: &'static str, tried: Vec<String> },
    /// A metadata document does not meet the specs (missing fields, another issuer or
    /// resource, no PKCE).
    #[error("invalid {document} at {url}: {reason}")]
    InvalidMetadata { document: &'static str, url: String, reason: String },
    /// The authorization server offers no dynamic client registration and no client is
    /// configured.
    #[error("the authorization server offers no dynamic client registration; configure a client id")]
    RegistrationUnsupported,
    /// An endpoint answered with an OAuth error (RFC 6749 section 5.2, RFC 7591 section 3.2.2).
    #[error(
        "the {endpoint} endpoint refused the request with HTTP {status}: {error}{}",
        describe(.description)
    )]
    Rejected { endpoint: &'static str, status: u16, error: String, description: Option<String> },
    /// The authorization response carried an error instead of a code (e.g. the user denied
    /// access). `state` finds the pending request it answers.
    #[error("authorization failed: {error}{}", describe(.description))]
    AuthorizationFailed { error: String, description: Option<String>, state: Option<String> },
    /// An answer with an unexpected status and no OAuth error.
    #[error("{url} answered HTTP {status}")]
    Status { url: String, status: u16 },
    /// An answer larger than the bound.
    #[error("the answer from {url} is larger than {limit} bytes")]
    TooLarge { url: String, limit: usize },
    /// The request could not be sent or its answer not read (including timeouts).
    #[error("cannot reach {url}: {message}")]
    Transport { url: String, message: String },
    /// An answer, or an authorization response, that is not what the specs require.
    #[error("invalid answer from {from}: {reason}")]
    InvalidResponse { from: String, reason: String },
    /// No tokens are stored: the user has not authorized this server yet.
    #[error("the user has not authorized this MCP server")]
    NotAuthorized,
    /// The access token expired and there is no refresh token to renew it.
    #[error("the access token expired and cannot be refreshed")]
    Expired,
    /// The operating system's random number generator failed.
    #[error("the system random number generator failed")]
    Random,
}

/// Formats an optional `error_description` after the error code.
fn describe(description: &Option<String>) -> String {
    description.as_deref().map(|description| format!(" ({description})")).unwrap_or_default()
}
