//! [`OAuthTokenProvider`]: bearer tokens for an MCP connection from a [`TokenStore`],
//! refreshed shortly before they expire, once however many requests need one.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use tokio::sync::Mutex;

use super::OAuthError;
use super::flow::OAuthClient;
use super::tokens::TokenSet;
use crate::config::BearerTokenProvider;

/// How long before its expiry an access token is refreshed by default.
pub const DEFAULT_REFRESH_SKEW: Duration = Duration::from_secs(30);

/// How long a failed refresh is not retried while the access token still works.
const REFRESH_RETRY_DELAY: Duration = Duration::from_secs(10);

/// Where one user's tokens for one MCP server are kept, e.g. a sealed row of the settings
/// table. Failures are the store's to log: a failed load is no tokens, a failed save leaves
/// the old ones.
#[async_trait]
pub trait TokenStore: Send + Sync {
    /// The stored tokens, if any.
    async fn load(&self) -> Option<TokenSet>;
    /// Replaces the stored tokens (after a refresh).
    async fn save(&self, tokens: &TokenSet);
}

/// A [`BearerTokenProvider`] for one user and one MCP server: answers the stored access token,
/// and refreshes it (saving the new tokens) when it expires within the skew. Concurrent requests
/// wait for one refresh instead of each starting their own.
pub struct OAuthTokenProvider {
    client: OAuthClient,
    store: Arc<dyn TokenStore>,
    skew: Duration,
    /// The tokens last loaded or refreshed. Its lock is held across a refresh, which makes
    /// refreshes single-flight.
    state: Mutex<State>,
    /// Set when the stored tokens changed elsewhere (another process refreshed or replaced
    /// them): the next request reads them again instead of answering the ones in memory.
    stale: AtomicBool,
}

#[derive(Default)]
struct State {
    tokens: Option<TokenSet>,
    /// After a failed refresh, none is tried before this while the access token still works,
    /// so an unreachable authorization server does not delay every request.
    retry_refresh_at: Option<Instant>,
}

impl OAuthTokenProvider {
    /// A provider over `store` that refreshes through `client`, [`DEFAULT_REFRESH_SKEW`]
    /// before expiry.
    pub fn new(client: OAuthClient, store: Arc<dyn TokenStore>) -> OAuthTokenProvider {
        OAuthTokenProvider { client, store, skew: DEFAULT_REFRESH_SKEW, state: Mutex::default(), stale: AtomicBool::new(false) }
    }

    /// Refreshes this long before expiry instead.
    pub fn with_skew(mut self, skew: Duration) -> OAuthTokenProvider {
        self.skew = skew;
        self
    }

    /// Makes the next request read the stored tokens again: another process changed them.
    pub fn reload_from_store(&self) {
        self.stale.store(true, Ordering::Release);
    }

    /// A usable access token: the one in memory while it does not expire within the skew (and
    /// nobody said the stored ones changed), else the stored one (which another process may
    /// have refreshed) if it does not, else a refreshed one. If refreshing fails while the
    /// token has not yet expired, it is answered, and the refresh is retried ten seconds later
    /// at the earliest.
    pub async fn access_token(&self) -> Result<String, OAuthError> {
        let mut guard = self.state.lock().await;
        let state = &mut *guard;
        let now = SystemTime::now();
        let stale = self.stale.swap(false, Ordering::AcqRel);
        if let Some(tokens) = state.tokens.as_ref().filter(|tokens| !stale && !tokens.expires_within(self.skew, now)) {
            return Ok(tokens.access_token.clone());
        }
        // The store is the truth: another process may have refreshed the tokens meanwhile, or
        // the user may have disconnected the server.
        state.tokens = self.store.load().await;
        let tokens = state.tokens.as_ref().ok_or(OAuthError::NotAuthorized)?;
        let usable = !tokens.is_expired(now);
        let retry_later = state.retry_refresh_at.is_some_and(|retry_at| Instant::now() < retry_at);
        if !tokens.expires_within(self.skew, now) || (usable && retry_later) {
            return Ok(tokens.access_token.clone());
        }
        match self.refresh_locked(state).await {
            Ok(access_token) => Ok(access_token),
            Err(error) => {
                match state.tokens.as_ref().filter(|tokens| !tokens.is_expired(SystemTime::now())) {
                    Some(tokens) => {
                        tracing::warn!(%error, "cannot refresh an OAuth token; using it until it expires");
                        state.retry_refresh_at = Some(Instant::now() + REFRESH_RETRY_DELAY);
                        Ok(tokens.access_token.clone())
                    }
                    None => Err(error),
                }
            }
        }
    }

    /// Refreshes now, whatever the expiry says: for a token the MCP server refused with a 401
    /// before it expired (e.g. revoked).
    pub async fn refresh_now(&self) -> Result<String, OAuthError> {
        let mut state = self.state.lock().await;
        state.tokens = self.store.load().await;
        self.refresh_locked(&mut state).await
    }

    /// Refreshes the tokens under the lock, saves and keeps the new ones.
    async fn refresh_locked(&self, state: &mut State) -> Result<String, OAuthError> {
        let tokens = state.tokens.as_ref().ok_or(OAuthError::NotAuthorized)?;
        let refreshed = self.client.refresh(tokens).await?;
        self.store.save(&refreshed).await;
        let access_token = refreshed.access_token.clone();
        *state = State { tokens: Some(refreshed), retry_refresh_at: None };
        Ok(access_token)
    }
}

#[async_trait]
impl BearerTokenProvider for OAuthTokenProvider {
    /// The access token, or none (so the server answers 401 and authorization starts over)
    /// when there are no tokens or they expired and cannot be refreshed.
    async fn bearer_token(&self) -> Option<String> {
        match self.access_token().await {
            Ok(token) => Some(token),
            Err(OAuthError::NotAuthorized) => None,
            Err(error) => {
                tracing::warn!(%error, "no usable OAuth token for an MCP server");
                None
            }
        }
    }
}

impl fmt::Debug for OAuthTokenProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OAuthTokenProvider").field("client", &self.client).field("skew", &self.skew).finish()
    }
}
