//! The OAuth client of one MCP server: dynamic client registration ([`register`]) and the
//! authorization code flow with PKCE and refresh ([`OAuthClient`]).

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use reqwest::header::HeaderValue;
use serde::{Deserialize, Serialize};
use url::Url;

use super::OAuthError;
use super::discovery::Discovery;
use super::fetch::{self, checked_url, decode};
use super::pkce::{code_challenge, random_token};
use super::tokens::{TokenSet, unix_seconds};

/// How a client authenticates at the token endpoint (RFC 7591 `token_endpoint_auth_method`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TokenEndpointAuth {
    /// A public client: only `client_id`, no secret (PKCE protects the code).
    #[serde(rename = "none")]
    Public,
    /// The secret in an HTTP Basic `Authorization` header.
    #[serde(rename = "client_secret_basic")]
    ClientSecretBasic,
    /// The secret in the form body.
    #[serde(rename = "client_secret_post")]
    ClientSecretPost,
}

impl TokenEndpointAuth {
    fn wire_name(self) -> &'static str {
        match self {
            TokenEndpointAuth::Public => "none",
            TokenEndpointAuth::ClientSecretBasic => "client_secret_basic",
            TokenEndpointAuth::ClientSecretPost => "client_secret_post",
        }
    }

    fn from_wire_name(name: &str) -> Option<TokenEndpointAuth> {
        [TokenEndpointAuth::Public, TokenEndpointAuth::ClientSecretBasic, TokenEndpointAuth::ClientSecretPost]
            .into_iter()
            .find(|method| method.wire_name() == name)
    }
}

/// A client registered with an authorization server, configured or from [`register`].
/// Serializable for storage; seal it, since it may hold a secret.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientCredentials {
    /// The client's id at the authorization server.
    pub client_id: String,
    /// The secret of a confidential client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    /// How the token endpoint authenticates the client; `None` picks from the server's
    /// metadata (Basic, else the form body, when there is a secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_method: Option<TokenEndpointAuth>,
    /// When the secret expires, after which the client must register again.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "unix_seconds")]
    pub client_secret_expires_at: Option<SystemTime>,
}

impl ClientCredentials {
    /// A configured client, with a secret for a confidential one.
    pub fn new(client_id: impl Into<String>, client_secret: Option<String>) -> ClientCredentials {
        ClientCredentials {
            client_id: client_id.into(),
            client_secret,
            auth_method: None,
            client_secret_expires_at: None,
        }
    }

    /// Whether the secret has expired at `now`.
    pub fn is_expired(&self, now: SystemTime) -> bool {
        self.client_secret_expires_at.is_some_and(|expires_at| expires_at <= now)
    }
}

impl fmt::Debug for ClientCredentials {
    /// The secret is a credential, so only whether it is there is shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientCredentials")
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret.as_ref().map(|_| "<redacted>"))
            .field("auth_method", &self.auth_method)
            .field("client_secret_expires_at", &self.client_secret_expires_at)
            .finish()
    }
}

