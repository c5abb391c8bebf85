//! The terminal client: `run` and `sessions` (and `agents`, `keys` and `settings`, in files of
//! their own, through its [`Api`]), over the native HTTP API, with the caller's `--api-key`.
//!
//! `run` never pretends a turn is over: one that waits for a person (an approval, an answer, an
//! authorization) says what waits and how to give it, and exits with [`EXIT_WAITING`].

use std::collections::HashMap;
use std::io::Write;
use std::process::ExitCode;

use anyhow::{Context, bail};
use futures_util::StreamExt;
use serde_json::{Value, json};
use teamster_protocol::event::{Event, ModelMessage, fold};

use crate::args::{ClientArgs, RunArgs, SessionsArgs};
use crate::sse::SseFrames;

/// The exit status of a turn that waits for a person (see `EXIT_CODES` in `args.rs`).
const EXIT_WAITING: u8 = 3;
/// The exit status of a cancelled turn.
const EXIT_CANCELLED: u8 = 4;
/// The longest session title made from a first message, in characters (as the web UI's).
const MAX_TITLE_CHARS: usize = 80;

/// A session's title from its first message, as the web UI makes it: the message's first line,
/// trimmed (the line too, where the web UI keeps its trailing blanks), at most
/// [`MAX_TITLE_CHARS`] characters; `None` for a message of only blanks.
pub fn session_title(text: &str) -> Option<String> {
    let title: String = text.trim().lines().next().unwrap_or_default().trim_end().chars().take(MAX_TITLE_CHARS).collect();
    Some(title).filter(|title| !title.is_empty())
}

pub(crate) struct Api {
    base: String,
    api_key: Option<String>,
    http: reqwest::Client,
}

impl Api {
    pub(crate) fn new(server: &str, api_key: Option<&str>) -> Api {
        Api {
            base: format!("{}/api/v1", server.trim_end_matches('/')),
            api_key: api_key.filter(|key| !key.is_empty()).map(str::to_owned),
            http: reqwest::Client::new(),
        }
    }

    pub(crate) fn of(client: &ClientArgs) -> Api {
        Api::new(&client.server, client.key())
    }

    /// A request to `path` under `/api/v1`, with the caller's key.
    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.base));
        match &self.api_key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
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

    pub(crate) async fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.call(self.request(reqwest::Method::GET, path)).await
    }

    pub(crate) async fn send(&self, method: reqwest::Method, path: &str, body: &Value) -> anyhow::Result<Value> {
        self.call(self.request(method, path).json(body)).await
    }

    pub(crate) async fn agent_by_name(&self, name: &str) -> anyhow::Result<Option<Value>> {
        let agents = self.get("/agents").await?;
        Ok(agents["data"].as_array().into_iter().flatten().find(|agent| agent["name"] == name).cloned())
    }
}

/// Lists the caller's sessions, newest first: id, agent, last update, title.
pub async fn sessions(args: SessionsArgs) -> anyhow::Result<ExitCode> {
    let api = Api::of(&args.client);
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
/// goes to stderr, so that `run --session` can continue it. With `--approve`, `--deny` or
/// `--answer` the turn answers what the session's last turn waits on instead.
pub async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let api = Api::of(&args.client);
    let (session_id, input) = match (&args.session, args.words.as_slice()) {
        (Some(session_id), []) if args.decides() => (session_id.clone(), decisions(&api, session_id, &args).await?),
        (Some(_), [_]) if args.decides() => {
            return Ok(usage("give either what to say or --approve/--deny/--answer, not both"))
        }
        (Some(session_id), [prompt]) => {
            api.get(&format!("/sessions/{session_id}")).await?;
            (session_id.clone(), vec![json!({ "type": "user.message", "content": prompt })])
        }
        (Some(_), _) => return Ok(usage("with --session, give only what to say: teamster run --session ID \"...\"")),
        (None, [agent, prompt]) => {
            let mut body = json!({ "agent": { "name": agent } });
            if let Some(title) = session_title(prompt) {
                body["title"] = json!(title);
            }
            let session = api.send(reqwest::Method::POST, "/sessions", &body).await?;
            let session_id = session["data"]["id"].as_str().context("the server returned no session id")?.to_owned();
            eprintln!("session {session_id} (continue it with --session {session_id})");
            (session_id, vec![json!({ "type": "user.message", "content": prompt })])
        }
        (None, _) => return Ok(usage("give the agent's name and what to say: teamster run AGENT \"...\"")),
    };
    let body = json!({ "input": input, "stream": true });
    let response = api.request(reqwest::Method::POST, &format!("/sessions/{session_id}/turns")).json(&body).send().await;
    let response = response.with_context(|| format!("cannot reach the server at {}", api.base))?;
    if !response.status().is_success() {
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        bail!("the server answered {status}: {}", body["error"]["message"].as_str().unwrap_or("no error message"));
    }
    let mut bytes = response.bytes_stream();
    let mut frames = SseFrames::default();
    let mut printer = Printer { text: !args.json, ..Printer::default() };
    while let Some(chunk) = bytes.next().await {
        for frame in frames.push(&chunk.context("the event stream broke")?) {
            if args.json {
                print_line(&frame.data)?;
            }
            if let Ok(event) = serde_json::from_str::<Event>(&frame.data)
                && let Some(ended) = printer.show(event)
            {
                return Ok(match ended {
                    Ended::Waiting(actions) => {
                        eprint!("{}", waiting_help(&actions, &printer.calls, &session_id, &args.client.server));
                        ExitCode::from(EXIT_WAITING)
                    }
                    Ended::Code(code) => code,
                });
            }
        }
    }
    bail!("the event stream ended before the turn did")
}

