//! A session's live channel ([`Live`], `service.live()`): one stream of the control layer's
//! events (`teamster-live`) that a UI subscribes to once instead of polling. It opens with
//! `display_state_changed` carrying the whole display state, then sends what happens: the
//! events of each turn as it runs, translated, and the changes of the session's title, mode,
//! model, state, tasks, plans and follow-ups, each followed by the display state (coalesced
//! while text streams).
//!
//! A channel is a task of its own that follows the session's running turn (on this replica or
//! another, through the runtime's subscriptions) and re-reads the session when told it changed:
//! at once for changes made on this replica ([`SessionSignals`], raised by the operations that
//! change a session), and every [`FALLBACK_READ`] for those made elsewhere. Its buffer is
//! bounded: a subscriber that stops reading is dropped, never holds a turn up, and may open a
//! channel again (which starts from a fresh snapshot).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use teamster_live::{Coalescer, DisplayState, LiveEvent, TurnTranslator, UsageTotals};
use teamster_protocol::control::{Plan, QueuedMessage, TaskList};
use teamster_protocol::{Event, TurnState};
use teamster_runtime::EventStream;
use tokio::sync::{broadcast, mpsc};

use crate::error::Result;
use crate::{Caller, Service, ServiceError};

/// How often a channel re-reads its session when nothing told it of a change (one made on
/// another replica).
pub const FALLBACK_READ: Duration = Duration::from_secs(1);
/// The same for a store no other replica shares (no change feed): only another process on
/// the same SQLite file, around a restart, changes a session unsignalled.
const ALONE_FALLBACK_READ: Duration = Duration::from_secs(30);
/// How many events a subscriber may fall behind before it is dropped.
const BUFFER: usize = 1024;
/// The most turns, newest first, whose usage a channel sums as it opens.
const USAGE_TURNS: usize = 1000;
/// How many signals the bus keeps for a channel that has not read them.
const SIGNALS: usize = 1024;

/// Tells a replica's channels that a session changed (see the [module](self)).
#[derive(Debug)]
pub(crate) struct SessionSignals {
    sender: broadcast::Sender<Arc<str>>,
}

impl Default for SessionSignals {
    fn default() -> SessionSignals {
        SessionSignals { sender: broadcast::Sender::new(SIGNALS) }
    }
}

impl SessionSignals {
    /// Wakes the channels of `session_id`.
    pub(crate) fn notify(&self, session_id: &str) {
        let _ = self.sender.send(session_id.into());
    }

    fn subscribe(&self) -> broadcast::Receiver<Arc<str>> {
        self.sender.subscribe()
    }
}

/// The sessions' live channels ([`Service::live`]).
pub struct Live<'a> {
    pub(crate) service: &'a Service,
}

impl Live<'_> {
    /// The display state of one of the caller's sessions now: what a channel opened now starts
    /// with.
    pub async fn display(&self, caller: &Caller, session_id: &str) -> Result<DisplayState> {
        let mut channel = self.open(caller, session_id).await?;
        match channel.next().await {
            Some(LiveEvent::DisplayStateChanged { display }) => Ok(*display),
            _ => Err(ServiceError::Unavailable("the session's display state could not be read now".to_owned())),
        }
    }

    /// Opens the live channel of one of the caller's sessions (404 as for reading it).
    pub async fn open(&self, caller: &Caller, session_id: &str) -> Result<LiveChannel> {
        self.service.catalog().owned_session(caller, session_id).await?;
        let (sender, receiver) = mpsc::channel(BUFFER);
        let channel = Channel {
            reader: Reader { service: self.service.clone(), caller: caller.clone(), session_id: session_id.to_owned() },
            session_id: session_id.to_owned(),
            sender,
            display: DisplayState { session_id: session_id.to_owned(), ..DisplayState::default() },
            coalescer: Coalescer::default(),
            following: None,
        };
        let signals = self.service.signals().subscribe();
        tokio::spawn(channel.run(signals));
        Ok(LiveChannel { receiver })
    }
}

/// The events of a session's live channel, as they happen; it ends when the session is
/// deleted or the subscriber fell too far behind.
pub struct LiveChannel {
    receiver: mpsc::Receiver<LiveEvent>,
}

