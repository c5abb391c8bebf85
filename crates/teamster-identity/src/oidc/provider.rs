//! The identity provider as this relying party sees it: its discovery document
//! (`/.well-known/openid-configuration`) and its signing keys (the JWK set), both fetched on first
//! need and kept; the keys are fetched again when a token names a key id they lack, at most once
//! every [`JWKS_REFETCH_INTERVAL`], so forged key ids cannot make us hammer the provider.

use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use reqwest::Url;
use serde::Deserialize;
use tokio::sync::Mutex;

use super::OidcError;
use super::jwt::{self, PublicKey};

/// The bound on one request to the provider, connection included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// The largest answer read from the provider.
const MAX_RESPONSE_BYTES: usize = 256 << 10;
/// The least time between two fetches of the JWK set for unknown key ids.
pub(crate) const JWKS_REFETCH_INTERVAL: Duration = Duration::from_secs(30);
/// The least time between two tries of a discovery that failed.
const DISCOVERY_RETRY_INTERVAL: Duration = Duration::from_secs(5);
/// The longest provider-supplied text kept in an error message, in characters.
const MAX_DETAIL_CHARS: usize = 300;

/// The parts of the discovery document used.
#[derive(Clone, Debug, Deserialize)]
pub(crate) struct Metadata {
    pub issuer: String,
    pub authorization_endpoint: String,
    pub token_endpoint: String,
    pub jwks_uri: String,
    #[serde(default)]
    pub code_challenge_methods_supported: Option<Vec<String>>,
    /// Whether authorization responses name the issuer (RFC 9207); they must then.
    #[serde(default)]
    pub authorization_response_iss_parameter_supported: bool,
}

/// The provider's answer at the token endpoint (only the ID token is used).
#[derive(Deserialize)]
struct TokenResponse {
    #[serde(default)]
    id_token: Option<String>,
}

/// An OAuth error body.
#[derive(Deserialize)]
struct ErrorBody {
    error: String,
    #[serde(default)]
    error_description: Option<String>,
}

/// What is known of the provider, behind one lock.
#[derive(Default)]
struct Known {
    metadata: Option<Metadata>,
    /// When discovery last failed: it is not tried again before [`DISCOVERY_RETRY_INTERVAL`].
    failed_at: Option<Instant>,
    keys: Vec<PublicKey>,
    keys_fetched_at: Option<Instant>,
}

/// The provider at one issuer.
pub(crate) struct Provider {
    issuer: String,
    http: reqwest::Client,
    known: Mutex<Known>,
}

/// `https`, or `http` to a loopback host (a provider on this machine, in tests and development).
pub(crate) fn checked_url(what: &str, text: &str) -> Result<Url, OidcError> {
    let invalid = |reason: &str| OidcError::Config(format!("the {what} {text:?} {reason}"));
    let url = Url::parse(text).map_err(|_| invalid("is not an absolute URL"))?;
    let Some(host) = url.host_str().filter(|host| !host.is_empty()) else { return Err(invalid("has no host")) };
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host.trim_start_matches('[').trim_end_matches(']').parse::<std::net::IpAddr>().is_ok_and(|address| address.is_loopback());
    match url.scheme() {
        "https" => {}
        "http" if loopback => {}
        _ => return Err(invalid("must be https (plain http only to a loopback host)")),
    }
    if !url.username().is_empty() || url.password().is_some() || url.fragment().is_some() {
        return Err(invalid("must have no credentials or fragment"));
    }
    Ok(url)
}

/// Provider text as it may appear in a message: no control characters, bounded.
pub(crate) fn clean(text: &str) -> String {
    text.chars().filter(|character| !character.is_control()).take(MAX_DETAIL_CHARS).collect()
}

