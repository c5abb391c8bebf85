//! The model seam: one small trait, [`ModelClient::stream`], and the provider adapters behind it.
//!
//! A request is a canonical chat ([`ModelRequest`]); a response is a stream of
//! [`ModelEvent`]s. Non-streaming use is the collected stream. Only the adapters under
//! `providers/` know provider JSON. The [`registry::ModelRegistry`] turns `provider/model`
//! names into a client and the provider's model id, wrapping every provider's client in a
//! concurrency limit ([`limit::LimitedClient`]) and retries ([`retry::RetryingClient`]).
//! [`TokenUsage::cost_in_usd`] prices a call's usage.

mod cost;
mod error;
pub mod limit;
pub mod providers;
pub mod registry;
mod request;
pub mod retry;

use futures_util::stream::BoxStream;

pub use error::{Error, GiveUpReason};
pub use request::*;

/// A model's answer as it streams: fragments, then a finish reason and usage.
pub type ModelStream = BoxStream<'static, Result<ModelEvent, Error>>;

/// Anything that can answer a chat request with a stream of events.
pub trait ModelClient: Send + Sync {
    fn stream(&self, request: ModelRequest) -> ModelStream;
}

impl<T: ModelClient + ?Sized> ModelClient for std::sync::Arc<T> {
    fn stream(&self, request: ModelRequest) -> ModelStream {
        (**self).stream(request)
    }
}
