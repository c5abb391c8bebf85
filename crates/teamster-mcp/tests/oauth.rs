//! OAuth against a real OAuth-protected MCP server written with the official Python `mcp`
//! package (`tests/mcp_servers/oauth_server.py`): discovery, registration, the authorization
//! code flow with PKCE, tokens reaching the server, refresh, and the sealed storage format.
//!
//! The interpreter comes from `TEAMSTER_TEST_PYTHON`, as for `tests/mcp.rs`; without it these
//! tests fail. The browser is played by a reqwest client that does not follow redirects: the
//! server logs in the user named by `login_as` and redirects to the callback at once, so the
//! test reads `code` and `state` from the `Location` header.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use teamster_mcp::oauth::{
    AuthorizationResponse, Challenge, CipherError, ClientCredentials, KeyError, OAuthClient, OAuthError,
    OAuthTokenProvider, TokenCipher, TokenEndpointAuth, TokenKey, TokenSet, TokenStore, discover, register,
};
use teamster_mcp::{BearerTokenProvider, HttpTransport, McpConnection, McpError, McpServerConfig, Transport};
use teamster_tools::{ToolOutput, ToolSource};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Where the authorization server sends the browser back; never contacted.
const REDIRECT_URI: &str = "http://127.0.0.1:9/oauth/callback";

fn python() -> String {
    std::env::var("TEAMSTER_TEST_PYTHON").unwrap_or_else(|_| {
        panic!(
            "TEAMSTER_TEST_PYTHON is not set: these tests need a Python with the `mcp` package \
             (scripts/test sets it to .venv/bin/python after installing tests/conformance/requirements.txt)"
        )
    })
}

/// A running `oauth_server.py`, killed on drop.
struct OAuthServer {
    base: String,
    _process: Child,
}

impl OAuthServer {
    async fn start(args: &[&str]) -> OAuthServer {
        let script =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/mcp_servers/oauth_server.py");
        let mut process = Command::new(python())
            .arg(script)
            .args(["--port", "0"])
            .args(args)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start the OAuth test server");
        let stdout = process.stdout.take().expect("stdout is piped");
        let line = tokio::time::timeout(Duration::from_secs(30), BufReader::new(stdout).lines().next_line())
            .await
            .expect("the OAuth test server did not start within 30 s")
            .expect("read the server's stdout")
            .expect("the OAuth test server exited before listening");
        let port =
            line.strip_prefix("LISTENING ").unwrap_or_else(|| panic!("unexpected first line {line:?}"));
        OAuthServer { base: format!("http://127.0.0.1:{port}"), _process: process }
    }

    fn mcp_url(&self) -> String {
        format!("{}/mcp", self.base)
    }

    /// How many registrations and grants of each type the server has seen.
    async fn grants(&self, kind: &str) -> u64 {
        let grants: serde_json::Value = reqwest::get(format!("{}/test/grants", self.base))
            .await
            .expect("GET /test/grants")
            .json()
            .await
            .expect("grants are JSON");
        grants[kind].as_u64().unwrap_or_else(|| panic!("no {kind} in {grants}"))
    }

    fn config(&self, bearer_token: Option<Arc<dyn BearerTokenProvider>>) -> McpServerConfig {
        let http = HttpTransport { bearer_token, ..HttpTransport::new(self.mcp_url()) };
        McpServerConfig::new("srv-oauth", "oauth", Transport::StreamableHttp(http))
    }

    /// Discovers the server from its challenge and registers a client.
    async fn client(&self) -> OAuthClient {
        let challenge = unauthorized_challenge(self).await;
        let discovery = discover(&self.mcp_url(), challenge.as_deref()).await.expect("discover");
        let credentials = register(&discovery, "teamster tests", REDIRECT_URI).await.expect("register");
        OAuthClient::new(discovery, credentials, REDIRECT_URI).expect("client")
    }
}

/// Connects without a token and answers the 401's challenge.
async fn unauthorized_challenge(server: &OAuthServer) -> Option<String> {
    match McpConnection::connect(server.config(None)).await {
        Err(McpError::Unauthorized { www_authenticate }) => www_authenticate,
        Err(error) => panic!("expected Unauthorized, got {error:?}"),
        Ok(_) => panic!("connected without a token"),
    }
}

