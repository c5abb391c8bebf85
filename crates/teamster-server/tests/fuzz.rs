//! Property-based fuzzing of every request body of the HTTP API, through the real application on
//! an in-memory SQLite store, with agents on the offline demo model (so a body that starts a turn
//! runs it, quickly and without a network).
//!
//! The routes that take a body are every `POST`, `PUT` and `PATCH` operation of the served
//! OpenAPI document (the native API) and the gateway dialect's, listed here. Each gets arbitrary
//! JSON values, its valid body with one to three parts changed (missing, extra and wrong-typed
//! fields, extreme numbers, long strings, nesting), and bytes that are not JSON (cut or flipped
//! valid bodies, invalid UTF-8, nesting past the parser's limit, a body over the size limit).
//! Whatever arrives, the answer comes within a bound, nothing panics (on the request's task or a
//! turn's), the answer is never a 5xx, and every 4xx carries the spec's error body,
//! `{"error": {"message", "type", "code", "param"}}`.
//!
//! Each property runs a fixed number of cases; failures are kept in `proptest-regressions/fuzz.txt`
//! and replayed first.

mod common;

use std::time::Duration;

use axum::body::{Body, to_bytes};
use axum::http::{Method, Request, StatusCode};
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};
use serde_json::{Value, json};
use teamster_server::{AppState, ServerConfig, app};
use tower::ServiceExt;

/// Cases per property: about fifteen seconds for the three in a debug build on two cores.
const CASES: u32 = 128;
/// The largest body the application under test accepts; larger ones must get a 413.
const MAX_BODY_BYTES: usize = 64 * 1024;
/// How long one request may take, its whole answer read, before it counts as a hang.
const REQUEST_BOUND: Duration = Duration::from_secs(30);

fn config() -> Config {
    Config {
        cases: CASES,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/proptest-regressions/fuzz.txt"
        )))),
        ..Config::default()
    }
}

/// A route that takes a body, with its path parameters filled in and a body it accepts.
#[derive(Clone, Debug)]
struct Route {
    method: Method,
    path: String,
    valid: Value,
}

/// The application with an agent, a session holding a finished turn and a draft session, and
/// every route that takes a body.
struct Fixture {
    runtime: tokio::runtime::Runtime,
    state: AppState,
    routes: Vec<Route>,
}

/// The ids the routes' paths name.
struct Ids {
    agent: String,
    session: String,
    turn: String,
    draft: String,
}

/// Whether anything panicked: a handler's panic reaches the test, but a turn's runs on a task of
/// its own and would only be logged.
static PANICKED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl Fixture {
    fn new() -> Fixture {
        let report = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICKED.store(true, std::sync::atomic::Ordering::SeqCst);
            report(info);
        }));
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let (state, routes) = runtime.block_on(async {
            let state = common::app_state(ServerConfig { max_body_bytes: MAX_BODY_BYTES, ..ServerConfig::default() }).await;
            let ids = setup(&state).await;
            let routes = routes(&state, &ids).await;
            (state, routes)
        });
        Fixture { runtime, state, routes }
    }

    fn route(&self, index: usize) -> &Route {
        &self.routes[index % self.routes.len()]
    }

    /// Sends `body` to `route` and checks the answer.
    fn check(&self, route: &Route, body: Vec<u8>) -> Result<(), TestCaseError> {
        let shown = String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
        let answer = self.runtime.block_on(async { tokio::time::timeout(REQUEST_BOUND, send(&self.state, route.method.clone(), &route.path, body)).await });
        let Ok((status, answer)) = answer else {
            return Err(TestCaseError::fail(format!("{} {} took over {REQUEST_BOUND:?} with {shown}", route.method, route.path)));
        };
        let answer_text = String::from_utf8_lossy(&answer[..answer.len().min(600)]).into_owned();
        prop_assert!(!PANICKED.load(std::sync::atomic::Ordering::SeqCst), "a panic while {} {} answered {status} to {shown}", route.method, route.path);
        prop_assert!(!status.is_server_error(), "{} {} answered {status}: {answer_text}\nto {shown}", route.method, route.path);
        if status.is_client_error() {
            let error = serde_json::from_slice::<Value>(&answer).ok();
            prop_assert!(
                error.as_ref().is_some_and(is_spec_error),
                "{} {} answered {status} without the spec's error body: {answer_text}\nto {shown}",
                route.method,
                route.path
            );
        }
        Ok(())
    }
}

