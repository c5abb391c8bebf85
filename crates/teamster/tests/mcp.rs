//! MCP servers as toolkits through the public API: the MCP test server
//! (`tests/mcp_servers/tools_server.py` over stdio, from the interpreter in
//! `TEAMSTER_TEST_PYTHON`) and the fake model, both real processes or servers.

use std::path::PathBuf;

use teamster::{Agent, AgentItem, AgentRequest, Error, McpServer, McpToolkit, Model};
use teamster_fake_model::FakeModelServer;

/// The tenant a run is for: its name reaches the server's environment.
#[derive(Clone)]
struct Tenant {
    name: String,
}

fn tenant(name: &str) -> Tenant {
    Tenant { name: name.to_owned() }
}

/// The MCP test server, started for each session with the tenant's name as `TENANT`.
fn tools_server() -> McpToolkit<Tenant> {
    let python = std::env::var("TEAMSTER_TEST_PYTHON")
        .expect("TEAMSTER_TEST_PYTHON must name a Python with the `mcp` package (scripts/test sets it)");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/mcp_servers/tools_server.py");
    let script = script.to_string_lossy().into_owned();
    McpToolkit::per_context("tools", move |tenant: &Tenant| {
        if tenant.name.is_empty() {
            return Err("a tenant needs a name".to_owned());
        }
        let args = [script.as_str(), "--transport", "stdio"];
        Ok(McpServer::stdio(python.clone(), args).env("TENANT", tenant.name.clone()))
    })
}

async fn agent(toolkit: McpToolkit<Tenant>) -> (FakeModelServer, Agent<Tenant>) {
    let server = FakeModelServer::start().await.expect("the fake model starts");
    let model = Model::openai_compatible(&server.base_url(), "test-key", "fake-model").expect("a valid model");
    let agent = Agent::builder("mcp", model).toolkit(toolkit).build().expect("a valid agent");
    (server, agent)
}

fn ask(text: &str) -> Vec<AgentItem> {
    vec![AgentItem::user(text)]
}

/// The output of the run's one tool call.
fn tool_output(output: &[AgentItem]) -> &str {
    let results: Vec<&str> = output
        .iter()
        .filter_map(|item| match item {
            AgentItem::ToolResult { output, .. } => Some(output.as_str()),
            _ => None,
        })
        .collect();
    let [result] = results[..] else { panic!("one tool result: {output:?}") };
    result
}

#[tokio::test]
async fn each_session_has_its_own_server_made_from_its_context() {
    let (_model, agent) = agent(tools_server()).await;
    let getenv = r#"[tool:getenv {"name": "TENANT"}]"#;
    let (acme, globex) = tokio::join!(
        agent.run(AgentRequest { input: ask(getenv), context: tenant("acme") }),
        agent.run(AgentRequest { input: ask(getenv), context: tenant("globex") }),
    );
    assert_eq!(acme.unwrap().text(), "Tool result: acme");
    assert_eq!(globex.unwrap().text(), "Tool result: globex");

    // The program's own environment (here the variable that named the interpreter) does not
    // reach the server.
    let own = r#"[tool:getenv {"name": "TEAMSTER_TEST_PYTHON"}]"#;
    let response = agent.run(AgentRequest { input: ask(own), context: tenant("acme") }).await.unwrap();
    assert_eq!(tool_output(&response.output), "<unset>");
}

#[tokio::test]
async fn a_session_keeps_one_connection_for_its_runs() {
    let (_model, agent) = agent(tools_server()).await;
    let session = agent.create_session(tenant("acme")).await.unwrap();
    // `counter` counts calls in the server process.
    for expected in ["1", "2", "3"] {
        let response = session.run(ask("[tool:counter]")).await.unwrap();
        assert_eq!(tool_output(&response.output), expected);
    }
    session.close().await;
    let fresh = agent.create_session(tenant("acme")).await.unwrap();
    let response = fresh.run(ask("[tool:counter]")).await.unwrap();
    assert_eq!(tool_output(&response.output), "1", "a new session starts a new server");
    fresh.close().await;
}

#[tokio::test]
async fn server_errors_go_back_to_the_model_and_the_run_goes_on() {
    let (_model, agent) = agent(tools_server()).await;
    let response = agent
        .run(AgentRequest { input: ask(r#"[tool:fail {"message": "disk on fire"}]"#), context: tenant("acme") })
        .await
        .unwrap();
    assert!(tool_output(&response.output).contains("disk on fire"), "{:?}", response.output);
    assert!(response.text().starts_with("Tool result: "), "{}", response.text());
}

#[tokio::test]
async fn servers_that_cannot_start_fail_the_session_with_the_reason() {
    let missing = McpToolkit::new("missing", McpServer::stdio("/nonexistent/mcp-server", ["--stdio"]));
    let misused = McpToolkit::new("misused", McpServer::stdio("true", ["x"]).header("Authorization", "Bearer x"));
    let cases: [(McpToolkit<Tenant>, &str, &str, &str); 3] = [
        (missing, "acme", "missing", "/nonexistent/mcp-server"),
        (misused, "acme", "misused", "takes no HTTP headers"),
        (tools_server(), "", "tools", "a tenant needs a name"),
    ];
    for (toolkit, name, toolkit_name, reason_part) in cases {
        let (_model, agent) = agent(toolkit).await;
        let error = agent.run(AgentRequest { input: ask("hi"), context: tenant(name) }).await.unwrap_err();
        let Error::Toolkit { toolkit, reason } = &error else { panic!("a toolkit error: {error:?}") };
        assert_eq!(toolkit, toolkit_name);
        assert!(reason.contains(reason_part), "{reason}");
    }
}
