//! The chat's state and how it changes: keys and server news come in as [`Incoming`], what the
//! chat must do goes out as [`Action`]s. Pure: no I/O, no clock, so it is tested by feeding it.

use std::collections::VecDeque;
use std::path::PathBuf;

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use teamster_protocol::event::Event;
use teamster_protocol::input::TurnInput;

use super::commands::{self, Command};
use super::editor::LineEditor;
use super::prompt::Prompt;
use super::transcript::{Tone, Transcript};

/// What happens to the chat: a key, pasted text, or news from the server.
#[derive(Debug)]
pub enum Incoming {
    Key(KeyEvent),
    Paste(String),
    /// The chat is in this session now (made for the first message, or resumed).
    Session { id: String, agent: Option<String>, mode: Option<String> },
    /// A resumed session's events, oldest first; `live` when its latest turn still runs (its
    /// events follow as they happen).
    History { events: Vec<Event>, live: bool },
    /// An event of a turn of `session` (news of a session the chat has left is dropped).
    Event { session: String, event: Box<Event> },
    /// The event stream of a turn of `session` ended.
    StreamEnded { session: String },
    /// The session's mode, as the server has it.
    Mode(Option<String>),
    /// The session's mode and task list (status and title of each), read after a turn.
    Status { mode: Option<String>, tasks: Vec<(String, String)> },
    /// Recent sessions: id and a line describing each.
    Sessions(Vec<(String, String)>),
    Note(Tone, String),
    /// A request failed; the chat is idle again.
    Failed(String),
}

/// What the chat asks its runner to do.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Send a message (and files), making the session first when there is none.
    Send { session: Option<String>, agent: String, text: String, attachments: Vec<PathBuf> },
    /// Resume the paused turn with these decisions (empty: after an MCP authorization).
    Decide { session: String, input: Vec<TurnInput> },
    Cancel { session: String },
    Steer { session: String, text: String },
    FollowUp { session: String, text: String },
    /// Read the session's mode and task list again.
    Refresh { session: String },
    /// Stream the turn a queued follow-up starts, once it starts after `after`.
    WatchNextTurn { session: String, after: Option<String> },
    ListSessions,
    Resume { session: String },
    SetMode { session: String, mode: String },
    Tasks { session: String },
    Plans { session: String },
    Download { session: String, turn: String, path: String, to: Option<String> },
    Quit,
}

/// What the chat is waiting for, if anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Busy {
    Idle,
    /// A request went out; its turn has not started yet.
    Starting,
    Running,
    Cancelling,
    Loading,
}

/// The chat.
#[derive(Debug)]
pub struct App {
    pub transcript: Transcript,
    /// The line being typed.
    pub input: LineEditor,
    pub busy: Busy,
    pub agent: String,
    pub session_id: Option<String>,
    pub mode: Option<String>,
    /// The session's task list: status and title of each task.
    pub tasks: Vec<(String, String)>,
    /// The prompt being answered, and those after it.
    pub prompts: VecDeque<Prompt>,
    /// Answers given so far to the paused turn's prompts.
    decisions: Vec<TurnInput>,
    pub attachments: Vec<PathBuf>,
    /// Follow-ups queued while a turn ran, not yet started.
    follow_ups: usize,
    /// Steering sent to the running turn and not yet taken by a model call: what the turn
    /// ends without taking starts the next turn.
    steers: usize,
    /// The latest turn ended cancelled by a client: the server dropped what was queued for it.
    stopped: bool,
    /// Ids of the last `/sessions` list, for `/resume N`.
    listed_sessions: Vec<String>,
    pub show_reasoning: bool,
    /// How many rows up from the bottom the view is (0 follows the conversation).
    pub scroll_back: usize,
    /// A Ctrl-C was pressed and nothing since: another one exits.
    pub exit_armed: bool,
    /// Advances while waiting, for the spinner.
    pub tick: usize,
    pub quit: bool,
}