/// Plays the browser: opens the authorization URL as `user` (or as nobody) and answers the
/// authorization response the server redirects to, with the request it answers.
async fn visit(
    client: &OAuthClient,
    user: Option<&str>,
) -> (teamster_mcp::oauth::AuthorizationRequest, Result<AuthorizationResponse, OAuthError>) {
    let request = client.begin().expect("begin");
    let mut url = reqwest::Url::parse(&request.authorize_url).expect("the authorization URL parses");
    if let Some(user) = user {
        url.query_pairs_mut().append_pair("login_as", user);
    }
    let browser = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let answer = browser.get(url).send().await.expect("GET the authorization URL");
    assert_eq!(answer.status(), reqwest::StatusCode::FOUND, "{:?}", answer.text().await);
    let location =
        answer.headers()[reqwest::header::LOCATION].to_str().expect("an ASCII Location").to_owned();
    let (callback, query) = location.split_once('?').expect("the redirect has a query");
    assert_eq!(callback, REDIRECT_URI);
    (request, AuthorizationResponse::from_query(query))
}

/// The whole flow for one user: authorize and exchange the code.
async fn authorize(client: &OAuthClient, user: &str) -> TokenSet {
    let (request, response) = visit(client, Some(user)).await;
    let response = response.expect("an authorization code");
    assert_eq!(response.state, request.state);
    client.finish_response(&response, &request.code_verifier).await.expect("finish")
}

/// Tokens in memory, counting saves.
#[derive(Default)]
struct MemoryStore {
    tokens: Mutex<Option<TokenSet>>,
    saves: AtomicUsize,
}

impl MemoryStore {
    fn holding(tokens: TokenSet) -> Arc<MemoryStore> {
        Arc::new(MemoryStore { tokens: Mutex::new(Some(tokens)), saves: AtomicUsize::new(0) })
    }

    fn tokens(&self) -> TokenSet {
        self.tokens.lock().unwrap().clone().expect("tokens are stored")
    }
}

#[async_trait]
impl TokenStore for MemoryStore {
    async fn load(&self) -> Option<TokenSet> {
        self.tokens.lock().unwrap().clone()
    }

    async fn save(&self, tokens: &TokenSet) {
        *self.tokens.lock().unwrap() = Some(tokens.clone());
        self.saves.fetch_add(1, Ordering::SeqCst);
    }
}

/// Sleeps until `instant` has passed (by a margin).
async fn sleep_until(instant: SystemTime) {
    let wait = instant.duration_since(SystemTime::now()).unwrap_or_default();
    tokio::time::sleep(wait + Duration::from_millis(200)).await;
}

#[tokio::test]
async fn connecting_without_a_token_is_unauthorized_with_a_challenge_naming_the_metadata() {
    let server = OAuthServer::start(&[]).await;
    let header = unauthorized_challenge(&server).await.expect("a WWW-Authenticate challenge");
    let challenge = Challenge::parse(&header);
    assert_eq!(
        challenge.resource_metadata.as_deref(),
        Some(format!("{}/.well-known/oauth-protected-resource/mcp", server.base).as_str())
    );
    assert_eq!(challenge.error.as_deref(), Some("invalid_token"));
}

#[tokio::test]
async fn discovery_finds_the_endpoints_from_the_challenge_or_the_well_known_uri() {
    let server = OAuthServer::start(&[]).await;
    let challenge = unauthorized_challenge(&server).await;
    let from_challenge = discover(&server.mcp_url(), challenge.as_deref()).await.expect("discover");
    assert_eq!(from_challenge.resource, server.mcp_url());
    assert_eq!(from_challenge.scope.as_deref(), Some("mcp"));
    let metadata = &from_challenge.authorization_server;
    assert_eq!(metadata.issuer, server.base);
    assert_eq!(metadata.authorization_endpoint, format!("{}/authorize", server.base));
    assert_eq!(metadata.token_endpoint, format!("{}/token", server.base));
    assert_eq!(metadata.registration_endpoint, Some(format!("{}/register", server.base)));
    let resource_metadata = from_challenge.resource_metadata.as_ref().expect("resource metadata");
    assert_eq!(resource_metadata.authorization_servers, Some(vec![server.base.clone()]));

    let from_well_known = discover(&server.mcp_url(), None).await.expect("discover without a challenge");
    assert_eq!(from_well_known, from_challenge);
    // Discovery results are kept as JSON.
    let json = serde_json::to_string(&from_challenge).unwrap();
    assert_eq!(serde_json::from_str::<teamster_mcp::oauth::Discovery>(&json).unwrap(), from_challenge);
}

