//! The embedded runtime through the public API: a turn whose stream is dropped and followed
//! again from where it stopped, a turn that waits for an approval and goes on once it is
//! given, and the same for a native Rust tool the runtime hosts, also across a restart. Real parts: the fake model in-process, the MCP test server
//! (`tests/mcp_servers/tools_server.py` over stdio, from the interpreter in
//! `TEAMSTER_TEST_PYTHON`), SQLite in memory.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
mod support;

use serde_json::json;
use teamster::runtime::{NativeTools, RequestContext, Runtime, RuntimeEvent, RuntimeOptions, ToolScope, user_message};
use teamster::{ToolError, tool};
use teamster_fake_model::FakeModelServer;
use teamster_protocol::input::{Approval, TurnInput};
use teamster_protocol::{Event, TurnState};

/// A runtime on an in-memory store whose provider `fake` is the fake model, and an agent
/// `helper` on it with the MCP test server `tools`.
async fn runtime(model: &FakeModelServer) -> Runtime {
    let mut options = RuntimeOptions::default();
    options.allow_stdio_mcp = true;
    let runtime = Runtime::open_with("sqlite::memory:", options).await.unwrap();
    support::add_fake_provider(&runtime, model).await;
    let python = std::env::var("TEAMSTER_TEST_PYTHON")
        .expect("TEAMSTER_TEST_PYTHON must name a Python with the `mcp` package (scripts/test sets it)");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/mcp_servers/tools_server.py");
    let tools = json!({
        "type": "stdio", "name": "tools", "description": "Test tools.", "command": python,
        "args": [script, "--transport", "stdio"],
    });
    runtime.add_mcp_server(serde_json::from_value(tools).unwrap()).await.unwrap();
    let spec = json!({
        "model": {"name": "fake/fake-model"},
        "mcp_servers": [{"type": "truefoundry-mcp-registry", "name": "tools", "preload": true}],
    });
    runtime.save_agent("helper", serde_json::from_value(spec).unwrap()).await.unwrap();
    runtime
}

fn text_of(events: &[RuntimeEvent]) -> String {
    events
        .iter()
        .filter_map(|event| match &event.event {
            Event::ModelMessageDelta(delta) => delta.content.clone(),
            _ => None,
        })
        .collect()
}

