//! [`Harness`]: the control layer over the sessions of one agent of an embedded [`Runtime`],
//! for the UIs that drive agents. It is bound to one session at a time (create, switch, list,
//! rename and delete them, each listed with a preview of its first message), sends messages
//! (with files) and answers, switches modes and models, patches the state, steers the running
//! turn, queues follow-ups, aborts, and reads tasks, plans, grants, modes, tools and the
//! conversation as messages.
//!
//! Everything that happens in the bound session reaches the [`subscribe`](Harness::subscribe)rs
//! as [`HarnessEvent`]s, the live channel's vocabulary (`agent_start`, `message_update`,
//! `tool_approval_required`, `subagent_start`, `mode_changed`, `display_state_changed`, ...),
//! whoever caused it: this harness, another one, or a client of the server on the same store.
//! Each turn event also comes as it was stored ([`HarnessEvent::TurnEvent`]), before what it
//! translates into. [`display`](Harness::display) is the [`DisplayState`] a UI renders from;
//! when a method that changes the session returns, the display state shows the change.
//!
//! ```
//! use teamster::runtime::{Harness, HarnessEvent, Runtime};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let runtime = Runtime::open("sqlite::memory:").await?;
//! let spec = serde_json::from_value(serde_json::json!({
//!     "model": {"name": "offline/echo"},
//!     "modes": [{"id": "ask", "default": true}, {"id": "code", "instructions": "Write code."}],
//! })).unwrap();
//! runtime.save_agent("demo", spec).await?;
//! let harness = Harness::select_or_create(&runtime, "demo").await?;
//! let mut events = harness.subscribe();
//! harness.set_mode("code").await?;
//! assert_eq!(harness.current_mode().await?.map(|mode| mode.id).as_deref(), Some("code"));
//! let turn = harness.send("Hello").await?;
//! assert!(turn.answer().contains("Hello"));
//! let display = harness.display();
//! assert_eq!(display.last_answer.as_deref(), Some(turn.answer().as_str()));
//! // The subscriber saw the mode change, then the turn.
//! let mut names = Vec::new();
//! while let Ok(event) = events.try_recv() {
//!     names.push(event.name());
//! }
//! let position = |name| names.iter().position(|seen| *seen == name).unwrap();
//! assert!(position("mode_changed") < position("agent_start"));
//! assert!(position("agent_start") < position("agent_end"));
//! runtime.shutdown().await;
//! # Ok::<(), teamster::runtime::RuntimeError>(())
//! # }).unwrap();
//! ```

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use base64::Engine as _;
use futures_util::StreamExt;
use teamster_live::{DisplayState, LiveEvent};
use teamster_protocol::agent::ModeSpec;
use teamster_protocol::agent_check::ToolCheck;
use teamster_protocol::control::{Grant, Plan, QueuedMessage, TaskList, ToolCategory};
use teamster_protocol::input::{Answer, Approval, UserContentPart};
use teamster_protocol::{AgentSpec, Event, Session, UserContent};
use teamster_service::{
    CloneSession, ListOrder, ServiceError, SessionListQuery, SessionOrder, SessionUpdate, TurnEventsQuery, TurnListQuery,
};
use tokio::sync::{broadcast, watch};

use crate::AgentItem;
use crate::items::ItemFolder;
use crate::runtime::{FinishedTurn, Refusal, Runtime, RuntimeError, TurnEvents, TurnInput, user_message};

/// Something that happened in the harness's session: the live channel's events, and each turn
/// event as stored ([`HarnessEvent::TurnEvent`]).
pub type HarnessEvent = LiveEvent;

/// How many of the newest turns `run_follow_ups` looks through.
const FOLLOW_UP_LOOKBACK: u32 = 50;
/// How many events a subscriber may fall behind before it misses some.
const EVENTS_BUFFER: usize = 1024;
/// How long a method that changed the session waits for the display state to show it; past
/// that (another client changed it again meanwhile) it returns, and the display catches up.
const SETTLE_LIMIT: Duration = Duration::from_secs(5);
/// How many of the last ended turns the harness remembers (see `Shared::ended`).
const ENDED_KEPT: usize = 16;
/// How long the harness waits before it opens its session's channel again.
const REOPEN_PAUSE: Duration = Duration::from_millis(200);
/// The most sessions `list_sessions` gives.
const MAX_LISTED: u32 = 100;
/// The most turns, newest first, whose messages `messages` gives.
const MAX_MESSAGE_TURNS: usize = 1000;

