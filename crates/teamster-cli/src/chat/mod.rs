//! `teamster chat`: an interactive terminal client of one agent.
//!
//! [`app`] is the state and its rules, [`render`] draws it, [`api`] talks to the server; this
//! file runs them: it reads the terminal on a thread of its own, feeds keys and the server's
//! news to the app, and carries out the app's actions on tasks that report back.

mod api;
mod app;
mod commands;
mod editor;
mod embedded;
mod prompt;
mod render;
mod transcript;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use base64::Engine as _;
use futures_util::{Stream, StreamExt};
use serde_json::Value;
use teamster_protocol::event::Event;
use teamster_protocol::input::{TurnInput, UserContent, UserContentPart};
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};

use self::api::{ChatApi, Sequenced};
use self::app::{Action, App, Incoming};
use self::transcript::Tone;
use crate::args::ChatArgs;

/// The agent a chat without one talks to: the example agent every server creates.
const DEFAULT_AGENT: &str = "demo";
/// How often the screen is drawn while nothing happens (the spinner turns).
const TICK: Duration = Duration::from_millis(100);
/// How long a queued follow-up may take to start its turn.
const FOLLOW_UP_WAIT: Duration = Duration::from_secs(15);
/// How often a broken event stream is taken up again before the chat gives up on it, and the
/// pause before the first try (it grows with each).
const MAX_RECONNECTS: u32 = 5;
const RECONNECT_PAUSE: Duration = Duration::from_millis(500);
/// The largest file `/attach` sends.
const MAX_ATTACHMENT_BYTES: u64 = 8 * 1024 * 1024;

pub async fn run(args: ChatArgs) -> anyhow::Result<ExitCode> {
    let embedded = match &args.server {
        Some(_) => None,
        None => Some(embedded::start(&args.store).await?),
    };
    let url = match (&args.server, &embedded) {
        (Some(url), _) => url.clone(),
        (None, Some(embedded)) => embedded.url.clone(),
        (None, None) => unreachable!("a chat without --server embeds one"),
    };
    let api = ChatApi::new(&url, args.api_key.clone().filter(|key| !key.is_empty()));
    let result = match check(&api, &args).await {
        Ok(agent) => chat(api, App::new(agent), args.session.clone(), args.server.is_some()).await,
        Err(error) => Err(error),
    };
    if let Some(embedded) = embedded {
        embedded.stop().await;
    }
    result
}

/// Checks, before the screen is taken, that the session or the agent exists; returns the agent.
async fn check(api: &ChatApi, args: &ChatArgs) -> anyhow::Result<String> {
    if let Some(session) = &args.session {
        let (agent, _) = api.session(session).await.with_context(|| format!("cannot resume session {session}"))?;
        return Ok(agent.or_else(|| args.agent.clone()).unwrap_or_else(|| "(inline agent)".to_owned()));
    }
    let agent = args.agent.clone().unwrap_or_else(|| DEFAULT_AGENT.to_owned());
    let names = api.agent_names().await?;
    if !names.contains(&agent) {
        let known = if names.is_empty() { "none yet".to_owned() } else { names.join(", ") };
        bail!("no agent named {agent:?} on the server (agents: {known}); create one with `teamster agents apply -f FILE`");
    }
    Ok(agent)
}

