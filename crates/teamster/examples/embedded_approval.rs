//! A human in the loop, in your process: `cargo run -p teamster --example embedded_approval`.
//!
//! The embedded runtime hosts the program's own Rust functions as tools ([`NativeTools`]): an
//! order desk whose `order_status` only reads and whose `refund_order` changes money. No MCP
//! server is involved. Refunding is not read-only, so the turn stops before the call and waits;
//! the program approves it, and the next turn runs the call and answers. The waiting turn is
//! durable: with a file or PostgreSQL store, the approval could come from another process, days
//! later (which registers the same tools). Runs on the provider whose key the environment holds
//! (`OPENAI_API_KEY` and `OPENAI_BASE_URL`, or `ANTHROPIC_API_KEY`; `TEAMSTER_MODEL` picks the
//! model), or with `-- --offline` on the offline demo model (which calls a tool the user names).

mod support;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use teamster::runtime::{Approval, Event, NativeTools, Runtime, RuntimeOptions, ToolScope, TurnInput, user_message};
use teamster::{ToolError, tool};

/// Arguments of the order desk's tools.
#[derive(Deserialize, JsonSchema)]
struct Order {
    /// The order's id, like A1001.
    order_id: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let status = tool("order_status", "Where an order is.", |order: Order, scope: &ToolScope| {
        let customer = scope.user.subject_id.clone();
        async move { Ok::<_, ToolError>(format!("order {} of {customer} left the warehouse today", order.order_id)) }
    });
    let refund = tool("refund_order", "Refunds an order in full.", |order: Order, scope: &ToolScope| {
        let customer = scope.user.subject_id.clone();
        async move {
            if !order.order_id.starts_with('A') {
                return Err(ToolError::new(format!("no order {:?}: ids look like A1001", order.order_id)));
            }
            Ok(format!("order {} of {customer} is refunded", order.order_id))
        }
    });
    let mut options = RuntimeOptions::default();
    NativeTools::new("orders").read_only_tool(status).tool(refund).register(&mut options)?;
    let runtime = Runtime::open_with("sqlite::memory:", options).await?;
    let model = support::runtime_model(&runtime).await?;
    // The agent names the tool set as it would name an MCP server; calls of tools that are not
    // read-only wait for approval unless the entry's selectors say otherwise.
    let spec = json!({
        "model": {"name": model},
        "instructions": "You help customers with their orders. Use the tools; never guess.",
        "mcp_servers": [{"name": "orders", "preload": true}],
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
