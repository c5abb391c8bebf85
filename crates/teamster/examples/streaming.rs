//! An answer as it is written: `cargo run -p teamster --example streaming`.
//!
//! Prints the text deltas as they arrive, then the complete items of the run.

use std::io::Write;

use futures_util::StreamExt;
use teamster::{Agent, AgentItem, AgentRequest, AgentStreamEvent, Model};

#[tokio::main]
async fn main() -> Result<(), teamster::Error> {
    let model_id = std::env::var("TEAMSTER_MODEL").unwrap_or_else(|_| "gpt-4o-mini".to_owned());
    let model = Model::from_env_vars_or_offline(|name| std::env::var(name).ok(), &model_id)?;
    let agent: Agent<()> = Agent::builder("storyteller", model).instructions("Tell very short stories.").build()?;

    let request = AgentRequest { input: vec![AgentItem::user("A story about a lighthouse, please.")], context: () };
    let mut stream = agent.run_stream(request);
    while let Some(event) = stream.next().await {
        match event? {
            AgentStreamEvent::TextDelta(delta) => {
                print!("{delta}");
                // Show each piece as soon as it comes.
                let _ = std::io::stdout().flush();
            }
            AgentStreamEvent::Response(response) => {
                println!("\n\n{} item(s) in the output", response.output.len());
            }
            _ => {}
        }
    }
    Ok(())
}
