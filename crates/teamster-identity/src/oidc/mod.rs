//! OpenID Connect login for browsers: this server as a relying party of one identity provider.
//!
//! [`Oidc::begin`] starts the authorization code flow with PKCE (`S256`), a `state` and a
//! `nonce`, and returns the provider's authorization URL and the pending login (verifier, nonce,
//! where to return, expiry) sealed under the service's secret key and bound to its `state`, for
//! the browser to keep in a short-lived cookie: nothing is stored, so any replica sharing the key
//! finishes any login. [`Oidc::finish`] opens it with the callback's `state`, exchanges the code
//! at the token endpoint (`client_secret_basic`) and verifies the ID token, nonce included.
//! [`Oidc::authenticate`] verifies an ID token a request carries (cookie or bearer) and maps its
//! claims to a [`Caller`]: the subject named by `sub` in its tenant (id `<tenant>:<sub>`, slug
//! `<sub>`, as an API key's subject of that name: a key an admin makes for that name acts as the
//! same user, and collaborators name the user as `user:<sub>`; the email, which a user may set at
//! some providers, never names anyone), tenant from a configured claim or the default, operator or
//! tenant admin by subject or by a claim's value (operator first).
//!
//! Tokens, codes, verifiers and the client secret never appear in errors, logs or `Debug` forms.

mod jwt;
mod provider;

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};
use teamster_mcp::oauth::{TokenCipher, TokenKey};
use teamster_protocol::Subject;

use crate::{Caller, Role};
use provider::{Provider, checked_url, clean};

/// How long a login may take from [`Oidc::begin`] to its callback.
pub const LOGIN_TIMEOUT: Duration = Duration::from_secs(10 * 60);
/// How far clocks may disagree when `exp`, `iat` and `nbf` are checked, in seconds.
const CLOCK_LEEWAY_SECS: u64 = 60;
/// The furthest ahead a token's `exp` may lie: ID tokens live minutes to hours, and a login
/// cookie lasts until the token's `exp`, so one valid for years is refused, not kept for years.
const MAX_TOKEN_LIFETIME_SECS: u64 = 24 * 3600;
/// The longest `return_to` kept, in bytes.
const MAX_RETURN_TO_BYTES: usize = 2048;
/// The longest tenant name or subject accepted from a token, in bytes (an API key's bound).
const MAX_NAME_BYTES: usize = 128;
/// The longest `sub` accepted (OpenID Connect Core 2: at most 255 ASCII characters).
const MAX_SUB_BYTES: usize = 255;

/// How the relying party is configured.
#[derive(Clone)]
pub struct OidcConfig {
    /// The provider's issuer identifier, exactly as its discovery document and tokens name it.
    pub issuer: String,
    pub client_id: String,
    pub client_secret: String,
    /// Where the provider sends the browser back: this server's callback under its public URL.
    pub redirect_uri: String,
    /// The scopes asked for; `openid` is always among them.
    pub scopes: Vec<String>,
    /// The claim naming a subject's tenant; without it (or without the claim in a token) the
    /// subject is in `default_tenant`.
    pub tenant_claim: Option<String>,
    pub default_tenant: String,
    /// Subjects (`sub` values) who are admins.
    pub admin_subjects: Vec<String>,
    /// A claim and a value that make a subject an admin: the claim equals the value, or is a
    /// list holding it (e.g. `groups` holding `teamster-admins`).
    pub admin_claim: Option<(String, String)>,
    /// Subjects (`sub` values) who are the server's operator.
    pub operator_subjects: Vec<String>,
    /// A claim and a value that make a subject the operator, as `admin_claim` does an admin.
    pub operator_claim: Option<(String, String)>,
}

impl fmt::Debug for OidcConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OidcConfig")
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field("client_secret", &"<redacted>")
            .field("redirect_uri", &self.redirect_uri)
            .field("scopes", &self.scopes)
            .field("tenant_claim", &self.tenant_claim)
            .field("default_tenant", &self.default_tenant)
            .field("admin_subjects", &self.admin_subjects)
            .field("admin_claim", &self.admin_claim)
            .field("operator_subjects", &self.operator_subjects)
            .field("operator_claim", &self.operator_claim)
            .finish()
    }
}

