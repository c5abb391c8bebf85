//! Tiny HTTP servers for adapter tests: they record the requests they receive and answer with
//! raw bytes, either chunked (each piece one HTTP chunk, so the client sees exactly the splits
//! the test chose) or close-delimited (the body ends when the connection closes). [`serve_once`]
//! answers one request; [`ScriptedServer`] answers a list of replies in order.

#![allow(dead_code, reason = "each test binary uses a part of this module")]

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// How the reply body is framed.
pub enum Body {
    /// `Transfer-Encoding: chunked`, one HTTP chunk per piece.
    Chunked(Vec<Vec<u8>>),
    /// No length: the pieces are written one by one and the connection is closed.
    CloseDelimited(Vec<Vec<u8>>),
    /// `Content-Length` and the bytes.
    Fixed(Vec<u8>),
}

/// What the server answers.
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: Body,
}

impl Reply {
    /// A `200` event stream sent in the given pieces, chunked.
    pub fn sse(pieces: Vec<Vec<u8>>) -> Self {
        Reply { status: 200, headers: vec![("content-type", "text/event-stream".into())], body: Body::Chunked(pieces) }
    }

    /// A fixed body with a status and a content type.
    pub fn fixed(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Self {
        Reply { status, headers: vec![("content-type", content_type.into())], body: Body::Fixed(body.into()) }
    }
}

/// The request the server received.
#[derive(Debug)]
pub struct Recorded {
    /// For example `POST /v1/chat/completions HTTP/1.1`.
    pub request_line: String,
    /// Header names are lowercase.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(key, _)| key == name).map(|(_, value)| value.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("the request body is JSON")
    }
}

/// Serves one request with `reply`; returns the base URL (`http://127.0.0.1:PORT/v1`) and the
/// task that yields the recorded request.
pub async fn serve_once(reply: Reply) -> (String, JoinHandle<Recorded>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("local address");
    let task = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.expect("accept");
        let recorded = read_request(&mut socket).await;
        write_reply(&mut socket, reply).await;
        recorded
    });
    (format!("http://{address}/v1"), task)
}

/// A server that answers each request with the next of its replies (a 500 once they run out),
/// one connection per request, optionally holding each request a while first so that
/// concurrent requests overlap.
pub struct ScriptedServer {
    /// For example `http://127.0.0.1:PORT/v1`.
    pub base_url: String,
    script: Arc<Script>,
    accept: JoinHandle<()>,
}

struct Script {
    replies: Mutex<VecDeque<Reply>>,
    recorded: Mutex<Vec<Recorded>>,
    hold: Duration,
    /// Requests received and not yet answered.
    in_flight: AtomicUsize,
    /// The most requests ever in flight at once.
    max_in_flight: AtomicUsize,
}

impl ScriptedServer {
    /// Answers with `replies` in order, at once.
    pub async fn start(replies: Vec<Reply>) -> Self {
        ScriptedServer::holding(replies, Duration::ZERO).await
    }

    /// Answers with `replies` in order, each after holding the request for `hold`.
    pub async fn holding(replies: Vec<Reply>, hold: Duration) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("local address");
        let script = Arc::new(Script {
            replies: Mutex::new(replies.into()),
            recorded: Mutex::new(Vec::new()),
            hold,
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
        });
        let serving = script.clone();
        let accept = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(serving.clone().answer(socket));
            }
        });
        ScriptedServer { base_url: format!("http://{address}/v1"), script, accept }
    }

    /// How many requests arrived so far.
    pub fn request_count(&self) -> usize {
        self.script.recorded.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// The bodies of the requests received so far, in order of arrival.
    pub fn request_bodies(&self) -> Vec<Vec<u8>> {
        let recorded = self.script.recorded.lock().unwrap_or_else(PoisonError::into_inner);
        recorded.iter().map(|request| request.body.clone()).collect()
    }

    /// The most requests that were ever in flight at once.
    pub fn max_in_flight(&self) -> usize {
        self.script.max_in_flight.load(Ordering::SeqCst)
    }
}

impl Drop for ScriptedServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl Script {
    async fn answer(self: Arc<Self>, mut socket: tokio::net::TcpStream) {
        let recorded = read_request(&mut socket).await;
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        self.recorded.lock().unwrap_or_else(PoisonError::into_inner).push(recorded);
        tokio::time::sleep(self.hold).await;
        let reply = self.replies.lock().unwrap_or_else(PoisonError::into_inner).pop_front();
        let reply = reply.unwrap_or_else(|| Reply::fixed(500, "text/plain", "the script has no more replies"));
        // Counted as answered before the reply is written: the client cannot finish reading it
        // sooner, so a client-side limit is never seen exceeded because of this server's timing.
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        write_reply(&mut socket, reply).await;
    }
}

/// Splits `bytes` into pieces of `size` bytes (the last one shorter).
pub fn pieces(bytes: &[u8], size: usize) -> Vec<Vec<u8>> {
    bytes.chunks(size.max(1)).map(<[u8]>::to_vec).collect()
}

