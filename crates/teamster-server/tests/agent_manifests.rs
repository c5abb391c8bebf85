//! Agents that are hard to get wrong, through the real application without a socket: the
//! manifest's published JSON Schema, unknown keys refused with the key that was meant, models
//! and MCP servers the server does not have refused when the agent is saved, and the check of
//! a manifest (`POST /api/v1/agents/check`). The MCP servers a check connects to are covered by
//! the conformance suite (tests/conformance/test_agent_manifests.py), against a real one.

mod common;

use axum::body::{Body, to_bytes};
use axum::http::{Method, Request, StatusCode};
use serde_json::{Value, json};
use teamster_server::{AppState, ServerConfig, app};
use tower::ServiceExt;

struct Api {
    state: AppState,
}

impl Api {
    async fn new() -> Api {
        Api { state: common::app_state(ServerConfig::default()).await }
    }

    /// Sends a request; answers the status, the body as JSON and the content type.
    async fn call(&self, method: Method, path: &str, body: Value) -> (StatusCode, Value, String) {
        let body = if body.is_null() { Body::empty() } else { Body::from(body.to_string()) };
        let request = Request::builder().method(method).uri(path).header("content-type", "application/json").body(body).unwrap();
        let response = app(self.state.clone()).oneshot(request).await.unwrap();
        let status = response.status();
        let content_type = response.headers().get("content-type").map(|value| value.to_str().unwrap().to_owned()).unwrap_or_default();
        let bytes = to_bytes(response.into_body(), usize::MAX).await.unwrap();
        (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null), content_type)
    }

    /// Creating `manifest` is refused with 400: answers the error.
    async fn refused(&self, manifest: Value) -> Value {
        let (status, body, _) = self.call(Method::POST, "/api/v1/agents", json!({"name": "refused", "manifest": manifest})).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        body["error"].clone()
    }
}

fn echo() -> Value {
    json!({"name": "offline/echo"})
}

#[tokio::test]
async fn the_manifest_schema_is_served_and_closed() {
    let api = Api::new().await;
    let (status, schema, content_type) = api.call(Method::GET, "/api/v1/schemas/agent-manifest.json", Value::Null).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(content_type, "application/schema+json");
    assert_eq!(schema["$schema"], "https://json-schema.org/draft/2020-12/schema");
    assert_eq!(schema["$ref"], "#/$defs/AgentSpec");
    let spec = &schema["$defs"]["AgentSpec"];
    assert_eq!(spec["additionalProperties"], false);
    assert!(spec["properties"]["instructions"].is_object() && spec["properties"]["modes"].is_object());
    // Every reference resolves inside the document.
    let text = schema.to_string();
    for target in text.split("\"$ref\":\"").skip(1).map(|rest| rest.split('"').next().unwrap()) {
        let name = target.strip_prefix("#/$defs/").unwrap_or_else(|| panic!("a reference outside the schema: {target}"));
        assert!(schema["$defs"][name].is_object(), "{target} is not defined");
    }
    // The document describes the route.
    let (_, document, _) = api.call(Method::GET, "/api/v1/openapi.json", Value::Null).await;
    assert!(document["paths"]["/api/v1/schemas/agent-manifest.json"]["get"].is_object());
    assert!(document["paths"]["/api/v1/agents/check"]["post"].is_object());
}