/// Why a login or a token failed. Messages never hold a token, code or secret.
#[derive(Debug, thiserror::Error)]
pub enum OidcError {
    /// The configuration cannot work (at start-up).
    #[error("OIDC configuration: {0}")]
    Config(String),
    /// The provider cannot be reached, or its documents are not usable.
    #[error("the identity provider is unavailable: {0}")]
    Unavailable(String),
    /// A token is not a valid ID token of the provider for this client.
    #[error("the ID token is not valid: {0}")]
    InvalidToken(String),
    /// The provider answered the login with an error (e.g. the user denied consent).
    #[error("the identity provider refused the login: {error}{}", .description.as_deref().map(|text| format!(" ({text})")).unwrap_or_default())]
    Denied { error: String, description: Option<String> },
    /// The callback's `state` answers no login pending in this browser (unknown, expired,
    /// finished already, or begun in another browser).
    #[error("{0}")]
    UnknownLogin(String),
    /// The code could not be exchanged for tokens.
    #[error("the login could not be completed: {0}")]
    Exchange(String),
    /// The callback names another issuer than ours (RFC 9207: a mix-up of providers).
    #[error("{0}")]
    WrongIssuer(String),
    /// The system's random number generator or the cipher failed.
    #[error("{0}")]
    Internal(String),
}

impl OidcError {
    /// A short code for the browser (`/?error=<code>`): letters, digits and `_` only.
    pub fn code(&self) -> String {
        match self {
            OidcError::Config(_) | OidcError::Internal(_) => "server_error".to_owned(),
            OidcError::Unavailable(_) => "idp_unavailable".to_owned(),
            OidcError::InvalidToken(_) => "invalid_id_token".to_owned(),
            OidcError::Denied { error, .. } => {
                let code: String = error.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_').take(64).collect();
                if code.is_empty() { "access_denied".to_owned() } else { code }
            }
            OidcError::UnknownLogin(_) => "invalid_state".to_owned(),
            OidcError::Exchange(_) => "token_exchange_failed".to_owned(),
            OidcError::WrongIssuer(_) => "invalid_issuer".to_owned(),
        }
    }
}

/// Who an ID token stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub caller: Caller,
    /// The `email` claim, else `preferred_username`, else `sub`: what the UI shows.
    pub email: String,
    /// The token's `exp`, in seconds since the Unix epoch.
    pub expires_at: u64,
}

impl Identity {
    /// How long the token stays valid from now (zero once it has expired).
    pub fn lifetime(&self) -> Duration {
        Duration::from_secs(self.expires_at.saturating_sub(now()))
    }
}

/// A login begun: where to send the browser, and what it keeps until the callback.
pub struct LoginStart {
    /// The provider's authorization URL, with every parameter of the request.
    pub authorize_url: String,
    /// The `state` of the request (the pending login's cookie is named after it).
    pub state: String,
    /// The pending login, sealed and bound to `state`.
    pub pending: String,
}

impl fmt::Debug for LoginStart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoginStart").field("state", &self.state).finish_non_exhaustive()
    }
}

/// What the provider sent back to the callback.
#[derive(Clone, Default)]
pub struct Callback {
    pub state: Option<String>,
    pub code: Option<String>,
    /// `iss` (RFC 9207), checked against the issuer when present or when the provider says it
    /// sends it.
    pub issuer: Option<String>,
    pub error: Option<String>,
    pub error_description: Option<String>,
}

/// A finished login.
pub struct Login {
    /// The verified ID token, for the session cookie.
    pub id_token: String,
    pub identity: Identity,
    /// The checked `return_to` of [`Oidc::begin`], if one was given.
    pub return_to: Option<String>,
}

/// The pending login a browser keeps, sealed.
#[derive(Serialize, Deserialize)]
struct Pending {
    verifier: String,
    nonce: String,
    #[serde(default)]
    return_to: Option<String>,
    /// Seconds since the Unix epoch.
    expires_at: u64,
}

/// The relying party.
pub struct Oidc {
    config: OidcConfig,
    provider: Provider,
    cipher: TokenCipher,
}