impl std::fmt::Debug for LiveChannel {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("LiveChannel").finish_non_exhaustive()
    }
}

impl Stream for LiveChannel {
    type Item = LiveEvent;

    fn poll_next(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Option<LiveEvent>> {
        self.receiver.poll_recv(context)
    }
}

/// The turn a channel follows.
struct Following {
    turn_id: String,
    events: EventStream,
    translator: TurnTranslator,
}

/// Why a channel stops.
enum Stop {
    /// The subscriber is gone, or fell too far behind.
    Subscriber,
    /// The session is gone, or the caller may no longer read it.
    Session,
    /// The store failed as the channel opened.
    Failed,
}

/// What a channel reads with: the service, as the caller, of one session.
struct Reader {
    service: Service,
    caller: Caller,
    session_id: String,
}

/// One channel's task.
struct Channel {
    reader: Reader,
    session_id: String,
    sender: mpsc::Sender<LiveEvent>,
    display: DisplayState,
    coalescer: Coalescer,
    following: Option<Following>,
}

impl Channel {
    async fn run(mut self, mut signals: broadcast::Receiver<Arc<str>>) {
        let stop = match self.open().await {
            Ok(()) => self.follow(&mut signals).await,
            Err(stop) => stop,
        };
        match stop {
            Stop::Session => tracing::debug!(session = %self.session_id, "a live channel ended with its session"),
            Stop::Failed => tracing::warn!(session = %self.session_id, "a live channel could not open"),
            Stop::Subscriber => {}
        }
    }

    /// Sends the first snapshot: the session's views, and its last turn replayed (followed on
    /// when it runs).
    async fn open(&mut self) -> std::result::Result<(), Stop> {
        let Some(record) = self.reader.session().await? else { return Err(Stop::Failed) };
        self.display.title = record.title.clone();
        self.display.mode = record.control.mode.clone();
        self.display.model = record.control.model.clone();
        self.display.state = record.control.state.clone();
        self.display.follow_ups = self.reader.follow_ups().await?;
        (self.display.tasks, self.display.plans) = self.reader.views().await?;
        let usage = self.reader.usage().await?;
        if let Some(turn_id) = record.last_turn_id {
            let running = matches!(self.reader.turn_state(&turn_id).await?, Some(TurnState::Running));
            if let Some(mut following) = self.reader.subscribe(&turn_id, self.display.usage.clone()).await? {
                if running {
                    // Its events follow, from its start, after the snapshot.
                    self.display.running_turn_id = Some(turn_id.clone());
                    self.display.last_turn_id = Some(turn_id.clone());
                    self.following = Some(following);
                } else {
                    // A finished turn: its replay fills the snapshot, silently.
                    while let Some(streamed) = following.events.next().await {
                        for event in translate(&mut following.translator, &streamed.json) {
                            event.fold_into(&mut self.display);
                        }
                    }
                }
            }
        }
        // The finished turns' usage, as stored (a replayed turn's is among it).
        self.display.usage = usage;
        if let Some(following) = &mut self.following {
            following.translator = TurnTranslator::new(self.display.usage.clone());
        }
        self.send_display()
    }

    async fn follow(&mut self, signals: &mut broadcast::Receiver<Arc<str>>) -> Stop {
        let fallback = if self.reader.service.runtime().is_clustered() { FALLBACK_READ } else { ALONE_FALLBACK_READ };
        loop {
            let due = self.coalescer.due();
            let result = tokio::select! {
                next = next_event(&mut self.following) => match next {
                    Some(streamed) => self.turn_event(&streamed.json).await,
                    None => {
                        self.following = None;
                        self.refresh(true).await
                    }
                },
                signal = signals.recv() => match signal {
                    Ok(session_id) if *session_id != *self.session_id => Ok(()),
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => self.refresh(false).await,
                    Err(broadcast::error::RecvError::Closed) => Err(Stop::Subscriber),
                },
                () = tokio::time::sleep(fallback) => self.refresh(false).await,
                () = sleep_until(due) => self.send_display(),
                () = self.sender.closed() => Err(Stop::Subscriber),
            };
            if let Err(stop) = result {
                return stop;
            }
        }
    }