/// Prints one event as one line of JSON (its data may span lines on the wire).
fn print_line(data: &str) -> anyhow::Result<()> {
    let event: Value = serde_json::from_str(data).with_context(|| format!("the server sent an event that is not JSON: {data:.200}"))?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{event}").and_then(|()| stdout.flush()).context("writing to standard output")
}

/// A wrong command line: says why, and exits 2 as clap's own usage errors do.
fn usage(message: &str) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(2)
}

/// A tool call the session's last turn waits on: its thread, id, and whether it wants an
/// approval (else an answer).
struct WaitingCall {
    thread_id: String,
    id: String,
    approval: bool,
}

/// The calls the session's last turn waits on, from its `required_actions`.
fn waiting_calls(turn: &Value) -> Vec<WaitingCall> {
    let mut calls = Vec::new();
    for action in turn["state"]["required_actions"].as_array().into_iter().flatten() {
        let approval = match action["type"].as_str() {
            Some("tool.approval_required") => true,
            Some("tool.response_required") => false,
            _ => continue,
        };
        let thread_id = action["thread_id"].as_str().unwrap_or(teamster_protocol::MAIN_THREAD_ID).to_owned();
        for call in action["tool_calls"].as_array().into_iter().flatten() {
            if let Some(id) = call["id"].as_str() {
                calls.push(WaitingCall { thread_id: thread_id.clone(), id: id.to_owned(), approval });
            }
        }
    }
    calls
}

/// The input that gives the decisions of `--approve`, `--deny` and `--answer` to the calls the
/// session's last turn waits on; a call it does not wait on is an error naming those it does.
async fn decisions(api: &Api, session_id: &str, args: &RunArgs) -> anyhow::Result<Vec<Value>> {
    let turns = api.get(&format!("/sessions/{session_id}/turns?limit=1")).await?;
    let waiting = waiting_calls(&turns["data"][0]);
    let listed = |approval: bool| {
        let ids: Vec<&str> = waiting.iter().filter(|call| call.approval == approval).map(|call| call.id.as_str()).collect();
        if ids.is_empty() { "none".to_owned() } else { ids.join(", ") }
    };
    if waiting.is_empty() {
        bail!("nothing in session {session_id} waits for an approval or an answer");
    }
    let mut input = Vec::new();
    for (id, allow) in args.approve.iter().map(|id| (id, true)).chain(args.deny.iter().map(|id| (id, false))) {
        let Some(call) = waiting.iter().find(|call| call.approval && call.id == *id) else {
            bail!("tool call {id:?} does not wait for an approval in session {session_id} (waiting for one: {})", listed(true));
        };
        let approval = if allow { json!({ "status": "allow" }) } else { json!({ "status": "deny" }) };
        input.push(json!({ "type": "user.tool_approval", "thread_id": call.thread_id, "tool_call_id": call.id, "approval": approval }));
    }
    if let Some(answer) = &args.answer {
        let questions: Vec<&WaitingCall> = waiting.iter().filter(|call| !call.approval).collect();
        let [call] = questions.as_slice() else {
            bail!(
                "--answer answers the one question a turn waits on; session {session_id} waits on {} (answer them in `teamster chat --session {session_id}`)",
                if questions.is_empty() { "none".to_owned() } else { format!("{}: {}", questions.len(), listed(false)) }
            );
        };
        input.push(json!({ "type": "user.tool_response", "thread_id": call.thread_id, "tool_call_id": call.id, "content": answer }));
    }
    Ok(input)
}