/// A file sent with a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attachment {
    /// Its name, as the agent sees it.
    pub name: String,
    /// Its media type (`image/png`, `text/csv`).
    pub media_type: String,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

/// The control layer over the sessions of one agent (see the [module](self)). Cheap to clone;
/// clones share the bound session, the subscribers and the display state.
#[derive(Clone)]
pub struct Harness {
    runtime: Runtime,
    shared: Arc<Shared>,
}

struct Shared {
    events: broadcast::Sender<HarnessEvent>,
    display: Arc<watch::Sender<DisplayState>>,
    /// The last turns the channel said ended, newest last: a turn may end and the next (a
    /// follow-up) start between two looks at the display state.
    ended: Arc<Mutex<VecDeque<String>>>,
    bound: Mutex<Bound>,
}

/// The session the harness drives, and the task that follows its live channel.
struct Bound {
    session_id: String,
    agent_name: String,
    /// The last turn `run_follow_ups` (or a send) followed.
    last_followed: Option<String>,
    pump: Option<tokio::task::AbortHandle>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(pump) = self.bound.get_mut().unwrap_or_else(PoisonError::into_inner).pump.take() {
            pump.abort();
        }
    }
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Harness").field("session_id", &self.session_id()).finish_non_exhaustive()
    }
}

impl Harness {
    /// The harness of one of the runtime's sessions (of a saved agent), its display state read
    /// from the session.
    pub async fn open(runtime: &Runtime, session_id: &str) -> Result<Harness, RuntimeError> {
        let session = runtime.service().catalog().get_session(runtime.caller(), session_id).await?;
        let Some(agent_name) = session.agent_name.clone() else {
            return Err(refused(Refusal::Invalid, "the session has no saved agent: a harness drives the sessions of one saved agent"));
        };
        let (display, _) = watch::channel(DisplayState::default());
        let harness = Harness {
            runtime: runtime.clone(),
            shared: Arc::new(Shared {
                events: broadcast::Sender::new(EVENTS_BUFFER),
                display: Arc::new(display),
                ended: Arc::default(),
                bound: Mutex::new(Bound { session_id: session.id.clone(), agent_name, last_followed: None, pump: None }),
            }),
        };
        harness.bind(&session.id).await?;
        Ok(harness)
    }

    /// The harness of the agent's newest session of the runtime's user, or of a new one when
    /// there is none.
    pub async fn select_or_create(runtime: &Runtime, agent_name: &str) -> Result<Harness, RuntimeError> {
        let newest = newest_session(runtime, agent_name, None).await?;
        let session_id = match newest {
            Some(session) => session.id,
            None => runtime.create_session(agent_name).await?.id,
        };
        Harness::open(runtime, &session_id).await
    }

    /// The id of the session the harness drives now.
    pub fn session_id(&self) -> String {
        self.bound().session_id.clone()
    }

    /// The saved agent whose sessions the harness drives.
    pub fn agent_name(&self) -> String {
        self.bound().agent_name.clone()
    }

    /// Every event from now on, of the session bound now and of those switched to later. A
    /// subscriber more than 1024 events behind is told how many it missed
    /// (`RecvError::Lagged`) and goes on.
    pub fn subscribe(&self) -> broadcast::Receiver<HarnessEvent> {
        self.shared.events.subscribe()
    }

    /// The display state as it stands.
    pub fn display(&self) -> DisplayState {
        self.shared.display.borrow().clone()
    }

    // Sessions.

    /// Creates a session of the harness's agent (with `title`, if given) and switches to it.
    ///
    /// ```
    /// use teamster::runtime::{Harness, Runtime};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let runtime = Runtime::open("sqlite::memory:").await?;
    /// let spec = serde_json::from_value(serde_json::json!({"model": {"name": "offline/echo"}})).unwrap();
    /// runtime.save_agent("demo", spec).await?;
    /// let harness = Harness::select_or_create(&runtime, "demo").await?;
    /// let first = harness.session_id();
    /// harness.send("Plan the release").await?;
    /// harness.create_session(Some("Notes")).await?;
    /// harness.rename("Release notes").await?;
    /// assert_eq!(harness.display().title.as_deref(), Some("Release notes"));
    /// let listed = harness.list_sessions().await?;
    /// let plan = listed.iter().find(|session| session.id == first).unwrap();
    /// assert_eq!(plan.preview.as_deref(), Some("Plan the release"));
    /// harness.switch_session(&first).await?;
    /// assert_eq!(harness.messages().await?.len(), 2, "the message and the answer");
    /// runtime.shutdown().await;
    /// # Ok::<(), teamster::runtime::RuntimeError>(())
    /// # }).unwrap();
    /// ```
    pub async fn create_session(&self, title: Option<&str>) -> Result<Session, RuntimeError> {
        let agent_name = self.agent_name();
        let service = self.runtime.service();
        let session = service.catalog().create_session(self.runtime.caller(), &agent_name, title.map(str::to_owned)).await?;
        self.switch_session(&session.id).await?;
        Ok(session)
    }