/// Registers a client (RFC 7591) at the discovered authorization server, named `client_name`
/// and allowed to be redirected to `redirect_uri`, for the authorization code and refresh
/// token grants. It asks to be a confidential client when the server accepts client secrets.
pub async fn register(
    discovery: &Discovery,
    client_name: &str,
    redirect_uri: &str,
) -> Result<ClientCredentials, OAuthError> {
    let metadata = &discovery.authorization_server;
    let endpoint = metadata.registration_endpoint.as_deref().ok_or(OAuthError::RegistrationUnsupported)?;
    let endpoint = checked_url(endpoint)?;
    let method = preferred_method(metadata.token_endpoint_auth_methods_supported.as_deref(), true);
    let mut body = serde_json::json!({
        "client_name": client_name,
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": method.wire_name(),
    });
    if let Some(scope) = &discovery.scope {
        body["scope"] = serde_json::Value::from(scope.as_str());
    }
    let answer = fetch::post_json(&endpoint, &body).await?;
    if !answer.status.is_success() {
        return Err(fetch::failure("registration", &answer));
    }

    #[derive(Deserialize)]
    struct RegistrationResponse {
        client_id: String,
        #[serde(default)]
        client_secret: Option<String>,
        #[serde(default)]
        client_secret_expires_at: Option<u64>,
        #[serde(default)]
        token_endpoint_auth_method: Option<String>,
    }
    let response: RegistrationResponse = decode(&answer, false)?;
    let invalid =
        |reason: &str| OAuthError::InvalidResponse { from: answer.url.clone(), reason: reason.to_owned() };
    if response.client_id.is_empty() {
        return Err(invalid("the client id is empty"));
    }
    let client_secret = response.client_secret.filter(|secret| !secret.is_empty());
    let auth_method = match response.token_endpoint_auth_method.as_deref() {
        Some(name) => TokenEndpointAuth::from_wire_name(name).ok_or_else(|| {
            invalid("the client was registered for an unsupported token endpoint auth method")
        })?,
        None if client_secret.is_none() => TokenEndpointAuth::Public,
        None => method,
    };
    if auth_method != TokenEndpointAuth::Public && client_secret.is_none() {
        return Err(invalid("the client needs a secret but none was issued"));
    }
    Ok(ClientCredentials {
        client_id: response.client_id,
        client_secret,
        auth_method: Some(auth_method),
        // Zero means the secret never expires (RFC 7591 section 3.2.1).
        client_secret_expires_at: response
            .client_secret_expires_at
            .filter(|seconds| *seconds > 0)
            .and_then(|seconds| UNIX_EPOCH.checked_add(std::time::Duration::from_secs(seconds))),
    })
}

/// The method to use given the server's supported list (RFC 8414's default when absent):
/// Basic, then the form body, then none; `none` only for a client without a secret.
fn preferred_method(supported: Option<&[String]>, has_secret: bool) -> TokenEndpointAuth {
    if !has_secret {
        return TokenEndpointAuth::Public;
    }
    let Some(supported) = supported else {
        return TokenEndpointAuth::ClientSecretBasic;
    };
    [TokenEndpointAuth::ClientSecretBasic, TokenEndpointAuth::ClientSecretPost, TokenEndpointAuth::Public]
        .into_iter()
        .find(|method| supported.iter().any(|name| name == method.wire_name()))
        .unwrap_or(TokenEndpointAuth::ClientSecretBasic)
}

/// The start of one authorization: the URL to send the user to, and what the callback needs.
#[derive(Clone, PartialEq, Eq)]
pub struct AuthorizationRequest {
    /// The authorization endpoint with the request's parameters.
    pub authorize_url: String,
    /// The unguessable `state` the callback comes back with, which finds this request.
    pub state: String,
    /// The PKCE code verifier [`OAuthClient::finish`] needs; keep it server-side.
    pub code_verifier: String,
}

impl fmt::Debug for AuthorizationRequest {
    /// The verifier is a secret, so it is left out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthorizationRequest")
            .field("authorize_url", &self.authorize_url)
            .field("state", &self.state)
            .field("code_verifier", &"<redacted>")
            .finish()
    }
}

/// What the authorization server sent back to the callback (RFC 6749 section 4.1.2).
#[derive(Clone, PartialEq, Eq)]
pub struct AuthorizationResponse {
    pub code: String,
    pub state: String,
    /// The issuer, when the server sends it (RFC 9207).
    pub issuer: Option<String>,
}

impl AuthorizationResponse {
    /// Reads the query string of the callback request (without the `?`). An `error` (e.g. the
    /// user denied access) is [`OAuthError::AuthorizationFailed`] with the `state` it answers.
    pub fn from_query(query: &str) -> Result<AuthorizationResponse, OAuthError> {
        let (mut code, mut state, mut issuer, mut error, mut description) = (None, None, None, None, None);
        for (name, value) in url::form_urlencoded::parse(query.as_bytes()) {
            let slot = match name.as_ref() {
                "code" => &mut code,
                "state" => &mut state,
                "iss" => &mut issuer,
                "error" => &mut error,
                "error_description" => &mut description,
                _ => continue,
            };
            slot.get_or_insert(value.into_owned());
        }
        if let Some(error) = error {
            return Err(OAuthError::AuthorizationFailed {
                error: fetch::clean(&error),
                description: description.as_deref().map(fetch::clean),
                state,
            });
        }
        let invalid = |reason: &str| OAuthError::InvalidResponse {
            from: "the authorization response".to_owned(),
            reason: reason.to_owned(),
        };
        let code = code.filter(|code| !code.is_empty()).ok_or_else(|| invalid("no code"))?;
        let state = state.filter(|state| !state.is_empty()).ok_or_else(|| invalid("no state"))?;
        Ok(AuthorizationResponse { code, state, issuer })
    }
}

