//! [`Harness`]: the control layer over one session of an embedded [`Runtime`], for the UIs
//! that drive agents: send messages and answers, switch modes and models, patch the state,
//! steer the running turn, queue follow-ups, read tasks, plans and grants, clone. Every turn
//! event and every change of mode, model, state, tasks, plans or follow-ups goes to the
//! [`subscribe`](Harness::subscribe)rs as one stream of [`HarnessEvent`]s, and
//! [`display`](Harness::display) gives the coalesced [`DisplayState`] a UI renders from.
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
//! let session = runtime.create_session("demo").await?;
//! let harness = Harness::open(&runtime, &session.id).await?;
//! let mut events = harness.subscribe();
//! harness.set_mode("code").await?;
//! assert_eq!(events.recv().await.unwrap(), HarnessEvent::ModeChanged(Some("code".into())));
//! let turn = harness.send("Hello").await?;
//! assert!(turn.answer().contains("Hello"));
//! assert_eq!(harness.display().mode.as_deref(), Some("code"));
//! runtime.shutdown().await;
//! # Ok::<(), teamster::runtime::RuntimeError>(())
//! # }).unwrap();
//! ```

use std::sync::{Arc, Mutex, PoisonError};

use futures_util::StreamExt;
use teamster_protocol::control::{Grant, Plan, QueuedMessage, TaskList};
use teamster_protocol::{Event, MAIN_THREAD_ID, UserContent};
use teamster_service::{CloneSession, ServiceError, SessionUpdate, TurnListQuery};
use tokio::sync::broadcast;

use crate::runtime::{FinishedTurn, Runtime, RuntimeError, RuntimeEvent, TurnEvents, TurnInput, user_message};

/// How many of the newest turns `run_follow_ups` looks through.
const FOLLOW_UP_LOOKBACK: u32 = 50;
/// How many events a subscriber may fall behind before it misses some.
const EVENTS_BUFFER: usize = 1024;

/// Something that happened in the harness's session.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum HarnessEvent {
    /// An event of a turn the harness follows (boxed: the other variants are small).
    Turn(Box<RuntimeEvent>),
    /// The session's mode (an approved plan's, or one chosen).
    ModeChanged(Option<String>),
    /// The model chosen for the session's next turns (`None`: the agent's).
    ModelChanged(Option<String>),
    /// The session state.
    StateChanged(serde_json::Value),
    /// The task list.
    TasksChanged(TaskList),
    /// The plans and where each stands.
    PlansChanged(Vec<Plan>),
    /// The queued follow-ups.
    FollowUpsChanged(Vec<QueuedMessage>),
}

/// What a UI shows of the session, kept up to date by the harness.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct DisplayState {
    /// The session's title.
    pub title: Option<String>,
    /// The mode the next turn runs in (`None`: the agent's default, or no modes).
    pub mode: Option<String>,
    /// The model chosen for the next turns (`None`: the agent's or the mode's).
    pub model: Option<String>,
    /// The turn running now, if the harness follows one.
    pub running_turn: Option<String>,
    /// The text of the main thread's message being streamed.
    pub streaming: String,
    /// The main thread's last answer.
    pub last_answer: Option<String>,
    /// The last turn the harness followed (or the session's last when it was opened).
    pub last_followed: Option<String>,
    /// What the last turn waits for: approvals, answers, authorizations.
    pub waiting_for: Vec<Event>,
    /// The task list.
    pub tasks: TaskList,
    /// The plans.
    pub plans: Vec<Plan>,
    /// The queued follow-ups.
    pub follow_ups: Vec<QueuedMessage>,
    /// The session state, for agents with a `state_schema`.
    pub state: Option<serde_json::Value>,
}

/// The control layer over one session (see the [module](self)). Cheap to clone; clones share
/// the subscribers and the display state.
#[derive(Clone)]
pub struct Harness {
    runtime: Runtime,
    session_id: String,
    shared: Arc<Shared>,
}

struct Shared {
    events: broadcast::Sender<HarnessEvent>,
    display: Mutex<DisplayState>,
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Harness").field("session_id", &self.session_id).finish_non_exhaustive()
    }
}

impl Harness {
    /// The harness of a session of `runtime`, its display state read from the session.
    pub async fn open(runtime: &Runtime, session_id: &str) -> Result<Harness, RuntimeError> {
        let harness = Harness {
            runtime: runtime.clone(),
            session_id: session_id.to_owned(),
            shared: Arc::new(Shared { events: broadcast::Sender::new(EVENTS_BUFFER), display: Mutex::default() }),
        };
        // A turn still running is not followed yet: `run_follow_ups` takes it up.
        let query = TurnListQuery { limit: 2, page_token: None };
        let (turns, _) = runtime.service().list_turns(runtime.caller(), session_id, query).await?;
        harness.lock().last_followed =
            turns.into_iter().find(|turn| turn.state.is_terminal()).map(|turn| turn.id);
        harness.refresh().await?;
        Ok(harness)
    }

