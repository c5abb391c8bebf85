//! Steering: instructions a user sends while a turn runs. Before each model call of the main
//! thread, the loop takes what arrived since the last one; the instructions join the
//! conversation as user messages and are recorded on the model message they steered
//! (`steering`), which is also where a rebuilt history puts them again.

use async_trait::async_trait;
use teamster_protocol::event::Steer;

/// Where a running turn's steering instructions come from (the service's queue).
#[async_trait]
pub trait Steering: Send + Sync {
    /// The instructions that arrived since the last call, oldest first; each is returned once.
    async fn take(&self) -> Vec<Steer>;
}
