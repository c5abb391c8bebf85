//! OAuth for MCP servers configured with `auth: {type: dcr}`: each user authorizes each such
//! server once, and that user's turns then connect with that user's tokens.
//!
//! The flow:
//! 1. A turn whose agent uses a `dcr` server for which the turn's user holds no usable tokens,
//!    or whose tokens the server refuses, pauses at its start, before any model call: it emits
//!    `mcp.auth_required` with an `auth_url` per such server and ends `done` with that event in
//!    `required_actions` (`mcp_turn.rs`, `runner.rs`).
//! 2. The `auth_url` is this server's authorize page with a ticket (its link comes from
//!    [`McpLinks`], which the HTTP layer provides).
//!    The ticket is sealed with the server's key (any replica opens it, nobody forges it),
//!    names the user, the MCP server and the session, and expires after [`TICKET_LIFETIME`]. It
//!    stands in for the user's credentials, since the browser that opens it may carry none.
//! 3. Opening it finds the authorization server (discovery, kept with the client), registers a
//!    client (RFC 7591) unless one is stored for the MCP server, begins the authorization code
//!    flow with PKCE, stores the pending authorization under a hash of its `state` for
//!    [`PENDING_LIFETIME`], and redirects the browser to the authorization server. Without a
//!    ticket the same route answers the caller's `MCPAuthStatus` as JSON (the spec's shape).
//! 4. The authorization server sends the browser to the callback page ([`McpLinks::callback`]),
//!    whose answer ([`OAuthCallback`]) takes the pending authorization (once, on any replica), exchanges the code and
//!    stores the user's grant: the tokens and the client they were issued to.
//! 5. A new turn with an empty input runs the paused turn again (`pending.rs` accepts it after
//!    `mcp.auth_required`). Its connections send the user's token through an
//!    [`OAuthTokenProvider`], shared by the user's connections to that server in this process,
//!    which refreshes the tokens before they expire and saves the new ones.
//!
//! Everything lives in the settings store, so any replica can take any step and a restart loses
//! nothing. Client registrations, pending authorizations and grants are stored only sealed with
//! the server's [`TokenCipher`], each bound to its row; tokens, codes, verifiers and client
//! secrets never appear in responses, events or logs. Whoever holds an `auth_url` can complete
//! the authorization (with their own account at the authorization server), which is why it is
//! short-lived and shown only in the user's own session. Grants are used only with the MCP
//! server URL they were issued for; an operator who changes the URL makes users authorize again.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use teamster_mcp::oauth::{
    AuthorizationResponse, ClientCredentials, Discovery, OAuthClient, OAuthError, OAuthTokenProvider, TokenCipher,
    TokenKey, TokenSet, TokenStore, discover, register,
};
use teamster_mcp::{McpConnection, McpError};
use teamster_protocol::Subject;
use teamster_protocol::settings::{ConfiguredMcpServer, McpAuthStatus, McpServerAuth, McpServerManifest};
use teamster_protocol::timestamp;
use teamster_store::SettingsStore;

use crate::error::{Result, McpHostError};
use super::links::{McpLinks, OAuthCallback};
use super::servers::{registry_config, scrub_url};
use super::McpHost;
use teamster_identity::Caller;

/// The settings kind of registered clients, one per MCP server (named by it).
const CLIENT_KIND: &str = "mcp-oauth-client";
/// The settings kind of pending authorizations, named by a hash of their `state`.
const PENDING_KIND: &str = "mcp-oauth-pending";
/// The prefix of the settings kind of one user's grants (named by MCP server), so that reading
/// a user's grants reads only theirs.
const GRANTS_KIND_PREFIX: &str = "mcp-oauth-grants:";
/// How long an `auth_url` works after its `mcp.auth_required` event.
pub(crate) const TICKET_LIFETIME: Duration = Duration::from_secs(15 * 60);
/// How long a started authorization waits for its callback.
pub(crate) const PENDING_LIFETIME: Duration = Duration::from_secs(10 * 60);
/// The most pending authorizations kept; beyond it the ones closest to expiry are dropped.
const MAX_PENDING: usize = 1000;
/// The longest ticket accepted.
const MAX_TICKET_CHARS: usize = 4096;
/// The longest `state` accepted.
const MAX_STATE_CHARS: usize = 512;
/// The longest `return_to` accepted, in bytes.
const MAX_RETURN_TO_BYTES: usize = 2048;
/// The client name registered with authorization servers.
const CLIENT_NAME: &str = "Teamster";
/// How long the unauthenticated request that reads an MCP server's challenge may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// The OAuth state of the service: the cipher, the links to this server's pages, and caches.
pub(crate) struct McpOAuth {
    cipher: Arc<TokenCipher>,
    /// Links to the authorize and callback pages; `None` where no HTTP layer serves them (an
    /// embedded service), so users cannot authorize in a browser.
    links: Option<Arc<dyn McpLinks>>,
    /// The callback URL registered as every client's redirect URI.
    redirect_uri: Option<String>,
    /// Registered clients by MCP server, as last read or registered here.
    clients: Mutex<HashMap<String, ClientRecord>>,
    /// A lock per MCP server that serialises its registrations in this process, so concurrent
    /// first authorizations of a server register one client (and a slow authorization server
    /// holds up only its own).
    registering: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// The token provider of each (user, MCP server) while connections use it, so one user's
    /// connections to a server share one refresh.
    providers: Mutex<HashMap<(String, String), SharedProvider>>,
}