/// Whether `value` is `{"error": {"message": string, "type": string, "code": string|null,
/// "param": string|null}}` and nothing more.
fn is_spec_error(value: &Value) -> bool {
    let Some(body) = value.as_object() else { return false };
    let Some(error) = body.get("error").and_then(Value::as_object) else { return false };
    let string_or_null = |key: &str| error.get(key).is_some_and(|value| value.is_string() || value.is_null());
    body.len() == 1
        && error.get("message").is_some_and(Value::is_string)
        && error.get("type").is_some_and(Value::is_string)
        && string_or_null("code")
        && string_or_null("param")
        && error.len() == 4
}

/// Sends a request and reads the whole answer.
async fn send(state: &AppState, method: Method, path: &str, body: Vec<u8>) -> (StatusCode, Vec<u8>) {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap();
    let response = app(state.clone()).oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = to_bytes(response.into_body(), usize::MAX).await.unwrap();
    (status, bytes.to_vec())
}

/// Sends a valid request the fixture needs and returns its JSON answer.
async fn must(state: &AppState, method: Method, path: &str, body: Value) -> Value {
    let (status, answer) = send(state, method.clone(), path, body.to_string().into_bytes()).await;
    let text = String::from_utf8_lossy(&answer).into_owned();
    assert!(status.is_success(), "{method} {path}: {status} {text}");
    serde_json::from_str(&text).unwrap_or(Value::String(text))
}

/// An agent, a session with a finished turn, a draft session, and an agent the fuzzed `PUT`s may
/// change (so that the session's agent stays the offline one).
async fn setup(state: &AppState) -> Ids {
    let offline = json!({"model": {"name": "offline/echo"}});
    let demo = json!({"model": {"name": "offline/echo"}, "config": {"tasks": {"enabled": true}},
                      "state_schema": {"type": "object", "properties": {"step": {"type": "integer", "default": 0}}}});
    must(state, Method::POST, "/api/v1/agents", json!({"name": "demo", "manifest": demo})).await;
    let agent = must(state, Method::POST, "/api/v1/agents", json!({"name": "target", "manifest": offline})).await;
    let session = must(state, Method::POST, "/api/v1/sessions", json!({"agent": {"name": "demo"}})).await;
    let session = session["data"]["id"].as_str().unwrap().to_owned();
    let turn = must(
        state,
        Method::POST,
        &format!("/api/v1/sessions/{session}/turns"),
        json!({"input": [{"type": "user.message", "content": "what time is it?"}], "stream": true}),
    )
    .await;
    let stream = turn.as_str().expect("a streamed turn");
    let turn = stream.split("\"turn_id\":\"").nth(1).and_then(|rest| rest.split('"').next()).expect("the stream names its turn");
    let draft = must(state, Method::POST, "/v1/agents/draft-sessions", json!({"agent_spec": offline})).await;
    Ids {
        agent: agent["data"]["id"].as_str().unwrap().to_owned(),
        session,
        turn: turn.to_owned(),
        draft: draft["data"]["id"].as_str().unwrap().to_owned(),
    }
}

