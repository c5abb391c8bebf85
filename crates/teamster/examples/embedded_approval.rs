//! A human in the loop, in your process: `cargo run -p teamster --example embedded_approval`.
//!
//! The embedded runtime runs an agent with an order desk MCP server (a small one this program
//! serves itself over stdio, `support/mod.rs`). Refunding an order is destructive, so the turn
//! stops before the call and waits; the program approves it, and the next turn runs the call
//! and answers. The waiting turn is durable: with a file or PostgreSQL store, the approval
//! could come from another process, days later. Runs on the offline demo model (which calls a
//! tool the user names), or on the OpenAI-compatible endpoint that `OPENAI_API_KEY` (and
//! `OPENAI_BASE_URL`, `TEAMSTER_MODEL`) name.

mod support;

use serde_json::json;
use teamster::runtime::{Approval, Event, Runtime, ServiceConfig, TurnInput, user_message};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if support::serve_orders_if_asked() {
        return Ok(());
    }
    // Stdio MCP servers start programs on this machine, so the runtime allows them only when
    // asked to.
    let config = ServiceConfig { allow_stdio_mcp: true, ..ServiceConfig::default() };
    let runtime = Runtime::open_with("sqlite::memory:", config).await?;
    let model = runtime.add_env_model_provider(|name| std::env::var(name).ok(), &support::model_id()).await?;
    let (command, args) = support::orders_server_command()?;
    let orders = json!({
        "type": "stdio", "name": "orders", "description": "The order desk.",
        "command": command, "args": args, "env": {"CUSTOMER": "cus_42"},
    });
    runtime.add_mcp_server(serde_json::from_value(orders)?).await?;
    // Calls of tools that write or destroy wait for approval unless the spec says otherwise.
    let spec = json!({
        "model": {"name": model},
        "instructions": "You help customers with their orders. Use the tools; never guess.",
        "mcp_servers": [{"type": "truefoundry-mcp-registry", "name": "orders", "preload": true}],
    });
    runtime.save_agent("order-desk", serde_json::from_value(spec)?).await?;
    let session = runtime.create_session("order-desk").await?;

    let ask = r#"Please refund order A1001, it arrived broken. (refund_order {"order_id": "A1001"})"#;
    let waiting = runtime.start_turn(&session.id, vec![user_message(ask)]).await?.finish().await?;
    let Some(Event::ToolApprovalRequired(pending)) = waiting.required_actions().first().copied() else {
        return Err(format!("the turn should wait for an approval; it ended with {:?}", waiting.output()).into());
    };
    let calls = waiting.output().and_then(|message| message.tool_calls.as_ref());
    let mut approvals = Vec::new();
    for waiting_call in &pending.tool_calls {
        let call = calls.into_iter().flatten().find(|call| call.id == waiting_call.id);
        if let Some(call) = call {
            println!("approve {}({})? yes", call.function.name, call.function.arguments);
        }
        approvals.push(TurnInput::ToolApproval {
            thread_id: pending.thread_id.clone(),
            tool_call_id: waiting_call.id.clone(),
            approval: Approval::allow(),
        });
    }

    let resumed = runtime.start_turn(&session.id, approvals).await?.finish().await?;
    for event in &resumed.events {
        if let Event::ToolResponse(response) = &event.event {
            println!("the order desk answered: {}", response.content);
        }
    }
    println!("{}", resumed.answer());
    let ran = resumed.events.iter().any(|event| matches!(&event.event, Event::ToolResponse(_)));
    runtime.shutdown().await;
    if !ran {
        return Err("the approved call did not run".into());
    }
    Ok(())
}