/// A token provider that connections hold, whose it is, and the client it refreshes with.
struct SharedProvider {
    provider: Weak<OAuthTokenProvider>,
    subject: Subject,
    client_id: String,
}

impl McpOAuth {
    /// The OAuth state for a server whose pages `links` names, sealing with `key` (or a random
    /// key for this process when there is none).
    pub fn new(links: Option<Arc<dyn McpLinks>>, key: Option<&TokenKey>) -> Result<McpOAuth> {
        let cipher = match key {
            Some(key) => TokenCipher::new(key),
            None => TokenCipher::new(&TokenKey::generate().map_err(|error| McpHostError::Unprocessable(error.to_string()))?),
        };
        Ok(McpOAuth {
            cipher: Arc::new(cipher),
            redirect_uri: links.as_ref().map(|links| links.callback()),
            links,
            clients: Mutex::new(HashMap::new()),
            registering: Mutex::new(HashMap::new()),
            providers: Mutex::new(HashMap::new()),
        })
    }

    /// The `auth_url` of an `mcp.auth_required` event: this server's authorize route with a
    /// ticket for the user, the MCP server and the session.
    pub fn auth_url(&self, subject: &Subject, server: &str, session_id: &str) -> Result<String, String> {
        let ticket = Ticket {
            subject: subject.clone(),
            server: server.to_owned(),
            session_id: session_id.to_owned(),
            expires_at: unix_now() + TICKET_LIFETIME.as_secs(),
        };
        let links = self.links.as_ref().ok_or_else(no_links)?;
        let sealed = self.cipher.seal_json(&ticket, &ticket_context(server)).map_err(|error| error.to_string())?;
        Ok(links.authorize(server, &sealed))
    }

    /// Opens a ticket for `server`, checking that it was made for it and has not expired.
    fn open_ticket(&self, server: &str, ticket: &str, now: u64) -> Result<Ticket> {
        let invalid = |message: &str| McpHostError::invalid_param("ticket", message.to_owned());
        if ticket.len() > MAX_TICKET_CHARS {
            return Err(invalid("the ticket is not valid; open the link of a recent mcp.auth_required event"));
        }
        let opened: Ticket = self
            .cipher
            .open_json(ticket, &ticket_context(server))
            .map_err(|_| invalid("the ticket is not valid for this MCP server; open the link of a recent mcp.auth_required event"))?;
        if opened.expires_at <= now {
            return Err(invalid(
                "the ticket has expired; start a turn with an empty input in the session to get a new link",
            ));
        }
        Ok(opened)
    }

    fn cached_client(&self, server: &str) -> Option<ClientRecord> {
        self.clients.lock().unwrap_or_else(PoisonError::into_inner).get(server).cloned()
    }

    /// The registration lock of a server.
    fn registration_lock(&self, server: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.registering.lock().unwrap_or_else(PoisonError::into_inner);
        locks.retain(|_, lock| Arc::strong_count(lock) > 1);
        locks.entry(server.to_owned()).or_default().clone()
    }

    fn cache_client(&self, server: &str, record: &ClientRecord) {
        self.clients.lock().unwrap_or_else(PoisonError::into_inner).insert(server.to_owned(), record.clone());
    }

    /// Forgets the provider of a user's connections to a server (its grant changed or is gone).
    fn forget_provider(&self, subject: &Subject, server: &str) {
        self.providers.lock().unwrap_or_else(PoisonError::into_inner).remove(&(subject_key(subject), server.to_owned()));
    }
}

impl fmt::Debug for McpOAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpOAuth").field("redirect_uri", &self.redirect_uri).finish_non_exhaustive()
    }
}

/// A client registered for one MCP server, with what discovery found; kept sealed (the
/// credentials may hold a secret), and carried by pending authorizations and grants so they
/// always use the client they began with.
#[derive(Clone, Serialize, Deserialize)]
struct ClientRecord {
    /// The MCP server URL the client was registered for.
    mcp_url: String,
    /// The redirect URI it was registered with.
    redirect_uri: String,
    discovery: Discovery,
    credentials: ClientCredentials,
}

impl ClientRecord {
    fn client(&self) -> Result<OAuthClient, OAuthError> {
        OAuthClient::new(self.discovery.clone(), self.credentials.clone(), self.redirect_uri.clone())
    }

    /// Whether it can serve the server at `mcp_url` with callbacks to `redirect_uri` at `now`.
    fn fits(&self, mcp_url: &str, redirect_uri: &str, now: SystemTime) -> bool {
        self.mcp_url == mcp_url && self.redirect_uri == redirect_uri && !self.credentials.is_expired(now)
    }
}

/// One user's tokens for one MCP server and the client they were issued to.
#[derive(Clone, Serialize, Deserialize)]
struct Grant {
    client: ClientRecord,
    tokens: TokenSet,
}

impl Grant {
    /// Whether the tokens work now or can be refreshed.
    fn is_usable(&self, now: SystemTime) -> bool {
        !self.tokens.is_expired(now) || self.tokens.refresh_token.is_some()
    }
}

/// An authorization begun and waiting for its callback.
#[derive(Serialize, Deserialize)]
struct Pending {
    subject: Subject,
    server: String,
    /// The session whose `mcp.auth_required` led here, if any.
    session_id: Option<String>,
    /// The PKCE verifier; it never leaves this server unsealed.
    code_verifier: String,
    /// Where the callback sends the browser afterwards, if anywhere.
    return_to: Option<String>,
    client: ClientRecord,
}