    /// Switches to another session of the harness's agent. The work running in the session
    /// left is aborted, as a UI leaving it expects.
    pub async fn switch_session(&self, session_id: &str) -> Result<(), RuntimeError> {
        let session = self.runtime.service().catalog().get_session(self.runtime.caller(), session_id).await?;
        if session.agent_name.as_deref() != Some(self.agent_name().as_str()) {
            return Err(refused(Refusal::Invalid, format!("session {session_id:?} is not a session of the agent {:?}", self.agent_name())));
        }
        let left = self.session_id();
        if left == session.id {
            return Ok(());
        }
        self.runtime.cancel(&left).await?;
        self.bind(&session.id).await
    }

    /// The runtime user's sessions of the harness's agent, the most recently updated first
    /// (at most 100).
    pub async fn list_sessions(&self) -> Result<Vec<Session>, RuntimeError> {
        let query = SessionListQuery {
            agent_name: Some(self.agent_name()),
            order_by: SessionOrder::UpdatedAt,
            descending: true,
            limit: MAX_LISTED,
            ..SessionListQuery::default()
        };
        let service = self.runtime.service();
        let (sessions, _) = service.catalog().list_sessions(self.runtime.caller(), query).await?;
        Ok(service.events().with_previews(sessions).await?)
    }

    /// The first user message of each of `session_ids` (`None` for a session without one
    /// yet), in their order: previews for a session list.
    pub async fn first_user_messages(&self, session_ids: &[&str]) -> Result<Vec<Option<String>>, RuntimeError> {
        let events = self.runtime.service().events();
        let mut messages = Vec::with_capacity(session_ids.len());
        for session_id in session_ids {
            messages.push(events.first_user_message(self.runtime.caller(), session_id).await?);
        }
        Ok(messages)
    }

    /// The bound session's conversation as messages, oldest first: the user's messages, the
    /// agent's (text, reasoning and tool calls) and the tool results, of its main thread and
    /// its last 1,000 turns.
    pub async fn messages(&self) -> Result<Vec<AgentItem>, RuntimeError> {
        let session_id = self.session_id();
        let service = self.runtime.service();
        let caller = self.runtime.caller();
        let mut turns = Vec::new();
        let mut page_token = None;
        while turns.len() < MAX_MESSAGE_TURNS {
            let query = TurnListQuery { limit: 100, page_token };
            let (page, next) = service.list_turns(caller, &session_id, query).await?;
            turns.extend(page);
            match next {
                Some(token) => page_token = Some(token),
                None => break,
            }
        }
        turns.reverse();
        let mut folder = ItemFolder::default();
        let mut items = Vec::new();
        for turn in turns {
            items.extend(turn.input.iter().filter_map(|input| match input {
                TurnInput::Message { content } => Some(AgentItem::user(content.to_text())),
                _ => None,
            }));
            let mut page_token = None;
            loop {
                let query = TurnEventsQuery { limit: 1000, order: ListOrder::Ascending, page_token, require_terminal: false };
                let (events, next) = service.events().turn_events(caller, &session_id, &turn.id, query).await?;
                for raw in events {
                    let event: Event = serde_json::from_str(raw.get()).map_err(|error| RuntimeError::Event(error.to_string()))?;
                    items.extend(folder.item(&event));
                }
                match next {
                    Some(token) => page_token = Some(token),
                    None => break,
                }
            }
        }
        Ok(items)
    }

    /// Renames the bound session.
    pub async fn rename(&self, title: &str) -> Result<(), RuntimeError> {
        self.update(SessionUpdate { title: Some(title.to_owned()), ..SessionUpdate::default() }).await
    }

