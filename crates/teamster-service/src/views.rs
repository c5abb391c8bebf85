//! Views folded from a session's events, for clients: its plans (`teamster_control::plans`,
//! from the logs of its chain of turns, each turn with the mode it ran in) and its task list
//! (`teamster_control::task_list`, newest turn first, stopping at the first turn that changed
//! it: versions only grow along a session's chain of turns, so that turn holds the latest list),
//! its first user message (the preview of session listings), and its sub-agent threads.

use std::collections::HashMap;

use teamster_control::{TurnEvents, mode_in_force, plans, task_list};
use teamster_protocol::input::TurnInput;
use teamster_protocol::api::{SessionThread, SessionThreadStatus};
use teamster_protocol::event::{ThreadCreated, ThreadDone, ThreadState};
use teamster_protocol::{Event, Session};
use teamster_protocol::control::{Plan, TaskList};
use teamster_store::{ContentKinds, ContentQuery};

use crate::Caller;
use crate::error::Result;
use crate::events::Events;

/// The most turns, newest first, whose plans a session lists.
const MAX_TURNS: usize = 1000;
/// The most threads a session lists (the newest).
pub const MAX_LISTED_THREADS: usize = 1000;
/// Content events read from the store at a time.
const PAGE: u32 = 1000;
/// The first turns a session's first user message is looked for in (turns that answer
/// nothing but decisions come before it only in sessions that began from a clone).
const FIRST_TURNS: u32 = 8;
/// The most characters of a preview.
pub const PREVIEW_CHARS: usize = 200;

impl Events<'_> {
    /// The first user message of one of the caller's sessions (its text; files named), `None`
    /// before any.
    pub async fn first_user_message(&self, caller: &Caller, session_id: &str) -> Result<Option<String>> {
        self.service.catalog().owned_session(caller, session_id).await?;
        self.first_message_of(session_id).await
    }

    /// Sessions the caller has just listed, each with its `preview`: the start of its first
    /// user message, at most [`PREVIEW_CHARS`] characters on one line.
    pub async fn with_previews(&self, mut sessions: Vec<Session>) -> Result<Vec<Session>> {
        for session in &mut sessions {
            session.preview = self.first_message_of(&session.id).await?.map(|text| preview(&text));
        }
        Ok(sessions)
    }

    async fn first_message_of(&self, session_id: &str) -> Result<Option<String>> {
        let turns = self.service.stores().events.oldest_turns(session_id, FIRST_TURNS).await?;
        Ok(turns.iter().flat_map(|turn| &turn.input).find_map(|item| match item {
            TurnInput::Message { content } => Some(content.to_text()),
            _ => None,
        }))
    }

    /// The plans the agent submitted in a session, oldest first, as its turns left them.
    pub async fn plans(&self, caller: &Caller, session_id: &str) -> Result<Vec<Plan>> {
        let session = self.service.catalog().owned_session(caller, session_id).await?;
        let spec = self.service.catalog().session_spec(&session).await?;
        if spec.modes.is_none() {
            return Ok(Vec::new());
        }
        self.service.runtime().flush().await;
        let mut turns = Vec::new();
        let mut next = session.last_turn_id;
        while let Some(turn_id) = next
            && turns.len() < MAX_TURNS
        {
            let turn = self.service.turn_record(session_id, &turn_id).await?;
            let events = self.turn_content(&turn.id).await?;
            next = turn.previous_turn_id.clone();
            turns.push((turn, events));
        }
        turns.reverse();
        let folded: Vec<TurnEvents<'_>> = turns
            .iter()
            .map(|(turn, events)| {
                let mode = mode_in_force(&spec, turn.control.mode.as_deref());
                TurnEvents {
                    turn_id: &turn.id,
                    input: &turn.input,
                    state: &turn.state,
                    mode: mode.map_or("", |mode| mode.id.as_str()),
                    transitions_to: mode.and_then(|mode| mode.transitions_to.as_deref()).unwrap_or(""),
                    events,
                }
            })
            .collect();
        Ok(plans(&folded))
    }

    /// The task list of a session, as its turns left it (the running one included).
    pub async fn tasks(&self, caller: &Caller, session_id: &str) -> Result<TaskList> {
        let session = self.service.catalog().owned_session(caller, session_id).await?;
        self.service.runtime().flush().await;
        let mut next = session.last_turn_id;
        while let Some(turn_id) = next {
            let turn = self.service.turn_record(session_id, &turn_id).await?;
            let list = task_list(&self.turn_content(&turn.id).await?);
            if list.version > 0 {
                return Ok(list);
            }
            next = turn.previous_turn_id;
        }
        Ok(TaskList::default())
    }

    /// The sub-agent threads of a session's chain of turns, oldest first: the newest
    /// [`MAX_LISTED_THREADS`] of its last [`MAX_TURNS`] turns. Forked threads are left out
    /// unless `include_forked`.
    pub async fn threads(&self, caller: &Caller, session_id: &str, include_forked: bool) -> Result<Vec<SessionThread>> {
        let session = self.service.catalog().owned_session(caller, session_id).await?;
        self.service.runtime().flush().await;
        // Read newest first, one turn at a time: a thread's end (which may come in a later turn
        // than its start, when it waited for a human) is met before its start.
        let mut ends: HashMap<String, ThreadEnd> = HashMap::new();
        let mut newest_first = Vec::new();
        let mut next = session.last_turn_id;
        let mut turns = 0;
        while let Some(turn_id) = next.take() {
            if turns == MAX_TURNS || newest_first.len() >= MAX_LISTED_THREADS {
                break;
            }
            turns += 1;
            let turn = self.service.turn_record(session_id, &turn_id).await?;
            for event in self.content_of(&turn.id, ContentKinds::Threads).await?.iter().rev() {
                match event {
                    Event::ThreadDone(done) => {
                        ends.insert(done.thread_id.clone(), ThreadEnd::of(done));
                    }
                    Event::ThreadCreated(created) => {
                        let end = ends.remove(&created.thread_id);
                        if include_forked || !created.forked {
                            newest_first.push(thread_of(created, &turn.id, end));
                        }
                    }
                    _ => {}
                }
            }
            next = turn.previous_turn_id;
        }
        newest_first.truncate(MAX_LISTED_THREADS);
        newest_first.reverse();
        Ok(newest_first)
    }

    /// Every content event of a turn, oldest first (events this version cannot read skipped).
    pub(crate) async fn turn_content(&self, turn_id: &str) -> Result<Vec<Event>> {
        self.content_of(turn_id, ContentKinds::TurnContent).await
    }

    /// A turn's content events of `kinds`, oldest first (those this version cannot read
    /// skipped).
    async fn content_of(&self, turn_id: &str, kinds: ContentKinds) -> Result<Vec<Event>> {
        let mut events = Vec::new();
        let mut after = None;
        loop {
            let query = ContentQuery { kinds, descending: false, after, limit: PAGE };
            let page = self.service.stores().events.read_content(turn_id, &query).await?;
            let full = page.len() == PAGE as usize;
            after = page.last().map(|event| event.sequence);
            events.extend(page.into_iter().filter_map(|event| serde_json::from_str(&event.data).ok()));
            if !full {
                return Ok(events);
            }
        }
    }
}