impl fmt::Debug for AuthorizationResponse {
    /// The code is a credential until it is used, so it is left out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthorizationResponse")
            .field("code", &"<redacted>")
            .field("state", &self.state)
            .field("issuer", &self.issuer)
            .finish()
    }
}

/// The OAuth client of one MCP server for one registered client: starts authorizations,
/// exchanges codes and refreshes tokens. Cheap to clone; holds no user's tokens.
#[derive(Clone)]
pub struct OAuthClient {
    discovery: Discovery,
    credentials: ClientCredentials,
    auth_method: TokenEndpointAuth,
    redirect_uri: String,
    authorization_endpoint: Url,
    token_endpoint: Url,
}

impl OAuthClient {
    /// A client for the discovered server, with credentials configured or from [`register`],
    /// whose callback is `redirect_uri` (as registered).
    pub fn new(
        discovery: Discovery,
        credentials: ClientCredentials,
        redirect_uri: impl Into<String>,
    ) -> Result<OAuthClient, OAuthError> {
        let metadata = &discovery.authorization_server;
        let authorization_endpoint = checked_url(&metadata.authorization_endpoint)?;
        let token_endpoint = checked_url(&metadata.token_endpoint)?;
        let has_secret = credentials.client_secret.is_some();
        let auth_method = match credentials.auth_method {
            _ if !has_secret => TokenEndpointAuth::Public,
            Some(method) => method,
            None => preferred_method(metadata.token_endpoint_auth_methods_supported.as_deref(), true),
        };
        Ok(OAuthClient {
            discovery,
            credentials,
            auth_method,
            redirect_uri: redirect_uri.into(),
            authorization_endpoint,
            token_endpoint,
        })
    }

    /// What discovery found for this server.
    pub fn discovery(&self) -> &Discovery {
        &self.discovery
    }

    /// The client's credentials.
    pub fn credentials(&self) -> &ClientCredentials {
        &self.credentials
    }

    /// Starts an authorization: a fresh `state` and PKCE verifier, and the authorization URL
    /// with `response_type=code`, the client, the redirect URI, the `S256` challenge, the
    /// state, the scope (if known) and the resource (RFC 8707).
    pub fn begin(&self) -> Result<AuthorizationRequest, OAuthError> {
        let state = random_token()?;
        let code_verifier = random_token()?;
        let mut url = self.authorization_endpoint.clone();
        {
            let mut query = url.query_pairs_mut();
            query
                .append_pair("response_type", "code")
                .append_pair("client_id", &self.credentials.client_id)
                .append_pair("redirect_uri", &self.redirect_uri)
                .append_pair("code_challenge", &code_challenge(&code_verifier))
                .append_pair("code_challenge_method", "S256")
                .append_pair("state", &state);
            if let Some(scope) = &self.discovery.scope {
                query.append_pair("scope", scope);
            }
            query.append_pair("resource", &self.discovery.resource);
        }
        Ok(AuthorizationRequest { authorize_url: url.into(), state, code_verifier })
    }

    /// Exchanges an authorization code for tokens, proving the request with its verifier.
    pub async fn finish(&self, code: &str, code_verifier: &str) -> Result<TokenSet, OAuthError> {
        let form = [
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", self.redirect_uri.as_str()),
            ("code_verifier", code_verifier),
        ];
        self.token_request(&form, None).await
    }