    /// Deletes one of the agent's sessions with its turns. Deleting the bound one moves the
    /// harness to the agent's newest other session, or to a new one.
    pub async fn delete_session(&self, session_id: &str) -> Result<(), RuntimeError> {
        let session = self.runtime.service().catalog().get_session(self.runtime.caller(), session_id).await?;
        if session.agent_name.as_deref() != Some(self.agent_name().as_str()) {
            return Err(refused(Refusal::Invalid, format!("session {session_id:?} is not a session of the agent {:?}", self.agent_name())));
        }
        self.runtime.service().delete_session(self.runtime.caller(), session_id).await?;
        if self.session_id() == session_id {
            let agent_name = self.agent_name();
            let next = match newest_session(&self.runtime, &agent_name, Some(session_id)).await? {
                Some(session) => session.id,
                None => self.runtime.create_session(&agent_name).await?.id,
            };
            self.bind(&next).await?;
        }
        Ok(())
    }

    /// A new session with the bound one's history up to `turn_id` (the last turn when `None`),
    /// and its harness; this one stays where it is.
    pub async fn clone_session(&self, turn_id: Option<&str>) -> Result<Harness, RuntimeError> {
        let request = CloneSession { turn_id: turn_id.map(str::to_owned), title: None };
        let clone = self.runtime.service().clone_session(self.runtime.caller(), &self.session_id(), request).await?;
        Harness::open(&self.runtime, &clone.id).await
    }

    // Messages and answers.

    /// Sends a user message: runs a turn and returns it once it has ended.
    pub async fn send(&self, text: impl Into<String>) -> Result<FinishedTurn, RuntimeError> {
        self.answer(vec![user_message(text)]).await
    }

    /// Sends a user message with files (images go to the model; other files into the agent's
    /// sandbox, when it has one).
    pub async fn send_with_files(&self, text: impl Into<String>, files: Vec<Attachment>) -> Result<FinishedTurn, RuntimeError> {
        let mut parts = vec![UserContentPart::Text { text: text.into() }];
        parts.extend(files.into_iter().map(|file| UserContentPart::File {
            data: format!("data:{};base64,{}", file.media_type, base64::engine::general_purpose::STANDARD.encode(&file.bytes)),
            name: file.name,
        }));
        self.answer(vec![TurnInput::Message { content: UserContent::Parts(parts) }]).await
    }

    /// Runs a turn with `input` (a message, or the decisions on what the last turn waits for:
    /// approvals, answers to questions) and returns it once it has ended and the display state
    /// shows it.
    pub async fn answer(&self, input: Vec<TurnInput>) -> Result<FinishedTurn, RuntimeError> {
        let session_id = self.session_id();
        let started = self.runtime.start_turn(&session_id, input).await?;
        self.follow(&session_id, &started.turn.id, started.events).await
    }

    /// Answers a question (`ask_user_question`, a client-side tool) the last turn waits on,
    /// and runs the turn that goes on. `tool_call_id` may be left out when exactly one call
    /// waits. For a multi-select question, answer with the chosen labels
    /// ([`Answer::Labels`]).
    ///
    /// ```
    /// use teamster::runtime::{Answer, Harness, Runtime};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let runtime = Runtime::open("sqlite::memory:").await?;
    /// let spec = serde_json::from_value(serde_json::json!({"model": {"name": "offline/echo"}})).unwrap();
    /// runtime.save_agent("demo", spec).await?;
    /// let harness = Harness::select_or_create(&runtime, "demo").await?;
    /// // The offline model calls the tool a message names, with the JSON after it.
    /// let question = r#"use ask_user_question {"question": "Which?", "options": [{"label": "Tests"}, {"label": "Docs"}], "multi_select": true}"#;
    /// harness.send(question).await?;
    /// assert!(harness.display().is_waiting());
    /// let answered = harness.respond(None, Answer::Labels(vec!["Tests".into(), "Docs".into()])).await?;
    /// assert!(answered.answer().contains(r#"["Tests","Docs"]"#), "{}", answered.answer());
    /// runtime.shutdown().await;
    /// # Ok::<(), teamster::runtime::RuntimeError>(())
    /// # }).unwrap();
    /// ```
    pub async fn respond(&self, tool_call_id: Option<&str>, answer: Answer) -> Result<FinishedTurn, RuntimeError> {
        let content = answer.into_text();
        let tool_call_id = tool_call_id.unwrap_or_default().to_owned();
        self.answer(vec![TurnInput::ToolResponse { thread_id: String::new(), tool_call_id, content }]).await
    }

