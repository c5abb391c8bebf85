//! The MCP host: the MCP servers operators configure (the registry), the connections sessions
//! hold to them (the pool), users' OAuth authorizations of them, and the tools a turn gets from
//! them. The rest of the service talks to it through [`McpHost`] alone; it knows no HTTP: the
//! server hands it [`McpLinks`] to build its own page links and an [`OAuthCallback`] already
//! read from the callback's query, and gets back where to send the browser.

mod error;
mod host;
mod links;
mod oauth;
mod pool;
mod servers;
mod toolbox;

pub use error::{McpHostError, Result};
pub use host::McpHost;
pub use links::{McpLinks, OAuthCallback};
pub use oauth::is_oauth_kind;
pub use servers::{McpServerWrite, SETTING_KIND, validate_agent_servers};
pub use toolbox::{TurnTools, tool_names};
