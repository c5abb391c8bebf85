//! An answer as it is written: `cargo run -p teamster --example streaming`.
//!
//! Prints the text deltas as they arrive, then the complete items of the run. Runs on the
//! provider whose key the environment holds, or on the offline demo model with `-- --offline`.

mod support;

use std::io::Write;

use futures_util::StreamExt;
use teamster::{Agent, AgentItem, AgentRequest, AgentStreamEvent};

#[tokio::main]
async fn main() -> Result<(), support::Failure> {
    let model = support::model()?;
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
