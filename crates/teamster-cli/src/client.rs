//! The terminal client: `agents apply|list|get`, `run` and `sessions`, over the native HTTP API.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{Context, bail};
use futures_util::StreamExt;
use serde_json::{Value, json};
use teamster_protocol::AgentManifest;
use teamster_protocol::event::{Event, ModelMessage, fold};

use crate::args::{AgentsCommand, RunArgs, SessionsArgs};
use crate::sse::SseFrames;

struct Api {
    base: String,
    http: reqwest::Client,
}

impl Api {
    fn new(server: &str) -> Api {
        Api { base: format!("{}/api/v1", server.trim_end_matches('/')), http: reqwest::Client::new() }
    }

    /// Sends a request and returns the JSON body, or the server's error message.
    async fn call(&self, request: reqwest::RequestBuilder) -> anyhow::Result<Value> {
        let response = request.send().await.with_context(|| format!("cannot reach the server at {}", self.base))?;
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            let message = body["error"]["message"].as_str().unwrap_or("no error message");
            bail!("the server answered {status}: {message}");
        }
        Ok(body)
    }

    async fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.call(self.http.get(format!("{}{path}", self.base))).await
    }

    async fn send(&self, method: reqwest::Method, path: &str, body: &Value) -> anyhow::Result<Value> {
        self.call(self.http.request(method, format!("{}{path}", self.base)).json(body)).await
    }

    async fn agent_by_name(&self, name: &str) -> anyhow::Result<Option<Value>> {
        let agents = self.get("/agents").await?;
        Ok(agents["data"].as_array().into_iter().flatten().find(|agent| agent["name"] == name).cloned())
    }
}

pub async fn agents(server: &str, command: AgentsCommand) -> anyhow::Result<ExitCode> {
    let api = Api::new(server);
    match command {
        AgentsCommand::Apply { file, model } => {
            let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
            let mut manifest: AgentManifest =
                serde_yaml::from_str(&text).with_context(|| format!("{} is not a truefoundry-agent manifest", file.display()))?;
            if manifest.kind != AgentManifest::TYPE {
                bail!("{} has type {:?}; expected {:?}", file.display(), manifest.kind, AgentManifest::TYPE);
            }
            if let Some(model) = model {
                manifest.model.name = model;
            }
            let spec = serde_json::to_value(manifest.to_spec())?;
            let (saved, before) = match api.agent_by_name(&manifest.name).await? {
                Some(existing) => {
                    let id = existing["id"].as_str().unwrap_or_default();
                    let saved = api.send(reqwest::Method::PUT, &format!("/agents/{id}"), &json!({ "manifest": spec })).await?;
                    (saved, Some(existing["version"].clone()))
                }
                None => {
                    (api.send(reqwest::Method::POST, "/agents", &json!({ "name": manifest.name, "manifest": spec })).await?, None)
                }
            };
            let name = saved["data"]["name"].as_str().unwrap_or("?");
            let version = &saved["data"]["version"];
            if before.as_ref() == Some(version) {
                println!("agent {name} is unchanged at version {version}");
            } else {
                println!("agent {name} is at version {version}");
            }
        }
        AgentsCommand::List => {
            let agents = api.get("/agents").await?;
            for agent in agents["data"].as_array().into_iter().flatten() {
                println!(
                    "{}\tv{}\t{}",
                    agent["name"].as_str().unwrap_or("?"),
                    agent["version"],
                    agent["manifest"]["model"]["name"].as_str().unwrap_or("?")
                );
            }
        }
        AgentsCommand::Get { name } => match api.agent_by_name(&name).await? {
            Some(agent) => println!("{}", serde_json::to_string_pretty(&agent)?),
            None => bail!("no agent named {name:?}"),
        },
    }
    Ok(ExitCode::SUCCESS)
}