/// Splits `bytes` at the given offsets.
pub fn split_at(bytes: &[u8], offsets: &[usize]) -> Vec<Vec<u8>> {
    let mut result = Vec::new();
    let mut start = 0;
    for &offset in offsets {
        result.push(bytes[start..offset].to_vec());
        start = offset;
    }
    result.push(bytes[start..].to_vec());
    result
}

async fn read_request(socket: &mut tokio::net::TcpStream) -> Recorded {
    let mut buffer = Vec::new();
    let mut scratch = [0u8; 4096];
    let head_end = loop {
        if let Some(position) = buffer.windows(4).position(|window| window == b"\r\n\r\n") {
            break position;
        }
        let read = socket.read(&mut scratch).await.expect("read the request");
        assert!(read > 0, "the client closed before sending a whole request head");
        buffer.extend_from_slice(&scratch[..read]);
    };
    let head = String::from_utf8(buffer[..head_end].to_vec()).expect("the request head is UTF-8");
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default().to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(name, _)| name == "content-length")
        .and_then(|(_, value)| value.parse().ok())
        .unwrap_or(0);
    let mut body = buffer[head_end + 4..].to_vec();
    while body.len() < length {
        let read = socket.read(&mut scratch).await.expect("read the request body");
        assert!(read > 0, "the client closed before sending the whole body");
        body.extend_from_slice(&scratch[..read]);
    }
    Recorded { request_line, headers, body }
}

async fn write_reply(socket: &mut tokio::net::TcpStream, reply: Reply) {
    let mut head = format!("HTTP/1.1 {} Test\r\n", reply.status);
    for (name, value) in &reply.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    // Every connection serves one request, so clients must not keep it for another.
    head.push_str("connection: close\r\n");
    match &reply.body {
        Body::Chunked(_) => head.push_str("transfer-encoding: chunked\r\n"),
        Body::CloseDelimited(_) => {}
        Body::Fixed(bytes) => head.push_str(&format!("content-length: {}\r\n", bytes.len())),
    }
    head.push_str("\r\n");
    // A client that gives up early (an error status) may close first; write errors are fine.
    let _ = socket.write_all(head.as_bytes()).await;
    match reply.body {
        Body::Chunked(pieces) => {
            for piece in pieces.iter().filter(|piece| !piece.is_empty()) {
                let mut frame = format!("{:x}\r\n", piece.len()).into_bytes();
                frame.extend_from_slice(piece);
                frame.extend_from_slice(b"\r\n");
                if socket.write_all(&frame).await.is_err() {
                    return;
                }
                let _ = socket.flush().await;
                tokio::task::yield_now().await;
            }
            let _ = socket.write_all(b"0\r\n\r\n").await;
        }
        Body::CloseDelimited(pieces) => {
            for piece in pieces {
                if socket.write_all(&piece).await.is_err() {
                    return;
                }
                let _ = socket.flush().await;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        Body::Fixed(bytes) => {
            let _ = socket.write_all(&bytes).await;
        }
    }
    let _ = socket.flush().await;
    let _ = socket.shutdown().await;
}

/// The bytes of `tests/fixtures/<provider>/<name>`.
pub fn fixture(provider: &str, name: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/{provider}/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|error| panic!("reading {path}: {error}"))
}

/// Serves `reply` once, streams `request` through the client `make` builds for the server's
/// base URL, and returns every stream item and the request the server received.
pub async fn run_adapter<C: teamster_llm::ModelClient>(
    reply: Reply,
    request: teamster_llm::ModelRequest,
    make: impl FnOnce(String) -> C,
) -> (Vec<Result<teamster_llm::ModelEvent, teamster_llm::Error>>, Recorded) {
    use futures_util::StreamExt;
    let (base_url, server) = serve_once(reply).await;
    let client = make(base_url);
    let items = tokio::time::timeout(Duration::from_secs(10), client.stream(request).collect::<Vec<_>>())
        .await
        .expect("the stream ends");
    let recorded = server.await.expect("the server task");
    (items, recorded)
}

/// The text of a stream's events, concatenated.
pub fn text_of(events: &[teamster_llm::ModelEvent]) -> String {
    events
        .iter()
        .filter_map(|event| match event {
            teamster_llm::ModelEvent::Text(text) => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// Folds tool call fragments into `(id, name, arguments)` per index.
pub fn tool_calls_of(events: &[teamster_llm::ModelEvent]) -> Vec<(String, String, String)> {
    let mut calls: Vec<(String, String, String)> = Vec::new();
    for event in events {
        if let teamster_llm::ModelEvent::ToolCall { index, id, name, arguments } = event {
            let index = *index as usize;
            if calls.len() <= index {
                calls.resize(index + 1, Default::default());
            }
            let call = &mut calls[index];
            if let Some(id) = id {
                call.0 = id.clone();
            }
            if let Some(name) = name {
                call.1 = name.clone();
            }
            call.2.push_str(arguments);
        }
    }
    calls
}