#[tokio::test]
async fn unknown_keys_are_refused_with_what_was_meant() {
    let api = Api::new().await;
    let error = api.refused(json!({"model": echo(), "instrucions": "Help."})).await;
    assert_eq!(error["code"], "unknown_field");
    assert_eq!(error["param"], "manifest.instrucions");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("`instrucions`") && message.contains("did you mean `instructions`?"), "{message}");

    // Nested keys are named by their path; all of them at once.
    let error = api.refused(json!({"model": echo(), "config": {"sandbox": {"enabld": true}, "task": {"enabled": true}}})).await;
    assert_eq!(error["param"], "manifest.config.sandbox.enabld");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("`config.sandbox.enabld`") && message.contains("did you mean `enabled`?"), "{message}");
    assert!(message.contains("`config.task`") && message.contains("did you mean `tasks`?"), "{message}");

    // A key that another kind of entry has: a git skill cannot be preloaded.
    let error = api
        .refused(json!({"model": echo(), "config": {"sandbox": {"enabled": true}},
            "skills": [{"type": "git", "url": "https://github.com/acme/skills", "name": "pdf", "ref": "main", "preload": true}]}))
        .await;
    assert_eq!(error["param"], "manifest.skills[0].preload");
    assert!(error["message"].as_str().unwrap().contains("an entry of type \"git\" has no such key"), "{error}");

    // Keys of the request itself, and of an update.
    let (status, body, _) = api.call(Method::POST, "/api/v1/agents", json!({"name": "x1", "manifst": {"model": echo()}})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["param"], "manifst");
    assert!(body["error"]["message"].as_str().unwrap().contains("did you mean `manifest`?"), "{body}");
    let (status, created, _) = api.call(Method::POST, "/api/v1/agents", json!({"name": "kept", "manifest": {"model": echo()}})).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["data"]["id"].as_str().unwrap();
    let (status, body, _) =
        api.call(Method::PUT, &format!("/api/v1/agents/{id}"), json!({"manifest": {"model": {"name": "offline/echo", "parms": {}}}})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["param"], "manifest.model.parms");

    // What may hold any key still does: sampling parameters providers pass on, the state schema.
    let (status, body, _) = api
        .call(Method::POST, "/api/v1/agents", json!({"name": "open", "manifest": {"model": {"name": "offline/echo", "params": {"seed": 7}},
            "state_schema": {"type": "object", "properties": {"n": {"type": "integer", "default": 0}}}}}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

#[tokio::test]
async fn models_and_mcp_servers_the_server_lacks_are_refused_when_saved() {
    let api = Api::new().await;
    let error = api.refused(json!({"model": {"name": "offline/gpt-9"}})).await;
    assert_eq!(error["param"], "model.name");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("offline/gpt-9") && message.contains("echo"), "{message}");

    let error = api.refused(json!({"model": {"name": "openai/gpt-4o"}})).await;
    assert_eq!(error["param"], "model.name");
    assert!(error["message"].as_str().unwrap().contains("no model provider named \"openai\""), "{error}");

    let error = api.refused(json!({"model": echo(), "modes": [{"id": "plan", "model": "offline/nope"}]})).await;
    assert_eq!(error["param"], "modes");
    assert!(error["message"].as_str().unwrap().contains("offline/nope"), "{error}");

    let error = api.refused(json!({"model": echo(), "mcp_servers": [{"name": "github"}]})).await;
    assert_eq!(error["param"], "mcp_servers");
    assert!(error["message"].as_str().unwrap().contains("no MCP server named \"github\" is configured"), "{error}");
    let error = api
        .refused(json!({"model": echo(), "modes": [{"id": "build", "additional_tools": [{"type": "truefoundry-mcp-registry", "name": "git"}]}]}))
        .await;
    assert_eq!(error["param"], "modes");

    // An inline server is the agent's own: it is not looked up.
    let (status, body, _) = api
        .call(Method::POST, "/api/v1/agents", json!({"name": "inline", "manifest": {"model": echo(),
            "mcp_servers": [{"type": "inline", "name": "x", "url": "http://127.0.0.1:9/mcp"}]}}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

#[tokio::test]
async fn a_check_reports_problems_models_and_why_this_toolset() {
    let api = Api::new().await;
    let manifest = json!({
        "model": echo(),
        "instrucions": "Help.",
        "modes": [{"id": "plan", "model": "offline/nope", "transitions_to": "build", "tools": ["get_current_datetime", "task_write"]},
                  {"id": "build"}],
        "config": {"tasks": {"enabled": true}, "ask_user_questions": {"enabled": false}},
        "mcp_servers": [{"type": "inline", "name": "down", "url": "http://127.0.0.1:9/mcp"}],
    });
    let (status, body, _) = api.call(Method::POST, "/api/v1/agents/check", json!({"name": "Bad Name", "manifest": manifest})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let report = &body["data"];
    assert_eq!(report["ok"], false);
    let problems: Vec<(&str, &str)> =
        report["problems"].as_array().unwrap().iter().map(|p| (p["param"].as_str().unwrap_or(""), p["message"].as_str().unwrap())).collect();
    assert!(problems.iter().any(|(param, message)| *param == "manifest.instrucions" && message.contains("instructions")), "{problems:?}");
    assert!(problems.iter().any(|(param, _)| *param == "name"), "{problems:?}");
    assert!(problems.iter().any(|(_, message)| message.contains("offline/nope")), "{problems:?}");

    assert_eq!(report["mode"], "plan");
    let models = report["models"].as_array().unwrap();
    assert_eq!(models[0], json!({"param": "model.name", "name": "offline/echo", "available": true, "model_id": "echo"}));
    assert_eq!(models[1]["param"], "modes[0].model");
    assert_eq!(models[1]["available"], false);

    let servers = report["mcp_servers"].as_array().unwrap();
    assert_eq!(servers.len(), 1);
    assert_eq!(servers[0]["connected"], false);
    assert!(servers[0]["error"].as_str().is_some_and(|error| !error.is_empty()));
    assert!(report["warnings"].as_array().unwrap().iter().any(|w| w["param"] == "mcp_servers[0]"), "{report}");

    let tools: Vec<&str> = report["tools"].as_array().unwrap().iter().map(|tool| tool["name"].as_str().unwrap()).collect();
    assert_eq!(tools, ["get_current_datetime", "task_write", "submit_plan"], "{report}");
    let plan = &report["tools"][2];
    assert_eq!(plan["requires_approval"], true);
    assert!(plan["approval_reason"].as_str().unwrap().contains("build"), "{plan}");
    let absent = |name: &str| -> String {
        let entry = report["absent_tools"].as_array().unwrap().iter().find(|tool| tool["name"] == name);
        entry.unwrap_or_else(|| panic!("{name} is not listed as absent: {report}"))["reason"].as_str().unwrap().to_owned()
    };
    assert!(absent("exec").contains("config.sandbox.enabled"));
    assert!(absent("ask_user_question").contains("config.ask_user_questions"));
    assert!(absent("task_update").contains("\"plan\" mode offers only"));
    assert!(absent("state_get").contains("config.state_tool"));

    // A sound manifest checks out; without a name only the manifest is checked.
    let (status, body, _) = api.call(Method::POST, "/api/v1/agents/check", json!({"manifest": {"model": echo()}})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["data"]["ok"], true, "{body}");
    assert_eq!(body["data"]["problems"], json!([]));
    // A manifest that cannot be read at all is still a report.
    let (status, body, _) = api.call(Method::POST, "/api/v1/agents/check", json!({"manifest": {"model": 5}})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["data"]["ok"], false);
    assert_eq!(body["data"]["problems"][0]["param"], "manifest.model");
    // Nothing was saved.
    let (_, agents, _) = api.call(Method::GET, "/api/v1/agents", Value::Null).await;
    assert_eq!(agents["data"], json!([]));
}
