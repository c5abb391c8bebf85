//! MCP OAuth through the service with two users: each user authorizes each server for
//! themselves, their turns pause until they have, and their connections carry their own
//! tokens. Over HTTP there is one local user (the spec names no per-user credentials without
//! OIDC), so the separation is tested here, with `Caller`s of two subjects.
//!
//! Real processes: the OAuth-protected MCP test server (`tests/mcp_servers/oauth_server.py`,
//! from the interpreter in `TEAMSTER_TEST_PYTHON`) and the fake model, in-process. The browser
//! is a reqwest client that does not follow redirects.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::json;
use teamster_protocol::input::TurnInput;
use teamster_protocol::settings::McpServerManifest;
use teamster_protocol::{Event, Subject, TurnState, UserContent};
use teamster_service::{Caller, CreateTurn, McpLinks, McpServerWrite, OAuthCallback, ProviderWrite, Service, ServiceConfig, TokenKey};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// A running `oauth_server.py`, killed on drop.
struct OAuthServer {
    base: String,
    _process: Child,
}

impl OAuthServer {
    async fn start() -> OAuthServer {
        let python = std::env::var("TEAMSTER_TEST_PYTHON")
            .expect("TEAMSTER_TEST_PYTHON must name a Python with the `mcp` package (scripts/test sets it)");
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/mcp_servers/oauth_server.py");
        let mut process = Command::new(python)
            .arg(script)
            .args(["--port", "0"])
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
        let port = line.strip_prefix("LISTENING ").unwrap_or_else(|| panic!("unexpected first line {line:?}"));
        OAuthServer { base: format!("http://127.0.0.1:{port}"), _process: process }
    }
}

fn user(id: &str) -> Caller {
    Caller::owner(Subject { subject_id: id.into(), subject_type: "user".into(), subject_slug: id.into() })
}

/// Links as the HTTP layer makes them, under a prefix.
struct Links;

impl McpLinks for Links {
    fn authorize(&self, server: &str, ticket: &str) -> String {
        format!("http://127.0.0.1:9/t1/api/v1/mcp-servers/{server}/authorize?ticket={ticket}")
    }
    fn callback(&self) -> String {
        "http://127.0.0.1:9/t1/api/v1/mcp-servers/oauth/callback".to_owned()
    }
}

/// The callback's query as the HTTP layer reads it.
fn callback_answer(query: &str) -> OAuthCallback {
    let url = reqwest::Url::parse(&format!("http://callback/?{query}")).unwrap();
    let value = |name: &str| url.query_pairs().find(|(key, _)| key == name).map(|(_, value)| value.into_owned());
    OAuthCallback {
        state: value("state"),
        code: value("code"),
        issuer: value("iss"),
        error: value("error"),
        error_description: value("error_description"),
    }
}

/// The service with the fake model as provider `fake` and the OAuth server as `oauth`.
async fn service(oauth: &OAuthServer, model: &teamster_fake_model::FakeModelServer) -> Service {
    let store = Arc::new(teamster_store_sqlite::SqliteStore::connect("sqlite::memory:").await.unwrap());
    let config = ServiceConfig {
        mcp_links: Some(Arc::new(Links)),
        secret_key: Some(TokenKey::generate().unwrap()),
        ..ServiceConfig::default()
    };
    let service = Service::start(store, config).await.unwrap();
    let provider = serde_json::from_value(json!({
        "type": "custom", "name": "fake", "base_url": model.base_url(), "auth": {"api_key": "k"},
        "models": [{"name": "fake-model", "model_id": "fake-model"}],
    }))
    .unwrap();
    service.catalog().providers().write(provider, ProviderWrite::Upsert).await.unwrap();
    let manifest: McpServerManifest = serde_json::from_value(json!({
        "type": "remote", "name": "oauth", "description": "OAuth tools.", "url": format!("{}/mcp", oauth.base),
        "auth": {"type": "dcr"},
    }))
    .unwrap();
    service.mcp().write_mcp_server(&user("admin"), manifest, McpServerWrite::Create).await.unwrap();
    service
}

async fn session(service: &Service, caller: &Caller) -> String {
    let spec = serde_json::from_value(json!({
        "model": {"name": "fake/fake-model"},
        "mcp_servers": [{"type": "truefoundry-mcp-registry", "name": "oauth", "preload": true}],
    }))
    .unwrap();
    service.catalog().create_draft_session(caller, spec, None, None).await.unwrap().id
}

/// Runs a turn to its end and answers its final state.
async fn turn(service: &Service, caller: &Caller, session_id: &str, input: Vec<TurnInput>) -> TurnState {
    let request = CreateTurn { input, previous_turn_id: None, at_tip: false, request_context: None };
    let started = service.create_turn(caller, session_id, request).await.unwrap();
    // The turn's events end when the turn does.
    let mut events = started.events(0);
    tokio::time::timeout(Duration::from_secs(60), async { while events.next().await.is_some() {} }).await.expect("the turn ends");
    service.get_turn(caller, session_id, &started.turn.id).await.expect("the turn").state
}

