//! Durable sessions in your process: `cargo run -p teamster --example embedded_runtime`.
//!
//! The same service the Teamster server runs, on an in-memory SQLite store (give a file path
//! or a `postgres://` URL to keep it). A turn runs whether or not anyone reads it: this program
//! stops reading halfway, then follows the turn again from the last event it saw. Runs on the
//! provider whose key the environment holds (`OPENAI_API_KEY` and `OPENAI_BASE_URL`, or
//! `ANTHROPIC_API_KEY`; `TEAMSTER_MODEL` picks the model), or with `-- --offline` on the offline
//! demo model.

mod support;

use futures_util::StreamExt;
use teamster::runtime::{Runtime, user_message};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runtime = Runtime::open("sqlite::memory:").await?;
    let model = support::runtime_model(&runtime).await?;
    let spec = serde_json::json!({
        "model": {"name": model},
        "instructions": "You are a helpful assistant.",
    });
    let spec = serde_json::from_value(spec)?;
    runtime.save_agent("assistant", spec).await?;
    let session = runtime.create_session("assistant").await?;

    let mut started = runtime.start_turn(&session.id, vec![user_message("Tell me about embedded agents.")]).await?;
    let mut last_seen = 0;
    for _ in 0..3 {
        if let Some(event) = started.events.next().await {
            let event = event?;
            println!("event {}: {}", event.sequence, event.event.kind());
            last_seen = event.sequence;
        }
    }
    drop(started.events);
    println!("(stopped reading after event {last_seen}; following again)");

    let rest = runtime.subscribe(&session.id, &started.turn.id, last_seen).await?.finish().await?;
    println!("{} more events; the rest of the answer: {}", rest.events.len(), rest.answer());
    runtime.shutdown().await;
    Ok(())
}
