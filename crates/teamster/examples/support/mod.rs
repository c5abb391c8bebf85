//! What the examples share: the model they run on (the environment's provider, or the offline
//! demo model when started with `--offline`), and a small MCP server to give them tools without
//! anything installed.
//!
//! The server is the example program itself, started again with `--orders-mcp-server`: an
//! online shop's order desk speaking MCP over stdio (JSON-RPC, one message per line), with a
//! read-only tool `order_status` and a destructive one, `refund_order`.

#![allow(dead_code, reason = "each example uses part of this module")]

use std::io::{BufRead, Write};

use serde_json::{Value, json};

/// The flag that makes an example program serve the orders MCP server instead.
const SERVER_FLAG: &str = "--orders-mcp-server";

/// The flag that runs an example on the offline demo model, by choice.
const OFFLINE_FLAG: &str = "--offline";

/// Whether the program was started with [`OFFLINE_FLAG`].
pub fn offline() -> bool {
    std::env::args().skip(1).any(|argument| argument == OFFLINE_FLAG)
}

/// The model id to use: `TEAMSTER_MODEL`, else `claude-haiku-4-5` when only `ANTHROPIC_API_KEY`
/// is set, else `gpt-4o-mini`.
pub fn model_id() -> String {
    let set = |name: &str| std::env::var(name).is_ok_and(|value| !value.trim().is_empty());
    std::env::var("TEAMSTER_MODEL").unwrap_or_else(|_| match set("ANTHROPIC_API_KEY") && !set("OPENAI_API_KEY") {
        true => "claude-haiku-4-5".to_owned(),
        false => "gpt-4o-mini".to_owned(),
    })
}

/// Why an example stopped.
pub type Failure = Box<dyn std::error::Error>;

/// The model of a stateless agent: the offline demo model when the program was started with
/// `--offline`, else the provider whose key the environment holds (`OPENAI_API_KEY` and
/// `OPENAI_BASE_URL`, or `ANTHROPIC_API_KEY`); without one, the error says what to set.
pub fn model() -> Result<teamster::Model, Failure> {
    if offline() {
        return Ok(teamster::Model::offline());
    }
    teamster::Model::from_env_vars(|name| std::env::var(name).ok(), &model_id()).map_err(explain)
}

/// The model name for the embedded runtime's agents, chosen as [`model`] chooses: the
/// offline demo model's with `--offline`, else the environment's provider's, added to
/// `runtime`.
#[cfg(feature = "runtime")]
pub async fn runtime_model(runtime: &teamster::runtime::Runtime) -> Result<String, Failure> {
    if offline() {
        return Ok(teamster::Model::offline().name().to_owned());
    }
    runtime.add_env_model_provider(|name| std::env::var(name).ok(), &model_id()).await.map_err(|error| match error {
        teamster::runtime::RuntimeError::Model(error) => explain(error),
        other => other.into(),
    })
}

/// A missing key as a sentence that also names the flag; other errors as they are.
fn explain(error: teamster::Error) -> Failure {
    match error {
        teamster::Error::MissingApiKey { .. } => format!("{error}; or run the example with `-- {OFFLINE_FLAG}`").into(),
        other => other.into(),
    }
}

/// How to start the orders MCP server: this program with [`SERVER_FLAG`].
pub fn orders_server_command() -> std::io::Result<(String, Vec<String>)> {
    let program = std::env::current_exe()?;
    Ok((program.to_string_lossy().into_owned(), vec![SERVER_FLAG.to_owned()]))
}

/// Serves the orders MCP server on stdin and stdout until stdin closes, when this program was
/// started as one; `false` otherwise.
pub fn serve_orders_if_asked() -> bool {
    if std::env::args().nth(1).as_deref() != Some(SERVER_FLAG) {
        return false;
    }
    let stdin = std::io::stdin().lock();
    let mut stdout = std::io::stdout().lock();
    for line in stdin.lines() {
        let Ok(line) = line else { break };
        let Ok(message) = serde_json::from_str::<Value>(&line) else { continue };
        // Notifications (no id) need no answer.
        let Some(id) = message.get("id").cloned() else { continue };
        let method = message["method"].as_str().unwrap_or_default();
        let reply = match answer(method, &message["params"]) {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err((code, text)) => json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": text}}),
        };
        if writeln!(stdout, "{reply}").and_then(|()| stdout.flush()).is_err() {
            break;
        }
    }
    true
}

/// The result of one request, or a JSON-RPC error code and message.
fn answer(method: &str, params: &Value) -> Result<Value, (i64, String)> {
    match method {
        "initialize" => Ok(json!({
            "protocolVersion": params["protocolVersion"].as_str().unwrap_or("2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "orders", "version": "1.0.0"},
            "instructions": "Order ids look like A1001. Refunds cannot be undone.",
        })),
        "ping" => Ok(json!({})),
        "tools/list" => Ok(json!({"tools": [
            {
                "name": "order_status",
                "description": "Where an order is.",
                "inputSchema": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
                "annotations": {"readOnlyHint": true},
            },
            {
                "name": "refund_order",
                "description": "Refunds an order in full.",
                "inputSchema": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
                "annotations": {"readOnlyHint": false, "destructiveHint": true},
            },
        ]})),
        "tools/call" => {
            let order = params["arguments"]["order_id"].as_str().unwrap_or_default();
            let customer = std::env::var("CUSTOMER").unwrap_or_else(|_| "a guest".to_owned());
            let (text, is_error) = match params["name"].as_str() {
                _ if !order.starts_with('A') => (format!("no order {order:?}: ids look like A1001"), true),
                Some("order_status") => (format!("order {order} of {customer} left the warehouse today"), false),
                Some("refund_order") => (format!("order {order} of {customer} is refunded"), false),
                other => (format!("no tool {other:?}"), true),
            };
            Ok(json!({"content": [{"type": "text", "text": text}], "isError": is_error}))
        }
        other => Err((-32601, format!("method not found: {other}"))),
    }
}