impl App {
    pub fn new(agent: String) -> App {
        let mut transcript = Transcript::default();
        transcript.note(Tone::Note, format!("chatting with {agent} — /help lists commands, Ctrl-C cancels, Ctrl-C twice exits"));
        App {
            transcript,
            input: LineEditor::default(),
            busy: Busy::Idle,
            agent,
            session_id: None,
            mode: None,
            tasks: Vec::new(),
            prompts: VecDeque::new(),
            decisions: Vec::new(),
            attachments: Vec::new(),
            follow_ups: 0,
            steers: 0,
            stopped: false,
            listed_sessions: Vec::new(),
            show_reasoning: false,
            scroll_back: 0,
            exit_armed: false,
            tick: 0,
            quit: false,
        }
    }

    /// Whether a turn is under way (or about to be).
    pub fn waiting(&self) -> bool {
        self.busy != Busy::Idle
    }

    /// Advances the spinner.
    pub fn on_tick(&mut self) {
        if self.waiting() {
            self.tick = self.tick.wrapping_add(1);
        }
    }

    pub fn update(&mut self, incoming: Incoming) -> Vec<Action> {
        match incoming {
            Incoming::Key(key) => self.on_key(key),
            Incoming::Paste(text) => {
                self.input.insert_str(&text.replace(['\r', '\n'], " "));
                Vec::new()
            }
            Incoming::Session { id, agent, mode } => {
                self.session_id = Some(id);
                if let Some(agent) = agent {
                    self.agent = agent;
                }
                self.mode = mode;
                Vec::new()
            }
            Incoming::History { events, live } => {
                self.transcript = Transcript::default();
                for event in &events {
                    self.transcript.apply(event);
                }
                let session = self.session_id.clone().unwrap_or_default();
                self.transcript.note(Tone::Note, format!("resumed session {session} with {}", self.agent));
                self.scroll_back = 0;
                if live {
                    self.busy = Busy::Running;
                } else {
                    self.busy = Busy::Idle;
                    self.ask_pending();
                }
                self.session_id.clone().map(|session| Action::Refresh { session }).into_iter().collect()
            }
            Incoming::Event { session, .. } | Incoming::StreamEnded { session } if self.session_id.as_ref() != Some(&session) => {
                Vec::new()
            }
            Incoming::Event { event, .. } => {
                if matches!(*event, Event::TurnCreated(_)) && self.busy != Busy::Cancelling {
                    self.busy = Busy::Running;
                }
                if let Event::ModelMessage(message) = &*event {
                    self.steers = self.steers.saturating_sub(message.steering.as_ref().map_or(0, Vec::len));
                }
                match &*event {
                    Event::TurnCreated(_) => self.stopped = false,
                    Event::TurnDone(done) => {
                        self.stopped = matches!(
                            done.state,
                            teamster_protocol::TurnState::Cancelled { reason: teamster_protocol::CancelReason::ClientCancelled, .. }
                        );
                    }
                    _ => {}
                }
                self.transcript.apply(&event);
                Vec::new()
            }
            Incoming::StreamEnded { .. } => self.on_stream_end(),
            Incoming::Status { mode, tasks } => {
                self.mode = mode;
                self.tasks = tasks;
                Vec::new()
            }
            Incoming::Mode(mode) => {
                self.transcript.note(Tone::Note, format!("mode: {}", mode.as_deref().unwrap_or("(the agent's default)")));
                self.mode = mode;
                Vec::new()
            }
            Incoming::Sessions(sessions) => {
                if sessions.is_empty() {
                    self.transcript.note(Tone::Note, "no sessions yet");
                }
                for (index, (_, line)) in sessions.iter().enumerate() {
                    self.transcript.note(Tone::Note, format!("{:>3}. {line}", index + 1));
                }
                self.listed_sessions = sessions.into_iter().map(|(id, _)| id).collect();
                Vec::new()
            }
            Incoming::Note(tone, text) => {
                self.transcript.note(tone, text);
                Vec::new()
            }
            Incoming::Failed(message) => {
                self.transcript.note(Tone::Error, message);
                // A turn that did not start, or a session that did not load; a failed steer or
                // cancel leaves the running turn as it is.
                if matches!(self.busy, Busy::Starting | Busy::Loading) {
                    self.busy = Busy::Idle;
                }
                Vec::new()
            }
        }
    }

