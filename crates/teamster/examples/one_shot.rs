//! One question, one answer: `cargo run -p teamster --example one_shot`.
//!
//! Runs on the provider whose key the environment holds (`OPENAI_API_KEY` and `OPENAI_BASE_URL`,
//! or `ANTHROPIC_API_KEY`; `TEAMSTER_MODEL` picks the model), or on the offline demo model when
//! started with `--offline`: `cargo run -p teamster --example one_shot -- --offline`.

mod support;

use teamster::{Agent, AgentItem, AgentRequest};

#[tokio::main]
async fn main() -> Result<(), support::Failure> {
    let model = support::model()?;
    let agent: Agent<()> = Agent::builder("poet", model).instructions("You answer in one short sentence.").build()?;

    let request = AgentRequest { input: vec![AgentItem::user("What is a haiku?")], context: () };
    let response = agent.run(request).await?;
    println!("{}", response.text());
    println!("({} input and {} output tokens)", response.usage.input_tokens, response.usage.output_tokens);
    Ok(())
}