/// A pending authorization as stored: its expiry in the clear (so expired rows are removed
/// without opening them), the rest sealed.
#[derive(Serialize, Deserialize)]
struct PendingRow {
    expires_at: u64,
    sealed: String,
}

/// What an `auth_url` carries, sealed.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Ticket {
    subject: Subject,
    server: String,
    session_id: String,
    /// Unix seconds.
    expires_at: u64,
}

impl McpHost {
    /// `GET /mcp-servers/{name}/authorize` without a ticket: whether the caller can use the
    /// server, and for a `dcr` server the caller has not authorized, a new authorization URL at
    /// the authorization server (registering a client first if none is stored).
    pub async fn mcp_authorization_status(
        &self,
        caller: &Caller,
        name: &str,
        return_to: Option<&str>,
    ) -> Result<McpAuthStatus> {
        let manifest = self.mcp_server_manifest(name).ok_or_else(|| not_found(name))?;
        let return_to = return_to.map(check_return_to).transpose()?;
        let status = |status: &str, authorization_url| McpAuthStatus { status: status.to_owned(), authorization_url };
        match manifest.auth {
            None => Ok(status("not_required", None)),
            Some(McpServerAuth::Header { .. }) => Ok(status("authenticated", None)),
            Some(McpServerAuth::Dcr {}) => {
                if self.authorized_servers(&caller.subject).await?.contains(name) {
                    return Ok(status("authenticated", None));
                }
                let url = self.begin_authorization(&caller.subject, name, &manifest, None, return_to).await?;
                Ok(status("auth_required", Some(url)))
            }
        }
    }

    /// `GET /mcp-servers/{name}/authorize?ticket=...`, the `auth_url` of an
    /// `mcp.auth_required` event: begins an authorization for the ticket's user and answers the
    /// authorization server's URL to redirect the browser to.
    pub async fn begin_mcp_authorization(&self, name: &str, ticket: &str, return_to: Option<&str>) -> Result<String> {
        let manifest = self.mcp_server_manifest(name).ok_or_else(|| not_found(name))?;
        let ticket = self.oauth.open_ticket(name, ticket, unix_now())?;
        if !matches!(manifest.auth, Some(McpServerAuth::Dcr {})) {
            return Err(McpHostError::invalid(format!("MCP server {name:?} does not use OAuth (auth type dcr)")));
        }
        let return_to = return_to.map(check_return_to).transpose()?;
        self.begin_authorization(&ticket.subject, name, &manifest, Some(ticket.session_id), return_to).await
    }