    /// One event of the followed turn, translated, sent and folded in. A tool that changed
    /// the task list, the plans or the state has the session read again at once.
    async fn turn_event(&mut self, json: &str) -> std::result::Result<(), Stop> {
        let Some(following) = &mut self.following else { return Ok(()) };
        let events = translate(&mut following.translator, json);
        let changed_views = events.iter().any(|event| match event {
            LiveEvent::ToolEnd { tool_name, .. } => {
                teamster_control::TASK_TOOLS.contains(&tool_name.as_str())
                    || [teamster_control::SUBMIT_PLAN, teamster_control::STATE_UPDATE].contains(&tool_name.as_str())
            }
            _ => false,
        });
        self.send_all(events)?;
        match changed_views {
            true => self.refresh(true).await,
            false => Ok(()),
        }
    }

    /// Re-reads the session and sends what changed; `views` also re-reads the folded views
    /// (tasks, plans), which change only with turns.
    async fn refresh(&mut self, views: bool) -> std::result::Result<(), Stop> {
        let Some(record) = self.reader.session().await? else { return Ok(()) };
        let mut events = Vec::new();
        if record.title != self.display.title {
            events.push(LiveEvent::ThreadChanged { session_id: self.session_id.clone(), title: record.title.clone() });
        }
        if record.control.mode != self.display.mode {
            events.push(LiveEvent::ModeChanged { mode: record.control.mode.clone() });
        }
        if record.control.model != self.display.model {
            events.push(LiveEvent::ModelChanged { model: record.control.model.clone() });
        }
        if let Some(state) = record.control.state.as_ref().filter(|state| self.display.state.as_ref() != Some(*state)) {
            events.push(LiveEvent::StateChanged { state: state.clone() });
        }
        let follow_ups = self.reader.follow_ups().await?;
        if follow_ups != self.display.follow_ups {
            let follow_up = follow_ups.iter().find(|queued| !self.display.follow_ups.iter().any(|known| known.id == queued.id)).cloned();
            events.push(LiveEvent::FollowUpQueued { follow_up, follow_ups });
        }
        let new_turn = record.last_turn_id.filter(|turn_id| {
            self.display.last_turn_id.as_ref() != Some(turn_id) && self.following.as_ref().is_none_or(|following| following.turn_id != *turn_id)
        });
        self.send_all(events)?;
        if views || new_turn.is_some() {
            let (tasks, plans) = self.reader.views().await?;
            let mut changed = Vec::new();
            if tasks != self.display.tasks {
                changed.push(LiveEvent::TaskUpdated { tasks });
            }
            if plans != self.display.plans {
                changed.push(LiveEvent::PlansChanged { plans });
            }
            self.send_all(changed)?;
        }
        if let Some(turn_id) = new_turn {
            self.following = self.reader.subscribe(&turn_id, self.display.usage.clone()).await?;
        }
        Ok(())
    }

    /// Sends events in order, each folded in, then the display state (or owes it).
    fn send_all(&mut self, events: Vec<LiveEvent>) -> std::result::Result<(), Stop> {
        if events.is_empty() {
            return Ok(());
        }
        let high_frequency = events.iter().all(LiveEvent::is_high_frequency);
        for event in events {
            event.fold_into(&mut self.display);
            self.send(event)?;
        }
        if self.coalescer.after_event(high_frequency, std::time::Instant::now()) {
            self.send_display()?;
        }
        Ok(())
    }

    fn send_display(&mut self) -> std::result::Result<(), Stop> {
        self.coalescer.sent(std::time::Instant::now());
        self.send(LiveEvent::DisplayStateChanged { display: Box::new(self.display.clone()) })
    }