/// Valid bodies, by method and path template (native paths without their `/api/v1`).
fn valid_bodies(ids: &Ids) -> Vec<(Method, &'static str, Value)> {
    let offline = json!({"model": {"name": "offline/echo"}, "instructions": "Be brief."});
    let input = json!([{"type": "user.message", "content": "what time is it?"}]);
    vec![
        (Method::POST, "/agents", json!({"name": "fuzzed", "manifest": offline})),
        (Method::PUT, "/agents/{agent_id}", json!({"manifest": offline})),
        (Method::POST, "/agents/check", json!({"name": "checked", "manifest": offline})),
        (Method::POST, "/sessions", json!({"agent": {"name": "demo"}, "title": "Fuzzed"})),
        (Method::PATCH, "/sessions/{session_id}", json!({"title": "Renamed", "state": {"step": 1}})),
        (Method::POST, "/sessions/{session_id}/turns", json!({"input": input, "stream": false})),
        (Method::POST, "/sessions/{session_id}/clone", json!({"title": "Copy", "turn_id": ids.turn})),
        (Method::POST, "/sessions/{session_id}/follow-ups", json!({"content": "and then?"})),
        (Method::POST, "/sessions/{session_id}/steer", json!({"content": "shorter"})),
        (Method::POST, "/sessions/{session_id}/cancel", json!({})),
        (
            Method::POST,
            "/chat",
            json!({"id": ids.session, "agent": "demo", "trigger": "submit-message", "messageId": "m1",
                   "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}]}),
        ),
        (Method::POST, "/keys", json!({"subject": "fuzzer", "tenant": "default", "role": "member"})),
        (
            Method::PUT,
            "/settings/model-providers",
            json!({"manifest": {"type": "custom", "name": "local", "base_url": "http://127.0.0.1:9/v1",
                   "auth": {"api_key": "sk-fuzz"}, "models": [{"name": "m", "model_id": "m"}]}}),
        ),
        (
            Method::PUT,
            "/settings/mcp-servers",
            json!({"manifest": {"type": "remote", "name": "tools", "description": "Tools.", "url": "http://127.0.0.1:9/mcp"}}),
        ),
        // Renamed to their own names; the provider and the server are made before the routes are
        // tried (`routes`).
        (Method::PATCH, "/settings/model-providers/{name}", json!({"name": "local"})),
        (Method::PATCH, "/settings/mcp-servers/{name}", json!({"name": "tools"})),
        (Method::POST, "/mcp-servers/{name}/test", json!({})),
        (
            Method::PUT,
            "/settings/skills",
            json!({"manifest": {"type": "git", "name": "skill", "description": "A skill.", "url": "https://example.invalid/a.git", "ref": "main"}}),
        ),
    ]
}

/// Every route that takes a body: the native ones from the served OpenAPI document, the gateway's
/// from the list below.
async fn routes(state: &AppState, ids: &Ids) -> Vec<Route> {
    let document = must(state, Method::GET, "/api/v1/openapi.json", Value::Null).await;
    let valid = valid_bodies(ids);
    // The provider and the MCP server that the routes naming one (`{name}`) address.
    for (method, path, body) in &valid {
        if *method == Method::PUT && ["/settings/model-providers", "/settings/mcp-servers"].contains(path) {
            must(state, Method::PUT, &format!("/api/v1{path}"), body.clone()).await;
        }
    }
    let fill = |template: &str| {
        let named = if template.contains("/model-providers/") { "local" } else { "tools" };
        template
            .replace("{name}", named)
            .replace("{agent_id}", &ids.agent)
            .replace("{session_id}", &ids.session)
            .replace("{chat_id}", &ids.session)
            .replace("{turn_id}", &ids.turn)
            .replace("{draft_session_id}", &ids.draft)
    };
    let mut routes = Vec::new();
    for (template, operations) in document["paths"].as_object().expect("the document has paths") {
        for (method, operation) in operations.as_object().into_iter().flatten() {
            let method = match method.as_str() {
                "post" => Method::POST,
                "put" => Method::PUT,
                "patch" => Method::PATCH,
                _ => continue,
            };
            let relative = template.strip_prefix("/api/v1").unwrap_or(template);
            // A path's `POST` and `PUT` (the settings) take the same body.
            let body = valid
                .iter()
                .find(|(known, path, _)| *known == method && *path == relative)
                .or_else(|| valid.iter().find(|(_, path, _)| *path == relative))
                .map(|(_, _, body)| body);
            // A route the list above has no body for gets `{}`; its fuzzing starts from there.
            let body = body.cloned().unwrap_or_else(|| json!({}));
            assert!(operation.is_object());
            let path = fill(template);
            let path = if path.starts_with("/api/") { path } else { format!("/api/v1{path}") };
            routes.push(Route { method, path, valid: body });
        }
    }
    for (method, template, _) in &valid {
        let path = format!("/api/v1{}", fill(template));
        assert!(
            routes.iter().any(|route| route.method == method && route.path == path),
            "{method} {template} is in the OpenAPI document"
        );
    }
    let input = json!([{"type": "user.message", "content": "what time is it?"}]);
    let gateway = [
        (Method::POST, "/v1/agents/sessions", json!({"agent_name": "demo"})),
        (Method::POST, "/v1/agents/sessions/{session_id}/turns", json!({"input": input, "stream": false})),
        (Method::POST, "/v1/agents/sessions/{session_id}/cancel", json!({})),
        (Method::POST, "/v1/agents/sessions/{session_id}/turns/{turn_id}/subscribe", json!({"after_sequence_number": 2})),
        (Method::POST, "/v1/agents/draft-sessions", json!({"agent_spec": {"model": {"name": "offline/echo"}}, "agent_name": "demo"})),
        (Method::PATCH, "/v1/agents/draft-sessions/{draft_session_id}", json!({"agent_spec": {"model": {"name": "offline/echo"}, "instructions": "Hi."}})),
    ];
    routes.extend(gateway.into_iter().map(|(method, template, valid)| Route { method, path: fill(template), valid }));
    // Every valid body gets through, so that mutations start from a request that does (a steer
    // needs a running turn and is refused; a second agent of the same name conflicts).
    for route in &routes {
        let (status, answer) = send(state, route.method.clone(), &route.path, route.valid.to_string().into_bytes()).await;
        assert!(
            status.is_success() || status == StatusCode::CONFLICT,
            "{} {} refused its valid body {}: {status} {}",
            route.method,
            route.path,
            route.valid,
            String::from_utf8_lossy(&answer)
        );
    }
    routes
}

/// A JSON value of any shape, with the edge cases a request parser must survive.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |number| serde_json::Number::from_f64(number).map(Value::Number)),
        prop::sample::select(vec![json!(u64::MAX), json!(i64::MIN), json!(-1), json!(0), json!(1e308), json!(4294967296u64), json!(2.5)]),
        ".{0,16}".prop_map(Value::String),
        (1usize..3_000).prop_map(|length| Value::String("ж\u{0}\"".repeat(length))),
        prop::sample::select(vec![
            "offline/echo", "demo", "user.message", "submit-message", "regenerate-message", "text", "admin", "member",
            "custom", "remote", "git", "auto", "none", "", "../..", "%00",
        ])
        .prop_map(|text| Value::String(text.to_owned())),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(key(), inner, 0..4).prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

/// Object keys: mostly the API's own field names, so that wrong values reach the handlers.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec![
            "name", "manifest", "model", "agent", "agent_name", "agent_spec", "title", "state", "mode", "permissions",
            "input", "type", "content", "stream", "previous_turn_id", "turn_id", "after_sequence_number", "id",
            "messages", "parts", "text", "role", "trigger", "messageId", "keepRunning", "subject", "tenant",
            "service_account", "base_url", "auth", "api_key", "models", "model_id", "url", "transport", "ref",
            "description", "config", "budget", "mcp_servers", "instructions", "params", "max_tokens",
        ])
        .prop_map(str::to_owned),
        1 => "[a-zA-Z_]{1,8}",
    ]
}