    /// The OAuth callback, with the authorization server's answer: finishes the pending
    /// authorization its `state` names and stores the user's grant. Answers where to redirect the browser (the
    /// `return_to` of the authorization, with `isSuccess`, and `reason` on failure), or `None`
    /// when there is none and the authorization succeeded.
    pub async fn finish_mcp_authorization(&self, callback: OAuthCallback) -> Result<Option<String>> {
        let state = callback
            .state
            .clone()
            .filter(|state| !state.is_empty())
            .ok_or_else(|| McpHostError::invalid_param("state", "the callback has no state"))?;
        let unknown = || {
            McpHostError::invalid_param(
                "state",
                "the state is unknown or has expired; open the authorization link again",
            )
        };
        if state.len() > MAX_STATE_CHARS {
            return Err(unknown());
        }
        let pending = self.take_pending(&state).await?.ok_or_else(unknown)?;
        let fail = |param: &'static str, reason: String| match &pending.return_to {
            Some(return_to) => Ok(Some(with_query(return_to, &[("isSuccess", "false"), ("reason", &reason)]))),
            None => Err(McpHostError::invalid_param(param, reason)),
        };
        if let Some(error) = &callback.error {
            let detail = callback.error_description.as_ref().map(|description| format!(": {}", clean(description))).unwrap_or_default();
            return fail("error", format!("the authorization server refused the authorization ({}){detail}", clean(error)));
        }
        let Some(code) = callback.code.filter(|code| !code.is_empty()) else {
            return fail("code", "the callback is not a valid authorization response: it has no code".to_owned());
        };
        let response = AuthorizationResponse { code, state, issuer: callback.issuer };
        let client = match pending.client.client() {
            Ok(client) => client,
            Err(error) => return fail("code", format!("the authorization cannot be finished: {error}")),
        };
        let tokens = match client.finish_response(&response, &pending.code_verifier).await {
            Ok(tokens) => tokens,
            Err(error) => return fail("code", format!("the authorization code could not be exchanged for tokens: {error}")),
        };
        let grant = Grant { client: pending.client.clone(), tokens };
        write_grant(self.store(), &self.oauth.cipher, &pending.subject, &pending.server, &grant).await?;
        self.forget_connections(&pending.subject, &pending.server);
        tracing::info!(server = %pending.server, subject = %pending.subject.subject_id, session_id = ?pending.session_id, "MCP server authorized");
        Ok(pending.return_to.as_deref().map(|return_to| with_query(return_to, &[("isSuccess", "true")])))
    }

    /// `DELETE /mcp-servers/{name}/authorize`: forgets the caller's tokens for a `dcr` server
    /// (the registered client stays for the next authorization) and closes the caller's
    /// connections to it; a no-op for other servers. Answers the server as the caller sees it.
    pub async fn disconnect_mcp_server(&self, caller: &Caller, name: &str) -> Result<ConfiguredMcpServer> {
        let manifest = self.mcp_server_manifest(name).ok_or_else(|| not_found(name))?;
        if matches!(manifest.auth, Some(McpServerAuth::Dcr {})) {
            self.store().delete_setting(&grants_kind(&caller.subject), name).await?;
            self.forget_connections(&caller.subject, name);
        }
        self.get_mcp_server_setting(caller, name).await
    }

    /// The MCP servers the user holds usable grants for. Unreadable grants are logged and left
    /// out.
    pub async fn authorized_servers(&self, subject: &Subject) -> Result<HashSet<String>> {
        let grants = read_grants(self.store(), &self.oauth.cipher, subject).await?;
        Ok(grants.into_iter().filter(|(server, grant)| self.grant_is_current(server, grant)).map(|(server, _)| server).collect())
    }

    /// Whether a grant can be used for the server as configured now: its tokens work or can be
    /// refreshed, and were issued for the server's current URL (a token is never sent to
    /// another URL than the one it was issued for).
    fn grant_is_current(&self, server: &str, grant: &Grant) -> bool {
        let url = self.mcp_server_manifest(server).and_then(|manifest| manifest.url);
        grant.is_usable(SystemTime::now()) && url.as_deref() == Some(grant.client.mcp_url.as_str())
    }

    /// The bearer token provider for the user's connections to a `dcr` server, and the id of
    /// the client it refreshes with; `None` when the user holds no usable grant (the turn then
    /// asks for authorization). Connections of one user to one server share a provider.
    pub async fn oauth_bearer(&self, subject: &Subject, server: &str) -> Option<(Arc<OAuthTokenProvider>, String)> {
        let oauth = &self.oauth;
        let grant = match read_grant(self.store(), &oauth.cipher, subject, server).await {
            Ok(grant) => grant?,
            Err(error) => {
                tracing::warn!(%server, %error, "cannot read a user's OAuth grant for an MCP server");
                return None;
            }
        };
        if !self.grant_is_current(server, &grant) {
            return None;
        }
        let client_id = grant.client.credentials.client_id.clone();
        let key = (subject_key(subject), server.to_owned());
        let mut providers = oauth.providers.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(shared) = providers.get(&key)
            && shared.client_id == client_id
            && let Some(provider) = shared.provider.upgrade()
        {
            return Some((provider, client_id));
        }
        let client = match grant.client.client() {
            Ok(client) => client,
            Err(error) => {
                tracing::warn!(%server, %error, "a stored OAuth client is unusable; the user is asked to authorize again");
                return None;
            }
        };
        let store = GrantStore {
            store: self.store.clone(),
            cipher: oauth.cipher.clone(),
            subject: subject.clone(),
            server: server.to_owned(),
            client: grant.client,
        };
        let provider = Arc::new(OAuthTokenProvider::new(client, Arc::new(store)));
        providers.retain(|_, shared| shared.provider.strong_count() > 0);
        providers.insert(
            key,
            SharedProvider { provider: Arc::downgrade(&provider), subject: subject.clone(), client_id: client_id.clone() },
        );
        Some((provider, client_id))
    }

    /// Begins an authorization for the user: a client for the server, a PKCE request, and the
    /// pending authorization stored for the callback. Answers the authorization URL.
    async fn begin_authorization(
        &self,
        subject: &Subject,
        name: &str,
        manifest: &McpServerManifest,
        session_id: Option<String>,
        return_to: Option<String>,
    ) -> Result<String> {
        let record = self.client_record(name, manifest).await?;
        let request = record.client().and_then(|client| client.begin()).map_err(|error| oauth_failure(name, "starting the authorization", error, manifest.url.as_deref()))?;
        let pending = Pending {
            subject: subject.clone(),
            server: name.to_owned(),
            session_id,
            code_verifier: request.code_verifier,
            return_to,
            client: record,
        };
        self.put_pending(&request.state, &pending).await?;
        Ok(request.authorize_url)
    }

    /// The registered client of a server: cached, else stored, else discovered and registered
    /// now (and stored, sealed, for every replica and restart). A client registered for another
    /// URL or redirect URI, or whose secret expired, is replaced.
    async fn client_record(&self, name: &str, manifest: &McpServerManifest) -> Result<ClientRecord> {
        let oauth = &self.oauth;
        let mcp_url = manifest.url.clone().ok_or_else(|| McpHostError::Unprocessable(format!("MCP server {name:?} has no URL")))?;
        let redirect_uri = oauth.redirect_uri.clone().ok_or_else(|| McpHostError::Unprocessable(no_links()))?;
        let fits = |record: &ClientRecord| record.fits(&mcp_url, &redirect_uri, SystemTime::now());
        if let Some(record) = oauth.cached_client(name).filter(fits) {
            return Ok(record);
        }
        let lock = oauth.registration_lock(name);
        let _registering = lock.lock().await;
        let context = client_context(name);
        let stored = self.store().list_settings(CLIENT_KIND).await?.into_iter().find(|(row, _)| row == name);
        if let Some((_, sealed)) = stored {
            match oauth.cipher.open_json::<ClientRecord>(&sealed, &context) {
                Ok(record) if fits(&record) => {
                    oauth.cache_client(name, &record);
                    return Ok(record);
                }
                Ok(_) => {}
                Err(error) => tracing::warn!(server = %name, %error, "a stored OAuth client cannot be opened; registering a new one"),
            }
        }
        let challenge = self.unauthorized_challenge(name, manifest).await;
        let discovery =
            discover(&mcp_url, challenge.as_deref()).await.map_err(|error| oauth_failure(name, "discovery", error, Some(&mcp_url)))?;
        let credentials = register(&discovery, CLIENT_NAME, &redirect_uri)
            .await
            .map_err(|error| oauth_failure(name, "dynamic client registration", error, Some(&mcp_url)))?;
        let record = ClientRecord { mcp_url, redirect_uri, discovery, credentials };
        let sealed = oauth.cipher.seal_json(&record, &context).map_err(|error| McpHostError::Unprocessable(error.to_string()))?;
        self.store().put_setting(CLIENT_KIND, name, &sealed, &timestamp::now()).await?;
        oauth.cache_client(name, &record);
        tracing::info!(server = %name, client_id = %record.credentials.client_id, "registered an OAuth client for an MCP server");
        Ok(record)
    }

    /// The `WWW-Authenticate` challenge of the server's 401 to a request without a token,
    /// which may name its metadata; `None` if it answers otherwise (discovery then tries the
    /// well-known locations).
    async fn unauthorized_challenge(&self, name: &str, manifest: &McpServerManifest) -> Option<String> {
        let mut config = registry_config(name, manifest, self.allow_stdio).ok()?;
        config.connect_timeout = PROBE_TIMEOUT;
        match McpConnection::connect(config).await {
            Err(McpError::Unauthorized { www_authenticate }) => www_authenticate,
            _ => None,
        }
    }

    /// Stores a pending authorization under its state, removing expired ones and, beyond
    /// [`MAX_PENDING`], those closest to expiry.
    async fn put_pending(&self, state: &str, pending: &Pending) -> Result<()> {
        let now = unix_now();
        let mut live = Vec::new();
        for (name, value) in self.store().list_settings(PENDING_KIND).await? {
            match serde_json::from_str::<PendingRow>(&value) {
                Ok(row) if row.expires_at > now => live.push((row.expires_at, name)),
                _ => {
                    self.store().delete_setting(PENDING_KIND, &name).await?;
                }
            }
        }
        if live.len() >= MAX_PENDING {
            live.sort();
            for (_, name) in &live[..=live.len() - MAX_PENDING] {
                self.store().delete_setting(PENDING_KIND, name).await?;
            }
        }
        let name = pending_name(state);
        let sealed = self
            .oauth
            .cipher
            .seal_json(pending, &pending_context(&name))
            .map_err(|error| McpHostError::Unprocessable(error.to_string()))?;
        let row = PendingRow { expires_at: now + PENDING_LIFETIME.as_secs(), sealed };
        let value = serde_json::to_string(&row).map_err(|error| McpHostError::Unprocessable(error.to_string()))?;
        self.store().put_setting(PENDING_KIND, &name, &value, &timestamp::now()).await?;
        Ok(())
    }

    /// Takes the pending authorization of a state: removes it, so it is used once even with
    /// replicas racing, and answers it unless it has expired or cannot be opened.
    async fn take_pending(&self, state: &str) -> Result<Option<Pending>> {
        let name = pending_name(state);
        let stored = self.store().list_settings(PENDING_KIND).await?.into_iter().find(|(row, _)| *row == name);
        let Some((_, value)) = stored else { return Ok(None) };
        if !self.store().delete_setting(PENDING_KIND, &name).await? {
            return Ok(None);
        }
        let Ok(row) = serde_json::from_str::<PendingRow>(&value) else { return Ok(None) };
        if row.expires_at <= unix_now() {
            return Ok(None);
        }
        match self.oauth.cipher.open_json::<Pending>(&row.sealed, &pending_context(&name)) {
            Ok(pending) => Ok(Some(pending)),
            Err(error) => {
                tracing::warn!(%error, "a pending OAuth authorization cannot be opened");
                Ok(None)
            }
        }
    }

    /// Closes the user's connections to a server and forgets their token provider, so the next
    /// turn connects with the current grant.
    fn forget_connections(&self, subject: &Subject, server: &str) {
        self.oauth.forget_provider(subject, server);
        self.pool.remove_user_server(&subject_key(subject), server);
    }

    /// Another replica changed OAuth settings of `kind` (any kind for `None`): registered
    /// clients are read from the store again; for the users whose grants changed, connections
    /// to a server whose grant was removed or replaced by another client's are closed (the next
    /// turn connects with the current grant or asks for authorization), and the token providers
    /// of the others read their tokens again (another replica refreshed them).
    pub async fn oauth_changed_elsewhere(&self, kind: Option<&str>) {
        if kind.is_none_or(|kind| kind == CLIENT_KIND) {
            self.oauth.clients.lock().unwrap_or_else(PoisonError::into_inner).clear();
        }
        let changed_user = match kind {
            None => None,
            Some(kind) => match kind.strip_prefix(GRANTS_KIND_PREFIX) {
                Some(user) => Some(user),
                None => return,
            },
        };
        let held: Vec<(Subject, String, String, Weak<OAuthTokenProvider>)> = {
            let providers = self.oauth.providers.lock().unwrap_or_else(PoisonError::into_inner);
            providers
                .iter()
                .filter(|((user, _), _)| changed_user.is_none_or(|changed| changed == user))
                .map(|((_, server), shared)| {
                    (shared.subject.clone(), server.clone(), shared.client_id.clone(), shared.provider.clone())
                })
                .collect()
        };
        for (subject, server, client_id, provider) in held {
            let stored = read_grant(self.store(), &self.oauth.cipher, &subject, &server).await;
            match stored {
                Ok(Some(grant)) if grant.client.credentials.client_id == client_id => {
                    if let Some(provider) = provider.upgrade() {
                        provider.reload_from_store();
                    }
                }
                Ok(_) => self.forget_connections(&subject, &server),
                Err(error) => {
                    tracing::warn!(%server, %error, "cannot read an OAuth grant another replica changed; closing its connections");
                    self.forget_connections(&subject, &server);
                }
            }
        }
    }
}