/// Runs the chat on the terminal until the user leaves.
/// `remote`: the server runs elsewhere (`--server`), not inside this process.
async fn chat(api: ChatApi, mut app: App, resume: Option<String>, remote: bool) -> anyhow::Result<ExitCode> {
    let mut terminal = ratatui::try_init().context("cannot take the terminal")?;
    let _ = crossterm::execute!(std::io::stdout(), crossterm::event::EnableBracketedPaste);
    let (news, mut incoming) = unbounded_channel::<Incoming>();
    let (keys, mut terminal_events) = unbounded_channel::<crossterm::event::Event>();
    let stop = Arc::new(AtomicBool::new(false));
    let reader = std::thread::spawn({
        let stop = stop.clone();
        move || read_terminal(&keys, &stop)
    });
    let server = api.server().to_owned();
    let web_urls = remote.then(|| api.clone());
    let runner = Runner { api, news };
    if let Some(session) = resume {
        app.busy = app::Busy::Loading;
        runner.execute(Action::Resume { session });
    }
    let mut tick = tokio::time::interval(TICK);
    let mut waiting_since: Option<Instant> = None;
    let outcome = loop {
        match (app.waiting() || !app.prompts.is_empty(), waiting_since) {
            (true, None) => waiting_since = Some(Instant::now()),
            (false, Some(_)) => waiting_since = None,
            _ => {}
        }
        let waited = waiting_since.map_or(0, |since| since.elapsed().as_secs());
        if let Err(error) = terminal.draw(|frame| render::draw(frame, &app, waited)) {
            break Err(anyhow::Error::new(error).context("drawing the chat"));
        }
        let mut batch = Vec::new();
        tokio::select! {
            Some(event) = terminal_events.recv() => match event {
                crossterm::event::Event::Key(key) => batch.push(Incoming::Key(key)),
                crossterm::event::Event::Paste(text) => batch.push(Incoming::Paste(text)),
                _ => {}
            },
            Some(news) = incoming.recv() => {
                batch.push(news);
                // Streamed deltas come fast: take what is there before drawing again.
                while batch.len() < 256 && let Ok(more) = incoming.try_recv() {
                    batch.push(more);
                }
            },
            _ = tick.tick() => app.on_tick(),
        }
        for news in batch {
            for action in app.update(news) {
                runner.execute(action);
            }
        }
        if app.quit {
            break Ok(ExitCode::SUCCESS);
        }
    };
    stop.store(true, Ordering::Relaxed);
    let _ = crossterm::execute!(std::io::stdout(), crossterm::event::DisableBracketedPaste);
    ratatui::restore();
    let _ = reader.join();
    if let Some(session) = &app.session_id {
        match &web_urls {
            // A remote server outlives the chat: the session stays open there, in a browser too.
            Some(api) => {
                println!("session {session} (resume it with `teamster chat --session {session} --server {server}`)");
                println!("in a browser: {}", api.web_url(session));
            }
            None => println!("session {session} (resume it with `teamster chat --session {session}`)"),
        }
    }
    outcome
}

/// Reads the terminal's events until `stop`, polling so that it notices.
fn read_terminal(keys: &UnboundedSender<crossterm::event::Event>, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        match crossterm::event::poll(Duration::from_millis(50)) {
            Ok(true) => match crossterm::event::read() {
                Ok(event) => {
                    if keys.send(event).is_err() {
                        return;
                    }
                }
                Err(_) => return,
            },
            Ok(false) => {}
            Err(_) => return,
        }
    }
}

/// Carries out the app's actions, each on a task that reports back as [`Incoming`].
struct Runner {
    api: ChatApi,
    news: UnboundedSender<Incoming>,
}