    /// Decides on a call the last turn waits on for approval, and runs the turn that goes
    /// on. `tool_call_id` may be left out when exactly one call waits.
    pub async fn approve(&self, tool_call_id: Option<&str>, approval: Approval) -> Result<FinishedTurn, RuntimeError> {
        let tool_call_id = tool_call_id.unwrap_or_default().to_owned();
        self.answer(vec![TurnInput::ToolApproval { thread_id: String::new(), tool_call_id, approval }]).await
    }

    /// Aborts the bound session's running turn, if any (and the steering queued for it).
    pub async fn abort(&self) -> Result<(), RuntimeError> {
        self.runtime.cancel(&self.session_id()).await?;
        self.settle(|display| display.running_turn_id.is_none()).await;
        Ok(())
    }

    /// Sends an instruction to the running turn, which takes it before its next model call.
    pub async fn steer(&self, text: impl Into<String>) -> Result<QueuedMessage, RuntimeError> {
        let service = self.runtime.service();
        Ok(service.follow_ups().steer(self.runtime.caller(), &self.session_id(), UserContent::Text(text.into())).await?)
    }

    /// Queues a message that starts the next turn once the running one ends (at once when none
    /// runs); [`Harness::run_follow_ups`] follows the turns they start.
    pub async fn follow_up(&self, text: impl Into<String>) -> Result<QueuedMessage, RuntimeError> {
        let service = self.runtime.service();
        let last_turn = self.display().last_turn_id;
        let queued =
            service.follow_ups().queue(self.runtime.caller(), &self.session_id(), UserContent::Text(text.into())).await?;
        let id = queued.id.clone();
        // Shown as queued, or already taken by a turn that started.
        self.settle(|display| display.follow_ups.iter().any(|item| item.id == id) || display.last_turn_id != last_turn).await;
        Ok(queued)
    }

    /// Cancels a queued follow-up.
    pub async fn cancel_follow_up(&self, id: &str) -> Result<(), RuntimeError> {
        self.runtime.service().follow_ups().cancel(self.runtime.caller(), &self.session_id(), id).await?;
        self.settle(|display| !display.follow_ups.iter().any(|item| item.id == id)).await;
        Ok(())
    }

    /// Follows the turns the session started since the last one the harness followed (the
    /// running one, and those its follow-ups start, even those already over) until none runs
    /// and none is queued, or the last waits for the user (which holds the queue); returns
    /// them, oldest first.
    pub async fn run_follow_ups(&self) -> Result<Vec<FinishedTurn>, RuntimeError> {
        let session_id = self.session_id();
        let mut finished = Vec::new();
        loop {
            let newer = self.turns_since_followed(&session_id).await?;
            if newer.is_empty() {
                let follow_ups = self.runtime.service().follow_ups().list(self.runtime.caller(), &session_id).await?;
                let waiting = self.display().is_waiting();
                if follow_ups.is_empty() || waiting {
                    self.settle(|display| display.follow_ups.is_empty() || display.is_waiting()).await;
                    return Ok(finished);
                }
                // Queued, and about to start: look again once something changes.
                let mut changes = self.shared.display.subscribe();
                let _ = tokio::time::timeout(Duration::from_millis(200), changes.changed()).await;
                continue;
            }
            for turn_id in newer {
                let events = self.runtime.subscribe(&session_id, &turn_id, 0).await?;
                finished.push(self.follow(&session_id, &turn_id, events).await?);
            }
        }
    }

    // Modes, models, state.

    /// Switches the session to one of its agent's modes.
    pub async fn set_mode(&self, mode: &str) -> Result<(), RuntimeError> {
        self.update(SessionUpdate { mode: Some(mode.to_owned()), ..SessionUpdate::default() }).await
    }

    /// Chooses the model of the next turns (`provider/model`; `""` for the agent's).
    pub async fn set_model(&self, model: &str) -> Result<(), RuntimeError> {
        self.update(SessionUpdate { model: Some(model.to_owned()), ..SessionUpdate::default() }).await
    }

