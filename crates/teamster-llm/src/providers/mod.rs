//! Provider adapters: each turns the canonical request into one provider's wire format and the
//! provider's stream back into [`crate::ModelEvent`]s. Only these modules know provider JSON.

pub mod anthropic;
#[cfg(test)]
mod fuzz;
mod http;
pub mod offline;
pub mod openai;
mod sse;

pub use anthropic::AnthropicClient;
pub use offline::OfflineModel;
pub use openai::OpenAiClient;