impl fmt::Debug for Oidc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Oidc").field("config", &self.config).finish_non_exhaustive()
    }
}

/// Seconds since the Unix epoch.
fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_secs())
}

/// 256 random bits in base64url: a state, a nonce or a PKCE verifier.
fn random_token() -> Result<String, OidcError> {
    let mut bytes = [0u8; 32];
    SystemRandom::new().fill(&mut bytes).map_err(|_| OidcError::Internal("the system's random number generator failed".to_owned()))?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

/// What a pending login's seal is bound to: its `state`.
fn pending_context(state: &str) -> Vec<u8> {
    format!("teamster oidc login\0{state}").into_bytes()
}

/// `return_to` when it is a same-origin path (`/...`, but not `//...` or `/\...`, which browsers
/// read as another host), without control characters or backslashes and of sane length; else
/// `None`.
pub fn safe_return_to(return_to: Option<&str>) -> Option<String> {
    let path = return_to?;
    let fits = path.starts_with('/')
        && !path.starts_with("//")
        && !path.contains('\\')
        && path.len() <= MAX_RETURN_TO_BYTES
        && !path.chars().any(|character| character.is_control() || character.is_whitespace());
    fits.then(|| path.to_owned())
}

/// Whether a tenant name (from a claim) is one an API key could have too.
fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_NAME_BYTES && name.bytes().all(|byte| byte.is_ascii_alphanumeric() || b"._-@".contains(&byte))
}

/// The claims of an ID token that are checked or mapped; the rest stay in `other`.
#[derive(Deserialize)]
struct Claims {
    iss: String,
    sub: String,
    aud: Audience,
    #[serde(default)]
    azp: Option<String>,
    exp: f64,
    #[serde(default)]
    iat: Option<f64>,
    #[serde(default)]
    nbf: Option<f64>,
    #[serde(default)]
    nonce: Option<String>,
    #[serde(default)]
    email: Option<String>,
    #[serde(default)]
    preferred_username: Option<String>,
    #[serde(flatten)]
    other: serde_json::Map<String, serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Audience {
    One(String),
    Many(Vec<String>),
}

impl Oidc {
    /// The relying party of `config`, sealing pending logins under `key` (replicas need the same
    /// key). Checks the configuration; reaches the provider only when first needed.
    pub fn new(mut config: OidcConfig, key: &TokenKey) -> Result<Oidc, OidcError> {
        if config.client_id.is_empty() {
            return Err(OidcError::Config("a client id is required".to_owned()));
        }
        if config.client_secret.is_empty() {
            return Err(OidcError::Config("a client secret is required".to_owned()));
        }
        checked_url("redirect URI", &config.redirect_uri)?;
        if !valid_name(&config.default_tenant) {
            return Err(OidcError::Config(format!("the default tenant {:?} is not 1 to {MAX_NAME_BYTES} letters, digits, '.', '_', '-' and '@'", config.default_tenant)));
        }
        if !config.scopes.iter().any(|scope| scope == "openid") {
            config.scopes.insert(0, "openid".to_owned());
        }
        let provider = Provider::new(&config.issuer)?;
        Ok(Oidc { config, provider, cipher: TokenCipher::new(key) })
    }

    pub fn config(&self) -> &OidcConfig {
        &self.config
    }

    /// Fetches the provider's discovery document now (at start-up), so a mistake shows early.
    pub async fn discover(&self) -> Result<(), OidcError> {
        self.provider.metadata().await.map(|_| ())
    }