/// How a thread ended, from its `thread.done`.
struct ThreadEnd {
    status: SessionThreadStatus,
    error: Option<String>,
    at: String,
}

impl ThreadEnd {
    fn of(done: &ThreadDone) -> ThreadEnd {
        let (status, error) = match &done.state {
            ThreadState::Done { .. } => (SessionThreadStatus::Done, None),
            ThreadState::Error { error, .. } => (SessionThreadStatus::Error, Some(error.clone())),
        };
        ThreadEnd { status, error, at: done.created_at.clone() }
    }
}

/// A thread as its `thread.created` in `turn_id` and its end, if it ended, tell it.
fn thread_of(created: &ThreadCreated, turn_id: &str, end: Option<ThreadEnd>) -> SessionThread {
    let (status, error, ended_at) = match end {
        Some(ThreadEnd { status, error, at }) => (status, error, Some(at)),
        None => (SessionThreadStatus::Running, None, None),
    };
    SessionThread {
        thread_id: created.thread_id.clone(),
        turn_id: turn_id.to_owned(),
        title: created.title.clone(),
        agent_info: created.agent_info.clone(),
        parent_thread_id: created.parent.thread_id.clone(),
        parent_tool_call_id: created.parent.tool_call_id.clone(),
        forked: created.forked,
        status,
        error,
        created_at: created.created_at.clone(),
        ended_at,
    }
}

/// A message on one line, whitespace collapsed, cut at [`PREVIEW_CHARS`] characters (with `…`).
fn preview(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(PREVIEW_CHARS) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line,
    }
}