/// One change to a JSON value at the node `at` picks (modulo the number of nodes).
#[derive(Clone, Debug)]
enum Mutation {
    Replace { at: usize, with: Value },
    Remove { at: usize },
    Insert { at: usize, key: String, with: Value },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), json_value()).prop_map(|(at, with)| Mutation::Replace { at, with }),
        any::<usize>().prop_map(|at| Mutation::Remove { at }),
        (any::<usize>(), key(), json_value()).prop_map(|(at, key, with)| Mutation::Insert { at, key, with }),
    ]
}

impl Mutation {
    fn apply(&self, value: &mut Value) {
        let mut paths = Vec::new();
        paths_of(value, &mut Vec::new(), &mut paths);
        let at = match self {
            Mutation::Replace { at, .. } | Mutation::Remove { at } | Mutation::Insert { at, .. } => at % paths.len(),
        };
        let path = &paths[at];
        match self {
            Mutation::Replace { with, .. } => *node(value, path) = with.clone(),
            Mutation::Remove { .. } => match path.split_last() {
                Some((last, parent)) => match node(value, parent) {
                    Value::Object(map) => {
                        map.remove(last.as_str().expect("object children are named"));
                    }
                    Value::Array(items) => {
                        items.remove(last.as_u64().expect("array children are numbered") as usize);
                    }
                    _ => unreachable!("a child's parent is a container"),
                },
                None => *value = Value::Null,
            },
            Mutation::Insert { key, with, .. } => match node(value, path) {
                Value::Object(map) => {
                    map.insert(key.clone(), with.clone());
                }
                Value::Array(items) => items.push(with.clone()),
                other => *other = with.clone(),
            },
        }
    }
}