    /// Begins a login that returns to `return_to` (checked by [`safe_return_to`]).
    pub async fn begin(&self, return_to: Option<&str>) -> Result<LoginStart, OidcError> {
        let metadata = self.provider.metadata().await?;
        let (state, nonce, verifier) = (random_token()?, random_token()?, random_token()?);
        let pending = Pending { verifier, nonce, return_to: safe_return_to(return_to), expires_at: now() + LOGIN_TIMEOUT.as_secs() };
        let sealed = self.cipher.seal_json(&pending, &pending_context(&state)).map_err(|error| OidcError::Internal(error.to_string()))?;
        let challenge = URL_SAFE_NO_PAD.encode(ring::digest::digest(&ring::digest::SHA256, pending.verifier.as_bytes()));
        let mut url = checked_url("authorization endpoint", &metadata.authorization_endpoint).map_err(|error| OidcError::Unavailable(error.to_string()))?;
        url.query_pairs_mut()
            .append_pair("response_type", "code")
            .append_pair("client_id", &self.config.client_id)
            .append_pair("redirect_uri", &self.config.redirect_uri)
            .append_pair("scope", &self.config.scopes.join(" "))
            .append_pair("state", &state)
            .append_pair("nonce", &pending.nonce)
            .append_pair("code_challenge", &challenge)
            .append_pair("code_challenge_method", "S256");
        Ok(LoginStart { authorize_url: url.into(), state, pending: sealed })
    }

    /// Finishes the login the callback answers, with the pending login the browser kept for its
    /// `state` (`None` when it has none).
    pub async fn finish(&self, callback: Callback, pending: Option<&str>) -> Result<Login, OidcError> {
        let Some(state) = callback.state.filter(|state| !state.is_empty()) else {
            return Err(OidcError::UnknownLogin("the callback carries no state".to_owned()));
        };
        if let Some(issuer) = callback.issuer.as_deref()
            && issuer != self.config.issuer
        {
            return Err(OidcError::WrongIssuer(format!("the callback names the issuer {:?}, not ours", clean(issuer))));
        }
        if let Some(error) = callback.error {
            return Err(OidcError::Denied { error: clean(&error), description: callback.error_description.as_deref().map(clean) });
        }
        let Some(pending) = pending else {
            return Err(OidcError::UnknownLogin(
                "no login is pending in this browser for this state (it expired, was finished already, or began in another browser)".to_owned(),
            ));
        };
        let pending: Pending = self
            .cipher
            .open_json(pending, &pending_context(&state))
            .map_err(|_| OidcError::UnknownLogin("the pending login does not belong to this state".to_owned()))?;
        if pending.expires_at < now() {
            return Err(OidcError::UnknownLogin(format!("the login took longer than {} minutes; sign in again", LOGIN_TIMEOUT.as_secs() / 60)));
        }
        let Some(code) = callback.code.filter(|code| !code.is_empty()) else {
            return Err(OidcError::Exchange("the callback carries neither a code nor an error".to_owned()));
        };
        if callback.issuer.is_none() && self.provider.metadata().await?.authorization_response_iss_parameter_supported {
            return Err(OidcError::WrongIssuer("the callback names no issuer, though the provider sends one (RFC 9207)".to_owned()));
        }
        let id_token = self
            .provider
            .exchange(&self.config.client_id, &self.config.client_secret, &self.config.redirect_uri, &code, &pending.verifier)
            .await?;
        let identity = self.verify(&id_token, Some(&pending.nonce)).await?;
        Ok(Login { id_token, identity, return_to: pending.return_to })
    }

    /// Who a request's ID token (cookie or bearer) stands for.
    pub async fn authenticate(&self, id_token: &str) -> Result<Identity, OidcError> {
        self.verify(id_token, None).await
    }

    /// Verifies an ID token: its signature by a key of the provider, `iss`, `aud` (and `azp`),
    /// `exp`, `iat` and `nbf` within the leeway, and `nonce` when one is expected.
    async fn verify(&self, token: &str, nonce: Option<&str>) -> Result<Identity, OidcError> {
        let invalid = |reason: String| OidcError::InvalidToken(reason);
        let jws = jwt::Jws::parse(token)?;
        let alg = jws.header.alg.as_str();
        if !jwt::supported(alg) {
            return Err(invalid(format!("its algorithm {:?} is not accepted", clean(alg))));
        }
        let keys = self.provider.keys_for(alg, jws.header.kid.as_deref()).await?;
        if keys.is_empty() {
            return Err(invalid("no signing key of the identity provider fits it".to_owned()));
        }
        if !keys.iter().any(|key| key.verifies(alg, jws.signing_input.as_bytes(), &jws.signature)) {
            return Err(invalid("its signature is not the identity provider's".to_owned()));
        }
        let claims: Claims = serde_json::from_slice(&jws.payload).map_err(|_| invalid("its claims lack iss, sub, aud or exp".to_owned()))?;
        self.check_claims(&claims, nonce, now())?;
        self.identity(claims)
    }