    /// Checks the issuer of an authorization response (RFC 9207: it must be this server's when
    /// sent, and must be sent when the server says it does), then [`finish`](Self::finish)es.
    pub async fn finish_response(
        &self,
        response: &AuthorizationResponse,
        code_verifier: &str,
    ) -> Result<TokenSet, OAuthError> {
        let metadata = &self.discovery.authorization_server;
        let expected = metadata.issuer.trim_end_matches('/');
        let issuer_required = metadata.authorization_response_iss_parameter_supported == Some(true);
        match response.issuer.as_deref() {
            Some(issuer) if issuer.trim_end_matches('/') != expected => {
                return Err(OAuthError::InvalidResponse {
                    from: "the authorization response".to_owned(),
                    reason: format!("it comes from issuer {:?}, not {expected:?}", fetch::clean(issuer)),
                });
            }
            None if issuer_required => {
                return Err(OAuthError::InvalidResponse {
                    from: "the authorization response".to_owned(),
                    reason: "it names no issuer".to_owned(),
                });
            }
            _ => {}
        }
        self.finish(&response.code, code_verifier).await
    }

    /// Renews tokens with their refresh token. The new set keeps the old refresh token and
    /// scope when the server sends none.
    pub async fn refresh(&self, tokens: &TokenSet) -> Result<TokenSet, OAuthError> {
        let refresh_token = tokens.refresh_token.as_deref().ok_or(OAuthError::Expired)?;
        let form = [("grant_type", "refresh_token"), ("refresh_token", refresh_token)];
        self.token_request(&form, Some(tokens)).await
    }

    /// Sends a token request with the client's authentication and the resource.
    async fn token_request(
        &self,
        grant: &[(&str, &str)],
        previous: Option<&TokenSet>,
    ) -> Result<TokenSet, OAuthError> {
        let mut form = grant.to_vec();
        form.push(("client_id", &self.credentials.client_id));
        form.push(("resource", &self.discovery.resource));
        let secret = self.credentials.client_secret.as_deref().unwrap_or_default();
        let basic = match self.auth_method {
            TokenEndpointAuth::Public => None,
            TokenEndpointAuth::ClientSecretPost => {
                form.push(("client_secret", secret));
                None
            }
            TokenEndpointAuth::ClientSecretBasic => {
                Some(basic_credentials(&self.credentials.client_id, secret)?)
            }
        };
        let now = SystemTime::now();
        let answer = fetch::post_form(&self.token_endpoint, &form, basic).await?;
        if !answer.status.is_success() {
            return Err(fetch::failure("token", &answer));
        }
        TokenSet::from_answer(&answer, now, previous)
    }
}

impl fmt::Debug for OAuthClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OAuthClient")
            .field("issuer", &self.discovery.authorization_server.issuer)
            .field("resource", &self.discovery.resource)
            .field("client_id", &self.credentials.client_id)
            .field("auth_method", &self.auth_method)
            .finish()
    }
}