    fn on_stream_end(&mut self) -> Vec<Action> {
        if self.transcript.running {
            self.transcript.running = false;
            self.transcript.note(Tone::Error, "the event stream ended before the turn did");
        }
        self.busy = Busy::Idle;
        self.ask_pending();
        if self.stopped && self.steers + self.follow_ups > 0 {
            // The server drops the steering and follow-ups queued for a cancelled turn.
            let dropped = self.steers + self.follow_ups;
            self.transcript.note(
                Tone::Note,
                format!("the cancel dropped {dropped} queued message{}; nothing runs now", if dropped == 1 { "" } else { "s" }),
            );
            self.steers = 0;
            self.follow_ups = 0;
        }
        if self.steers > 0 {
            // The server starts a turn with the instructions this one did not take.
            self.steers = 0;
            self.follow_ups += 1;
        }
        let Some(session) = self.session_id.clone() else { return Vec::new() };
        let mut actions = vec![Action::Refresh { session: session.clone() }];
        if self.prompts.is_empty() && self.follow_ups > 0 {
            self.follow_ups -= 1;
            self.busy = Busy::Starting;
            actions.push(Action::WatchNextTurn { session, after: self.transcript.last_turn_id.clone() });
        }
        actions
    }

    /// Turns the latest turn's required actions into prompts.
    fn ask_pending(&mut self) {
        self.prompts = Prompt::from_pending(&self.transcript).into();
        self.decisions.clear();
        if let Some(prompt) = self.prompts.front() {
            let hint = match prompt {
                Prompt::Approval { .. } => "approval needed: y allows, n denies (with a reason), a always allows",
                Prompt::Question { .. } => "a question for you: ↑/↓ choose, space ticks, Enter answers (or type an answer)",
                Prompt::Authorize { .. } => "authorization needed: open the link, then press Enter to resume",
            };
            self.transcript.note(Tone::Note, hint);
        }
    }

    fn on_key(&mut self, key: KeyEvent) -> Vec<Action> {
        if key.kind == KeyEventKind::Release {
            return Vec::new();
        }
        let control = key.modifiers.contains(KeyModifiers::CONTROL);
        if control && key.code == KeyCode::Char('c') {
            return self.on_interrupt();
        }
        self.exit_armed = false;
        match key.code {
            KeyCode::Char('d') if control && self.input.is_empty() => {
                self.quit = true;
                return vec![Action::Quit];
            }
            KeyCode::Char('o') if control => self.show_reasoning = !self.show_reasoning,
            KeyCode::Char('u') if control => self.input.clear(),
            // Each row is at least one line on screen: scrolling stops at the top.
            KeyCode::PageUp => self.scroll_back = (self.scroll_back + 10).min(self.transcript.rows(self.show_reasoning).len()),
            KeyCode::PageDown => self.scroll_back = self.scroll_back.saturating_sub(10),
            KeyCode::Left => self.input.left(),
            KeyCode::Right => self.input.right(),
            KeyCode::Home => self.input.home(),
            KeyCode::End => self.input.end(),
            KeyCode::Delete => self.input.delete(),
            KeyCode::Char('a') if control => self.input.home(),
            KeyCode::Char('e') if control => self.input.end(),
            KeyCode::Char('w') if control => self.input.delete_word(),
            KeyCode::Up if self.prompts.is_empty() => self.input.previous(),
            KeyCode::Down if self.prompts.is_empty() => self.input.next(),
            _ => {
                if !self.prompts.is_empty() {
                    return self.on_prompt_key(key);
                }
                return self.on_line_key(key, control);
            }
        }
        Vec::new()
    }