    /// Checks a signed token's claims at `now` (seconds since the Unix epoch): `iss`, `aud` (and
    /// `azp`), `exp`, `iat` and `nbf` within the leeway, and `nonce` when one is expected.
    fn check_claims(&self, claims: &Claims, nonce: Option<&str>, now: u64) -> Result<(), OidcError> {
        let invalid = |reason: String| OidcError::InvalidToken(reason);
        if claims.iss != self.config.issuer {
            return Err(invalid(format!("it was issued by {:?}, not the configured issuer", clean(&claims.iss))));
        }
        let audience = match &claims.aud {
            Audience::One(one) => vec![one.as_str()],
            Audience::Many(many) => many.iter().map(String::as_str).collect(),
        };
        if !audience.contains(&self.config.client_id.as_str()) {
            return Err(invalid("it is meant for another client (aud)".to_owned()));
        }
        if (audience.len() > 1 || claims.azp.is_some()) && claims.azp.as_deref() != Some(self.config.client_id.as_str()) {
            return Err(invalid("it was issued to another client (azp)".to_owned()));
        }
        let now = now as f64;
        let leeway = CLOCK_LEEWAY_SECS as f64;
        if !(claims.exp.is_finite() && claims.exp + leeway > now) {
            return Err(invalid("it has expired".to_owned()));
        }
        if claims.exp > now + (MAX_TOKEN_LIFETIME_SECS + CLOCK_LEEWAY_SECS) as f64 {
            return Err(invalid(format!("it expires more than {} hours from now (exp)", MAX_TOKEN_LIFETIME_SECS / 3600)));
        }
        if claims.iat.is_some_and(|iat| !iat.is_finite() || iat > now + leeway) || claims.nbf.is_some_and(|nbf| !nbf.is_finite() || nbf > now + leeway) {
            return Err(invalid("it is not valid yet (iat or nbf in the future)".to_owned()));
        }
        if let Some(expected) = nonce
            && claims.nonce.as_deref() != Some(expected)
        {
            return Err(invalid("its nonce is not the login's".to_owned()));
        }
        Ok(())
    }