    /// Queues one event for the subscriber; one that fell [`BUFFER`] events behind is dropped.
    fn send(&self, event: LiveEvent) -> std::result::Result<(), Stop> {
        self.sender.try_send(event).map_err(|_| Stop::Subscriber)
    }
}

impl Reader {
    /// The session's record; `None` when the store failed (the next read tries again: a
    /// store that fails is not a session that ended).
    async fn session(&self) -> std::result::Result<Option<teamster_store::SessionRecord>, Stop> {
        match self.service.catalog().owned_session(&self.caller, &self.session_id).await {
            Ok(record) => Ok(Some(record)),
            Err(ServiceError::NotFound(_) | ServiceError::Forbidden(_)) => Err(Stop::Session),
            Err(error) => {
                tracing::warn!(session = %self.session_id, %error, "a live channel could not read its session");
                Ok(None)
            }
        }
    }

    async fn follow_ups(&self) -> std::result::Result<Vec<QueuedMessage>, Stop> {
        self.service.follow_ups().list(&self.caller, &self.session_id).await.map_err(|_| Stop::Session)
    }

    /// The usage of the session's finished turns (at most [`USAGE_TURNS`] of the newest).
    async fn usage(&self) -> std::result::Result<UsageTotals, Stop> {
        let mut usage = UsageTotals::default();
        let mut page_token = None;
        for _ in 0..USAGE_TURNS / 100 {
            let query = crate::TurnListQuery { limit: 100, page_token };
            let (turns, next) = self.service.list_turns(&self.caller, &self.session_id, query).await.map_err(|_| Stop::Session)?;
            for turn in &turns {
                if let Some(metrics) = turn.state.metrics() {
                    usage.input_tokens += metrics.total_input_tokens;
                    usage.output_tokens += metrics.total_output_tokens;
                    usage.cache_read_tokens += metrics.total_cache_read_tokens.unwrap_or(0);
                    usage.cache_write_tokens += metrics.total_cache_write_tokens.unwrap_or(0);
                    if let Some(cost) = metrics.total_cost_in_usd {
                        usage.add_cost(cost);
                    }
                }
            }
            match next {
                Some(token) => page_token = Some(token),
                None => break,
            }
        }
        Ok(usage)
    }

    /// The task list and the plans.
    async fn views(&self) -> std::result::Result<(TaskList, Vec<Plan>), Stop> {
        let events = self.service.events();
        let tasks = events.tasks(&self.caller, &self.session_id).await.map_err(|_| Stop::Session)?;
        let plans = events.plans(&self.caller, &self.session_id).await.map_err(|_| Stop::Session)?;
        Ok((tasks, plans))
    }

    async fn turn_state(&self, turn_id: &str) -> std::result::Result<Option<TurnState>, Stop> {
        match self.service.turn_record(&self.session_id, turn_id).await {
            Ok(record) => Ok(Some(record.state)),
            Err(ServiceError::NotFound(_)) => Ok(None),
            Err(_) => Err(Stop::Session),
        }
    }

    /// The turn's stream from its start, with a translator that adds to the usage so far;
    /// `None` when its stream is gone (past its retention).
    async fn subscribe(&self, turn_id: &str, usage: UsageTotals) -> std::result::Result<Option<Following>, Stop> {
        match self.service.events().subscribe(&self.caller, &self.session_id, turn_id, 0).await {
            Ok(events) => Ok(Some(Following {
                turn_id: turn_id.to_owned(),
                events,
                translator: TurnTranslator::new(usage),
            })),
            Err(ServiceError::PreconditionFailed(_) | ServiceError::NotFound(_)) => Ok(None),
            Err(_) => Err(Stop::Session),
        }
    }
}

/// A stored event's JSON, translated; one this version cannot read is skipped.
fn translate(translator: &mut TurnTranslator, json: &str) -> Vec<LiveEvent> {
    match serde_json::from_str::<Event>(json) {
        Ok(event) => translator.translate(&event),
        Err(_) => Vec::new(),
    }
}

/// The next event of the followed turn; never, when none is followed.
async fn next_event(following: &mut Option<Following>) -> Option<teamster_runtime::StreamedEvent> {
    match following {
        Some(following) => following.events.next().await,
        None => std::future::pending().await,
    }
}

/// Sleeps until `due`; never, when nothing is due.
async fn sleep_until(due: Option<std::time::Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due.into()).await,
        None => std::future::pending().await,
    }
}