/// Every node's path: object keys as strings, array positions as numbers.
fn paths_of(value: &Value, here: &mut Vec<Value>, paths: &mut Vec<Vec<Value>>) {
    paths.push(here.clone());
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                here.push(Value::from(key.as_str()));
                paths_of(child, here, paths);
                here.pop();
            }
        }
        Value::Array(items) => {
            for (index, child) in items.iter().enumerate() {
                here.push(Value::from(index));
                paths_of(child, here, paths);
                here.pop();
            }
        }
        _ => {}
    }
}

fn node<'a>(value: &'a mut Value, path: &[Value]) -> &'a mut Value {
    path.iter().fold(value, |value, step| match step {
        Value::String(key) => &mut value[key.as_str()],
        _ => &mut value[step.as_u64().expect("a position") as usize],
    })
}

/// Bytes that are not a well-formed JSON body, made from a valid one.
#[derive(Clone, Debug)]
enum Malformed {
    /// The first `at` bytes (modulo the length).
    Cut { at: usize },
    /// Some bytes replaced, which may break UTF-8 as well as JSON.
    Flip { flips: Vec<(usize, u8)> },
    /// Bytes that are not UTF-8 inside a string value.
    InvalidUtf8 { bytes: Vec<u8> },
    /// The body nested inside `depth` arrays or objects.
    Nested { depth: usize, objects: bool },
    /// A number too large for any integer or float type, where the body's first number or
    /// string is.
    HugeNumber { digits: usize },
    /// The body padded past the size limit with spaces (valid JSON, too large).
    Oversize,
    /// Arbitrary bytes.
    Bytes { bytes: Vec<u8> },
}

fn malformed() -> impl Strategy<Value = Malformed> {
    prop_oneof![
        any::<usize>().prop_map(|at| Malformed::Cut { at }),
        prop::collection::vec((any::<usize>(), any::<u8>()), 1..4).prop_map(|flips| Malformed::Flip { flips }),
        prop::collection::vec(prop::sample::select(vec![0x80u8, 0xc3, 0xff, 0xfe, 0xed, 0xa0]), 1..6).prop_map(|bytes| Malformed::InvalidUtf8 { bytes }),
        (1usize..400, any::<bool>()).prop_map(|(depth, objects)| Malformed::Nested { depth, objects }),
        (20usize..2_000).prop_map(|digits| Malformed::HugeNumber { digits }),
        Just(Malformed::Oversize),
        prop::collection::vec(any::<u8>(), 0..64).prop_map(|bytes| Malformed::Bytes { bytes }),
    ]
}