    /// The caller a verified token's claims stand for.
    fn identity(&self, claims: Claims) -> Result<Identity, OidcError> {
        let invalid = |reason: String| OidcError::InvalidToken(reason);
        if claims.sub.is_empty() || claims.sub.len() > MAX_SUB_BYTES || claims.sub.chars().any(char::is_control) {
            return Err(invalid("its sub is empty, too long or holds control characters".to_owned()));
        }
        let tenant = match self.config.tenant_claim.as_deref().and_then(|name| claims.other.get(name)) {
            None | Some(serde_json::Value::Null) => self.config.default_tenant.clone(),
            Some(serde_json::Value::String(tenant)) if valid_name(tenant) => tenant.clone(),
            Some(_) => {
                return Err(invalid(format!(
                    "its tenant claim is not a tenant name (1 to {MAX_NAME_BYTES} letters, digits, '.', '_', '-' and '@')"
                )));
            }
        };
        let holds = |claim: &Option<(String, String)>| {
            claim.as_ref().is_some_and(|(name, wanted)| match claims.other.get(name) {
                Some(serde_json::Value::String(value)) => value == wanted,
                Some(serde_json::Value::Array(values)) => values.iter().any(|value| value.as_str() == Some(wanted)),
                _ => false,
            })
        };
        let role = if holds(&self.config.operator_claim) || self.config.operator_subjects.contains(&claims.sub) {
            Role::Operator
        } else if holds(&self.config.admin_claim) || self.config.admin_subjects.contains(&claims.sub) {
            Role::Admin
        } else {
            Role::Member
        };
        let email = claims.email.clone().or(claims.preferred_username.clone()).map(|text| clean(&text)).unwrap_or_else(|| claims.sub.clone());
        let caller = Caller {
            subject: Subject { subject_id: format!("{tenant}:{}", claims.sub), subject_type: "user".to_owned(), subject_slug: claims.sub.clone() },
            tenant,
            role,
            key_id: None,
        };
        Ok(Identity { caller, email, expires_at: claims.exp.max(0.0) as u64 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oidc(tenant_claim: Option<&str>) -> Oidc {
        let config = OidcConfig {
            issuer: "http://127.0.0.1:1".into(),
            client_id: "teamster".into(),
            client_secret: "s3cret".into(),
            redirect_uri: "http://127.0.0.1:2/api/v1/auth/callback".into(),
            scopes: vec!["email".into()],
            tenant_claim: tenant_claim.map(str::to_owned),
            default_tenant: "default".into(),
            admin_subjects: vec!["root".into()],
            admin_claim: Some(("groups".into(), "admins".into())),
            operator_subjects: vec!["ops".into()],
            operator_claim: Some(("groups".into(), "operators".into())),
        };
        Oidc::new(config, &TokenKey::generate().unwrap()).unwrap()
    }

    fn claims(value: serde_json::Value) -> Claims {
        let mut base = serde_json::json!({"iss": "http://127.0.0.1:1", "aud": "teamster", "exp": 4e9});
        base.as_object_mut().unwrap().extend(value.as_object().unwrap().clone());
        serde_json::from_value(base).unwrap()
    }

    #[test]
    fn return_to_is_kept_only_when_it_is_a_same_origin_path() {
        for good in ["/", "/#/chat/c1", "/t1/?x=1", "/a/b"] {
            assert_eq!(safe_return_to(Some(good)).as_deref(), Some(good));
        }
        for bad in ["//evil.example", "/\\evil.example", "https://evil.example/", "evil", "", "/a b", "/a\nb", "/a\\b"] {
            assert_eq!(safe_return_to(Some(bad)), None, "{bad:?}");
        }
        assert_eq!(safe_return_to(None), None);
    }

    #[test]
    fn claims_map_to_callers_by_tenant_and_role() {
        let relying_party = oidc(Some("tenant"));
        let plain = relying_party.identity(claims(serde_json::json!({"sub": "u1", "email": "ann@example.com"}))).unwrap();
        assert_eq!((plain.caller.subject.subject_id.as_str(), plain.caller.subject.subject_slug.as_str()), ("default:u1", "u1"));
        assert_eq!((plain.caller.tenant.as_str(), plain.caller.role, plain.email.as_str()), ("default", Role::Member, "ann@example.com"));
        let tenant = relying_party.identity(claims(serde_json::json!({"sub": "u1", "tenant": "acme"}))).unwrap();
        assert_eq!((tenant.caller.subject.subject_id.as_str(), tenant.email.as_str()), ("acme:u1", "u1"));
        assert!(relying_party.identity(claims(serde_json::json!({"sub": "u1", "tenant": "a:b"}))).is_err());
        assert!(relying_party.identity(claims(serde_json::json!({"sub": "u1", "tenant": 7}))).is_err());
        assert_eq!(relying_party.identity(claims(serde_json::json!({"sub": "root"}))).unwrap().caller.role, Role::Admin);
        let grouped = relying_party.identity(claims(serde_json::json!({"sub": "u2", "groups": ["x", "admins"]}))).unwrap();
        assert_eq!(grouped.caller.role, Role::Admin);
        assert_eq!(relying_party.identity(claims(serde_json::json!({"sub": "u2", "groups": "staff"}))).unwrap().caller.role, Role::Member);
        // The operator is its own mapping; a tenant admin group never makes one.
        assert_eq!(relying_party.identity(claims(serde_json::json!({"sub": "ops"}))).unwrap().caller.role, Role::Operator);
        let operator = relying_party.identity(claims(serde_json::json!({"sub": "u3", "groups": ["admins", "operators"]}))).unwrap();
        assert_eq!(operator.caller.role, Role::Operator);
        assert!(relying_party.identity(claims(serde_json::json!({"sub": ""}))).is_err());
        // Without a tenant claim configured, a token's `tenant` is ignored.
        assert_eq!(oidc(None).identity(claims(serde_json::json!({"sub": "u1", "tenant": "acme"}))).unwrap().caller.tenant, "default");
    }

    #[test]
    fn claims_are_checked_for_issuer_audience_time_and_nonce() {
        let relying_party = oidc(None);
        let at = 1_000_000;
        let check = |extra: serde_json::Value, nonce: Option<&str>| {
            let base = serde_json::json!({"sub": "u1", "exp": at + 300, "iat": at});
            let mut value = base.as_object().unwrap().clone();
            value.extend(extra.as_object().unwrap().clone());
            relying_party.check_claims(&claims(serde_json::Value::Object(value)), nonce, at)
        };
        assert!(check(serde_json::json!({}), None).is_ok());
        assert!(check(serde_json::json!({"nonce": "n1"}), Some("n1")).is_ok());
        // Within the leeway a minute either way.
        assert!(check(serde_json::json!({"exp": at - 30, "iat": at + 30}), None).is_ok());
        assert!(check(serde_json::json!({"exp": at + 24 * 3600}), None).is_ok(), "a day is a lifetime some providers give");
        let refused = [
            (serde_json::json!({"iss": "http://127.0.0.1:9"}), None),
            (serde_json::json!({"aud": "other"}), None),
            (serde_json::json!({"aud": ["other", "teamster"]}), None),
            (serde_json::json!({"aud": ["other", "teamster"], "azp": "other"}), None),
            (serde_json::json!({"azp": "other"}), None),
            (serde_json::json!({"exp": at - 61}), None),
            // Absurd lifetimes: a day and a bit past the leeway, years, and beyond what u64 holds.
            (serde_json::json!({"exp": at + 24 * 3600 + 61}), None),
            (serde_json::json!({"exp": at + 10 * 365 * 24 * 3600}), None),
            (serde_json::json!({"exp": 1e30}), None),
            (serde_json::json!({"iat": at + 61}), None),
            (serde_json::json!({"nbf": at + 61}), None),
            (serde_json::json!({}), Some("n1")),
            (serde_json::json!({"nonce": "n2"}), Some("n1")),
        ];
        for (extra, nonce) in refused {
            assert!(matches!(check(extra.clone(), nonce), Err(OidcError::InvalidToken(_))), "{extra} {nonce:?}");
        }
        assert!(check(serde_json::json!({"aud": ["other", "teamster"], "azp": "teamster"}), None).is_ok());
    }

    #[tokio::test]
    async fn a_pending_login_opens_only_for_its_state() {
        let relying_party = oidc(None);
        let pending = Pending { verifier: "v".into(), nonce: "n".into(), return_to: None, expires_at: now() + 60 };
        let sealed = relying_party.cipher.seal_json(&pending, &pending_context("state-1")).unwrap();
        let callback = |state: &str| Callback { state: Some(state.into()), code: None, ..Callback::default() };
        // The right state opens it (and then wants a code); another state does not.
        assert!(matches!(relying_party.finish(callback("state-1"), Some(&sealed)).await, Err(OidcError::Exchange(_))));
        assert!(matches!(relying_party.finish(callback("state-2"), Some(&sealed)).await, Err(OidcError::UnknownLogin(_))));
        assert!(matches!(relying_party.finish(callback("state-1"), None).await, Err(OidcError::UnknownLogin(_))));
        let expired = Pending { expires_at: now() - 1, ..pending };
        let sealed = relying_party.cipher.seal_json(&expired, &pending_context("state-1")).unwrap();
        assert!(matches!(relying_party.finish(callback("state-1"), Some(&sealed)).await, Err(OidcError::UnknownLogin(_))));
        let mixed_up = Callback { issuer: Some("https://evil.example".into()), ..callback("state-1") };
        assert_eq!(relying_party.finish(mixed_up, Some(&sealed)).await.err().unwrap().code(), "invalid_issuer");
        let denied = Callback { error: Some("access_denied".into()), error_description: Some("no\u{7}".into()), ..callback("state-1") };
        let error = relying_party.finish(denied, Some(&sealed)).await.err().unwrap();
        assert_eq!((error.code(), error.to_string()), ("access_denied".to_owned(), "the identity provider refused the login: access_denied (no)".to_owned()));
    }
}
