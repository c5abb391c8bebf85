//! An MCP server as a toolkit: `cargo run -p teamster --example mcp_toolkit`.
//!
//! Each customer's run session starts its own connection to an order desk MCP server, which
//! learns from the session's context whom it serves. The server here is a small one this
//! program serves itself over stdio (`support/mod.rs`); `McpServer::streamable_http` reaches
//! any remote one. Runs on the provider whose key the environment holds (`OPENAI_API_KEY` and
//! `OPENAI_BASE_URL`, or `ANTHROPIC_API_KEY`; `TEAMSTER_MODEL` picks the model), or with
//! `-- --offline` on the offline demo model (which calls a tool the user names).

mod support;

use teamster::{Agent, AgentItem, AgentRequest, McpServer, McpToolkit};

/// Who a run is for.
struct Customer {
    id: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if support::serve_orders_if_asked() {
        return Ok(());
    }
    let (command, args) = support::orders_server_command()?;
    let orders = McpToolkit::per_context("orders", move |customer: &Customer| {
        Ok(McpServer::stdio(command.clone(), args.clone()).env("CUSTOMER", customer.id.clone()))
    });
    let model = support::model()?;
    let agent = Agent::builder("order-desk", model)
        .instructions("You help customers with their orders. Use the tools; never guess.")
        .toolkit(orders)
        .build()?;

    let question = r#"Where is my order A1001? (order_status {"order_id": "A1001"})"#;
    let request = AgentRequest { input: vec![AgentItem::user(question)], context: Customer { id: "cus_42".into() } };
    let response = agent.run(request).await?;
    for item in &response.output {
        if let AgentItem::ToolResult { tool_name, output, .. } = item {
            println!("{tool_name} answered: {output}");
        }
    }
    println!("{}", response.text());
    if !response.output.iter().any(|item| matches!(item, AgentItem::ToolResult { .. })) {
        return Err("the model answered without calling the order desk".into());
    }
    Ok(())
}