    /// Chooses the model a declared sub-agent runs on from the next turn (`provider/model`;
    /// `""` for its declaration's); subscribers hear `SubagentModelChanged`.
    ///
    /// ```
    /// use teamster::runtime::{Harness, Runtime};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let runtime = Runtime::open("sqlite::memory:").await?;
    /// let spec = serde_json::from_value(serde_json::json!({
    ///     "model": {"name": "offline/echo"},
    ///     "sub_agents": [{"name": "researcher", "description": "Looks things up."}],
    /// })).unwrap();
    /// runtime.save_agent("demo", spec).await?;
    /// let harness = Harness::select_or_create(&runtime, "demo").await?;
    /// harness.set_subagent_model("researcher", "offline/echo").await?;
    /// assert_eq!(harness.display().subagent_models["researcher"], "offline/echo");
    /// let agent = harness.current_agent().await?;
    /// assert_eq!(agent.sub_agents.unwrap()[0].model.as_deref(), Some("offline/echo"));
    /// runtime.shutdown().await;
    /// # Ok::<(), teamster::runtime::RuntimeError>(())
    /// # }).unwrap();
    /// ```
    pub async fn set_subagent_model(&self, agent_name: &str, model: &str) -> Result<(), RuntimeError> {
        let models = std::collections::BTreeMap::from([(agent_name.to_owned(), model.to_owned())]);
        self.update(SessionUpdate { subagent_models: Some(models), ..SessionUpdate::default() }).await
    }

    /// Changes the session state with a JSON merge patch (refused whole when it breaks the
    /// agent's `state_schema`).
    pub async fn patch_state(&self, patch: serde_json::Value) -> Result<(), RuntimeError> {
        self.update(SessionUpdate { state: Some(patch), ..SessionUpdate::default() }).await
    }

    /// The agent's modes (none when it has none).
    ///
    /// ```
    /// use teamster::runtime::{Harness, Runtime};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let runtime = Runtime::open("sqlite::memory:").await?;
    /// let spec = serde_json::from_value(serde_json::json!({
    ///     "model": {"name": "offline/echo"},
    ///     "modes": [{"id": "ask", "default": true}, {"id": "code", "instructions": "Write code."}],
    /// })).unwrap();
    /// runtime.save_agent("demo", spec).await?;
    /// let harness = Harness::select_or_create(&runtime, "demo").await?;
    /// let modes: Vec<String> = harness.list_modes().await?.into_iter().map(|mode| mode.id).collect();
    /// assert_eq!(modes, ["ask", "code"]);
    /// assert_eq!(harness.current_mode().await?.map(|mode| mode.id).as_deref(), Some("ask"));
    /// harness.set_mode("code").await?;
    /// let agent = harness.current_agent().await?;
    /// assert_eq!(agent.instructions.as_deref(), Some("Write code."));
    /// runtime.shutdown().await;
    /// # Ok::<(), teamster::runtime::RuntimeError>(())
    /// # }).unwrap();
    /// ```
    pub async fn list_modes(&self) -> Result<Vec<ModeSpec>, RuntimeError> {
        Ok(self.spec().await?.modes.unwrap_or_default())
    }

    /// The mode the next turn runs in: the one chosen, else the agent's default (`None` when
    /// the agent has no modes).
    pub async fn current_mode(&self) -> Result<Option<ModeSpec>, RuntimeError> {
        let spec = self.spec().await?;
        let chosen = self.display().mode;
        Ok(teamster_control::mode_in_force(&spec, chosen.as_deref()).cloned())
    }

    /// The agent as the next turn runs it: the session's pinned version with its mode's
    /// instructions, model and tools, and the model chosen for the session.
    pub async fn current_agent(&self) -> Result<AgentSpec, RuntimeError> {
        let session = self.runtime.service().catalog().get_session(self.runtime.caller(), &self.session_id()).await?;
        let spec = self.spec().await?;
        Ok(teamster_control::agent_in_mode(&spec, &session.control))
    }

    // Tools and permissions.

