//! One question, one answer: `cargo run -p teamster --example one_shot`.
//!
//! Runs on the offline demo model, or on the OpenAI-compatible endpoint that `OPENAI_API_KEY`
//! (and `OPENAI_BASE_URL`, `TEAMSTER_MODEL`) name.

use teamster::{Agent, AgentItem, AgentRequest, Model};

#[tokio::main]
async fn main() -> Result<(), teamster::Error> {
    let model_id = std::env::var("TEAMSTER_MODEL").unwrap_or_else(|_| "gpt-4o-mini".to_owned());
    let model = Model::from_env_vars_or_offline(|name| std::env::var(name).ok(), &model_id)?;
    let agent: Agent<()> = Agent::builder("poet", model).instructions("You answer in one short sentence.").build()?;

    let request = AgentRequest { input: vec![AgentItem::user("What is a haiku?")], context: () };
    let response = agent.run(request).await?;
    println!("{}", response.text());
    println!("({} input and {} output tokens)", response.usage.input_tokens, response.usage.output_tokens);
    Ok(())
}