/// A [`TokenStore`] over one user's sealed grant row for one server. Tokens of another client
/// (the user authorized again meanwhile) are not this provider's: they load as none.
struct GrantStore {
    store: Arc<dyn SettingsStore>,
    cipher: Arc<TokenCipher>,
    subject: Subject,
    server: String,
    client: ClientRecord,
}

impl GrantStore {
    async fn current(&self) -> Option<Grant> {
        match read_grant(self.store.as_ref(), &self.cipher, &self.subject, &self.server).await {
            Ok(grant) => grant.filter(|grant| grant.client.credentials.client_id == self.client.credentials.client_id),
            Err(error) => {
                tracing::warn!(server = %self.server, %error, "cannot read an OAuth grant");
                None
            }
        }
    }
}

#[async_trait]
impl TokenStore for GrantStore {
    async fn load(&self) -> Option<TokenSet> {
        self.current().await.map(|grant| grant.tokens)
    }

    /// Saves refreshed tokens, unless the grant was removed (the user disconnected) or
    /// replaced meanwhile.
    async fn save(&self, tokens: &TokenSet) {
        if self.current().await.is_none() {
            return;
        }
        let grant = Grant { client: self.client.clone(), tokens: tokens.clone() };
        if let Err(error) = write_grant(self.store.as_ref(), &self.cipher, &self.subject, &self.server, &grant).await {
            tracing::warn!(server = %self.server, %error, "cannot save refreshed OAuth tokens");
        }
    }
}