impl Runner {
    fn execute(&self, action: Action) {
        let api = self.api.clone();
        let news = self.news.clone();
        let report = news.clone();
        let task = async move {
            match action {
                Action::Quit => Ok(()),
                Action::Send { session, agent, text, attachments } => {
                    let session = match session {
                        Some(session) => session,
                        None => {
                            let title = crate::client::session_title(&text).or_else(|| {
                                attachments.first().and_then(|path| path.file_name()).map(|name| name.to_string_lossy().into_owned())
                            });
                            let (id, mode) = api.create_session(&agent, title).await?;
                            let _ = news.send(Incoming::Session { id: id.clone(), agent: None, mode });
                            let _ = news.send(Incoming::Note(Tone::Note, format!("in a browser: {}", api.web_url(&id))));
                            id
                        }
                    };
                    let content = message_content(text, &attachments).await?;
                    let stream = api.start_turn(&session, &[TurnInput::Message { content }]).await?;
                    follow(&api, &session, None, stream, &news).await;
                    Ok(())
                }
                Action::Decide { session, input } => {
                    let stream = api.start_turn(&session, &input).await?;
                    follow(&api, &session, None, stream, &news).await;
                    Ok(())
                }
                Action::Cancel { session } => api.cancel(&session).await,
                Action::Steer { session, text } => api.steer(&session, &text).await,
                Action::FollowUp { session, text } => api.follow_up(&session, &text).await,
                Action::WatchNextTurn { session, after } => {
                    // The live channel says when the turn starts: its snapshot names the last
                    // turn (one may have started already), `agent_start` each new one.
                    let live = api.live(&session).await?;
                    let started = live.filter_map(|event| {
                        let turn = event.ok().and_then(|event| match event["type"].as_str() {
                            Some("display_state_changed") => event["display"]["last_turn_id"].as_str().map(str::to_owned),
                            Some("agent_start") => event["turn_id"].as_str().map(str::to_owned),
                            _ => None,
                        });
                        std::future::ready(turn.filter(|turn| Some(turn) != after.as_ref()))
                    });
                    let mut started = std::pin::pin!(started);
                    match tokio::time::timeout(FOLLOW_UP_WAIT, started.next()).await {
                        Ok(Some(turn)) => {
                            let stream = api.subscribe(&session, &turn, None).await?;
                            follow(&api, &session, Some(turn), stream, &news).await;
                            Ok(())
                        }
                        _ => bail!("the queued follow-up did not start a turn"),
                    }
                }
                Action::ListSessions => {
                    let sessions = api.sessions(20).await?;
                    let listed = sessions
                        .iter()
                        .map(|session| {
                            let id = session["id"].as_str().unwrap_or("?").to_owned();
                            let line = format!(
                                "{id}  {}  {}  {}",
                                session["agent_name"].as_str().unwrap_or("(inline agent)"),
                                session["updated_at"].as_str().unwrap_or("?"),
                                session["title"].as_str().unwrap_or("")
                            );
                            (id, line)
                        })
                        .collect();
                    let _ = news.send(Incoming::Sessions(listed));
                    Ok(())
                }
                Action::Resume { session } => resume(&api, &session, &news).await,
                Action::Refresh { session } => {
                    // Best effort: a status that cannot be read leaves the old one shown.
                    if let (Ok((_, mode)), Ok(list)) = (api.session(&session).await, api.tasks(&session).await) {
                        let tasks = list["tasks"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .map(|task| (task["status"].as_str().unwrap_or("pending").to_owned(), task["title"].as_str().unwrap_or("?").to_owned()))
                            .collect();
                        let _ = news.send(Incoming::Status { mode, tasks });
                    }
                    Ok(())
                }
                Action::SetMode { session, mode } => {
                    let mode = api.set_mode(&session, &mode).await?;
                    let _ = news.send(Incoming::Mode(mode));
                    Ok(())
                }
                Action::Tasks { session } => {
                    for line in task_lines(&api.tasks(&session).await?) {
                        let _ = news.send(Incoming::Note(Tone::Note, line));
                    }
                    Ok(())
                }
                Action::Plans { session } => {
                    for line in plan_lines(&api.plans(&session).await?) {
                        let _ = news.send(Incoming::Note(Tone::Note, line));
                    }
                    Ok(())
                }
                Action::Download { session, turn, path, to } => {
                    let bytes = api.download(&session, &turn, &path).await?;
                    let to = to.map(PathBuf::from).unwrap_or_else(|| {
                        PathBuf::from(Path::new(&path).file_name().map_or_else(|| "download".into(), |name| name.to_owned()))
                    });
                    tokio::fs::write(&to, &bytes).await.with_context(|| format!("writing {}", to.display()))?;
                    let _ = news.send(Incoming::Note(Tone::Note, format!("saved {path} to {} ({} bytes)", to.display(), bytes.len())));
                    Ok(())
                }
            }
        };
        tokio::spawn(async move {
            if let Err(error) = task.await {
                let _ = report.send(Incoming::Failed(format!("{error:#}")));
            }
        });
    }
}

/// Loads a session's history and, when its latest turn still runs, streams the rest of it.
async fn resume(api: &ChatApi, session: &str, news: &UnboundedSender<Incoming>) -> anyhow::Result<()> {
    let (agent, mode) = api.session(session).await?;
    let mut events = api.session_events(session).await?;
    let last_turn = events.last().map(|(turn, _)| turn.clone());
    let live = last_turn.as_ref().filter(|last| {
        !events.iter().any(|(turn, event)| turn == *last && matches!(event, Event::TurnDone(_)))
    });
    let live = live.cloned();
    if let Some(turn) = &live {
        // The subscription replays the running turn from its start, deltas and all.
        events.retain(|(event_turn, _)| event_turn != turn);
    }
    let _ = news.send(Incoming::Session { id: session.to_owned(), agent, mode });
    let _ = news.send(Incoming::Note(Tone::Note, format!("in a browser: {}", api.web_url(session))));
    let _ = news.send(Incoming::History { events: events.into_iter().map(|(_, event)| event).collect(), live: live.is_some() });
    if let Some(turn) = live {
        let stream = api.subscribe(session, &turn, None).await?;
        follow(api, session, Some(turn), stream, news).await;
    }
    Ok(())
}

/// Forwards a turn's events until its `turn.done`, then says the stream ended. A stream that
/// breaks is taken up again after the last event it gave (a few times, while the turn is known).
async fn follow(
    api: &ChatApi,
    session: &str,
    mut turn: Option<String>,
    stream: impl Stream<Item = anyhow::Result<Sequenced>> + Send + 'static,
    news: &UnboundedSender<Incoming>,
) {
    let mut last: Option<u64> = None;
    let mut retries = 0;
    let mut stream: std::pin::Pin<Box<dyn Stream<Item = anyhow::Result<Sequenced>> + Send>> = Box::pin(stream);
    loop {
        let broken = loop {
            match stream.next().await {
                None => break "the event stream ended before the turn did".to_owned(),
                Some(Err(error)) => break format!("{error:#}"),
                Some(Ok(Sequenced { sequence, event })) => {
                    last = sequence.or(last);
                    retries = 0;
                    if let Event::TurnCreated(created) = &event {
                        turn = Some(created.turn_id.clone());
                    }
                    let done = matches!(event, Event::TurnDone(_));
                    let _ = news.send(Incoming::Event { session: session.to_owned(), event: Box::new(event) });
                    if done {
                        let _ = news.send(Incoming::StreamEnded { session: session.to_owned() });
                        return;
                    }
                }
            }
        };
        let Some(turn) = turn.as_deref().filter(|_| retries < MAX_RECONNECTS) else {
            let _ = news.send(Incoming::Note(Tone::Error, broken));
            let _ = news.send(Incoming::StreamEnded { session: session.to_owned() });
            return;
        };
        retries += 1;
        let _ = news.send(Incoming::Note(Tone::Note, format!("{broken}; reconnecting…")));
        tokio::time::sleep(RECONNECT_PAUSE * retries).await;
        match api.subscribe(session, turn, last).await {
            Ok(again) => stream = Box::pin(again),
            Err(error) => stream = Box::pin(futures_util::stream::iter([Err(error)])),
        }
    }
}

/// A message's content: the text alone, or the text and each attached file as a data URL.
async fn message_content(text: String, attachments: &[PathBuf]) -> anyhow::Result<UserContent> {
    if attachments.is_empty() {
        return Ok(UserContent::Text(text));
    }
    let mut parts = vec![UserContentPart::Text { text }];
    for path in attachments {
        let size = tokio::fs::metadata(path).await.with_context(|| format!("cannot attach {}", path.display()))?.len();
        if size > MAX_ATTACHMENT_BYTES {
            bail!("{} is {size} bytes; the chat attaches files up to {MAX_ATTACHMENT_BYTES}", path.display());
        }
        let bytes = tokio::fs::read(path).await.with_context(|| format!("cannot attach {}", path.display()))?;
        let name = path.file_name().map_or_else(|| "file".to_owned(), |name| name.to_string_lossy().into_owned());
        let data = format!("data:{};base64,{}", media_type(path), base64::engine::general_purpose::STANDARD.encode(&bytes));
        parts.push(UserContentPart::File { name, data });
    }
    Ok(UserContent::Parts(parts))
}

/// A media type from a file's extension; unknown ones are plain bytes.
fn media_type(path: &Path) -> &'static str {
    let extension = path.extension().and_then(|extension| extension.to_str()).unwrap_or_default().to_ascii_lowercase();
    match extension.as_str() {
        "txt" | "md" | "log" => "text/plain",
        "csv" => "text/csv",
        "json" => "application/json",
        "html" | "htm" => "text/html",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "pdf" => "application/pdf",
        "py" | "rs" | "js" | "ts" | "sh" | "toml" | "yaml" | "yml" => "text/plain",
        _ => "application/octet-stream",
    }
}