fn tool_responses(events: &[RuntimeEvent]) -> Vec<&str> {
    events
        .iter()
        .filter_map(|event| match &event.event {
            Event::ToolResponse(response) => Some(response.content.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_dropped_stream_is_followed_again_from_where_it_stopped() {
    let model = FakeModelServer::start().await.unwrap();
    let runtime = runtime(&model).await;
    let session = runtime.create_session("helper").await.unwrap();
    let mut started = runtime.start_turn(&session.id, vec![user_message("[delay:5] [tokens:30]")]).await.unwrap();
    let mut seen = Vec::new();
    while seen.len() < 5 {
        seen.push(started.events.next().await.expect("an event").unwrap());
    }
    let last = seen.last().unwrap().sequence;
    drop(started.events);

    let rest = runtime.subscribe(&session.id, &started.turn.id, last).await.unwrap().finish().await.unwrap();
    seen.extend(rest.events);
    let sequences: Vec<u64> = seen.iter().map(|event| event.sequence).collect();
    assert_eq!(sequences, (1..=sequences.len() as u64).collect::<Vec<u64>>(), "every event once, in order");
    assert!(matches!(seen.last().unwrap().event, Event::TurnDone(_)));
    let expected: String = (1..=30).map(|n| format!("tok{n} ")).collect();
    assert_eq!(text_of(&seen), expected);
    runtime.shutdown().await;
}

#[tokio::test]
async fn an_approval_lets_a_waiting_call_run() {
    let model = FakeModelServer::start().await.unwrap();
    let runtime = runtime(&model).await;
    let session = runtime.create_session("helper").await.unwrap();
    let waiting = runtime
        .start_turn(&session.id, vec![user_message("[tool:delete_everything {}]")])
        .await
        .unwrap()
        .finish()
        .await
        .unwrap();
    let [Event::ToolApprovalRequired(pending)] = &waiting.required_actions()[..] else {
        panic!("one approval awaited: {:?}", waiting.events)
    };
    let call = &pending.tool_calls[0];

    let approval = TurnInput::ToolApproval {
        thread_id: "main".to_owned(),
        tool_call_id: call.id.clone(),
        approval: Approval::allow(),
    };
    let resumed = runtime.start_turn(&session.id, vec![approval]).await.unwrap();
    let turn_id = resumed.turn.id.clone();
    let resumed = resumed.finish().await.unwrap();
    assert_eq!(tool_responses(&resumed.events), ["deleted"]);
    assert_eq!(resumed.answer(), "Tool result: deleted");
    let state = runtime.get_turn(&session.id, &turn_id).await.unwrap().state;
    assert!(matches!(state, TurnState::Done { .. }), "{state:?}");
    runtime.shutdown().await;
}

/// A directory under the system's temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(label: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("teamster-runtime-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::test]
async fn an_embedded_agent_uses_a_local_skill_in_its_sandbox() {
    let temp = TempDir::new("skills");
    let skill = temp.0.join("house-style");
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::write(skill.join("SKILL.md"), "---\nname: house-style\ndescription: How reports are written here.\n---\nEnd every report with local-skill-body-5e1.\n").unwrap();
    std::fs::write(skill.join("footer.txt"), "-- the team\n").unwrap();
    let root = temp.0.join("sandboxes");
    let provider = teamster::runtime::Bubblewrap::start(&root, teamster::runtime::SandboxLimits::default()).await.unwrap();
    let sandbox = teamster::runtime::SandboxOptions::new(std::sync::Arc::new(provider), root.join(".skills"))
        .with_local_skill("house-style", &skill);
    let mut options = RuntimeOptions::default();
    options.sandbox = Some(sandbox);
    let runtime = Runtime::open_with("sqlite::memory:", options).await.unwrap();
    let model = FakeModelServer::start().await.unwrap();
    support::add_fake_provider(&runtime, &model).await;
    let spec = json!({
        "model": {"name": "fake/fake-model"},
        "skills": [{"name": "house-style"}],
        "config": {"sandbox": {"enabled": true}},
    });
    runtime.save_agent("writer", serde_json::from_value(spec).unwrap()).await.unwrap();
    let session = runtime.create_session("writer").await.unwrap();

    let command = json!({"command": "cat /workspace/skills/house-style/SKILL.md /workspace/skills/house-style/footer.txt"});
    let finished = runtime
        .start_turn(&session.id, vec![user_message(format!("[tool:exec {command}]"))])
        .await
        .unwrap()
        .finish()
        .await
        .unwrap();
    let responses = tool_responses(&finished.events);
    assert!(
        matches!(&responses[..], [result] if result.contains("local-skill-body-5e1") && result.contains("-- the team")),
        "{responses:?}"
    );
    let requests: serde_json::Value =
        reqwest::get(format!("http://{}/requests", model.address())).await.unwrap().json().await.unwrap();
    let system = requests[0]["messages"][0]["content"].as_str().unwrap_or_default();
    assert!(system.contains("- house-style: How reports are written here. (SKILL.md: /workspace/skills/house-style/SKILL.md)"), "{system}");
    assert!(!system.contains("local-skill-body-5e1"), "only the description is in the context: {system}");
    runtime.shutdown().await;
}

/// A program's own tools, hosted by the runtime: `lookup` only reads, `refund` counts its runs
/// and the sessions it ran for.
fn order_desk(refunds: Arc<Mutex<Vec<String>>>) -> NativeTools<ToolScope> {
    let lookup = tool("lookup", "Where an order is.", |order: Order, _: &ToolScope| async move {
        Ok::<_, ToolError>(format!("{} is on its way", order.order_id))
    });
    let refund = tool("refund", "Refunds an order.", move |order: Order, scope: &ToolScope| {
        refunds.lock().unwrap().push(scope.session_id.clone());
        let user = scope.user.subject_id.clone();
        async move { Ok::<_, ToolError>(format!("{} refunded for {user}", order.order_id)) }
    });
    NativeTools::new("orders").read_only_tool(lookup).tool(refund)
}

/// Arguments of the order desk's tools.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Order {
    order_id: String,
}

#[tokio::test]
async fn a_native_tool_waits_for_approval_and_runs_once_when_approved() {
    let refunds = Arc::new(Mutex::new(Vec::new()));
    let mut options = RuntimeOptions::default();
    order_desk(refunds.clone()).register(&mut options).unwrap();
    let runtime = Runtime::open_with("sqlite::memory:", options).await.unwrap();
    let model = FakeModelServer::start().await.unwrap();
    support::add_fake_provider(&runtime, &model).await;
    // The set is named as an MCP server would be; its selectors apply as they do to one.
    let spec = json!({"model": {"name": "fake/fake-model"}, "mcp_servers": [{"name": "orders", "preload": true}]});
    runtime.save_agent("desk", serde_json::from_value(spec).unwrap()).await.unwrap();
    let session = runtime.create_session("desk").await.unwrap();

    // The read-only tool runs at once.
    let looked = runtime.start_turn(&session.id, vec![user_message(r#"[tool:lookup {"order_id": "A1"}]"#)]).await.unwrap();
    let looked = looked.finish().await.unwrap();
    assert!(looked.required_actions().is_empty(), "{:?}", looked.events);
    assert_eq!(tool_responses(&looked.events), ["A1 is on its way"]);

    // The other waits, without running, until a human approves it.
    let asked = runtime.start_turn(&session.id, vec![user_message(r#"[tool:refund {"order_id": "A2"}]"#)]).await.unwrap();
    let waiting = asked.finish().await.unwrap();
    let [Event::ToolApprovalRequired(pending)] = &waiting.required_actions()[..] else {
        panic!("one approval awaited: {:?}", waiting.events)
    };
    assert!(refunds.lock().unwrap().is_empty(), "the call ran before its approval");
    let approval = TurnInput::ToolApproval {
        thread_id: pending.thread_id.clone(),
        tool_call_id: pending.tool_calls[0].id.clone(),
        approval: Approval::allow(),
    };
    let resumed = runtime.start_turn(&session.id, vec![approval]).await.unwrap().finish().await.unwrap();
    assert_eq!(tool_responses(&resumed.events), ["A2 refunded for local"]);
    assert_eq!(resumed.answer(), "Tool result: A2 refunded for local");
    assert_eq!(refunds.lock().unwrap().as_slice(), std::slice::from_ref(&session.id), "the approved call ran once, for its session");
    runtime.shutdown().await;
}

#[tokio::test]
async fn a_turns_request_context_reaches_native_tools_and_is_recorded_on_the_turn() {
    let whose = tool("whose", "Whose request this is.", |_: serde_json::Value, scope: &ToolScope| {
        let tenant = scope.request_context.as_ref().and_then(|context| context.get("tenant")).cloned();
        async move { Ok::<_, ToolError>(format!("tenant {}", tenant.unwrap_or_default())) }
    });
    let mut options = RuntimeOptions::default();
    NativeTools::new("context").read_only_tool(whose).register(&mut options).unwrap();
    let runtime = Runtime::open_with("sqlite::memory:", options).await.unwrap();
    let model = FakeModelServer::start().await.unwrap();
    support::add_fake_provider(&runtime, &model).await;
    let spec = json!({"model": {"name": "fake/fake-model"}, "mcp_servers": [{"name": "context", "preload": true}]});
    runtime.save_agent("contextual", serde_json::from_value(spec).unwrap()).await.unwrap();
    let session = runtime.create_session("contextual").await.unwrap();

    let context: RequestContext = serde_json::from_value(json!({"tenant": "acme", "locale": "fr"})).unwrap();
    let started = runtime.start_turn_with_context(&session.id, vec![user_message("[tool:whose {}]")], context.clone()).await.unwrap();
    let turn_id = started.turn.id.clone();
    let finished = started.finish().await.unwrap();
    assert_eq!(tool_responses(&finished.events), [r#"tenant "acme""#]);
    assert_eq!(runtime.get_turn(&session.id, &turn_id).await.unwrap().request_context, Some(context));

    let plain = runtime.start_turn(&session.id, vec![user_message("[tool:whose {}]")]).await.unwrap().finish().await.unwrap();
    assert_eq!(tool_responses(&plain.events), ["tenant null"]);
    runtime.shutdown().await;
}

#[tokio::test]
async fn a_runtime_without_a_model_key_says_so_instead_of_running_the_demo_model() {
    let runtime = Runtime::open("sqlite::memory:").await.unwrap();
    let error = runtime.add_env_model_provider(|_| None, "gpt-4o-mini").await.unwrap_err();
    assert!(
        matches!(&error, teamster::runtime::RuntimeError::Model(teamster::Error::MissingApiKey { variables }) if variables.len() == 2),
        "{error:?}"
    );
    let spec = serde_json::from_value(json!({"model": {"name": "openai/gpt-4o-mini"}})).unwrap();
    assert!(runtime.save_agent("assistant", spec).await.is_err(), "no provider was added");
    runtime.shutdown().await;
}

#[tokio::test]
async fn a_native_tool_approval_outlives_the_runtime_that_asked_for_it() {
    let temp = TempDir::new("native-durable");
    let database = temp.0.join("teamster.db").to_string_lossy().into_owned();
    let model = FakeModelServer::start().await.unwrap();
    let refunds = Arc::new(Mutex::new(Vec::new()));
    let open = |refunds: &Arc<Mutex<Vec<String>>>| {
        let mut options = RuntimeOptions::default();
        order_desk(refunds.clone()).register(&mut options).unwrap();
        Runtime::open_with(&database, options)
    };
    let first = open(&refunds).await.unwrap();
    support::add_fake_provider(&first, &model).await;
    // Approval rules are the entry's, as for an MCP server: here every tool of the set asks.
    let spec = json!({
        "model": {"name": "fake/fake-model"},
        "mcp_servers": [{"name": "orders", "preload": true, "require_approval_for_tools": ["@all"]}],
    });
    first.save_agent("desk", serde_json::from_value(spec).unwrap()).await.unwrap();
    let session = first.create_session("desk").await.unwrap();
    let asked = first.start_turn(&session.id, vec![user_message(r#"[tool:lookup {"order_id": "A3"}]"#)]).await.unwrap();
    let waiting = asked.finish().await.unwrap();
    let [Event::ToolApprovalRequired(pending)] = &waiting.required_actions()[..] else {
        panic!("the read-only tool waits too when the entry says @all: {:?}", waiting.events)
    };
    first.shutdown().await;
    drop(first);

    // Another runtime on the same store, with the same tools registered, takes the approval
    // (once the first one's tasks have let the database go).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let second = loop {
        match open(&refunds).await {
            Ok(runtime) => break runtime,
            Err(_) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            Err(error) => panic!("the store stays held: {error}"),
        }
    };
    let approval = TurnInput::ToolApproval {
        thread_id: pending.thread_id.clone(),
        tool_call_id: pending.tool_calls[0].id.clone(),
        approval: Approval::allow(),
    };
    let resumed = second.start_turn(&session.id, vec![approval]).await.unwrap().finish().await.unwrap();
    assert_eq!(tool_responses(&resumed.events), ["A3 is on its way"]);
    second.shutdown().await;
}

#[tokio::test]
async fn a_sub_agent_calls_the_native_tools_of_its_parent() {
    let mut options = RuntimeOptions::default();
    order_desk(Arc::default()).register(&mut options).unwrap();
    let runtime = Runtime::open_with("sqlite::memory:", options).await.unwrap();
    let model = FakeModelServer::start().await.unwrap();
    support::add_fake_provider(&runtime, &model).await;
    let spec = json!({
        "model": {"name": "fake/fake-model"},
        "mcp_servers": [{"name": "orders", "preload": true}],
        "config": {"dynamic_sub_agents": {"enabled": true}},
    });
    runtime.save_agent("desk", serde_json::from_value(spec).unwrap()).await.unwrap();
    let session = runtime.create_session("desk").await.unwrap();
    let spawn = json!({"name": "clerk", "task": r#"[tool:lookup {"order_id": "A4"}]"#});
    let finished = runtime.start_turn(&session.id, vec![user_message(format!("[tool:run_sub_agent {spawn}]"))]).await.unwrap();
    let finished = finished.finish().await.unwrap();
    let on_threads: Vec<(&str, &str)> = finished
        .events
        .iter()
        .filter_map(|event| match &event.event {
            Event::ToolResponse(response) if response.content.contains("A4") => Some((response.thread_id.as_str(), response.content.as_str())),
            _ => None,
        })
        .collect();
    assert!(
        on_threads.iter().any(|(thread, content)| *thread != "main" && *content == "A4 is on its way"),
        "the sub-agent's own call of lookup: {:?}",
        finished.events
    );
    runtime.shutdown().await;
}