/// What `run` says when its turn waits for a person: what waits, and the commands that answer.
fn waiting_help(actions: &[Event], calls: &HashMap<String, String>, session_id: &str, server: &str) -> String {
    let mut text = String::from("\nthe turn waits for you:\n");
    let mut approvals = Vec::new();
    let mut questions = 0;
    let mut authorizations = false;
    for action in actions {
        match action {
            Event::ToolApprovalRequired(pending) => {
                for call in &pending.tool_calls {
                    let shown = calls.get(&call.id).map_or_else(|| "a tool call".to_owned(), Clone::clone);
                    text.push_str(&format!("  approve or deny {}: {shown}\n", call.id));
                    approvals.push(call.id.clone());
                }
            }
            Event::ToolResponseRequired(pending) => {
                for call in &pending.tool_calls {
                    let shown = calls.get(&call.id).map_or_else(|| "a question".to_owned(), Clone::clone);
                    text.push_str(&format!("  answer {}: {shown}\n", call.id));
                    questions += 1;
                }
            }
            Event::McpAuthRequired(pending) => {
                for server in &pending.mcp_servers {
                    text.push_str(&format!("  authorize the MCP server {}: open {}\n", server.name, server.auth_url));
                    authorizations = true;
                }
            }
            _ => {}
        }
    }
    text.push_str("answer it with:\n");
    if let Some(first) = approvals.first() {
        text.push_str(&format!("  teamster run --session {session_id} --approve {first}   (or --deny {first}; one flag per call)\n"));
    }
    if questions == 1 {
        text.push_str(&format!("  teamster run --session {session_id} --answer TEXT\n"));
    }
    if authorizations {
        text.push_str("  (after authorizing, the chat below resumes the turn)\n");
    }
    text.push_str(&format!("  teamster chat --session {session_id} --server {}\n", server.trim_end_matches('/')));
    text
}

/// How a streamed turn ended.
enum Ended {
    /// It waits for a person: these are its required actions.
    Waiting(Vec<Event>),
    Code(ExitCode),
}

#[derive(Default)]
struct Printer {
    /// Whether the model's text goes to standard output (not with `--json`, where the events
    /// do).
    text: bool,
    message: Option<ModelMessage>,
    /// Every tool call seen, by id: `name(arguments)`, to say what a waiting call is.
    calls: HashMap<String, String>,
}

impl Printer {
    /// Shows an event; returns how the turn ended once it has.
    fn show(&mut self, event: Event) -> Option<Ended> {
        let mut stdout = std::io::stdout();
        match event {
            Event::ModelMessage(message) => self.message = Some(message),
            Event::ModelMessageDelta(delta) => {
                if let Some(text) = delta.content.as_ref().filter(|_| self.text) {
                    let _ = write!(stdout, "{text}");
                    let _ = stdout.flush();
                }
                if let Some(message) = &mut self.message {
                    fold(message, &delta);
                    if delta.finish_reason.is_some() {
                        for call in message.tool_calls.iter().flatten() {
                            let shown = shown_call(&call.function.name, &call.function.arguments);
                            eprintln!("\n→ {shown}");
                            self.calls.insert(call.id.clone(), shown);
                        }
                    }
                }
            }
            Event::ToolResponse(response) => eprintln!("← {}", response.content),
            Event::TurnDone(done) => {
                if self.text {
                    println!();
                }
                return Some(match done.state {
                    teamster_protocol::TurnState::Done { required_actions, .. } if !required_actions.is_empty() => {
                        Ended::Waiting(required_actions)
                    }
                    teamster_protocol::TurnState::Done { .. } => Ended::Code(ExitCode::SUCCESS),
                    teamster_protocol::TurnState::Cancelled { reason, .. } => {
                        eprintln!("turn cancelled: {}", serde_json::to_string(&reason).unwrap_or_default());
                        Ended::Code(ExitCode::from(EXIT_CANCELLED))
                    }
                    teamster_protocol::TurnState::Error { message, .. } => {
                        eprintln!("turn failed: {message}");
                        Ended::Code(ExitCode::FAILURE)
                    }
                    teamster_protocol::TurnState::Running => Ended::Code(ExitCode::FAILURE),
                });
            }
            _ => {}
        }
        None
    }
}

/// A tool call as `run` names it: a question's text and choices, any other call as
/// `name(arguments)`.
fn shown_call(name: &str, arguments: &str) -> String {
    let parsed: Value = serde_json::from_str(arguments).unwrap_or(Value::Null);
    match parsed["question"].as_str() {
        Some(question) if name == "ask_user_question" => {
            let choices: Vec<&str> = parsed["options"].as_array().into_iter().flatten().filter_map(|option| option["label"].as_str()).collect();
            if choices.is_empty() { question.to_owned() } else { format!("{question} ({})", choices.join(", ")) }
        }
        _ => format!("{name}({arguments})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_are_the_first_line_trimmed_to_80_characters() {
        assert_eq!(session_title("  Hello there \nsecond line").as_deref(), Some("Hello there"));
        assert_eq!(session_title(&"é".repeat(100)).map(|title| title.chars().count()), Some(80));
        assert_eq!(session_title(" \n "), None);
    }

    #[test]
    fn questions_read_as_their_text_and_other_calls_as_name_and_arguments() {
        let question = r#"{"question":"Colour?","options":[{"label":"Blue"},{"label":"Red"}]}"#;
        assert_eq!(shown_call("ask_user_question", question), "Colour? (Blue, Red)");
        assert_eq!(shown_call("delete_file", r#"{"path":"a"}"#), r#"delete_file({"path":"a"})"#);
    }
}