    /// The tools the model is offered now, each with its category and whether its calls run
    /// at once, ask or are refused under the agent's rules and the session's permissions and
    /// grants.
    ///
    /// ```
    /// use teamster::runtime::{Harness, Permission, Runtime, ToolCategory};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let runtime = Runtime::open("sqlite::memory:").await?;
    /// let spec = serde_json::from_value(serde_json::json!({"model": {"name": "offline/echo"}})).unwrap();
    /// runtime.save_agent("demo", spec).await?;
    /// let harness = Harness::select_or_create(&runtime, "demo").await?;
    /// let tools = harness.tools().await?;
    /// let ask = tools.iter().find(|tool| tool.name == "ask_user_question").unwrap();
    /// assert_eq!((ask.category, ask.permission), (ToolCategory::Other, Permission::Allow));
    /// assert_eq!(harness.tool_category("no_such_tool").await?, None);
    /// runtime.shutdown().await;
    /// # Ok::<(), teamster::runtime::RuntimeError>(())
    /// # }).unwrap();
    /// ```
    pub async fn tools(&self) -> Result<Vec<ToolCheck>, RuntimeError> {
        Ok(self.runtime.service().session_tools(self.runtime.caller(), &self.session_id()).await?)
    }

    /// The category of a tool the model is offered now (`None` for one it is not).
    pub async fn tool_category(&self, name: &str) -> Result<Option<ToolCategory>, RuntimeError> {
        Ok(self.tools().await?.into_iter().find(|tool| tool.name == name).map(|tool| tool.category))
    }

    /// The session's "always allow" grants.
    pub async fn grants(&self) -> Result<Vec<Grant>, RuntimeError> {
        Ok(self.runtime.service().catalog().session_grants(self.runtime.caller(), &self.session_id()).await?)
    }

    /// Revokes a grant: its tool (or category) asks again.
    pub async fn revoke_grant(&self, id: &str) -> Result<(), RuntimeError> {
        Ok(self.runtime.service().catalog().revoke_grant(self.runtime.caller(), &self.session_id(), id).await?)
    }

    /// The task list.
    pub fn tasks(&self) -> TaskList {
        self.shared.display.borrow().tasks.clone()
    }

    /// The plans.
    pub fn plans(&self) -> Vec<Plan> {
        self.shared.display.borrow().plans.clone()
    }

    // The machinery.

    fn bound(&self) -> std::sync::MutexGuard<'_, Bound> {
        lock(&self.shared.bound)
    }

    /// The spec the bound session runs.
    async fn spec(&self) -> Result<AgentSpec, RuntimeError> {
        Ok(self.runtime.service().catalog().spec_of_session(self.runtime.caller(), &self.session_id()).await?)
    }

    /// Binds the harness to `session_id`: follows its live channel from a fresh snapshot, and
    /// returns once the display state is that snapshot.
    async fn bind(&self, session_id: &str) -> Result<(), RuntimeError> {
        let channel = self.runtime.channels().open_with_turn_events(self.runtime.caller(), session_id).await?;
        let last_followed = self.last_ended_turn(session_id).await?;
        let pump = tokio::spawn(pump(
            self.runtime.clone(),
            session_id.to_owned(),
            channel,
            self.shared.events.clone(),
            Arc::clone(&self.shared.display),
            Arc::clone(&self.shared.ended),
        ));
        {
            let mut bound = self.bound();
            if let Some(previous) = bound.pump.replace(pump.abort_handle()) {
                previous.abort();
            }
            bound.session_id = session_id.to_owned();
            bound.last_followed = last_followed;
        }
        let mut display = self.shared.display.subscribe();
        match tokio::time::timeout(SETTLE_LIMIT, display.wait_for(|display| display.session_id == session_id)).await {
            Ok(Ok(_)) => Ok(()),
            _ => Err(RuntimeError::Failed(format!("the live channel of session {session_id:?} did not open"))),
        }
    }

    /// The session's newest turn that has ended: a turn still running is not followed yet
    /// (`run_follow_ups` takes it up).
    async fn last_ended_turn(&self, session_id: &str) -> Result<Option<String>, RuntimeError> {
        let query = TurnListQuery { limit: 2, page_token: None };
        let (turns, _) = self.runtime.service().list_turns(self.runtime.caller(), session_id, query).await?;
        Ok(turns.into_iter().find(|turn| turn.state.is_terminal()).map(|turn| turn.id))
    }

    /// The session's turns after the last one the harness followed, oldest first.
    async fn turns_since_followed(&self, session_id: &str) -> Result<Vec<String>, RuntimeError> {
        let followed = self.bound().last_followed.clone();
        let query = TurnListQuery { limit: FOLLOW_UP_LOOKBACK, page_token: None };
        let (turns, _) = self.runtime.service().list_turns(self.runtime.caller(), session_id, query).await?;
        let mut newer: Vec<String> =
            turns.into_iter().map(|turn| turn.id).take_while(|id| Some(id) != followed.as_ref()).collect();
        newer.reverse();
        Ok(newer)
    }

    /// Changes the session, then waits for the display state to show what the store holds.
    async fn update(&self, update: SessionUpdate) -> Result<(), RuntimeError> {
        let session = self.runtime.service().catalog().update_session(self.runtime.caller(), &self.session_id(), update).await?;
        self.settle(|display| {
            display.title == session.title
                && display.mode == session.control.mode
                && display.model == session.control.model
                && display.subagent_models == session.control.subagent_models
                && (session.control.state.is_none() || display.state == session.control.state)
        })
        .await;
        Ok(())
    }

    /// Reads a turn's events to its end, then waits for the display state to show the turn
    /// ended and the views it changed.
    async fn follow(&self, session_id: &str, turn_id: &str, events: TurnEvents) -> Result<FinishedTurn, RuntimeError> {
        self.bound().last_followed = Some(turn_id.to_owned());
        let finished = events.finish().await?;
        let service = self.runtime.service();
        let caller = self.runtime.caller();
        let session = service.catalog().get_session(caller, session_id).await?;
        let tasks = service.events().tasks(caller, session_id).await?;
        let plans = service.events().plans(caller, session_id).await?;
        let ended = Arc::clone(&self.shared.ended);
        self.settle(|display| {
            let shown_ended = display.last_turn_id.as_deref() == Some(turn_id)
                && display.running_turn_id.as_deref() != Some(turn_id)
                && display.last_turn_status.is_some();
            let views_shown = display.mode == session.control.mode && display.tasks == tasks && display.plans == plans;
            // Past it already: a later turn (a follow-up) started once it ended.
            let moved_on = display.last_turn_id.as_deref() != Some(turn_id) && lock(&ended).iter().any(|ended| ended == turn_id);
            (shown_ended && views_shown) || moved_on
        })
        .await;
        Ok(finished)
    }

    /// Waits (at most [`SETTLE_LIMIT`]) for the display state to satisfy `shown`.
    async fn settle(&self, shown: impl FnMut(&DisplayState) -> bool) {
        let mut display = self.shared.display.subscribe();
        let _ = tokio::time::timeout(SETTLE_LIMIT, display.wait_for(shown)).await;
    }
}

