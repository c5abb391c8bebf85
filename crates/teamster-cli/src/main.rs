//! `teamster`: the server (`serve`), terminal clients for it (`agents`, `run`, `sessions`, and
//! the interactive `chat`), and API key management (`keys`).
//!
//! Thin by design: parse arguments, build configuration, wire the concrete adapters, run.

mod agents;
mod allocator;
mod args;
mod chat;
mod client;
mod keys;
mod limits;
mod log_lines;
mod oidc;
mod serve;
mod settings;
mod sse;
mod store;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = args::Args::parse();
    if matches!(args.command, args::Command::Serve(_)) {
        allocator::pin_mmap_threshold();
    }
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let args::Command::Serve(serve) = &args.command {
        builder.worker_threads(serve.worker_threads());
    }
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match args.command {
            args::Command::Serve(serve) => serve::run(*serve).await,
            args::Command::Agents(agents) => agents::run(&agents.client, agents.command).await,
            args::Command::Run(run) => client::run(run).await,
            args::Command::Sessions(sessions) => client::sessions(sessions).await,
            args::Command::Chat(chat) => chat::run(chat).await,
            args::Command::Keys(keys) => keys::run(keys).await,
            args::Command::Settings(settings) => settings::run(settings).await,
        }
    });
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
