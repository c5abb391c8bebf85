//! The HTTP side of the driver: setting Teamster up through its native API, running one streamed
//! turn (or one direct streaming call to the fake model) and timing its frames.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use serde_json::{Value, json};

/// The API key configured for the fake provider; the fake ignores it, but the direct calls send
/// the same `Authorization` header as the server does.
pub const FAKE_API_KEY: &str = "k";

/// The longest a single turn or call may take before it counts as failed.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// An HTTP client: no proxy (loopback only), bounded requests, and either a keep-alive pool
/// (`keep_alive`, what real clients do) or a new connection for every request.
pub fn http_client(keep_alive: bool) -> anyhow::Result<reqwest::Client> {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(REQUEST_TIMEOUT)
        .connect_timeout(Duration::from_secs(5))
        .pool_max_idle_per_host(if keep_alive { 256 } else { 0 })
        .tcp_nodelay(true)
        .build()
        .context("building the HTTP client")
}

/// The timings of one streamed turn or direct call, from just before the request is sent.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    /// Until the end of the response body.
    pub total: Duration,
    /// Until the first SSE event (comments such as `: ping` excluded).
    pub first_event: Duration,
    /// Until the first model output: a `model.message.delta` event from Teamster, the first
    /// content chunk from the fake model.
    pub first_delta: Duration,
    /// How many model deltas (Teamster) or content chunks (direct) arrived.
    pub deltas: u32,
}

/// What one worker calls, again and again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `POST /api/v1/sessions/{id}/turns` with `"stream": true`; ends after `turn.done`.
    Turn,
    /// `POST /v1/chat/completions` on the fake model with the body Teamster sends it.
    Direct,
}

/// A target for the load phases: one URL per worker (a session each for Teamster) and a body.
#[derive(Clone, Debug)]
pub struct Target {
    pub kind: Kind,
    /// The URL worker `i` posts to is `urls[i % urls.len()]`.
    pub urls: Vec<String>,
    /// The request body, sent verbatim.
    pub body: String,
    /// Client-side round robin over replicas, when there are several.
    pub replicas: Option<RoundRobin>,
}

/// Sends each request to the next of several replicas that share one database: `urls` name the
/// first replica, and a request to the `n`-th replica has its base URL swapped.
#[derive(Clone, Debug)]
pub struct RoundRobin {
    /// The base URL (`http://ADDR`) of every replica, the first one first.
    pub bases: Vec<String>,
    next: Arc<AtomicUsize>,
}

impl RoundRobin {
    pub fn new(bases: Vec<String>) -> RoundRobin {
        RoundRobin { bases, next: Arc::new(AtomicUsize::new(0)) }
    }

    /// `url` (on the first replica) moved to the next replica in turn.
    fn route(&self, url: &str) -> String {
        let replica = self.next.fetch_add(1, Ordering::Relaxed) % self.bases.len();
        match url.strip_prefix(self.bases[0].as_str()) {
            Some(path) => format!("{}{path}", self.bases[replica]),
            None => url.to_owned(),
        }
    }
}

impl Target {
    /// Runs one request for `worker` and times it.
    pub async fn call(&self, client: &reqwest::Client, worker: usize) -> anyhow::Result<Sample> {
        let routed = self.replicas.as_ref().map(|replicas| replicas.route(&self.urls[worker % self.urls.len()]));
        let url = routed.as_ref().unwrap_or(&self.urls[worker % self.urls.len()]);
        let mut request = client.post(url).header(CONTENT_TYPE, "application/json").header(ACCEPT, "text/event-stream");
        if self.kind == Kind::Direct {
            request = request.header(AUTHORIZATION, format!("Bearer {FAKE_API_KEY}"));
        }
        let started = Instant::now();
        let mut response = request.body(self.body.clone()).send().await.with_context(|| format!("POST {url}"))?;
        if !response.status().is_success() {
            let status = response.status();
            let text = response.text().await.unwrap_or_default();
            bail!("POST {url}: {status}: {text}");
        }
        let mut frames = FrameBuffer::default();
        let mut first_event = None;
        let mut first_delta = None;
        let mut deltas = 0u32;
        let mut finished = false;
        while let Some(chunk) = response.chunk().await.with_context(|| format!("reading the stream of {url}"))? {
            let now = started.elapsed();
            frames.push(&chunk, |frame| {
                if frame.first() == Some(&b':') || frame.is_empty() {
                    return; // A comment (heartbeat) is not an event.
                }
                first_event.get_or_insert(now);
                let text = std::str::from_utf8(frame).unwrap_or("");
                match self.kind {
                    Kind::Turn => {
                        if text.contains("\"model.message.delta\"") {
                            first_delta.get_or_insert(now);
                            // The last delta carries `finish_reason` and usage, not content.
                            if text.contains("\"content\":\"") {
                                deltas += 1;
                            }
                        } else if text.contains("\"turn.done\"") {
                            finished = true;
                        }
                    }
                    Kind::Direct => {
                        if text.starts_with("data: [DONE]") {
                            finished = true;
                        } else if text.contains("\"content\":\"") {
                            first_delta.get_or_insert(now);
                            deltas += 1;
                        }
                    }
                }
            });
        }
        let total = started.elapsed();
        if !finished {
            bail!("the stream of {url} ended without its final event");
        }
        let first_event = first_event.context("no event")?;
        Ok(Sample { total, first_event, first_delta: first_delta.unwrap_or(total), deltas })
    }
}