/// Lists the caller's sessions, newest first: id, agent, last update, title.
pub async fn sessions(args: SessionsArgs) -> anyhow::Result<ExitCode> {
    let api = Api::new(&args.client.server);
    let page = api.get(&format!("/sessions?limit={}", args.limit)).await?;
    let sessions = page["data"].as_array().cloned().unwrap_or_default();
    if sessions.is_empty() {
        eprintln!("no sessions yet: start one with `teamster run AGENT \"...\"`");
    }
    for session in &sessions {
        println!(
            "{}\t{}\t{}\t{}",
            session["id"].as_str().unwrap_or("?"),
            session["agent_name"].as_str().unwrap_or("(inline agent)"),
            session["updated_at"].as_str().unwrap_or("?"),
            session["title"].as_str().unwrap_or("")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Streams one turn: text to stdout as it arrives, tool activity to stderr. The session's id
/// goes to stderr, so that `run --session` can continue it.
pub async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let api = Api::new(&args.client.server);
    let (session_id, prompt) = match (&args.session, args.words.as_slice()) {
        (Some(session_id), [prompt]) => {
            api.get(&format!("/sessions/{session_id}")).await?;
            (session_id.clone(), prompt.clone())
        }
        (Some(_), _) => bail!("with --session, give only what to say: teamster run --session ID \"...\""),
        (None, [agent, prompt]) => {
            let session = api.send(reqwest::Method::POST, "/sessions", &json!({ "agent": { "name": agent } })).await?;
            let session_id = session["data"]["id"].as_str().context("the server returned no session id")?.to_owned();
            eprintln!("session {session_id} (continue it with --session {session_id})");
            (session_id, prompt.clone())
        }
        (None, _) => bail!("give the agent's name and what to say: teamster run AGENT \"...\""),
    };
    let body = json!({ "input": [{ "type": "user.message", "content": prompt }], "stream": true });
    let response = api
        .http
        .post(format!("{}/sessions/{session_id}/turns", api.base))
        .json(&body)
        .send()
        .await
        .context("cannot reach the server")?;
    if !response.status().is_success() {
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        bail!("the server answered {status}: {}", body["error"]["message"].as_str().unwrap_or("no error message"));
    }
    let mut bytes = response.bytes_stream();
    let mut frames = SseFrames::default();
    let mut printer = Printer::default();
    while let Some(chunk) = bytes.next().await {
        for frame in frames.push(&chunk.context("the event stream broke")?) {
            if let Ok(event) = serde_json::from_str::<Event>(&frame.data)
                && let Some(code) = printer.show(event)
            {
                return Ok(code);
            }
        }
    }
    bail!("the event stream ended before the turn did")
}

#[derive(Default)]
struct Printer {
    message: Option<ModelMessage>,
}

impl Printer {
    /// Shows an event; returns the exit code once the turn is done.
    fn show(&mut self, event: Event) -> Option<ExitCode> {
        let mut stdout = std::io::stdout();
        match event {
            Event::ModelMessage(message) => self.message = Some(message),
            Event::ModelMessageDelta(delta) => {
                if let Some(text) = &delta.content {
                    let _ = write!(stdout, "{text}");
                    let _ = stdout.flush();
                }
                if let Some(message) = &mut self.message {
                    fold(message, &delta);
                    if delta.finish_reason.is_some() {
                        for call in message.tool_calls.iter().flatten() {
                            eprintln!("\n→ {}({})", call.function.name, call.function.arguments);
                        }
                    }
                }
            }
            Event::ToolResponse(response) => eprintln!("← {}", response.content),
            Event::TurnDone(done) => {
                println!();
                return Some(match done.state {
                    teamster_protocol::TurnState::Done { .. } => ExitCode::SUCCESS,
                    teamster_protocol::TurnState::Cancelled { reason, .. } => {
                        eprintln!("turn cancelled: {}", serde_json::to_string(&reason).unwrap_or_default());
                        ExitCode::FAILURE
                    }
                    teamster_protocol::TurnState::Error { message, .. } => {
                        eprintln!("turn failed: {message}");
                        ExitCode::FAILURE
                    }
                    teamster_protocol::TurnState::Running => ExitCode::FAILURE,
                });
            }
            _ => {}
        }
        None
    }
}