impl Malformed {
    fn apply(&self, valid: &Value) -> Vec<u8> {
        let text = valid.to_string();
        match self {
            Malformed::Cut { at } => text.as_bytes()[..at % (text.len() + 1)].to_vec(),
            Malformed::Flip { flips } => {
                let mut bytes = text.into_bytes();
                for (position, byte) in flips {
                    let length = bytes.len();
                    bytes[position % length] ^= byte | 1;
                }
                bytes
            }
            Malformed::InvalidUtf8 { bytes } => match text.find(":\"") {
                Some(position) => [text.as_bytes()[..position + 2].to_vec(), bytes.clone(), text.as_bytes()[position + 2..].to_vec()].concat(),
                None => [b"\"".to_vec(), bytes.clone(), b"\"".to_vec()].concat(),
            },
            Malformed::Nested { depth, objects } => {
                let (open, close) = if *objects { ("{\"input\":", "}") } else { ("[", "]") };
                format!("{}{text}{}", open.repeat(*depth), close.repeat(*depth)).into_bytes()
            }
            Malformed::HugeNumber { digits } => {
                let number = format!("9{}e99999", "9".repeat(*digits));
                match text.find(":\"").or_else(|| text.find(':')) {
                    Some(position) => {
                        let rest = &text[position + 1..];
                        let end = rest.find([',', '}']).unwrap_or(rest.len());
                        format!("{}:{number}{}", &text[..position], &rest[end..]).into_bytes()
                    }
                    None => number.into_bytes(),
                }
            }
            Malformed::Oversize => format!("{}{text}", " ".repeat(MAX_BODY_BYTES)).into_bytes(),
            Malformed::Bytes { bytes } => bytes.clone(),
        }
    }
}

proptest! {
    #![proptest_config(config())]

    /// Any JSON value, to any route that takes a body.
    #[test]
    fn arbitrary_json_bodies_get_answers_or_spec_errors(route in any::<usize>(), body in json_value()) {
        let fixture = fixture();
        let route = fixture.route(route);
        fixture.check(route, body.to_string().into_bytes())?;
    }

    /// A route's valid body with one to three parts changed.
    #[test]
    fn mutated_valid_bodies_get_answers_or_spec_errors(route in any::<usize>(), mutations in prop::collection::vec(mutation(), 1..4)) {
        let fixture = fixture();
        let route = fixture.route(route);
        let mut body = route.valid.clone();
        for mutation in &mutations {
            mutation.apply(&mut body);
        }
        fixture.check(route, body.to_string().into_bytes())?;
    }

    /// Bytes that are not a well-formed JSON body, or one too large or too deep.
    #[test]
    fn malformed_bodies_get_spec_errors(route in any::<usize>(), malformed in malformed()) {
        let fixture = fixture();
        let route = fixture.route(route);
        fixture.check(route, malformed.apply(&route.valid))?;
    }
}

/// One fixture per test binary: every case of every property uses the same application.
fn fixture() -> &'static Fixture {
    static FIXTURE: std::sync::OnceLock<Fixture> = std::sync::OnceLock::new();
    FIXTURE.get_or_init(Fixture::new)
}

#[test]
fn every_route_that_takes_a_body_is_fuzzed() {
    let fixture = fixture();
    let mut listed: Vec<String> = fixture.routes.iter().map(|route| format!("{} {}", route.method, route.path)).collect();
    listed.sort();
    assert!(fixture.routes.len() >= 20, "{listed:#?}");
    for expected in ["PATCH /api/v1/sessions/", "POST /api/v1/chat", "POST /api/v1/keys", "/follow-ups", "/steer", "/clone"] {
        assert!(listed.iter().any(|route| route.contains(expected)), "{expected} in {listed:#?}");
    }
}