#[tokio::test]
async fn dynamic_registration_registers_a_confidential_client() {
    let server = OAuthServer::start(&[]).await;
    let discovery = discover(&server.mcp_url(), None).await.expect("discover");
    let credentials = register(&discovery, "teamster tests", REDIRECT_URI).await.expect("register");
    assert!(!credentials.client_id.is_empty());
    assert!(credentials.client_secret.as_ref().is_some_and(|secret| !secret.is_empty()));
    // The server offers client_secret_post and client_secret_basic; Basic is preferred.
    assert_eq!(credentials.auth_method, Some(TokenEndpointAuth::ClientSecretBasic));
    assert_eq!(credentials.client_secret_expires_at, None);
    assert!(!format!("{credentials:?}").contains(credentials.client_secret.as_deref().unwrap()));
    assert_eq!(server.grants("registrations").await, 1);

    let bad_redirect = register(&discovery, "teamster tests", "not a url").await.unwrap_err();
    match &bad_redirect {
        OAuthError::Rejected { endpoint: "registration", error, .. } => {
            assert_eq!(error, "invalid_client_metadata")
        }
        other => panic!("expected the registration endpoint's refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn each_user_authorizes_and_the_server_sees_their_own_token() {
    let server = OAuthServer::start(&[]).await;
    let client = server.client().await;

    let alice = authorize(&client, "alice").await;
    let bob = authorize(&client, "bob").await;
    assert_ne!(alice.access_token, bob.access_token);
    assert!(alice.refresh_token.is_some() && alice.expires_at.is_some());
    assert_eq!(alice.scope.as_deref(), Some("mcp"));
    assert_eq!(server.grants("authorization_code").await, 2);

    for (user, tokens) in [("alice", alice), ("bob", bob)] {
        let provider = OAuthTokenProvider::new(client.clone(), MemoryStore::holding(tokens));
        let connection =
            McpConnection::connect(server.config(Some(Arc::new(provider)))).await.expect("connect");
        assert_eq!(connection.call("whoami", "{}").await, ToolOutput::ok(user));
        assert_eq!(connection.call("echo", r#"{"text": "hi"}"#).await, ToolOutput::ok("hi"));
    }

    // A provider without tokens sends none, and the server asks for authorization again.
    let provider = OAuthTokenProvider::new(client.clone(), Arc::new(MemoryStore::default()));
    assert!(matches!(provider.access_token().await, Err(OAuthError::NotAuthorized)));
    let error = McpConnection::connect(server.config(Some(Arc::new(provider)))).await.unwrap_err();
    assert!(matches!(error, McpError::Unauthorized { .. }), "{error:?}");
}

#[tokio::test]
async fn expiring_tokens_are_refreshed_once_for_concurrent_requests_and_calls_keep_working() {
    let server = OAuthServer::start(&["--token-ttl", "3"]).await;
    let client = server.client().await;
    let store = MemoryStore::holding(authorize(&client, "alice").await);
    let skew = Duration::from_secs(1);
    let provider = Arc::new(OAuthTokenProvider::new(client.clone(), store.clone()).with_skew(skew));
    let connection = McpConnection::connect(server.config(Some(provider.clone()))).await.expect("connect");
    assert_eq!(connection.call("whoami", "{}").await, ToolOutput::ok("alice"));

    // Once the token expires within the skew, concurrent requests share one refresh.
    let first = store.tokens();
    sleep_until(first.expires_at.expect("an expiry") - skew).await;
    let refreshes = server.grants("refresh_token").await;
    let tokens = futures_util::future::join_all((0..8).map(|_| provider.bearer_token())).await;
    let refreshed = store.tokens();
    assert_ne!(refreshed.access_token, first.access_token);
    assert!(
        tokens.iter().all(|token| token.as_deref() == Some(refreshed.access_token.as_str())),
        "{tokens:?}"
    );
    assert_eq!(server.grants("refresh_token").await, refreshes + 1);
    assert_eq!(store.saves.load(Ordering::SeqCst), 1);
    // The server rotated the refresh token.
    assert_ne!(refreshed.refresh_token, first.refresh_token);
    assert_eq!(connection.call("whoami", "{}").await, ToolOutput::ok("alice"));

    // Once it has expired outright, the next call refreshes it on its way.
    sleep_until(refreshed.expires_at.expect("an expiry")).await;
    assert_eq!(connection.call("whoami", "{}").await, ToolOutput::ok("alice"));
    assert_eq!(server.grants("refresh_token").await, refreshes + 2);
    assert_eq!(store.saves.load(Ordering::SeqCst), 2);

    // Without a refresh token an expired token is the end.
    let expired = TokenSet { refresh_token: None, expires_at: Some(SystemTime::now()), ..store.tokens() };
    let stranded = OAuthTokenProvider::new(client.clone(), MemoryStore::holding(expired));
    assert!(matches!(stranded.access_token().await, Err(OAuthError::Expired)));
    assert_eq!(stranded.bearer_token().await, None);
}

#[tokio::test]
async fn tokens_changed_elsewhere_are_read_again_when_the_provider_is_told() {
    let server = OAuthServer::start(&[]).await;
    let client = server.client().await;
    let first = authorize(&client, "frank").await;
    let store = MemoryStore::holding(first.clone());
    let provider = OAuthTokenProvider::new(client.clone(), store.clone());
    assert_eq!(provider.access_token().await.unwrap(), first.access_token);

    // Another process replaces the stored tokens: the ones in memory are answered until the
    // provider hears of it, then the stored ones.
    let second = authorize(&client, "frank").await;
    *store.tokens.lock().unwrap() = Some(second.clone());
    assert_eq!(provider.access_token().await.unwrap(), first.access_token);
    provider.reload_from_store();
    assert_eq!(provider.access_token().await.unwrap(), second.access_token);

    // The user disconnected elsewhere: no tokens, so no bearer at all.
    *store.tokens.lock().unwrap() = None;
    provider.reload_from_store();
    assert!(matches!(provider.access_token().await, Err(OAuthError::NotAuthorized)));
    assert_eq!(store.saves.load(Ordering::SeqCst), 0, "reading again refreshes nothing");
}

#[tokio::test]
async fn a_failed_refresh_keeps_a_token_that_still_works() {
    let server = OAuthServer::start(&[]).await;
    let client = server.client().await;
    let tokens = authorize(&client, "erin").await;
    // A refresh token the server never issued, and a token that expires within the skew.
    let doomed = TokenSet {
        refresh_token: Some("never-issued".into()),
        expires_at: Some(SystemTime::now() + Duration::from_secs(300)),
        ..tokens
    };
    let store = MemoryStore::holding(doomed.clone());
    let provider =
        Arc::new(OAuthTokenProvider::new(client, store.clone()).with_skew(Duration::from_secs(3600)));
    assert_eq!(provider.access_token().await.unwrap(), doomed.access_token);
    assert_eq!(provider.bearer_token().await, Some(doomed.access_token.clone()));
    let connection = McpConnection::connect(server.config(Some(provider.clone()))).await.expect("connect");
    assert_eq!(connection.call("whoami", "{}").await, ToolOutput::ok("erin"));
    assert_eq!(store.saves.load(Ordering::SeqCst), 0);
    match provider.refresh_now().await.unwrap_err() {
        OAuthError::Rejected { endpoint: "token", error, .. } => assert_eq!(error, "invalid_grant"),
        other => panic!("expected the token endpoint's refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn a_wrong_code_verifier_is_refused_with_the_servers_error() {
    let server = OAuthServer::start(&[]).await;
    let client = server.client().await;
    let (_, response) = visit(&client, Some("alice")).await;
    let response = response.expect("an authorization code");
    let error =
        client.finish(&response.code, "a-verifier-that-was-never-sent-aaaaaaaaaaaaaa").await.unwrap_err();
    match &error {
        OAuthError::Rejected { endpoint: "token", status: 400, error, description } => {
            assert_eq!(error, "invalid_grant");
            assert!(
                description.as_deref().is_some_and(|text| text.contains("code_verifier")),
                "{description:?}"
            );
        }
        other => panic!("expected the token endpoint's refusal, got {other:?}"),
    }
    assert!(!error.to_string().contains(&response.code), "{error}");
    assert_eq!(server.grants("authorization_code").await, 0);
}

#[tokio::test]
async fn a_denied_authorization_comes_back_with_its_state() {
    let server = OAuthServer::start(&[]).await;
    let client = server.client().await;
    let (request, response) = visit(&client, None).await;
    match response {
        Err(OAuthError::AuthorizationFailed { error, description, state }) => {
            assert_eq!(error, "access_denied");
            assert!(description.is_some_and(|text| text.contains("login_as")));
            assert_eq!(state, Some(request.state));
        }
        other => panic!("expected a denied authorization, got {other:?}"),
    }
}

#[tokio::test]
async fn a_configured_public_client_needs_no_registration() {
    let server = OAuthServer::start(&["--default-user", "carol"]).await;
    let discovery = discover(&server.mcp_url(), None).await.expect("discover");
    // Registered out of band, as an operator would, then configured by id only.
    let registration = serde_json::json!({
        "client_name": "configured",
        "redirect_uris": [REDIRECT_URI],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
        "scope": "mcp",
    });
    let registered: serde_json::Value = reqwest::Client::new()
        .post(format!("{}/register", server.base))
        .json(&registration)
        .send()
        .await
        .expect("register out of band")
        .json()
        .await
        .expect("a registration");
    let client_id = registered["client_id"].as_str().expect("a client id");
    let client = OAuthClient::new(discovery, ClientCredentials::new(client_id, None), REDIRECT_URI).unwrap();

    let (request, response) = visit(&client, None).await;
    let response = response.expect("the default user is logged in");
    let tokens = client.finish_response(&response, &request.code_verifier).await.expect("finish");
    let refreshed = client.refresh(&tokens).await.expect("refresh");
    assert_ne!(refreshed.access_token, tokens.access_token);
    let provider = OAuthTokenProvider::new(client, MemoryStore::holding(refreshed));
    let connection = McpConnection::connect(server.config(Some(Arc::new(provider)))).await.expect("connect");
    assert_eq!(connection.call("whoami", "{}").await, ToolOutput::ok("carol"));
}

#[tokio::test]
async fn a_server_without_resource_metadata_is_its_own_authorization_server() {
    let server = OAuthServer::start(&["--no-resource-metadata"]).await;
    let challenge = unauthorized_challenge(&server).await;
    assert_eq!(
        challenge.as_deref().map(Challenge::parse).and_then(|challenge| challenge.resource_metadata),
        None
    );
    let client = server.client().await;
    assert_eq!(client.discovery().resource_metadata, None);
    assert_eq!(client.discovery().resource, server.mcp_url());
    assert_eq!(client.discovery().authorization_server.issuer, server.base);

    let provider =
        OAuthTokenProvider::new(client.clone(), MemoryStore::holding(authorize(&client, "dave").await));
    let connection = McpConnection::connect(server.config(Some(Arc::new(provider)))).await.expect("connect");
    assert_eq!(connection.call("whoami", "{}").await, ToolOutput::ok("dave"));
}

#[tokio::test]
async fn openid_connect_discovery_is_the_fallback() {
    let server = OAuthServer::start(&["--oidc-discovery-only"]).await;
    let discovery = discover(&server.mcp_url(), None).await.expect("discover");
    assert_eq!(discovery.authorization_server.token_endpoint, format!("{}/token", server.base));
}

#[tokio::test]
async fn discovery_refuses_insecure_or_unreachable_servers() {
    let insecure = discover("http://mcp.example.com/mcp", None).await.unwrap_err();
    assert!(matches!(insecure, OAuthError::InvalidUrl { .. }), "{insecure:?}");
    let challenge = r#"Bearer resource_metadata="http://metadata.example.com/x""#;
    let insecure_metadata = discover("https://mcp.example.com/mcp", Some(challenge)).await.unwrap_err();
    assert!(matches!(insecure_metadata, OAuthError::InvalidUrl { .. }), "{insecure_metadata:?}");
    let closed = discover("http://127.0.0.1:9/mcp", None).await.unwrap_err();
    assert!(matches!(closed, OAuthError::Transport { .. }), "{closed:?}");
}

fn sample_tokens() -> TokenSet {
    TokenSet {
        access_token: "access-secret".into(),
        refresh_token: Some("refresh-secret".into()),
        expires_at: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)),
        scope: Some("mcp".into()),
    }
}

#[test]
fn sealed_tokens_open_only_with_their_key_and_context() {
    let key = TokenKey::generate().unwrap();
    let cipher = TokenCipher::new(&key);
    let tokens = sample_tokens();
    let sealed = cipher.seal_json(&tokens, b"alice/github").unwrap();
    assert!(sealed.starts_with("v1."), "{sealed}");
    assert!(!sealed.contains("secret"));
    assert_ne!(cipher.seal_json(&tokens, b"alice/github").unwrap(), sealed, "every seal has a fresh nonce");
    assert_eq!(cipher.open_json::<TokenSet>(&sealed, b"alice/github").unwrap(), tokens);
    // The same key read back from its text form opens it too.
    let again = TokenCipher::new(&TokenKey::from_base64(&key.to_base64()).unwrap());
    assert_eq!(again.open_json::<TokenSet>(&sealed, b"alice/github").unwrap(), tokens);

    let other = TokenCipher::new(&TokenKey::generate().unwrap());
    assert!(matches!(other.open(&sealed, b"alice/github"), Err(CipherError::WrongKey)));
    assert!(matches!(cipher.open(&sealed, b"bob/github"), Err(CipherError::Tampered)));

    // Flip one character of the payload.
    let mut tampered = sealed.clone().into_bytes();
    let last = tampered.len() - 5;
    tampered[last] = if tampered[last] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    assert!(matches!(cipher.open(&tampered, b"alice/github"), Err(CipherError::Tampered)));

    for malformed in ["", "v1", "v2.00000000.AAAA", &sealed[..20], "v1.xyz.", &"v1.".repeat(100_000)] {
        let error = cipher.open(malformed, b"alice/github").unwrap_err();
        assert!(
            matches!(error, CipherError::Malformed | CipherError::WrongKey),
            "{malformed:.30}: {error:?}"
        );
    }
    let not_tokens = cipher.seal(b"[1, 2]", b"ctx").unwrap();
    assert!(matches!(cipher.open_json::<TokenSet>(&not_tokens, b"ctx"), Err(CipherError::Decode)));
    assert!(!format!("{key:?} {cipher:?}").contains(&key.to_base64()));
}

#[test]
fn key_files_are_created_private_and_reused() {
    let directory = std::env::temp_dir().join(format!("teamster-oauth-key-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&directory);
    let path = directory.join("data").join("token.key");

    let created = TokenKey::load(None, &path).expect("create the key file");
    assert_eq!(TokenKey::load(Some(""), &path).expect("read it back"), created);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(TokenKey::load_or_create(&path), Err(KeyError::Permissions { mode: 0o644, .. })));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    assert_eq!(std::fs::read_dir(path.parent().unwrap()).unwrap().count(), 1, "no temporary file is left");

    // The environment's key wins over the file.
    let from_env = TokenKey::generate().unwrap();
    assert_eq!(TokenKey::load(Some(&format!(" {}\n", from_env.to_base64())), &path).unwrap(), from_env);
    for invalid in ["not base64!", "AAAA", &"A".repeat(64)] {
        assert!(matches!(TokenKey::load(Some(invalid), &path), Err(KeyError::Invalid)), "{invalid}");
    }
    std::fs::write(&path, "garbage").unwrap();
    assert!(matches!(TokenKey::load(None, &path), Err(KeyError::Invalid)));
    std::fs::remove_dir_all(&directory).unwrap();
}