/// The HTTP Basic header of RFC 6749 section 2.3.1: id and secret form-encoded, then base64.
/// Spaces are sent as `%20`, which servers decoding with either convention read back.
fn basic_credentials(client_id: &str, client_secret: &str) -> Result<HeaderValue, OAuthError> {
    let encode = |text: &str| {
        url::form_urlencoded::byte_serialize(text.as_bytes()).collect::<String>().replace('+', "%20")
    };
    let credentials = format!("{}:{}", encode(client_id), encode(client_secret));
    let mut value =
        HeaderValue::from_str(&format!("Basic {}", STANDARD.encode(credentials))).map_err(|_| {
            OAuthError::InvalidResponse {
                from: "the client credentials".to_owned(),
                reason: "not a valid header".to_owned(),
            }
        })?;
    value.set_sensitive(true);
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oauth::discovery::AuthorizationServerMetadata;

    fn discovery() -> Discovery {
        Discovery {
            resource: "https://mcp.example.com/mcp".into(),
            resource_metadata: None,
            authorization_server: AuthorizationServerMetadata {
                issuer: "https://as.example.com".into(),
                authorization_endpoint: "https://as.example.com/authorize?tenant=1".into(),
                token_endpoint: "https://as.example.com/token".into(),
                registration_endpoint: None,
                scopes_supported: None,
                code_challenge_methods_supported: Some(vec!["S256".into()]),
                token_endpoint_auth_methods_supported: Some(vec!["client_secret_post".into()]),
                authorization_response_iss_parameter_supported: Some(true),
            },
            scope: Some("read write".into()),
        }
    }

    #[test]
    fn the_authorize_url_carries_every_parameter() {
        let client =
            OAuthClient::new(discovery(), ClientCredentials::new("client 1", None), "https://app.example/cb")
                .unwrap();
        let request = client.begin().unwrap();
        let url = Url::parse(&request.authorize_url).unwrap();
        let query: Vec<(String, String)> = url.query_pairs().into_owned().collect();
        let get = |name: &str| query.iter().find(|(key, _)| key == name).map(|(_, value)| value.as_str());
        assert_eq!(get("tenant"), Some("1"));
        assert_eq!(get("response_type"), Some("code"));
        assert_eq!(get("client_id"), Some("client 1"));
        assert_eq!(get("redirect_uri"), Some("https://app.example/cb"));
        assert_eq!(get("code_challenge"), Some(code_challenge(&request.code_verifier).as_str()));
        assert_eq!(get("code_challenge_method"), Some("S256"));
        assert_eq!(get("state"), Some(request.state.as_str()));
        assert_eq!(get("scope"), Some("read write"));
        assert_eq!(get("resource"), Some("https://mcp.example.com/mcp"));
        assert!(!format!("{request:?}").contains(&request.code_verifier));
        assert_ne!(client.begin().unwrap().state, request.state);
    }

    #[test]
    fn the_auth_method_follows_the_credentials_and_the_server() {
        let method = |credentials| {
            OAuthClient::new(discovery(), credentials, "https://app.example/cb").unwrap().auth_method
        };
        assert_eq!(method(ClientCredentials::new("c", None)), TokenEndpointAuth::Public);
        assert_eq!(
            method(ClientCredentials::new("c", Some("s".into()))),
            TokenEndpointAuth::ClientSecretPost
        );
        let basic = ClientCredentials {
            auth_method: Some(TokenEndpointAuth::ClientSecretBasic),
            ..ClientCredentials::new("c", Some("s".into()))
        };
        assert_eq!(method(basic), TokenEndpointAuth::ClientSecretBasic);
        assert_eq!(preferred_method(None, true), TokenEndpointAuth::ClientSecretBasic);
        assert_eq!(preferred_method(Some(&["none".into()]), true), TokenEndpointAuth::Public);
    }

    #[test]
    fn authorization_responses_are_read_from_the_query() {
        let response =
            AuthorizationResponse::from_query("code=abc%2Fd&state=s1&iss=https%3A%2F%2Fas.example.com")
                .unwrap();
        assert_eq!(response.code, "abc/d");
        assert_eq!(response.state, "s1");
        assert_eq!(response.issuer.as_deref(), Some("https://as.example.com"));
        assert!(!format!("{response:?}").contains("abc"));

        match AuthorizationResponse::from_query("error=access_denied&error_description=No+thanks&state=s2") {
            Err(OAuthError::AuthorizationFailed { error, description, state }) => {
                assert_eq!(
                    (error.as_str(), description.as_deref(), state.as_deref()),
                    ("access_denied", Some("No thanks"), Some("s2"))
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            AuthorizationResponse::from_query("state=s"),
            Err(OAuthError::InvalidResponse { .. })
        ));
        assert!(matches!(
            AuthorizationResponse::from_query("code=c"),
            Err(OAuthError::InvalidResponse { .. })
        ));
    }

    #[tokio::test]
    async fn a_response_from_another_issuer_is_refused_before_any_request() {
        let client =
            OAuthClient::new(discovery(), ClientCredentials::new("c", None), "https://app.example/cb")
                .unwrap();
        for query in ["code=c&state=s&iss=https%3A%2F%2Fevil.example.com", "code=c&state=s"] {
            let response = AuthorizationResponse::from_query(query).unwrap();
            let error = client.finish_response(&response, "verifier").await.unwrap_err();
            assert!(matches!(error, OAuthError::InvalidResponse { .. }), "{query}: {error:?}");
        }
    }

    #[test]
    fn basic_credentials_are_form_encoded_first() {
        let value = basic_credentials("id 1", "s:+/").unwrap();
        let encoded = value.to_str().unwrap().strip_prefix("Basic ").unwrap();
        assert_eq!(STANDARD.decode(encoded).unwrap(), b"id%201:s%3A%2B%2F");
        assert!(value.is_sensitive());
    }
}
