//! A session's live channel: the snapshot it opens with, then its turns followed and the
//! session re-read when signalled (see the [module](super)).


use futures_util::StreamExt;
use teamster_live::{Coalescer, DisplayState, LiveEvent, TurnTranslator, UsageTotals};
use teamster_protocol::control::{Plan, QueuedMessage, TaskList};
use teamster_protocol::{Event, TurnState};
use teamster_runtime::EventStream;
use tokio::sync::{broadcast, mpsc};

use super::{fallback_read, key_revoked};
use crate::signals::Signal;
use crate::{Caller, Service, ServiceError};

/// The most turns, newest first, whose usage a channel sums as it opens.
const USAGE_TURNS: usize = 1000;

/// Runs the channel of `session_id` for `caller` until the session or the subscriber goes.
pub(super) async fn run(
    service: Service,
    caller: Caller,
    session_id: String,
    sender: mpsc::Sender<LiveEvent>,
    signals: broadcast::Receiver<Signal>,
    turn_events: bool,
) {
    let channel = Channel {
        turn_events,
        reader: Reader { service, caller, session_id: session_id.clone() },
        display: DisplayState { session_id: session_id.clone(), ..DisplayState::default() },
        session_id,
        sender,
        coalescer: Coalescer::default(),
        following: None,
    };
    channel.run(signals).await;
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
    /// Whether each turn event goes out as it was stored too (`LiveEvent::TurnEvent`).
    turn_events: bool,
}

impl Channel {
    async fn run(mut self, mut signals: broadcast::Receiver<Signal>) {
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
                        let translated = stored(&streamed.json).map(|event| following.translator.translate(&event));
                        for event in translated.into_iter().flatten() {
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

    async fn follow(&mut self, signals: &mut broadcast::Receiver<Signal>) -> Stop {
        let fallback = fallback_read(&self.reader.service);
        let service = self.reader.service.clone();
        let caller = self.reader.caller.clone();
        let revoked = key_revoked(&service, &caller);
        tokio::pin!(revoked);
        loop {
            let due = self.coalescer.due();
            let result = tokio::select! {
                next = next_event(&mut self.following) => match next {
                    Some(streamed) => self.turn_event(&streamed).await,
                    None => {
                        self.following = None;
                        self.refresh(true).await
                    }
                },
                signal = signals.recv() => match signal {
                    Ok(signal) if *signal.session_id != *self.session_id => Ok(()),
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => self.refresh(false).await,
                    Err(broadcast::error::RecvError::Closed) => Err(Stop::Subscriber),
                },
                () = tokio::time::sleep(fallback) => self.refresh(false).await,
                () = sleep_until(due) => self.send_display(),
                () = self.sender.closed() => Err(Stop::Subscriber),
                () = &mut revoked => Err(Stop::Session),
            };
            if let Err(stop) = result {
                return stop;
            }
        }
    }

    /// One event of the followed turn, translated, sent and folded in. A tool that changed
    /// the task list, the plans or the state has the session read again at once.
    async fn turn_event(&mut self, streamed: &teamster_runtime::StreamedEvent) -> std::result::Result<(), Stop> {
        let Some(following) = &mut self.following else { return Ok(()) };
        let Some(event) = stored(&streamed.json) else { return Ok(()) };
        let mut events = following.translator.translate(&event);
        if self.turn_events {
            let raw = LiveEvent::TurnEvent { turn_id: following.turn_id.clone(), sequence: streamed.sequence, event: Box::new(event) };
            events.insert(0, raw);
        }
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
        // A new turn's effects on the views show after its events, as it is followed.
        if views {
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
                    usage.add_turn(metrics);
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

/// A stored event, read; `None` for one this version cannot read (it is skipped).
fn stored(json: &str) -> Option<Event> {
    serde_json::from_str(json).ok()
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
