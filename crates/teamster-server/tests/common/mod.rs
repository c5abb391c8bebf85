//! What every integration test of the server starts from: the whole application on a fresh
//! in-memory store, without a socket.

use std::sync::Arc;

use teamster_server::{AppState, ServerConfig};
use teamster_service::{Service, ServiceConfig};

/// The application state of a server with `config`, on a fresh in-memory SQLite store.
pub async fn app_state(config: ServerConfig) -> AppState {
    let store = Arc::new(teamster_store_sqlite::SqliteStore::connect("sqlite::memory:").await.expect("an in-memory store"));
    let service = Service::start(store, ServiceConfig::default()).await.expect("the service starts");
    AppState::new(service, config)
}