/// Every grant of a user, by server; unreadable ones are logged and left out.
async fn read_grants(
    store: &dyn SettingsStore,
    cipher: &TokenCipher,
    subject: &Subject,
) -> Result<HashMap<String, Grant>, teamster_store::Error> {
    let mut grants = HashMap::new();
    for (server, sealed) in store.list_settings(&grants_kind(subject)).await? {
        match cipher.open_json::<Grant>(&sealed, &grant_context(subject, &server)) {
            Ok(grant) => {
                grants.insert(server, grant);
            }
            Err(error) => tracing::warn!(%server, %error, "a stored OAuth grant cannot be opened; the user is asked to authorize again"),
        }
    }
    Ok(grants)
}

/// A user's grant for one server.
async fn read_grant(
    store: &dyn SettingsStore,
    cipher: &TokenCipher,
    subject: &Subject,
    server: &str,
) -> Result<Option<Grant>, teamster_store::Error> {
    Ok(read_grants(store, cipher, subject).await?.remove(server))
}

async fn write_grant(
    store: &dyn SettingsStore,
    cipher: &TokenCipher,
    subject: &Subject,
    server: &str,
    grant: &Grant,
) -> Result<()> {
    let sealed = cipher
        .seal_json(grant, &grant_context(subject, server))
        .map_err(|error| McpHostError::Unprocessable(error.to_string()))?;
    store.put_setting(&grants_kind(subject), server, &sealed, &timestamp::now()).await?;
    Ok(())
}

/// Whether another replica's change to settings of `kind` concerns the OAuth state replicas
/// keep in memory: registered clients, and the token providers of users' grants.
pub fn is_oauth_kind(kind: &str) -> bool {
    kind == CLIENT_KIND || kind.starts_with(GRANTS_KIND_PREFIX)
}

/// A user as one string: type and id.
pub(crate) fn subject_key(subject: &Subject) -> String {
    format!("{}:{}", subject.subject_type, subject.subject_id)
}

fn grants_kind(subject: &Subject) -> String {
    format!("{GRANTS_KIND_PREFIX}{}", subject_key(subject))
}

fn grant_context(subject: &Subject, server: &str) -> Vec<u8> {
    format!("mcp-oauth-grant\0{}\0{}\0{server}", subject.subject_type, subject.subject_id).into_bytes()
}

fn client_context(server: &str) -> Vec<u8> {
    format!("mcp-oauth-client\0{server}").into_bytes()
}

fn pending_context(name: &str) -> Vec<u8> {
    format!("mcp-oauth-pending\0{name}").into_bytes()
}

fn ticket_context(server: &str) -> Vec<u8> {
    format!("mcp-oauth-ticket\0{server}").into_bytes()
}

/// The row name of a pending authorization: a hash of its state, so the store never holds a
/// state that would match a callback.
fn pending_name(state: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, state.as_bytes());
    digest.as_ref()[..16].iter().map(|byte| format!("{byte:02x}")).collect()
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()
}

fn not_found(name: &str) -> McpHostError {
    McpHostError::NotFound(format!("MCP server {name:?} not found"))
}

