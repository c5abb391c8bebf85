//! What the MCP OAuth flow needs from the HTTP layer, without knowing HTTP: links to this
//! server's authorize and callback pages ([`McpLinks`], given by the server, which owns the
//! routes and the public URL), and the authorization server's answer, already read from the
//! callback's query ([`OAuthCallback`]).

/// Absolute links to the pages of the MCP OAuth flow, as users' browsers reach them.
pub trait McpLinks: Send + Sync {
    /// The page that starts the caller's authorization of MCP server `server`; `ticket` (URL
    /// safe) stands in for the user's credentials. It is an `mcp.auth_required` event's
    /// `auth_url`.
    fn authorize(&self, server: &str, ticket: &str) -> String;
    /// The page the authorization server sends the browser back to: the redirect URI every
    /// client is registered with.
    fn callback(&self) -> String;
}

/// An authorization server's answer at the callback (RFC 6749 §4.1.2): a `code` for the
/// `state`, or an `error`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OAuthCallback {
    pub state: Option<String>,
    pub code: Option<String>,
    /// The issuer, when the authorization server says (RFC 9207).
    pub issuer: Option<String>,
    pub error: Option<String>,
    pub error_description: Option<String>,
}