fn whoami() -> Vec<TurnInput> {
    vec![TurnInput::Message { content: UserContent::Text("[tool:whoami {}] who am I?".into()) }]
}

/// The answer of a turn that ran the tool: `Tool result: <user>`.
fn answer(state: &TurnState) -> String {
    match state {
        TurnState::Done { output: Some(output), required_actions, .. } if required_actions.is_empty() => {
            serde_json::to_value(output).unwrap()["content"].as_str().unwrap_or_default().to_owned()
        }
        other => panic!("expected a finished turn, got {other:?}"),
    }
}

/// The `auth_url` of a turn that paused for authorization of the one server.
fn auth_url(state: &TurnState) -> String {
    match state {
        TurnState::Done { output: None, required_actions, .. } => match required_actions.as_slice() {
            [Event::McpAuthRequired(required)] => {
                assert_eq!(required.thread_id, None);
                assert_eq!(required.mcp_servers.len(), 1);
                assert_eq!((required.mcp_servers[0].id.as_str(), required.mcp_servers[0].name.as_str()), ("mcp:oauth", "oauth"));
                required.mcp_servers[0].auth_url.clone()
            }
            other => panic!("expected one mcp.auth_required, got {other:?}"),
        },
        other => panic!("expected a paused turn, got {other:?}"),
    }
}

/// Plays the browser for `login`: our authorize link (through the service), the authorization
/// server, and its redirect back, whose query goes to the service's callback.
async fn authorize(service: &Service, auth_url: &str, login: &str) {
    let url = reqwest::Url::parse(auth_url).unwrap();
    assert_eq!(url.path(), "/t1/api/v1/mcp-servers/oauth/authorize");
    let ticket = url.query_pairs().find(|(key, _)| key == "ticket").unwrap().1.into_owned();
    let at_server = service.mcp().begin_mcp_authorization("oauth", &ticket, None).await.unwrap();
    let browser = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let answer = browser.get(format!("{at_server}&login_as={login}")).send().await.unwrap();
    assert_eq!(answer.status(), reqwest::StatusCode::FOUND);
    let location = answer.headers()[reqwest::header::LOCATION].to_str().unwrap().to_owned();
    let (callback, query) = location.split_once('?').unwrap();
    assert_eq!(callback, "http://127.0.0.1:9/t1/api/v1/mcp-servers/oauth/callback");
    assert_eq!(service.mcp().finish_mcp_authorization(callback_answer(query)).await.unwrap(), None);
}

async fn status(service: &Service, caller: &Caller) -> String {
    service.mcp().mcp_authorization_status(caller, "oauth", None).await.unwrap().status
}

#[tokio::test]
async fn each_user_authorizes_for_themselves_and_connects_with_their_own_token() {
    let oauth = OAuthServer::start().await;
    let model = teamster_fake_model::FakeModelServer::start().await.unwrap();
    let service = service(&oauth, &model).await;
    let (alice, bob) = (user("alice"), user("bob"));

    let alices = session(&service, &alice).await;
    let paused = turn(&service, &alice, &alices, whoami()).await;
    authorize(&service, &auth_url(&paused), "alice").await;
    assert_eq!(answer(&turn(&service, &alice, &alices, Vec::new()).await), "Tool result: alice");
    assert_eq!(status(&service, &alice).await, "authenticated");

    // Bob is asked again, in his own session, however recently Alice authorized.
    assert_eq!(status(&service, &bob).await, "auth_required");
    let bobs = session(&service, &bob).await;
    let paused = turn(&service, &bob, &bobs, whoami()).await;
    let bobs_link = auth_url(&paused);
    authorize(&service, &bobs_link, "bob").await;
    assert_eq!(answer(&turn(&service, &bob, &bobs, Vec::new()).await), "Tool result: bob");

    // Each keeps their own token, in new turns and new sessions.
    assert_eq!(answer(&turn(&service, &alice, &alices, whoami()).await), "Tool result: alice");
    let again = session(&service, &alice).await;
    assert_eq!(answer(&turn(&service, &alice, &again, whoami()).await), "Tool result: alice");
    assert_eq!(answer(&turn(&service, &bob, &bobs, whoami()).await), "Tool result: bob");

    // Bob disconnects: only he is asked again, and Alice's connections are untouched.
    let shown = service.mcp().disconnect_mcp_server(&bob, "oauth").await.unwrap();
    assert_eq!(shown.auth_status.status, "auth_required");
    auth_url(&turn(&service, &bob, &bobs, whoami()).await);
    assert_eq!(answer(&turn(&service, &alice, &alices, whoami()).await), "Tool result: alice");
    assert_eq!(status(&service, &alice).await, "authenticated");
}