    /// The session's id.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// Every event from now on: turn events and changes. A subscriber more than 1024 events
    /// behind is told how many it missed (`RecvError::Lagged`) and goes on.
    pub fn subscribe(&self) -> broadcast::Receiver<HarnessEvent> {
        self.shared.events.subscribe()
    }

    /// The display state as it stands.
    pub fn display(&self) -> DisplayState {
        self.lock().clone()
    }

    /// Sends a user message: runs a turn and returns it once it has ended.
    pub async fn send(&self, text: impl Into<String>) -> Result<FinishedTurn, RuntimeError> {
        self.answer(vec![user_message(text)]).await
    }

    /// Runs a turn with `input` (a message, or the decisions on what the last turn waits for:
    /// approvals, answers to questions) and returns it once it has ended.
    pub async fn answer(&self, input: Vec<TurnInput>) -> Result<FinishedTurn, RuntimeError> {
        let started = self.runtime.start_turn(&self.session_id, input).await?;
        self.follow(&started.turn.id, started.events).await
    }

    /// Switches the session to one of its agent's modes.
    pub async fn set_mode(&self, mode: &str) -> Result<(), RuntimeError> {
        self.update(SessionUpdate { mode: Some(mode.to_owned()), ..SessionUpdate::default() }).await
    }

    /// Chooses the model of the next turns (`provider/model`; `""` for the agent's).
    pub async fn set_model(&self, model: &str) -> Result<(), RuntimeError> {
        self.update(SessionUpdate { model: Some(model.to_owned()), ..SessionUpdate::default() }).await
    }

    /// Changes the session state with a JSON merge patch (refused whole when it breaks the
    /// agent's `state_schema`).
    pub async fn patch_state(&self, patch: serde_json::Value) -> Result<(), RuntimeError> {
        self.update(SessionUpdate { state: Some(patch), ..SessionUpdate::default() }).await
    }

    /// Sends an instruction to the running turn, which takes it before its next model call.
    pub async fn steer(&self, text: impl Into<String>) -> Result<QueuedMessage, RuntimeError> {
        let service = self.runtime.service();
        Ok(service.follow_ups().steer(self.runtime.caller(), &self.session_id, UserContent::Text(text.into())).await?)
    }

    /// Queues a message that starts the next turn once the running one ends (at once when none
    /// runs); [`Harness::run_follow_ups`] follows the turns they start.
    pub async fn follow_up(&self, text: impl Into<String>) -> Result<QueuedMessage, RuntimeError> {
        let service = self.runtime.service();
        let queued = service.follow_ups().queue(self.runtime.caller(), &self.session_id, UserContent::Text(text.into())).await?;
        self.refresh().await?;
        Ok(queued)
    }

    /// Cancels a queued follow-up.
    pub async fn cancel_follow_up(&self, id: &str) -> Result<(), RuntimeError> {
        self.runtime.service().follow_ups().cancel(self.runtime.caller(), &self.session_id, id).await?;
        self.refresh().await
    }

    /// Follows the turns the session started since the last one the harness followed (the
    /// running one, and those its follow-ups start, even those already over) until none runs
    /// and none is queued, or the last waits for the user (which holds the queue); returns
    /// them, oldest first.
    pub async fn run_follow_ups(&self) -> Result<Vec<FinishedTurn>, RuntimeError> {
        let mut finished = Vec::new();
        loop {
            let newer = self.turns_since_followed().await?;
            if newer.is_empty() {
                self.refresh().await?;
                let display = self.display();
                if display.follow_ups.is_empty() || !display.waiting_for.is_empty() {
                    return Ok(finished);
                }
                // Queued, and about to start: look again.
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                continue;
            }
            for turn_id in newer {
                let events = self.runtime.subscribe(&self.session_id, &turn_id, 0).await?;
                finished.push(self.follow(&turn_id, events).await?);
            }
        }
    }

    /// The session's turns after the last one the harness followed, oldest first.
    async fn turns_since_followed(&self) -> Result<Vec<String>, RuntimeError> {
        let followed = self.lock().last_followed.clone();
        let query = TurnListQuery { limit: FOLLOW_UP_LOOKBACK, page_token: None };
        let (turns, _) = self.runtime.service().list_turns(self.runtime.caller(), &self.session_id, query).await?;
        let mut newer: Vec<String> =
            turns.into_iter().map(|turn| turn.id).take_while(|id| Some(id) != followed.as_ref()).collect();
        newer.reverse();
        Ok(newer)
    }

    /// The task list.
    pub fn tasks(&self) -> TaskList {
        self.lock().tasks.clone()
    }