/// A task list (`GET .../tasks`) as lines.
fn task_lines(list: &Value) -> Vec<String> {
    let tasks = list["tasks"].as_array().cloned().unwrap_or_default();
    if tasks.is_empty() {
        return vec!["no tasks".to_owned()];
    }
    let done = tasks.iter().filter(|task| task["status"] == "completed").count();
    let mut lines = vec![format!("tasks: {done} of {} done", tasks.len())];
    for task in &tasks {
        let mark = match task["status"].as_str() {
            Some("completed") => "[x]",
            Some("in_progress") => "[~]",
            _ => "[ ]",
        };
        lines.push(format!("  {mark} {}", task["title"].as_str().unwrap_or("?")));
    }
    lines
}

/// Submitted plans (`GET .../plans`) as lines.
fn plan_lines(plans: &Value) -> Vec<String> {
    let plans = plans.as_array().cloned().unwrap_or_default();
    if plans.is_empty() {
        return vec!["no plans".to_owned()];
    }
    let mut lines = Vec::new();
    for plan in &plans {
        lines.push(format!(
            "plan {:?} ({}): {} → {}",
            plan["title"].as_str().unwrap_or("?"),
            plan["status"].as_str().unwrap_or("?"),
            plan["mode"].as_str().unwrap_or("?"),
            plan["transitions_to"].as_str().unwrap_or("?")
        ));
        for line in plan["plan"].as_str().unwrap_or_default().lines() {
            lines.push(format!("  {line}"));
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_lists_and_plans_read_as_lines() {
        let tasks = serde_json::json!({"version": 2, "tasks": [
            {"id": "1", "title": "Read", "status": "completed"},
            {"id": "2", "title": "Write", "status": "in_progress"},
            {"id": "3", "title": "Ship", "status": "pending"}]});
        assert_eq!(task_lines(&tasks), ["tasks: 1 of 3 done", "  [x] Read", "  [~] Write", "  [ ] Ship"]);
        assert_eq!(task_lines(&serde_json::json!({"tasks": []})), ["no tasks"]);
        let plans = serde_json::json!([{"title": "Fix", "status": "pending", "mode": "plan", "transitions_to": "build", "plan": "1. a\n2. b"}]);
        assert_eq!(plan_lines(&plans), ["plan \"Fix\" (pending): plan → build", "  1. a", "  2. b"]);
        assert_eq!(media_type(Path::new("a/B.PNG")), "image/png");
    }
}