/// An OAuth step's failure as a request error: a server that offers no registration is 422,
/// anything else the authorization server did or did not do is 424.
fn oauth_failure(name: &str, step: &str, error: OAuthError, url: Option<&str>) -> McpHostError {
    match error {
        OAuthError::RegistrationUnsupported => McpHostError::Unprocessable(format!(
            "MCP server {name:?}: its authorization server offers no dynamic client registration"
        )),
        // The server's URL (or one made from it) may be quoted, with its credentials.
        other => McpHostError::FailedDependency(scrub_url(format!("MCP server {name:?}: {step} failed: {other}"), url)),
    }
}


/// Why no `auth_url` can be made: nothing serves the OAuth pages.
fn no_links() -> String {
    "MCP OAuth needs this server's public authorize and callback pages, and none are configured".to_owned()
}

/// A string from an authorization server, shortened and stripped of control characters before
/// it is shown.
fn clean(text: &str) -> String {
    text.chars().filter(|character| !character.is_control()).take(200).collect()
}


/// A `return_to`: a path on this server's origin (`/...`, not `//...`), bounded, without
/// control characters or backslashes.
fn check_return_to(path: &str) -> Result<String> {
    let invalid = || McpHostError::invalid_param("return_to", "return_to must be a relative path on this server, such as /chat");
    if path.len() > MAX_RETURN_TO_BYTES
        || !path.starts_with('/')
        || path.starts_with("//")
        || path.contains('\\')
        || path.chars().any(char::is_control)
    {
        return Err(invalid());
    }
    let base = reqwest::Url::parse("http://origin.invalid/").map_err(|_| invalid())?;
    match base.join(path) {
        Ok(joined) if joined.origin() == base.origin() => Ok(path.to_owned()),
        _ => Err(invalid()),
    }
}