    /// The plans.
    pub fn plans(&self) -> Vec<Plan> {
        self.lock().plans.clone()
    }

    /// The session's "always allow" grants.
    pub async fn grants(&self) -> Result<Vec<Grant>, RuntimeError> {
        Ok(self.runtime.service().catalog().session_grants(self.runtime.caller(), &self.session_id).await?)
    }

    /// Revokes a grant: its tool (or category) asks again.
    pub async fn revoke_grant(&self, id: &str) -> Result<(), RuntimeError> {
        Ok(self.runtime.service().catalog().revoke_grant(self.runtime.caller(), &self.session_id, id).await?)
    }

    /// A new session with this one's history up to `turn_id` (the last turn when `None`), and
    /// its harness.
    pub async fn clone_session(&self, turn_id: Option<&str>) -> Result<Harness, RuntimeError> {
        let request = CloneSession { turn_id: turn_id.map(str::to_owned), title: None };
        let clone = self.runtime.service().clone_session(self.runtime.caller(), &self.session_id, request).await?;
        Harness::open(&self.runtime, &clone.id).await
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, DisplayState> {
        self.shared.display.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn emit(&self, event: HarnessEvent) {
        // No subscriber is not an error.
        let _ = self.shared.events.send(event);
    }

    async fn update(&self, update: SessionUpdate) -> Result<(), RuntimeError> {
        self.runtime.service().catalog().update_session(self.runtime.caller(), &self.session_id, update).await?;
        self.refresh().await
    }

    /// Reads a turn's events to its end, passing each on and keeping the display state.
    async fn follow(&self, turn_id: &str, mut events: TurnEvents) -> Result<FinishedTurn, RuntimeError> {
        {
            let mut display = self.lock();
            display.running_turn = Some(turn_id.to_owned());
            display.last_followed = Some(turn_id.to_owned());
            display.streaming.clear();
            display.waiting_for.clear();
        }
        let mut read = Vec::new();
        while let Some(event) = events.next().await {
            let event = event?;
            self.show(&event.event);
            self.emit(HarnessEvent::Turn(Box::new(event.clone())));
            read.push(event);
        }
        let finished = FinishedTurn { events: read };
        {
            let mut display = self.lock();
            display.running_turn = None;
            display.waiting_for = finished.required_actions().into_iter().cloned().collect();
            let answer = finished.answer();
            if !answer.is_empty() {
                display.last_answer = Some(answer);
            }
            display.streaming.clear();
        }
        self.refresh().await?;
        Ok(finished)
    }

    /// Folds a turn event into the display state.
    fn show(&self, event: &Event) {
        let mut display = self.lock();
        match event {
            Event::ModelMessage(message) if message.thread_id == MAIN_THREAD_ID => display.streaming.clear(),
            Event::ModelMessageDelta(delta) if delta.thread_id == MAIN_THREAD_ID => {
                if let Some(text) = &delta.content {
                    display.streaming.push_str(text);
                }
            }
            _ => {}
        }
    }

    /// Reads the session's mode, model, state, tasks, plans and follow-ups, and tells
    /// subscribers what changed.
    async fn refresh(&self) -> Result<(), RuntimeError> {
        let service = self.runtime.service();
        let caller = self.runtime.caller();
        let session = service.catalog().get_session(caller, &self.session_id).await?;
        let tasks = service.events().tasks(caller, &self.session_id).await?;
        let plans = service.events().plans(caller, &self.session_id).await?;
        let follow_ups = service.follow_ups().list(caller, &self.session_id).await?;
        let state = match service.catalog().session_state(caller, &self.session_id).await {
            Ok(state) => Some(state),
            Err(ServiceError::Invalid { .. }) => None,
            Err(error) => return Err(error.into()),
        };
        let mut changes = Vec::new();
        {
            let mut display = self.lock();
            display.title = session.title;
            if display.mode != session.control.mode {
                display.mode = session.control.mode;
                changes.push(HarnessEvent::ModeChanged(display.mode.clone()));
            }
            if display.model != session.control.model {
                display.model = session.control.model;
                changes.push(HarnessEvent::ModelChanged(display.model.clone()));
            }
            if display.state != state {
                display.state = state;
                changes.extend(display.state.clone().map(HarnessEvent::StateChanged));
            }
            if display.tasks != tasks {
                display.tasks = tasks;
                changes.push(HarnessEvent::TasksChanged(display.tasks.clone()));
            }
            if display.plans != plans {
                display.plans = plans;
                changes.push(HarnessEvent::PlansChanged(display.plans.clone()));
            }
            if display.follow_ups != follow_ups {
                display.follow_ups = follow_ups;
                changes.push(HarnessEvent::FollowUpsChanged(display.follow_ups.clone()));
            }
        }
        for change in changes {
            self.emit(change);
        }
        Ok(())
    }
}