    /// A key of the input line when no prompt waits.
    fn on_line_key(&mut self, key: KeyEvent, control: bool) -> Vec<Action> {
        match key.code {
            KeyCode::Enter => {
                let line = self.input.take();
                self.submit(&line)
            }
            KeyCode::Backspace => {
                self.input.backspace();
                Vec::new()
            }
            KeyCode::Char(character) if !control => {
                self.input.insert(character);
                Vec::new()
            }
            _ => Vec::new(),
        }
    }

    /// Ctrl-C: cancels the running turn (or drops the prompts, or clears the line); a second
    /// one in a row exits.
    fn on_interrupt(&mut self) -> Vec<Action> {
        if self.exit_armed {
            self.quit = true;
            return vec![Action::Quit];
        }
        self.exit_armed = true;
        if matches!(self.busy, Busy::Running | Busy::Starting)
            && let Some(session) = self.session_id.clone()
        {
            self.busy = Busy::Cancelling;
            self.transcript.note(Tone::Note, "cancelling the turn… (Ctrl-C again exits)");
            return vec![Action::Cancel { session }];
        }
        if !self.prompts.is_empty() {
            self.prompts.clear();
            self.decisions.clear();
            self.transcript.note(Tone::Note, "left the questions unanswered; your next message goes on without them (Ctrl-C again exits)");
        } else {
            self.input.clear();
            self.transcript.note(Tone::Note, "press Ctrl-C again to exit");
        }
        Vec::new()
    }

    fn on_prompt_key(&mut self, key: KeyEvent) -> Vec<Action> {
        // A line starting with `/` is a command, whatever the prompt (`//` answers with a `/`).
        let typing_command = self.input.as_str().starts_with('/') && !self.input.as_str().starts_with("//");
        if typing_command || (key.code == KeyCode::Char('/') && self.input.is_empty()) {
            return self.on_command_key(key);
        }
        let Some(prompt) = self.prompts.front_mut() else { return Vec::new() };
        let decision = match (&*prompt, key.code) {
            (Prompt::Approval { denying: false, .. }, KeyCode::Char('y')) => prompt.decide(true, false, ""),
            (Prompt::Approval { denying: false, .. }, KeyCode::Char('a')) => prompt.decide(true, true, ""),
            (Prompt::Approval { denying: false, .. }, KeyCode::Char('n')) => {
                if let Prompt::Approval { denying, .. } = prompt {
                    *denying = true;
                }
                self.input.clear();
                return Vec::new();
            }
            (Prompt::Approval { denying: true, .. }, KeyCode::Enter) => {
                let reason = self.input.take();
                prompt.decide(false, false, &reason)
            }
            (Prompt::Approval { denying: true, .. }, KeyCode::Esc) => {
                if let Prompt::Approval { denying, .. } = prompt {
                    *denying = false;
                }
                return Vec::new();
            }
            (Prompt::Question { .. }, KeyCode::Up) => {
                prompt.move_cursor(-1);
                return Vec::new();
            }
            (Prompt::Question { .. }, KeyCode::Down | KeyCode::Tab) => {
                prompt.move_cursor(1);
                return Vec::new();
            }
            (Prompt::Question { multi_select: true, .. }, KeyCode::Char(' ')) if self.input.is_empty() => {
                prompt.toggle();
                return Vec::new();
            }
            (Prompt::Question { .. }, KeyCode::Enter) => match prompt.answer(self.input.as_str().strip_prefix('/').unwrap_or(self.input.as_str())) {
                Some(answer) => {
                    self.input.clear();
                    Some(answer)
                }
                None => return Vec::new(),
            },
            (Prompt::Authorize { .. }, KeyCode::Enter) => None,
            (prompt, KeyCode::Backspace) if prompt.takes_text() => {
                self.input.backspace();
                return Vec::new();
            }
            (prompt, KeyCode::Char(character)) if prompt.takes_text() => {
                self.input.insert(character);
                return Vec::new();
            }
            _ => return Vec::new(),
        };
        self.prompts.pop_front();
        self.decisions.extend(decision);
        if !self.prompts.is_empty() {
            return Vec::new();
        }
        let Some(session) = self.session_id.clone() else { return Vec::new() };
        self.busy = Busy::Starting;
        self.scroll_back = 0;
        vec![Action::Decide { session, input: std::mem::take(&mut self.decisions) }]
    }

