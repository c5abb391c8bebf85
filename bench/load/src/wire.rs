//! Counting what `teamster serve` asks of PostgreSQL: a loopback relay between the server and
//! the database that reads the headers of the frontend protocol's messages as they pass.
//!
//! Every exchange the server waits for ends with a `Sync` (extended protocol) or is one `Query`
//! (simple protocol), so their sum is the round trips; each `Execute`, and each `Query`, is a
//! statement run. The relay also counts the bytes each way. It sees only message types and
//! lengths, never changes a byte, and runs on threads of its own, outside the driver's runtime.
//! Connections through it are plain TCP: the server's `sslmode=prefer` request is answered `N`
//! by the throwaway server, which has no TLS.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use anyhow::Context;

/// The untyped request codes that come before the startup message.
const SSL_REQUEST: u32 = 80_877_103;
const GSSENC_REQUEST: u32 = 80_877_104;

/// What passed through the relay so far.
#[derive(Default)]
pub struct Counts {
    syncs: AtomicU64,
    queries: AtomicU64,
    executes: AtomicU64,
    to_server: AtomicU64,
    from_server: AtomicU64,
}

/// A reading of [`Counts`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Reading {
    /// `Sync` and `Query` messages: exchanges the client waited for.
    pub round_trips: u64,
    /// `Execute` and `Query` messages.
    pub statements: u64,
    /// Bytes sent to the database and received from it.
    pub to_server: u64,
    pub from_server: u64,
}

impl Reading {
    /// `self - earlier`, field by field.
    pub fn since(&self, earlier: &Reading) -> Reading {
        Reading {
            round_trips: self.round_trips - earlier.round_trips,
            statements: self.statements - earlier.statements,
            to_server: self.to_server - earlier.to_server,
            from_server: self.from_server - earlier.from_server,
        }
    }
}

impl Counts {
    pub fn read(&self) -> Reading {
        let syncs = self.syncs.load(Ordering::Acquire);
        let queries = self.queries.load(Ordering::Acquire);
        Reading {
            round_trips: syncs + queries,
            statements: self.executes.load(Ordering::Acquire) + queries,
            to_server: self.to_server.load(Ordering::Acquire),
            from_server: self.from_server.load(Ordering::Acquire),
        }
    }
}

/// A running relay; it stops accepting when dropped (open connections run until either side
/// closes them).
pub struct Relay {
    /// `host:port` to connect to instead of the database's.
    pub address: String,
    pub counts: Arc<Counts>,
    stopped: Arc<AtomicBool>,
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stopped.store(true, Ordering::Release);
        // Wakes the accepting thread so that it sees the flag.
        let _ = TcpStream::connect(&self.address);
    }
}

/// Starts a relay on a free loopback port to `upstream` (`host:port`).
pub fn start(upstream: &str) -> anyhow::Result<Relay> {
    let listener = TcpListener::bind("127.0.0.1:0").context("binding the PostgreSQL relay")?;
    let address = listener.local_addr()?.to_string();
    let counts = Arc::new(Counts::default());
    let stopped = Arc::new(AtomicBool::new(false));
    let (upstream, shared, stop) = (upstream.to_owned(), counts.clone(), stopped.clone());
    std::thread::Builder::new().name("pg-relay".into()).spawn(move || {
        for client in listener.incoming() {
            if stop.load(Ordering::Acquire) {
                return;
            }
            let Ok(client) = client else { continue };
            let Ok(server) = TcpStream::connect(&upstream) else { continue };
            let _ = (client.set_nodelay(true), server.set_nodelay(true));
            let (Ok(client_reader), Ok(server_writer)) = (client.try_clone(), server.try_clone()) else { continue };
            let up = shared.clone();
            let down = shared.clone();
            std::thread::spawn(move || {
                let mut parser = Parser::default();
                pump(client_reader, server_writer, |bytes| {
                    up.to_server.fetch_add(bytes.len() as u64, Ordering::AcqRel);
                    parser.feed(bytes, &up);
                });
            });
            std::thread::spawn(move || {
                pump(server, client, |bytes| {
                    down.from_server.fetch_add(bytes.len() as u64, Ordering::AcqRel);
                });
            });
        }
    })?;
    Ok(Relay { address, counts, stopped })
}

/// Copies `from` to `to` until either ends, showing each read to `observe`.
fn pump(mut from: TcpStream, mut to: TcpStream, mut observe: impl FnMut(&[u8])) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(read) => {
                observe(&buffer[..read]);
                if to.write_all(&buffer[..read]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}

/// Reads the frontend message stream in pieces as they arrive: first untyped messages (an
/// optional SSL or GSS encryption request, then the startup message: length, code), then typed
/// ones (type byte, length).
#[derive(Default)]
struct Parser {
    /// Whether the startup message has passed.
    started: bool,
    header: Vec<u8>,
    /// Bytes of the current message's body still to skip.
    skip: usize,
}

impl Parser {
    fn feed(&mut self, mut data: &[u8], counts: &Counts) {
        while !data.is_empty() {
            if self.skip > 0 {
                let skipped = self.skip.min(data.len());
                self.skip -= skipped;
                data = &data[skipped..];
                continue;
            }
            let header_len = if self.started { 5 } else { 8 };
            let taken = (header_len - self.header.len()).min(data.len());
            self.header.extend_from_slice(&data[..taken]);
            data = &data[taken..];
            if self.header.len() < header_len {
                return;
            }
            let word = |at: usize| u32::from_be_bytes([self.header[at], self.header[at + 1], self.header[at + 2], self.header[at + 3]]);
            if self.started {
                let (kind, length) = (self.header[0], word(1) as usize);
                match kind {
                    b'S' => counts.syncs.fetch_add(1, Ordering::AcqRel),
                    b'Q' => counts.queries.fetch_add(1, Ordering::AcqRel),
                    b'E' => counts.executes.fetch_add(1, Ordering::AcqRel),
                    _ => 0,
                };
                self.skip = length.saturating_sub(4);
            } else {
                let (length, code) = (word(0) as usize, word(4));
                self.started = code != SSL_REQUEST && code != GSSENC_REQUEST;
                self.skip = length.saturating_sub(8);
            }
            self.header.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut bytes = vec![kind];
        bytes.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        bytes.extend_from_slice(body);
        bytes
    }

    #[test]
    fn messages_are_counted_across_any_split() {
        let mut stream = Vec::new();
        stream.extend_from_slice(&8u32.to_be_bytes());
        stream.extend_from_slice(&SSL_REQUEST.to_be_bytes());
        let startup = b"\0\x03\0\0user\0postgres\0\0";
        stream.extend_from_slice(&(startup.len() as u32 + 4).to_be_bytes());
        stream.extend_from_slice(startup);
        for part in [message(b'P', b"\0SELECT 1\0\0\0"), message(b'B', &[0; 10]), message(b'E', &[0; 5]), message(b'S', b"")] {
            stream.extend(part);
        }
        stream.extend(message(b'Q', b"BEGIN\0"));
        stream.extend(message(b'E', b"\0\0\0\0\0"));
        stream.extend(message(b'S', b""));
        for chunk in [1, 2, 3, 7, stream.len()] {
            let counts = Counts::default();
            let mut parser = Parser::default();
            for piece in stream.chunks(chunk) {
                parser.feed(piece, &counts);
            }
            let reading = counts.read();
            assert_eq!((reading.round_trips, reading.statements), (3, 3), "chunks of {chunk}");
        }
    }
}
