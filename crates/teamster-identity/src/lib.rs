//! Identity: who calls and what they may do. A [`Caller`] (a subject in a tenant, with a
//! [`Role`]) comes from an API key ([`ApiKeys`], records in the settings store) or from an OIDC
//! login ([`oidc`], the relying party: discovery, the authorization code flow with PKCE, ID
//! token checks, sealed session cookies).
//!
//! Invariant: this crate knows the settings store's narrow port and nothing of sessions,
//! agents, turns or HTTP; the service decides what a caller may touch, the server how a
//! request proves who it is.

mod api_keys;
mod caller;
mod error;
pub mod oidc;

pub use api_keys::{ApiKey, ApiKeys, CreatedKey, KEY_CACHE_TTL, KeyCache, NewKey, SETTING_KIND};
pub use caller::{Caller, Role};
pub use error::IdentityError;