    /// A key while a command is typed over a prompt: Enter runs it, the prompt stays.
    fn on_command_key(&mut self, key: KeyEvent) -> Vec<Action> {
        match key.code {
            KeyCode::Enter => {
                let line = self.input.take();
                match commands::parse(&line) {
                    Ok(Some(command)) => self.run_command(command),
                    Ok(None) => Vec::new(),
                    Err(message) => {
                        self.transcript.note(Tone::Error, message);
                        Vec::new()
                    }
                }
            }
            KeyCode::Backspace => {
                self.input.backspace();
                Vec::new()
            }
            KeyCode::Esc => {
                self.input.clear();
                Vec::new()
            }
            KeyCode::Char(character) => {
                self.input.insert(character);
                Vec::new()
            }
            _ => Vec::new(),
        }
    }

    /// Enter on the input line: a command, or a message (a follow-up while a turn runs).
    fn submit(&mut self, line: &str) -> Vec<Action> {
        if line.trim().is_empty() {
            return Vec::new();
        }
        match commands::parse(line) {
            Err(message) => {
                self.transcript.note(Tone::Error, message);
                Vec::new()
            }
            Ok(Some(command)) => self.run_command(command),
            Ok(None) => {
                let text = line.strip_prefix('/').filter(|rest| rest.starts_with('/')).unwrap_or(line).trim().to_owned();
                if self.waiting() {
                    return self.run_command(Command::FollowUp(text));
                }
                self.busy = Busy::Starting;
                self.scroll_back = 0;
                self.prompts.clear();
                vec![Action::Send {
                    session: self.session_id.clone(),
                    agent: self.agent.clone(),
                    text,
                    attachments: std::mem::take(&mut self.attachments),
                }]
            }
        }
    }

