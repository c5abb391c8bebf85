//! `fake-model`: runs the fake OpenAI and Anthropic server of [`teamster_fake_model`].
//!
//! `fake-model [--listen ADDR] [--api-key KEY]` (default `127.0.0.1:0`; with a key, model
//! requests must carry it) binds, prints `listening on http://ADDR`
//! as its first line of standard output (flushed, so that a parent process can read the port),
//! and serves until interrupted or terminated.

use std::io::Write as _;
use std::process::ExitCode;

const USAGE: &str = "usage: fake-model [--listen ADDR] [--api-key KEY]   (default 127.0.0.1:0, no key)";

#[tokio::main]
async fn main() -> ExitCode {
    let (listen, api_key) = match parse_args(std::env::args().skip(1)) {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("fake-model: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let listener = match tokio::net::TcpListener::bind(&listen).await {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("fake-model: cannot listen on {listen}: {error}");
            return ExitCode::FAILURE;
        }
    };
    let address = match listener.local_addr() {
        Ok(address) => address,
        Err(error) => {
            eprintln!("fake-model: cannot read the listening address: {error}");
            return ExitCode::FAILURE;
        }
    };
    let mut stdout = std::io::stdout().lock();
    if writeln!(stdout, "listening on http://{address}").and_then(|()| stdout.flush()).is_err() {
        return ExitCode::FAILURE;
    }
    drop(stdout);
    match teamster_fake_model::serve_router(listener, teamster_fake_model::router_with_key(api_key), shutdown_signal()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("fake-model: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The listen address and the API key to require, or `None` when help was asked for.
fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Option<(String, Option<String>)>, String> {
    let mut listen = "127.0.0.1:0".to_owned();
    let mut api_key = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--listen" => listen = args.next().ok_or("--listen needs an address")?,
            "--api-key" => api_key = Some(args.next().ok_or("--api-key needs a key")?),
            "-h" | "--help" => return Ok(None),
            other => match other.strip_prefix("--listen=") {
                Some(value) => listen = value.to_owned(),
                None => return Err(format!("unknown argument {other:?}")),
            },
        }
    }
    Ok(Some((listen, api_key)))
}

/// Completes on Ctrl-C or SIGTERM. In-flight streams are not waited for: the process exits.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let terminate = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut signal) => {
                    signal.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            () = terminate => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Option<String>, String> {
        parse_args(args.iter().map(|arg| (*arg).to_owned())).map(|parsed| parsed.map(|(listen, _)| listen))
    }

    #[test]
    fn arguments() {
        assert_eq!(parse(&[]), Ok(Some("127.0.0.1:0".into())));
        assert_eq!(parse(&["--listen", "127.0.0.1:8080"]), Ok(Some("127.0.0.1:8080".into())));
        assert_eq!(parse(&["--listen=[::1]:0"]), Ok(Some("[::1]:0".into())));
        assert_eq!(parse(&["--help"]), Ok(None));
        assert!(parse(&["--listen"]).is_err());
        assert!(parse(&["--port", "1"]).is_err());
        let with_key = parse_args(["--api-key", "k"].into_iter().map(str::to_owned));
        assert_eq!(with_key, Ok(Some(("127.0.0.1:0".into(), Some("k".into())))));
        assert!(parse(&["--api-key"]).is_err());
    }
}
