//! `teamster chat` without `--server`: the server `teamster serve` runs, started inside this
//! process on a loopback port of its own, on the default data directory (or `--data-dir`,
//! `--database`).
//!
//! Why a server and not the service called directly: the chat then has one code path, the
//! native HTTP API and its event streams, whether the runtime is remote or embedded, and the
//! embedded runtime is exactly the one `teamster serve` runs (example agent, sandboxes, MCP
//! OAuth callbacks, which need an HTTP address anyway). The cost, a loopback socket, is
//! nothing beside a model call. Its log goes to `chat.log` in the data directory, not to the
//! screen the chat draws on.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use tokio::sync::oneshot;

use crate::args::{Args, Command, StoreArgs};

/// How long the server gets to finish running turns' records when the chat ends.
const STOP_WAIT: Duration = Duration::from_secs(8);

/// A server running in this process.
pub struct Embedded {
    /// Its base URL, `http://127.0.0.1:PORT`.
    pub url: String,
    stop: oneshot::Sender<()>,
    /// The server's result, once it has stopped.
    done: oneshot::Receiver<anyhow::Result<ExitCode>>,
}

/// Starts the server on `127.0.0.1:0` with the store the arguments name and every other
/// setting as `teamster serve` takes it (its defaults and `TEAMSTER_*` variables).
pub async fn start(store: &StoreArgs) -> anyhow::Result<Embedded> {
    let mut serve = match Args::try_parse_from(["teamster", "serve", "--listen", "127.0.0.1:0"]).context("the embedded server's settings")? {
        Args { command: Command::Serve(serve) } => *serve,
        _ => bail!("the embedded server's settings did not parse as `serve`"),
    };
    serve.store = store.clone();
    let data_dir = crate::store::data_dir(store);
    std::fs::create_dir_all(&data_dir).with_context(|| format!("creating {}", data_dir.display()))?;
    let log_path = data_dir.join("chat.log");
    let log = std::fs::OpenOptions::new().create(true).append(true).open(&log_path).with_context(|| format!("opening {}", log_path.display()))?;
    // The subscriber is set once per process; the chat starts one server.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("TEAMSTER_LOG").unwrap_or_else(|_| "info".into()))
        .with_ansi(false)
        .with_writer(std::sync::Mutex::new(log))
        .try_init();

    let (listening, address) = oneshot::channel::<SocketAddr>();
    let (stop, stopped) = oneshot::channel::<()>();
    let (finished, done) = oneshot::channel::<anyhow::Result<ExitCode>>();
    // A runtime of its own on a thread of its own: the server outlives no chat, and its future
    // need not be `Send`.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("teamster-embedded")
        .enable_all()
        .build()
        .context("starting the embedded server's runtime")?;
    std::thread::Builder::new().name("teamster-embedded".into()).spawn(move || {
        let shutdown = async move {
            let _ = stopped.await;
        };
        let result = runtime.block_on(crate::serve::serve(serve, move |address| {
            let _ = listening.send(address);
        }, shutdown));
        let _ = finished.send(result);
        runtime.shutdown_timeout(STOP_WAIT);
    })?;
    match address.await {
        Ok(address) => Ok(Embedded { url: format!("http://{address}"), stop, done }),
        Err(_) => match done.await {
            Ok(Err(error)) => Err(error.context(format!("starting the embedded server (its log: {})", log_path.display()))),
            _ => bail!("the embedded server stopped before it listened (its log: {})", log_path.display()),
        },
    }
}

impl Embedded {
    /// Stops the server, waiting a little for running turns to record their end.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = tokio::time::timeout(STOP_WAIT, self.done).await;
    }
}