    fn run_command(&mut self, command: Command) -> Vec<Action> {
        let session = self.session_id.clone();
        let needs_session = |app: &mut App| {
            app.transcript.note(Tone::Error, "no session yet: send a message first");
            Vec::new()
        };
        match command {
            Command::Help => {
                for (usage, what) in commands::HELP {
                    self.transcript.note(Tone::Note, format!("{usage:<22} {what}"));
                }
                self.transcript.note(Tone::Note, "keys: Enter sends · Ctrl-C cancels, twice exits · Ctrl-O reasoning · PgUp/PgDn scroll");
                Vec::new()
            }
            Command::Quit => {
                self.quit = true;
                vec![Action::Quit]
            }
            Command::Cancel => match session {
                Some(session) if self.waiting() => {
                    self.busy = Busy::Cancelling;
                    vec![Action::Cancel { session }]
                }
                _ => {
                    self.transcript.note(Tone::Note, "no turn is running");
                    Vec::new()
                }
            },
            Command::New(agent) => {
                if let Some(agent) = agent {
                    self.agent = agent;
                }
                *self = App { agent: self.agent.clone(), show_reasoning: self.show_reasoning, ..App::new(self.agent.clone()) };
                Vec::new()
            }
            Command::Sessions => vec![Action::ListSessions],
            Command::Resume(which) => {
                let session = match which.parse::<usize>() {
                    Ok(number) if number >= 1 && number <= self.listed_sessions.len() => self.listed_sessions[number - 1].clone(),
                    _ => which,
                };
                self.busy = Busy::Loading;
                self.prompts.clear();
                self.follow_ups = 0;
                self.steers = 0;
                vec![Action::Resume { session }]
            }
            Command::Mode(None) => {
                self.transcript.note(Tone::Note, format!("mode: {}", self.mode.as_deref().unwrap_or("(the agent's default)")));
                Vec::new()
            }
            Command::Mode(Some(mode)) => match session {
                Some(session) => vec![Action::SetMode { session, mode }],
                None => needs_session(self),
            },
            Command::Tasks => match session {
                Some(session) => vec![Action::Tasks { session }],
                None => needs_session(self),
            },
            Command::Plans => match session {
                Some(session) => vec![Action::Plans { session }],
                None => needs_session(self),
            },
            Command::Steer(text) => match session {
                Some(session) if self.waiting() => {
                    self.steers += 1;
                    self.transcript.note(Tone::Note, format!("steering sent; it joins before the next model call: {text}"));
                    vec![Action::Steer { session, text }]
                }
                _ => {
                    self.transcript.note(Tone::Error, "no turn is running: just send the message");
                    Vec::new()
                }
            },
            Command::FollowUp(text) => match session {
                Some(session) if self.waiting() => {
                    self.follow_ups += 1;
                    self.transcript.note(Tone::User, format!("› (queued) {text}"));
                    vec![Action::FollowUp { session, text }]
                }
                // With no turn running, a follow-up is just the next message.
                _ => self.submit(&text),
            },
            Command::Attach(None) if self.attachments.is_empty() => {
                self.transcript.note(Tone::Note, "no attachments: /attach PATH adds one");
                Vec::new()
            }
            Command::Attach(None) => {
                let names: Vec<String> = self.attachments.iter().map(|path| path.display().to_string()).collect();
                self.transcript.note(Tone::Note, format!("attached to your next message: {}", names.join(", ")));
                Vec::new()
            }
            Command::Attach(Some(path)) => {
                let path = PathBuf::from(path);
                self.transcript.note(Tone::Note, format!("will attach {} to your next message", path.display()));
                self.attachments.push(path);
                Vec::new()
            }
            Command::Detach => {
                self.attachments.clear();
                self.transcript.note(Tone::Note, "attachments dropped");
                Vec::new()
            }
            Command::Download { path, to } => match (session, self.transcript.last_turn_id.clone()) {
                (Some(session), Some(turn)) => vec![Action::Download { session, turn, path, to }],
                _ => needs_session(self),
            },
            Command::Reasoning => {
                self.show_reasoning = !self.show_reasoning;
                Vec::new()
            }
            Command::Usage => {
                let totals = &self.transcript.totals;
                let cost = totals.cost_usd.map_or_else(|| "no price configured".to_owned(), |cost| format!("${cost:.4}"));
                self.transcript.note(Tone::Usage, format!("this chat: {} in · {} out tokens · {cost}", totals.input_tokens, totals.output_tokens));
                Vec::new()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(code: KeyCode) -> Incoming {
        Incoming::Key(KeyEvent::new(code, KeyModifiers::NONE))
    }

    fn ctrl(character: char) -> Incoming {
        Incoming::Key(KeyEvent::new(KeyCode::Char(character), KeyModifiers::CONTROL))
    }

    fn typed(app: &mut App, text: &str) -> Vec<Action> {
        for character in text.chars() {
            app.update(key(KeyCode::Char(character)));
        }
        app.update(key(KeyCode::Enter))
    }

    fn ended() -> Incoming {
        Incoming::StreamEnded { session: "s1".into() }
    }

    fn event(json: &str) -> Incoming {
        Incoming::Event { session: "s1".into(), event: Box::new(serde_json::from_str(json).unwrap()) }
    }

    #[test]
    fn a_message_starts_a_turn_and_ctrl_c_cancels_then_exits() {
        let mut app = App::new("demo".into());
        let actions = typed(&mut app, "hello");
        assert_eq!(actions, vec![Action::Send { session: None, agent: "demo".into(), text: "hello".into(), attachments: vec![] }]);
        app.update(Incoming::Session { id: "s1".into(), agent: None, mode: None });
        assert_eq!(app.update(ctrl('c')), vec![Action::Cancel { session: "s1".into() }]);
        assert_eq!(app.busy, Busy::Cancelling);
        assert_eq!(app.update(ctrl('c')), vec![Action::Quit]);
        assert!(app.quit);
    }

    #[test]
    fn ctrl_c_when_idle_warns_first_and_a_key_in_between_disarms_it() {
        let mut app = App::new("demo".into());
        assert_eq!(app.update(ctrl('c')), vec![]);
        app.update(key(KeyCode::Char('x')));
        assert_eq!(app.update(ctrl('c')), vec![]);
        assert_eq!(app.update(ctrl('c')), vec![Action::Quit]);
    }

    #[test]
    fn while_a_turn_runs_enter_queues_a_follow_up_and_the_next_turn_is_watched() {
        let mut app = App::new("demo".into());
        app.update(Incoming::Session { id: "s1".into(), agent: None, mode: None });
        typed(&mut app, "first");
        assert_eq!(typed(&mut app, "second"), vec![Action::FollowUp { session: "s1".into(), text: "second".into() }]);
        assert_eq!(typed(&mut app, "/steer faster"), vec![Action::Steer { session: "s1".into(), text: "faster".into() }]);
        assert_eq!(
            app.update(ended()),
            vec![Action::Refresh { session: "s1".into() }, Action::WatchNextTurn { session: "s1".into(), after: None }]
        );
        // The follow-up's turn, then the turn of the steering the first turn did not take.
        assert_eq!(
            app.update(ended()),
            vec![Action::Refresh { session: "s1".into() }, Action::WatchNextTurn { session: "s1".into(), after: None }]
        );
        assert_eq!(app.update(ended()), vec![Action::Refresh { session: "s1".into() }]);
    }

    #[test]
    fn a_cancel_leaves_nothing_queued_and_watches_no_next_turn() {
        let mut app = App::new("demo".into());
        app.update(Incoming::Session { id: "s1".into(), agent: None, mode: None });
        typed(&mut app, "first");
        typed(&mut app, "second");
        typed(&mut app, "/steer faster");
        assert_eq!(app.update(ctrl('c')), vec![Action::Cancel { session: "s1".into() }]);
        app.update(event(r#"{"type":"turn.done","id":"d","created_at":"x","thread_id":null,"state":{"status":"cancelled","reason":"client-cancelled","completed_at":"x"}}"#));
        assert_eq!(app.update(ended()), vec![Action::Refresh { session: "s1".into() }]);
        assert_eq!(app.busy, Busy::Idle);
        assert!(app.transcript.rows(false).iter().any(|row| row.text.contains("the cancel dropped 2 queued messages")));
        // The next message starts a turn of its own, not a follow-up of a turn that is gone.
        assert!(matches!(typed(&mut app, "again").as_slice(), [Action::Send { .. }]));
    }

    #[test]
    fn a_paused_turn_is_answered_prompt_by_prompt() {
        let mut app = App::new("demo".into());
        app.update(Incoming::Session { id: "s1".into(), agent: None, mode: None });
        typed(&mut app, "go");
        app.update(event(r#"{"type":"model.message","id":"m1","thread_id":"main","created_at":"x","tool_calls":[
            {"id":"c1","function":{"name":"echo","arguments":"{}"},"tool_info":{"type":"truefoundry-system","name":"echo"}},
            {"id":"c2","function":{"name":"ask_user_question","arguments":"{\"question\":\"Colour?\",\"options\":[{\"label\":\"Blue\"},{\"label\":\"Red\"}]}"},"tool_info":{"type":"truefoundry-system","name":"ask_user_question"}}]}"#));
        app.update(event(r#"{"type":"turn.done","id":"d","created_at":"x","thread_id":null,"state":{"status":"done","output":null,"completed_at":"x","required_actions":[
            {"type":"tool.approval_required","id":"p1","created_at":"x","thread_id":"main","tool_calls":[{"id":"c1","source_event_id":"m1"}]},
            {"type":"tool.response_required","id":"p2","created_at":"x","thread_id":"main","tool_calls":[{"id":"c2","source_event_id":"m1"}]}]}}"#));
        assert_eq!(app.update(ended()), vec![Action::Refresh { session: "s1".into() }]);
        assert_eq!(app.prompts.len(), 2);
        app.update(key(KeyCode::Char('n')));
        assert_eq!(typed(&mut app, "not now"), vec![]);
        app.update(key(KeyCode::Down));
        let actions = app.update(key(KeyCode::Enter));
        let Some(Action::Decide { session, input }) = actions.first() else { panic!("{actions:?}") };
        assert_eq!(session, "s1");
        assert_eq!(
            serde_json::to_value(input).unwrap(),
            serde_json::json!([
                {"type": "user.tool_approval", "thread_id": "main", "tool_call_id": "c1", "approval": {"status": "deny", "reason": "not now"}},
                {"type": "user.tool_response", "thread_id": "main", "tool_call_id": "c2", "content": "Red"}
            ])
        );
    }

    #[test]
    fn over_a_prompt_a_slash_line_is_a_command_and_a_double_slash_an_answer() {
        let mut app = App::new("demo".into());
        app.update(Incoming::Session { id: "s1".into(), agent: None, mode: None });
        app.prompts.push_back(Prompt::Approval { thread_id: "main".into(), call_id: "c1".into(), tool: "echo".into(), arguments: "{}".into(), denying: false });
        assert_eq!(typed(&mut app, "/sessions"), vec![Action::ListSessions]);
        assert_eq!(app.prompts.len(), 1, "the prompt stays");
        app.prompts.clear();
        app.update(event(r#"{"type":"model.message","id":"m1","thread_id":"main","created_at":"x","tool_calls":[
            {"id":"c2","function":{"name":"ask_user_question","arguments":"{\"question\":\"Path?\"}"},"tool_info":{"type":"truefoundry-system","name":"ask_user_question"}}]}"#));
        app.update(event(r#"{"type":"tool.response_required","id":"p2","created_at":"x","thread_id":"main","tool_calls":[{"id":"c2","source_event_id":"m1"}]}"#));
        app.update(ended());
        let actions = typed(&mut app, "//tmp");
        let Some(Action::Decide { input, .. }) = actions.first() else { panic!("{actions:?}") };
        assert!(matches!(&input[0], TurnInput::ToolResponse { content, .. } if content == "/tmp"), "{input:?}");
    }

    #[test]
    fn an_authorization_resumes_the_turn_with_an_empty_input() {
        let mut app = App::new("demo".into());
        app.update(Incoming::Session { id: "s1".into(), agent: None, mode: None });
        app.update(event(r#"{"type":"mcp.auth_required","id":"a1","created_at":"x","thread_id":"main","mcp_servers":[{"id":"s","name":"docs","auth_url":"http://auth/x"}]}"#));
        app.update(ended());
        assert!(matches!(app.prompts.front(), Some(Prompt::Authorize { links }) if links[0].1 == "http://auth/x"));
        assert_eq!(app.update(key(KeyCode::Enter)), vec![Action::Decide { session: "s1".into(), input: vec![] }]);
    }

    #[test]
    fn commands_need_a_session_where_they_act_on_one() {
        let mut app = App::new("demo".into());
        assert_eq!(typed(&mut app, "/tasks"), vec![]);
        assert_eq!(typed(&mut app, "/sessions"), vec![Action::ListSessions]);
        app.update(Incoming::Sessions(vec![("s9".into(), "s9 demo".into())]));
        assert_eq!(typed(&mut app, "/resume 1"), vec![Action::Resume { session: "s9".into() }]);
        app.update(Incoming::Session { id: "s9".into(), agent: Some("helper".into()), mode: Some("plan".into()) });
        app.update(Incoming::History { events: vec![], live: false });
        assert_eq!(app.busy, Busy::Idle);
        assert_eq!(typed(&mut app, "/mode build"), vec![Action::SetMode { session: "s9".into(), mode: "build".into() }]);
        typed(&mut app, "/attach notes.txt");
        let actions = typed(&mut app, "read it");
        assert_eq!(actions, vec![Action::Send { session: Some("s9".into()), agent: "helper".into(), text: "read it".into(), attachments: vec!["notes.txt".into()] }]);
    }
}