impl Provider {
    pub fn new(issuer: &str) -> Result<Provider, OidcError> {
        checked_url("issuer", issuer)?;
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .connect_timeout(Duration::from_secs(5))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|error| OidcError::Config(format!("cannot build an HTTP client: {error}")))?;
        Ok(Provider { issuer: issuer.to_owned(), http, known: Mutex::new(Known::default()) })
    }

    /// The discovery document, fetched on first need and checked: its `issuer` is exactly the
    /// configured one, its endpoints are URLs under the URL policy, and it offers PKCE `S256`
    /// when it lists PKCE methods at all.
    pub async fn metadata(&self) -> Result<Metadata, OidcError> {
        let mut known = self.known.lock().await;
        if let Some(metadata) = &known.metadata {
            return Ok(metadata.clone());
        }
        if known.failed_at.is_some_and(|at| at.elapsed() < DISCOVERY_RETRY_INTERVAL) {
            return Err(OidcError::Unavailable("the identity provider's discovery failed moments ago; try again shortly".to_owned()));
        }
        match self.discover().await {
            Ok(metadata) => {
                known.metadata = Some(metadata.clone());
                known.failed_at = None;
                Ok(metadata)
            }
            Err(error) => {
                known.failed_at = Some(Instant::now());
                Err(error)
            }
        }
    }

    async fn discover(&self) -> Result<Metadata, OidcError> {
        let url = format!("{}/.well-known/openid-configuration", self.issuer.trim_end_matches('/'));
        let body = self.get(&url).await?;
        let metadata: Metadata = serde_json::from_slice(&body)
            .map_err(|error| OidcError::Unavailable(format!("the discovery document at {url} is not valid: {}", clean(&error.to_string()))))?;
        if metadata.issuer != self.issuer {
            return Err(OidcError::Unavailable(format!(
                "the discovery document names the issuer {:?}, not the configured {:?}",
                clean(&metadata.issuer),
                self.issuer
            )));
        }
        for (what, endpoint) in [
            ("authorization endpoint", &metadata.authorization_endpoint),
            ("token endpoint", &metadata.token_endpoint),
            ("JWK set URL", &metadata.jwks_uri),
        ] {
            checked_url(what, endpoint).map_err(|error| OidcError::Unavailable(error.to_string()))?;
        }
        if let Some(methods) = &metadata.code_challenge_methods_supported
            && !methods.iter().any(|method| method == "S256")
        {
            return Err(OidcError::Unavailable("the identity provider does not offer PKCE with S256".to_owned()));
        }
        Ok(metadata)
    }

    /// The keys that may have signed a token of `alg` naming `kid`: the known ones, or, when
    /// none fits, the keys fetched again (unless they were fetched moments ago).
    pub async fn keys_for(&self, alg: &str, kid: Option<&str>) -> Result<Vec<PublicKey>, OidcError> {
        let fitting = |keys: &[PublicKey]| -> Vec<PublicKey> {
            keys.iter().filter(|key| key.fits(alg) && (kid.is_none() || key.kid.as_deref() == kid)).cloned().collect()
        };
        let metadata = self.metadata().await?;
        let mut known = self.known.lock().await;
        let found = fitting(&known.keys);
        let recent = known.keys_fetched_at.is_some_and(|at| at.elapsed() < JWKS_REFETCH_INTERVAL);
        if !found.is_empty() || recent {
            return Ok(found);
        }
        known.keys_fetched_at = Some(Instant::now());
        let body = self.get(&metadata.jwks_uri).await?;
        known.keys = jwt::read_jwks(&body).map_err(|reason| OidcError::Unavailable(format!("the JWK set at {}: {reason}", metadata.jwks_uri)))?;
        tracing::info!(keys = known.keys.len(), "fetched the identity provider's signing keys");
        Ok(fitting(&known.keys))
    }

    /// Exchanges an authorization code for the provider's ID token (`client_secret_basic`).
    pub async fn exchange(&self, client_id: &str, client_secret: &str, redirect_uri: &str, code: &str, verifier: &str) -> Result<String, OidcError> {
        let metadata = self.metadata().await?;
        // RFC 6749 2.3.1: both parts are form-encoded before they are joined.
        let credentials = STANDARD.encode(format!("{}:{}", form_encode(client_id), form_encode(client_secret)));
        let form = [("grant_type", "authorization_code"), ("code", code), ("redirect_uri", redirect_uri), ("code_verifier", verifier)];
        let request = self
            .http
            .post(&metadata.token_endpoint)
            .header("authorization", format!("Basic {credentials}"))
            .header("accept", "application/json")
            .form(&form);
        let failed = |reason: String| OidcError::Exchange(reason);
        let response = request.send().await.map_err(|error| failed(format!("cannot reach the token endpoint: {}", without_url(&error))))?;
        let status = response.status();
        let body = read_bounded(response).await.map_err(failed)?;
        if !status.is_success() {
            return Err(failed(match serde_json::from_slice::<ErrorBody>(&body) {
                Ok(error) => format!(
                    "the token endpoint refused the code ({}): {}{}",
                    status.as_u16(),
                    clean(&error.error),
                    error.error_description.map(|text| format!(" ({})", clean(&text))).unwrap_or_default()
                ),
                Err(_) => format!("the token endpoint answered HTTP {}", status.as_u16()),
            }));
        }
        // The body holds tokens: a decoding error names no part of it.
        let tokens: TokenResponse = serde_json::from_slice(&body).map_err(|_| failed("the token endpoint's answer is not a token response".to_owned()))?;
        tokens.id_token.filter(|token| !token.is_empty()).ok_or_else(|| failed("the token endpoint's answer has no id_token (is the openid scope granted?)".to_owned()))
    }

    async fn get(&self, url: &str) -> Result<Vec<u8>, OidcError> {
        let unavailable = |reason: String| OidcError::Unavailable(format!("{url}: {reason}"));
        let response = self.http.get(url).header("accept", "application/json").send().await.map_err(|error| unavailable(without_url(&error)))?;
        let status = response.status();
        if !status.is_success() {
            return Err(unavailable(format!("answered HTTP {}", status.as_u16())));
        }
        read_bounded(response).await.map_err(unavailable)
    }
}

/// `text` percent-encoded for a form: unreserved characters as they are, every other byte `%XX`.
fn form_encode(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (byte as char).to_string(),
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

/// A response's body, at most [`MAX_RESPONSE_BYTES`].
async fn read_bounded(mut response: reqwest::Response) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|error| without_url(&error))? {
        if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
            return Err(format!("the answer is larger than {MAX_RESPONSE_BYTES} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A reqwest error and its causes, without the URL (which may carry a code).
fn without_url(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    if let Some(url) = error.url() {
        text = text.replace(url.as_str(), "the provider");
    }
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    clean(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_urls_are_https_or_loopback() {
        for good in ["https://id.example.com", "http://127.0.0.1:9000/realm", "http://localhost:8080", "http://[::1]:1"] {
            assert!(checked_url("issuer", good).is_ok(), "{good}");
        }
        assert_eq!(form_encode("a b:c%é"), "a%20b%3Ac%25%C3%A9");
        for bad in ["http://id.example.com", "ftp://id.example.com", "https://u:p@id.example.com", "https://id.example.com/#x", "id.example.com"] {
            assert!(checked_url("issuer", bad).is_err(), "{bad}");
        }
    }
}
