//! The chat's client of the native `/api/v1` API: sessions, turns and their event streams,
//! decisions, steering and follow-ups, modes, tasks and plans, sandbox downloads.

use anyhow::{Context, bail};
use futures_util::{Stream, StreamExt};
use serde_json::{Value, json};
use teamster_protocol::event::Event;
use teamster_protocol::input::TurnInput;

use crate::sse::SseFrames;

/// How many pages of a session's events a resume reads at most (100 events each).
const MAX_HISTORY_PAGES: usize = 50;
/// How many pages of agents (100 each) the chat looks through for the one it was given.
const MAX_AGENT_PAGES: usize = 20;

/// The extension events the chat's turn streams carry: what a running command prints.
const SHOWN_EXTENSIONS: &str = "shell.output";

/// A server's native API, with the caller's key if it needs one.
#[derive(Clone, Debug)]
pub struct ChatApi {
    base: String,
    api_key: Option<String>,
    http: reqwest::Client,
}

impl ChatApi {
    pub fn new(server: &str, api_key: Option<String>) -> ChatApi {
        ChatApi { base: format!("{}/api/v1", server.trim_end_matches('/')), api_key, http: reqwest::Client::new() }
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.base));
        match &self.api_key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    /// Sends a request; a response that is not a success becomes the server's error message.
    async fn send(&self, request: reqwest::RequestBuilder) -> anyhow::Result<reqwest::Response> {
        let response = request.send().await.with_context(|| format!("cannot reach the server at {}", self.base))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let body: Value = response.json().await.unwrap_or(Value::Null);
        let message = body["error"]["message"].as_str().unwrap_or("no error message");
        bail!("the server answered {status}: {message}")
    }

    async fn json(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> anyhow::Result<Value> {
        let mut request = self.request(method, path);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = self.send(request).await?;
        if response.status() == reqwest::StatusCode::NO_CONTENT {
            return Ok(Value::Null);
        }
        response.json().await.context("the server's answer is not JSON")
    }

    async fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.json(reqwest::Method::GET, path, None).await
    }

    /// The names of the server's agents (up to [`MAX_AGENT_PAGES`] pages of them).
    pub async fn agent_names(&self) -> anyhow::Result<Vec<String>> {
        let mut names = Vec::new();
        let mut page_token: Option<String> = None;
        for _ in 0..MAX_AGENT_PAGES {
            let path = match &page_token {
                Some(token) => format!("/agents?limit=100&page_token={token}"),
                None => "/agents?limit=100".to_owned(),
            };
            let page = self.get(&path).await?;
            names.extend(page["data"].as_array().into_iter().flatten().filter_map(|agent| agent["name"].as_str().map(str::to_owned)));
            page_token = page["pagination"]["next_page_token"].as_str().map(str::to_owned);
            if page_token.is_none() {
                break;
            }
        }
        Ok(names)
    }

    /// The server's address, as `teamster chat --server` takes it.
    pub fn server(&self) -> &str {
        self.base.strip_suffix("/api/v1").unwrap_or(&self.base)
    }

    /// Where the web UI shows a session.
    pub fn web_url(&self, session: &str) -> String {
        format!("{}/#/chat/{session}", self.server())
    }

    /// Makes a session of the agent, titled (as the web UI titles them) after its first message;
    /// returns its id and mode.
    pub async fn create_session(&self, agent: &str, title: Option<String>) -> anyhow::Result<(String, Option<String>)> {
        let mut body = json!({ "agent": { "name": agent } });
        if let Some(title) = title {
            body["title"] = json!(title);
        }
        let session = self.json(reqwest::Method::POST, "/sessions", Some(body)).await?;
        let id = session["data"]["id"].as_str().context("the server returned no session id")?.to_owned();
        Ok((id, session["data"]["mode"].as_str().map(str::to_owned)))
    }

    /// A session: its agent's name and its mode.
    pub async fn session(&self, session: &str) -> anyhow::Result<(Option<String>, Option<String>)> {
        let session = self.get(&format!("/sessions/{session}")).await?;
        let data = &session["data"];
        Ok((data["agent_name"].as_str().map(str::to_owned), data["mode"].as_str().map(str::to_owned)))
    }

    /// The session's events, oldest first, as `(turn id, event)`.
    pub async fn session_events(&self, session: &str) -> anyhow::Result<Vec<(String, Event)>> {
        let mut events = Vec::new();
        let mut page_token: Option<String> = None;
        for _ in 0..MAX_HISTORY_PAGES {
            let mut path = format!("/sessions/{session}/events?limit=100");
            if let Some(token) = &page_token {
                path.push_str(&format!("&page_token={token}"));
            }
            let page = self.get(&path).await?;
            for item in page["data"].as_array().into_iter().flatten() {
                // An event of a kind this build does not know is skipped, not fatal.
                if let Ok(event) = serde_json::from_value::<Event>(item["event"].clone()) {
                    events.push((item["turn_id"].as_str().unwrap_or_default().to_owned(), event));
                }
            }
            page_token = page["pagination"]["next_page_token"].as_str().map(str::to_owned);
            if page_token.is_none() {
                break;
            }
        }
        events.reverse();
        Ok(events)
    }

    /// Starts a turn and returns its event stream (with what its commands print as they run).
    pub async fn start_turn(&self, session: &str, input: &[TurnInput]) -> anyhow::Result<impl Stream<Item = anyhow::Result<Sequenced>> + use<>> {
        let request = self
            .request(reqwest::Method::POST, &format!("/sessions/{session}/turns"))
            .query(&[("include", SHOWN_EXTENSIONS)])
            .json(&json!({ "input": input, "stream": true }));
        Ok(events(self.send(request).await?))
    }

    /// The event stream of a turn, from its start or after the event numbered `after`.
    pub async fn subscribe(&self, session: &str, turn: &str, after: Option<u64>) -> anyhow::Result<impl Stream<Item = anyhow::Result<Sequenced>> + use<>> {
        let mut request =
            self.request(reqwest::Method::GET, &format!("/sessions/{session}/turns/{turn}/subscribe")).query(&[("include", SHOWN_EXTENSIONS)]);
        if let Some(after) = after {
            request = request.query(&[("after_sequence_number", after)]);
        }
        Ok(events(self.send(request).await?))
    }

    /// The session's live channel: each event's JSON (its `type` is the event's name), the
    /// display state first.
    pub async fn live(&self, session: &str) -> anyhow::Result<impl Stream<Item = anyhow::Result<Value>> + use<>> {
        let response = self.send(self.request(reqwest::Method::GET, &format!("/sessions/{session}/live"))).await?;
        let mut frames = SseFrames::default();
        Ok(response.bytes_stream().flat_map(move |chunk| {
            let decoded: Vec<anyhow::Result<Value>> = match chunk {
                Err(error) => vec![Err(anyhow::Error::new(error).context("the live channel broke"))],
                Ok(bytes) => frames.push(&bytes).into_iter().filter_map(|frame| serde_json::from_str(&frame.data).ok().map(Ok)).collect(),
            };
            futures_util::stream::iter(decoded)
        }))
    }

    pub async fn cancel(&self, session: &str) -> anyhow::Result<()> {
        self.json(reqwest::Method::POST, &format!("/sessions/{session}/cancel"), Some(json!({}))).await.map(drop)
    }

    pub async fn steer(&self, session: &str, text: &str) -> anyhow::Result<()> {
        self.json(reqwest::Method::POST, &format!("/sessions/{session}/steer"), Some(json!({ "content": text }))).await.map(drop)
    }

    pub async fn follow_up(&self, session: &str, text: &str) -> anyhow::Result<()> {
        self.json(reqwest::Method::POST, &format!("/sessions/{session}/follow-ups"), Some(json!({ "content": text }))).await.map(drop)
    }

    /// Switches the session's mode; returns the mode it is in now.
    pub async fn set_mode(&self, session: &str, mode: &str) -> anyhow::Result<Option<String>> {
        let session = self.json(reqwest::Method::PATCH, &format!("/sessions/{session}"), Some(json!({ "mode": mode }))).await?;
        Ok(session["data"]["mode"].as_str().map(str::to_owned))
    }

    pub async fn tasks(&self, session: &str) -> anyhow::Result<Value> {
        Ok(self.get(&format!("/sessions/{session}/tasks")).await?["data"].take())
    }

    pub async fn plans(&self, session: &str) -> anyhow::Result<Value> {
        Ok(self.get(&format!("/sessions/{session}/plans")).await?["data"].take())
    }

    /// The caller's recent sessions, newest first.
    pub async fn sessions(&self, limit: u32) -> anyhow::Result<Vec<Value>> {
        Ok(self.get(&format!("/sessions?limit={limit}")).await?["data"].as_array().cloned().unwrap_or_default())
    }

    /// A file of the sandbox a turn ran in.
    pub async fn download(&self, session: &str, turn: &str, path: &str) -> anyhow::Result<Vec<u8>> {
        let request = self
            .request(reqwest::Method::GET, &format!("/sessions/{session}/turns/{turn}/download-sandbox-file"))
            .query(&[("path", path)]);
        let response = self.send(request).await?;
        Ok(response.bytes().await.context("the download broke off")?.to_vec())
    }
}

/// An event of a stream with its sequence number (the SSE `id`), from which a broken stream
/// is taken up again.
#[derive(Debug)]
pub struct Sequenced {
    pub sequence: Option<u64>,
    pub event: Event,
}

/// The events of an SSE response (heartbeats and frames of unknown events skipped).
fn events(response: reqwest::Response) -> impl Stream<Item = anyhow::Result<Sequenced>> {
    let mut frames = SseFrames::default();
    response.bytes_stream().flat_map(move |chunk| {
        let decoded: Vec<anyhow::Result<Sequenced>> = match chunk {
            Err(error) => vec![Err(anyhow::Error::new(error).context("the event stream broke"))],
            Ok(bytes) => frames
                .push(&bytes)
                .into_iter()
                .filter_map(|frame| {
                    let event = serde_json::from_str::<Event>(&frame.data).ok()?;
                    Some(Ok(Sequenced { sequence: frame.id.and_then(|id| id.parse().ok()), event }))
                })
                .collect(),
        };
        futures_util::stream::iter(decoded)
    })
}