/// A checked `return_to` with parameters added to its query.
fn with_query(path: &str, pairs: &[(&str, &str)]) -> String {
    let Ok(mut url) = reqwest::Url::parse("http://origin.invalid/").and_then(|base| base.join(path)) else {
        return path.to_owned();
    };
    url.query_pairs_mut().extend_pairs(pairs);
    let mut relative = url.path().to_owned();
    if let Some(query) = url.query() {
        relative.push('?');
        relative.push_str(query);
    }
    if let Some(fragment) = url.fragment() {
        relative.push('#');
        relative.push_str(fragment);
    }
    relative
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Links as the HTTP layer makes them.
    struct TestLinks;

    impl McpLinks for TestLinks {
        fn authorize(&self, server: &str, ticket: &str) -> String {
            format!("http://127.0.0.1:8790/api/v1/mcp-servers/{server}/authorize?ticket={ticket}")
        }
        fn callback(&self) -> String {
            "http://127.0.0.1:8790/api/v1/mcp-servers/oauth/callback".to_owned()
        }
    }

    fn oauth() -> McpOAuth {
        McpOAuth::new(Some(Arc::new(TestLinks)), Some(&TokenKey::from_base64(&"A".repeat(43)).unwrap())).unwrap()
    }

    fn user(id: &str) -> Subject {
        Subject { subject_id: id.into(), subject_type: "user".into(), subject_slug: id.into() }
    }

    fn ticket_of(url: &str) -> String {
        let url = reqwest::Url::parse(url).unwrap();
        url.query_pairs().find(|(key, _)| key == "ticket").unwrap().1.into_owned()
    }

    #[test]
    fn auth_urls_carry_a_ticket_only_their_server_opens_before_it_expires() {
        let oauth = oauth();
        let url = oauth.auth_url(&user("alice"), "github", "sess_1").unwrap();
        assert!(url.starts_with("http://127.0.0.1:8790/api/v1/mcp-servers/github/authorize?ticket=v1."), "{url}");
        let ticket = ticket_of(&url);
        assert!(!ticket.contains("alice") && !ticket.contains("sess_1"), "the ticket is sealed: {ticket}");

        let now = unix_now();
        let opened = oauth.open_ticket("github", &ticket, now).unwrap();
        assert_eq!(
            opened,
            Ticket {
                subject: user("alice"),
                server: "github".into(),
                session_id: "sess_1".into(),
                expires_at: opened.expires_at
            }
        );
        assert!((now + TICKET_LIFETIME.as_secs()).abs_diff(opened.expires_at) <= 2);

        let message = |result: Result<Ticket>| result.unwrap_err().to_string();
        assert!(message(oauth.open_ticket("jira", &ticket, now)).contains("not valid for this MCP server"));
        assert!(message(oauth.open_ticket("github", &ticket, opened.expires_at)).contains("expired"));
        let mut tampered = ticket.clone();
        tampered.insert(ticket.len() - 3, 'x');
        assert!(message(oauth.open_ticket("github", &tampered, now)).contains("not valid"));
        assert!(message(oauth.open_ticket("github", &"v1.".repeat(2000), now)).contains("not valid"));
        // Another server's key opens nothing.
        let other = McpOAuth::new(Some(Arc::new(TestLinks)), None).unwrap();
        assert!(other.open_ticket("github", &ticket, now).is_err());
    }

    #[test]
    fn pending_rows_are_named_by_a_hash_of_the_state() {
        let name = pending_name("state-1");
        assert_eq!(name.len(), 32);
        assert!(!name.contains("state"));
        assert_eq!(name, pending_name("state-1"));
        assert_ne!(name, pending_name("state-2"));
    }

    #[test]
    fn contexts_bind_sealed_rows_to_their_user_and_server() {
        let oauth = oauth();
        let sealed = oauth.cipher.seal_json(&"tokens", &grant_context(&user("alice"), "github")).unwrap();
        assert!(oauth.cipher.open_json::<String>(&sealed, &grant_context(&user("alice"), "github")).is_ok());
        assert!(oauth.cipher.open_json::<String>(&sealed, &grant_context(&user("bob"), "github")).is_err());
        assert!(oauth.cipher.open_json::<String>(&sealed, &grant_context(&user("alice"), "jira")).is_err());
        assert_ne!(grants_kind(&user("alice")), grants_kind(&user("bob")));
    }

    #[test]
    fn return_to_must_stay_on_this_server() {
        for good in ["/", "/chat", "/chat/s1?tab=2#end", "/a%20b"] {
            assert_eq!(check_return_to(good).unwrap(), good);
        }
        for bad in ["", "chat", "//evil.example/x", "/\\evil.example", "https://evil.example/", "/a\nb", &format!("/{}", "a".repeat(3000))] {
            let error = check_return_to(bad).unwrap_err();
            assert!(matches!(error, McpHostError::Invalid { param: Some("return_to"), .. }), "{bad:?}: {error:?}");
        }
        assert_eq!(with_query("/chat", &[("isSuccess", "true")]), "/chat?isSuccess=true");
        assert_eq!(
            with_query("/chat?tab=2#end", &[("isSuccess", "false"), ("reason", "denied & gone")]),
            "/chat?tab=2&isSuccess=false&reason=denied+%26+gone#end"
        );
    }

    fn record() -> ClientRecord {
        let discovery: Discovery = serde_json::from_value(serde_json::json!({
            "resource": "https://mcp.example.com/mcp",
            "resource_metadata": null,
            "authorization_server": {
                "issuer": "https://as.example.com",
                "authorization_endpoint": "https://as.example.com/authorize",
                "token_endpoint": "https://as.example.com/token",
                "code_challenge_methods_supported": ["S256"],
            },
            "scope": null,
        }))
        .unwrap();
        ClientRecord {
            mcp_url: "https://mcp.example.com/mcp".into(),
            redirect_uri: "http://127.0.0.1:8790/api/v1/mcp-servers/oauth/callback".into(),
            discovery,
            credentials: ClientCredentials::new("client-1", Some("client-secret-1".into())),
        }
    }

    fn pending(id: &str) -> Pending {
        Pending {
            subject: user(id),
            server: "github".into(),
            session_id: Some("sess_1".into()),
            code_verifier: "verifier-1".into(),
            return_to: None,
            client: record(),
        }
    }

    #[tokio::test]
    async fn pending_authorizations_are_sealed_taken_once_and_expire() {
        let store: Arc<dyn SettingsStore> =
            Arc::new(teamster_store_sqlite::SqliteStore::connect("sqlite::memory:").await.unwrap());
        let service = McpHost::start(store.clone(), None, None, teamster_sealed::SealedSettings::new(None), false, Arc::default(), Default::default()).await.unwrap();

        service.put_pending("state-a", &pending("alice")).await.unwrap();
        let rows = store.list_settings(PENDING_KIND).await.unwrap();
        assert_eq!(rows.len(), 1);
        let (name, value) = &rows[0];
        assert_eq!(*name, pending_name("state-a"));
        for secret in ["verifier-1", "client-secret-1", "alice", "state-a"] {
            assert!(!value.contains(secret), "{secret} is stored in the clear: {value}");
        }

        assert!(service.take_pending("state-b").await.unwrap().is_none(), "an unknown state");
        let taken = service.take_pending("state-a").await.unwrap().expect("the pending authorization");
        assert_eq!((taken.subject.subject_id.as_str(), taken.code_verifier.as_str()), ("alice", "verifier-1"));
        assert_eq!(taken.client.credentials.client_id, "client-1");
        assert!(service.take_pending("state-a").await.unwrap().is_none(), "a state is used once");

        // An expired one is not answered, and the next write removes it.
        service.put_pending("state-c", &pending("bob")).await.unwrap();
        let (name, value) = store.list_settings(PENDING_KIND).await.unwrap().remove(0);
        let mut row: PendingRow = serde_json::from_str(&value).unwrap();
        row.expires_at = unix_now() - 1;
        store.put_setting(PENDING_KIND, &name, &serde_json::to_string(&row).unwrap(), "t").await.unwrap();
        assert!(service.take_pending("state-c").await.unwrap().is_none(), "an expired state");
        service.put_pending("state-d", &pending("bob")).await.unwrap();
        service.put_pending("state-e", &pending("bob")).await.unwrap();
        store.put_setting(PENDING_KIND, &name, &serde_json::to_string(&row).unwrap(), "t").await.unwrap();
        service.put_pending("state-f", &pending("bob")).await.unwrap();
        let names: Vec<String> = store.list_settings(PENDING_KIND).await.unwrap().into_iter().map(|(name, _)| name).collect();
        assert!(!names.contains(&name), "the expired row was removed");
        assert_eq!(names.len(), 3);

        // A sealed row moved to another state's name does not open.
        let (_, moved) = store.list_settings(PENDING_KIND).await.unwrap().remove(0);
        store.put_setting(PENDING_KIND, &pending_name("state-z"), &moved, "t").await.unwrap();
        assert!(service.take_pending("state-z").await.unwrap().is_none());
    }
}
