//! A limit on how many calls run at once against one provider: [`LimitedClient`].

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::{Stream, StreamExt, stream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::{Error, ModelClient, ModelEvent, ModelRequest, ModelStream};

/// How many requests a provider gets at once when its manifest does not say.
pub const DEFAULT_MAX_CONCURRENT_REQUESTS: usize = 64;

/// A client that lets at most a fixed number of calls run at once; later calls wait in line.
///
/// A call takes its permit before its request is sent and keeps it until its stream ends or is
/// dropped. Wrapped by a [`crate::retry::RetryingClient`], each attempt takes a permit of its
/// own, so a call waiting to retry holds none.
#[derive(Debug)]
pub struct LimitedClient<C> {
    inner: Arc<C>,
    permits: Arc<Semaphore>,
}

impl<C: ModelClient + 'static> LimitedClient<C> {
    /// Wraps `inner` so that at most `max_concurrent` calls (at least one) run at once.
    pub fn new(inner: C, max_concurrent: usize) -> Self {
        LimitedClient { inner: Arc::new(inner), permits: Arc::new(Semaphore::new(max_concurrent.max(1))) }
    }
}

impl<C: ModelClient + 'static> ModelClient for LimitedClient<C> {
    fn stream(&self, request: ModelRequest) -> ModelStream {
        let inner = self.inner.clone();
        let permits = self.permits.clone();
        Box::pin(
            stream::once(async move {
                // The semaphore is never closed, so this is always a permit.
                let permit = permits.acquire_owned().await.ok();
                Permitted { events: inner.stream(request), _permit: permit }
            })
            .flatten(),
        )
    }
}

/// A stream that holds a permit for as long as it lives.
struct Permitted {
    events: ModelStream,
    _permit: Option<OwnedSemaphorePermit>,
}

impl Stream for Permitted {
    type Item = Result<ModelEvent, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.events.poll_next_unpin(cx)
    }
}
