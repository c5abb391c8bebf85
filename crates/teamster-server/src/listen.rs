//! Serving connections: HTTP/1.1 on hyper with a header-read (and idle) timeout, a cap on open
//! connections, and a shutdown that never waits for streaming clients.
//!
//! - A connection that does not deliver a complete request header within the header timeout,
//!   whether it just opened or sits idle between requests, is closed: half-open connections
//!   cannot pile up until the process runs out of file descriptors.
//! - At most `max_connections` are open at once; beyond that, accepting waits until one
//!   closes (the kernel's backlog holds the rest), so the server keeps the descriptors it needs.
//! - On shutdown the listener stops accepting, every live event stream ends cleanly after the
//!   last frame it sent (its client resumes from that `id:`), each connection finishes the
//!   request in flight and closes, and whatever is still open after the drain period is dropped.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::AppState;

/// How long open connections get to finish their request once shutdown has begun.
const DRAIN: Duration = Duration::from_secs(3);

/// Serves the application on a listener until `shutdown` completes, then drains.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let config = state.config.clone();
    let stop = state.shutdown.clone();
    let app = tower::ServiceExt::map_request(crate::app(state), |request: hyper::Request<hyper::body::Incoming>| {
        request.map(axum::body::Body::new)
    });
    let service = TowerToHyperService::new(app);
    let permits = Arc::new(Semaphore::new(config.max_connections.max(1)));
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            () = &mut shutdown => break,
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of descriptors or a connection reset before it was accepted: the
                    // listener itself is fine; wait a moment rather than spin.
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        // Events are small writes that must leave at once: without TCP_NODELAY, Nagle's
        // algorithm holds them until the client's delayed ACK (about 40 ms on Linux).
        if let Err(error) = stream.set_nodelay(true) {
            tracing::warn!(%error, "could not set TCP_NODELAY");
        }
        let service = service.clone();
        let stop = stop.clone();
        let header_timeout = config.header_timeout;
        connections.spawn(async move {
            let _permit = permit;
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(header_timeout).keep_alive(true);
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(connection);
            let result = tokio::select! {
                result = connection.as_mut() => result,
                () = stop.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(error) = result {
                tracing::debug!(%peer, %error, "connection ended with an error");
            }
        });
        // Reap finished connections now and then, so the set stays the size of what is open.
        while connections.try_join_next().is_some() {}
    }
    drop(listener);
    stop.cancel();
    let drained = tokio::time::timeout(DRAIN, async { while connections.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        tracing::warn!(open = connections.len(), "connections still open after the drain period are closed");
        connections.shutdown().await;
    }
    Ok(())
}