/// The data of an SSE frame: its `data:` lines joined by newlines (`id:` and the rest left out).
pub fn frame_data(frame: &str) -> String {
    let lines: Vec<&str> = frame
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(|data| data.strip_prefix(' ').unwrap_or(data))
        .collect();
    lines.join("\n")
}

/// Splits an SSE byte stream into frames (the text between blank lines).
#[derive(Default)]
pub struct FrameBuffer {
    /// Bytes received but not yet part of a complete frame.
    pending: Vec<u8>,
}

impl FrameBuffer {
    pub fn push(&mut self, chunk: &[u8], mut on_frame: impl FnMut(&[u8])) {
        self.pending.extend_from_slice(chunk);
        let mut start = 0;
        while let Some(offset) = find_blank_line(&self.pending[start..]) {
            on_frame(&self.pending[start..start + offset]);
            start += offset + 2;
        }
        self.pending.drain(..start);
    }
}

fn find_blank_line(bytes: &[u8]) -> Option<usize> {
    bytes.windows(2).position(|pair| pair == b"\n\n")
}

/// Configures the fake model as provider `fake` with model `fake-model`.
pub async fn configure_provider(client: &reqwest::Client, teamster: &str, fake: &str) -> anyhow::Result<()> {
    let body = json!({"manifest": {
        "type": "custom",
        "name": "fake",
        "base_url": format!("{fake}/v1"),
        "auth": {"api_key": FAKE_API_KEY},
        "models": [{"name": "fake-model", "model_id": "fake-model", "properties": {}}],
    }});
    send_json(client.put(format!("{teamster}/api/v1/settings/model-providers")), &body).await.map(|_| ())
}

/// Creates the agent `name` on `fake/fake-model`.
pub async fn create_agent(client: &reqwest::Client, teamster: &str, name: &str) -> anyhow::Result<()> {
    let body = json!({"name": name, "manifest": {"model": {"name": "fake/fake-model"}}});
    send_json(client.post(format!("{teamster}/api/v1/agents")), &body).await.map(|_| ())
}

/// Creates a session of agent `name`; returns its id.
pub async fn create_session(client: &reqwest::Client, teamster: &str, agent: &str) -> anyhow::Result<String> {
    let body = json!({"agent": {"name": agent}});
    let response = send_json(client.post(format!("{teamster}/api/v1/sessions")), &body).await?;
    response["data"]["id"].as_str().map(str::to_owned).with_context(|| format!("no data.id in {response}"))
}

/// The body of a streamed turn asking the fake for `tokens` chunks; `previous_turn_id` is
/// `"none"` (independent turns) or `"auto"` (chained turns that accumulate history).
pub fn turn_body(tokens: u32, previous_turn_id: &str) -> String {
    json!({
        "input": [{"type": "user.message", "content": format!("[tokens:{tokens}] hi")}],
        "stream": true,
        "previous_turn_id": previous_turn_id,
    })
    .to_string()
}

/// Forgets the request bodies the fake model recorded.
pub async fn clear_recorded_requests(client: &reqwest::Client, fake: &str) -> anyhow::Result<()> {
    let response = client.delete(format!("{fake}/requests")).send().await?;
    if !response.status().is_success() {
        bail!("DELETE /requests: {}", response.status());
    }
    Ok(())
}

/// The one request body the fake model recorded since it was last cleared, byte for byte.
pub async fn only_recorded_request(client: &reqwest::Client, fake: &str) -> anyhow::Result<String> {
    let text = client.get(format!("{fake}/requests")).send().await?.error_for_status()?.text().await?;
    let parsed: Value = serde_json::from_str(&text).context("GET /requests is not JSON")?;
    let count = parsed.as_array().map_or(0, Vec::len);
    if count != 1 {
        bail!("expected exactly one recorded request, found {count}");
    }
    // The array is `[` + the body verbatim + `]`: strip the brackets to keep the exact bytes.
    let inner = text.trim().strip_prefix('[').and_then(|rest| rest.strip_suffix(']')).context("not an array")?;
    Ok(inner.to_owned())
}

async fn send_json(request: reqwest::RequestBuilder, body: &Value) -> anyhow::Result<Value> {
    let response = request.json(body).send().await?;
    let status = response.status();
    let text = response.text().await?;
    if !status.is_success() {
        bail!("{status}: {text}");
    }
    if text.trim().is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_str(&text).with_context(|| format!("response is not JSON: {text}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames_of(chunks: &[&str]) -> Vec<String> {
        let mut buffer = FrameBuffer::default();
        let mut frames = Vec::new();
        for chunk in chunks {
            buffer.push(chunk.as_bytes(), |frame| frames.push(String::from_utf8_lossy(frame).into_owned()));
        }
        frames
    }

    #[test]
    fn frames_split_across_chunks() {
        let frames = frames_of(&["id: 1\ndata: {\"a\"", ":1}\n", "\nid: 2\ndata: {}\n\n: ping\n\nid: 3"]);
        assert_eq!(frames, ["id: 1\ndata: {\"a\":1}", "id: 2\ndata: {}", ": ping"]);
    }

    #[test]
    fn turn_body_is_unchained_by_default() {
        let body: Value = serde_json::from_str(&turn_body(50, "none")).unwrap();
        assert_eq!(body["input"][0]["content"], "[tokens:50] hi");
        assert_eq!(body["stream"], true);
        assert_eq!(body["previous_turn_id"], "none");
    }
}
