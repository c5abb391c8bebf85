//! Agents in your Rust program.
//!
//! An [`Agent`] is a reusable, stateless blueprint: a [`Model`], instructions (fixed, or made
//! from each caller's context), [`Tool`]s and [`Toolkit`]s, model parameters and an iteration
//! limit. It runs for any number of callers at once, each with its own context `Ctx`, which
//! reaches the instructions, the toolkits and every tool call and never another caller's run.
//!
//! - [`Agent::run`] and [`Agent::run_stream`] run once, in a [`RunSession`] opened for the run
//!   and closed after it (also when the stream is dropped).
//! - [`Agent::create_session`] opens a [`RunSession`] you keep: its toolkits are prepared once
//!   and serve every run until [`RunSession::close`].
//!
//! A run never remembers: pass the conversation so far as [`AgentItem`]s, and append the
//! response's [`output`](AgentResponse::output) to it for the next run. Runs go through the
//! same engine loop as the Teamster server (tool calls in parallel, large results, context
//! compaction, retries), so an agent behaves here as it does there.
//!
//! # Quick start
//!
//! ```
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//! use teamster::{Agent, AgentItem, AgentRequest, Model, ToolError, tool};
//!
//! /// The user a request is for.
//! struct User {
//!     name: String,
//! }
//!
//! /// Arguments of `get_current_datetime`.
//! #[derive(Deserialize, JsonSchema)]
//! struct Now {}
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! // The offline demo model needs no key; `Model::openai_compatible` talks to a real one.
//! let agent = Agent::builder("assistant", Model::offline())
//!     .dynamic_instructions(|user: &User| Ok(format!("You help {}.", user.name)))
//!     .tool(tool("get_current_datetime", "The current date and time.", |_: Now, _: &User| async {
//!         Ok::<_, ToolError>("2030-01-01T09:00:00Z".to_owned())
//!     }))
//!     .build()?;
//!
//! let request = AgentRequest { input: vec![AgentItem::user("What time is it?")], context: User { name: "Ada".into() } };
//! let response = agent.run(request).await?;
//! assert!(response.text().contains("2030-01-01T09:00:00Z"));
//! # Ok::<(), teamster::Error>(())
//! # }).unwrap();
//! ```

#![warn(missing_docs)]

mod agent;
mod error;
mod items;
mod mcp;
mod model;
/// The types a custom [`ModelClient`] reads (a [`ModelRequest`](model_client::ModelRequest)
/// of messages and tool definitions) and streams back (a
/// [`ModelStream`](model_client::ModelStream) of [`ModelEvent`](model_client::ModelEvent)s).
pub mod model_client {
    pub use teamster_protocol::event::FinishReason;
    pub use teamster_llm::{
        AssistantToolCall, Error, Image, Message, ModelEvent, ModelRequest, ModelStream, ThinkingBlock,
        TokenUsage, ToolDefinition,
    };
}
#[cfg(feature = "runtime")]
pub mod runtime;
mod session;
mod stream;
mod tool;
mod toolkit;

pub use agent::{Agent, AgentBuilder};
pub use error::Error;
pub use items::{AgentItem, AgentRequest, AgentResponse, Part, RunSessionRequest, Usage};
pub use mcp::{McpServer, McpToolkit};
pub use model::Model;
/// The trait of a model's client: implement it and pass it to [`Model::from_client`] to run
/// agents on a model of your own (a test double, an in-house gateway). What it reads and
/// streams is in [`model_client`].
pub use teamster_llm::ModelClient;
pub use session::RunSession;
pub use stream::{AgentStream, AgentStreamEvent};
pub use teamster_protocol::agent::{JsonSchemaFormat, ModelParams, ResponseFormat};
pub use tool::{Tool, ToolError, tool};
pub use toolkit::{Toolkit, ToolkitSession};