/// Follows a session's live channel into the display state and the subscribers; opens it
/// again from a fresh snapshot if it ends while the session is still there (it fell behind).
async fn pump(
    runtime: Runtime,
    session_id: String,
    mut channel: teamster_channels::LiveChannel,
    events: broadcast::Sender<HarnessEvent>,
    display: Arc<watch::Sender<DisplayState>>,
    ended: Arc<Mutex<VecDeque<String>>>,
) {
    loop {
        while let Some(shared) = channel.next().await {
            let event = shared.event();
            if let LiveEvent::AgentEnd { turn_id, .. } = event {
                let mut ended = lock(&ended);
                if ended.len() == ENDED_KEPT {
                    ended.pop_front();
                }
                ended.push_back(turn_id.clone());
            }
            display.send_modify(|state| event.fold_into(state));
            // No subscriber is not an error.
            let _ = events.send(event.clone());
        }
        // A channel that ended at once (its store failing) is not opened again in a busy loop.
        tokio::time::sleep(REOPEN_PAUSE).await;
        channel = loop {
            match runtime.channels().open_with_turn_events(runtime.caller(), &session_id).await {
                Ok(reopened) => break reopened,
                Err(ServiceError::NotFound(_) | ServiceError::Forbidden(_)) => return,
                Err(error) => {
                    tracing::warn!(session = %session_id, %error, "the harness could not follow its session again");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        };
    }
}

/// The runtime user's most recently updated session of `agent_name`, but `except`.
async fn newest_session(runtime: &Runtime, agent_name: &str, except: Option<&str>) -> Result<Option<Session>, RuntimeError> {
    let query = SessionListQuery {
        agent_name: Some(agent_name.to_owned()),
        order_by: SessionOrder::UpdatedAt,
        descending: true,
        limit: 2,
        ..SessionListQuery::default()
    };
    let (sessions, _) = runtime.service().catalog().list_sessions(runtime.caller(), query).await?;
    Ok(sessions.into_iter().find(|session| Some(session.id.as_str()) != except))
}

fn refused(refusal: Refusal, message: impl Into<String>) -> RuntimeError {
    RuntimeError::Refused { refusal, message: message.into() }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
