//! [`Runtime`]: the embedded runtime. The service the Teamster server runs, in-process, on a
//! store of the program's choosing: saved agents, sessions, durable turns whose events can be
//! followed again from any sequence number, cancellation, approvals and questions, sub-agents
//! and MCP servers, and the program's own Rust tools ([`NativeTools`]), gated by approvals as
//! MCP tools are. With a sandbox in its [`RuntimeOptions`] (bubblewrap, [`Bubblewrap`]), agents
//! run code in a sandbox per session and use skills, from git or from local directories
//! ([`SandboxOptions`]). It speaks its own types ([`RuntimeOptions`], [`RuntimeError`]); the
//! service underneath stays out of its API.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::Stream;
use teamster_protocol::UserContent;
use teamster_protocol::agent::Agent as SavedAgent;
use teamster_service::{Caller, CreateTurn, EventStream, McpServerWrite, ProviderWrite, Service, ServiceError};

pub use teamster_protocol::event::{ModelMessage, ToolCall};
pub use teamster_protocol::input::Approval;
pub use teamster_protocol::settings::{McpServerManifest, ModelProviderManifest};
pub use teamster_protocol::{AgentSpec, Event, RequestContext, Session, Turn, TurnInput, TurnState};
#[cfg(feature = "sandbox")]
pub use teamster_sandbox::{Bubblewrap, Limits as SandboxLimits, SandboxError, SandboxProvider};

mod harness;
mod native;
mod options;

pub use harness::{Attachment, Harness, HarnessEvent};
pub use teamster_live::{AgentEndStatus, DisplayState, SubagentStatus, SubagentView, ToolCallView, UsageTotals};
pub use teamster_protocol::agent::ModeSpec;
pub use teamster_protocol::agent_check::ToolCheck;
pub use teamster_protocol::control::{Permission, ToolCategory};
pub use teamster_protocol::input::Answer;
pub use native::{NativeTools, ToolScope};
#[cfg(feature = "sandbox")]
pub use options::SandboxOptions;
pub use options::{Refusal, RuntimeError, RuntimeOptions};

/// The embedded runtime: the server's service over one store, in-process, called as one local
/// user.
///
/// ```
/// use teamster::runtime::Runtime;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let runtime = Runtime::open("sqlite::memory:").await?;
/// let spec = serde_json::from_value(serde_json::json!({"model": {"name": "offline/echo"}})).unwrap();
/// runtime.save_agent("demo", spec).await?;
/// let session = runtime.create_session("demo").await?;
/// let turn = runtime.start_turn(&session.id, vec![teamster::runtime::user_message("Hello")]).await?;
/// let finished = turn.finish().await?;
/// assert!(finished.answer().contains("Hello"));
/// runtime.shutdown().await;
/// # Ok::<(), teamster::runtime::RuntimeError>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct Runtime {
    service: Service,
    /// The harness's live channels.
    channels: teamster_channels::Channels,
    caller: Caller,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Runtime").finish_non_exhaustive()
    }
}

/// A user message as turn input.
pub fn user_message(text: impl Into<String>) -> TurnInput {
    TurnInput::Message { content: UserContent::Text(text.into()) }
}

impl Runtime {
    /// Opens the store at `database` (`sqlite::memory:`, `sqlite://PATH` or a file path, or a
    /// `postgres://` URL) with the default configuration.
    pub async fn open(database: &str) -> Result<Runtime, RuntimeError> {
        Runtime::open_with(database, RuntimeOptions::default()).await
    }

    /// Opens the store at `database` with `options`.
    pub async fn open_with(database: &str, options: RuntimeOptions) -> Result<Runtime, RuntimeError> {
        let store = teamster_stores::open_store(database).await?;
        let service = Service::start(store, options.into_service_config()).await?;
        let channels = teamster_channels::Channels::new(service.clone(), None);
        Ok(Runtime { service, channels, caller: Caller::local() })
    }

    /// The service underneath, for the harness.
    pub(crate) fn service(&self) -> &Service {
        &self.service
    }

    /// The sessions' live channels, for the harness.
    pub(crate) fn channels(&self) -> &teamster_channels::Channels {
        &self.channels
    }

    /// Who the runtime's calls are made as.
    pub(crate) fn caller(&self) -> &Caller {
        &self.caller
    }

    /// Adds or replaces a model provider (agents name its models `provider/model`).
    pub async fn add_model_provider(&self, manifest: ModelProviderManifest) -> Result<(), RuntimeError> {
        self.service.catalog().providers().write(manifest, ProviderWrite::Upsert).await?;
        Ok(())
    }

    /// Adds the provider the environment names, read through `vars` (`OPENAI_API_KEY`, and
    /// `OPENAI_BASE_URL` for another endpoint than OpenAI's; or `ANTHROPIC_API_KEY` and
    /// `ANTHROPIC_BASE_URL`; see [`Model::from_env_vars`](crate::Model::from_env_vars)), with
    /// its model `model_id`, and answers that model's name (`openai/MODEL_ID`,
    /// `anthropic/MODEL_ID`). Without a key it adds nothing and fails with
    /// [`Error::MissingApiKey`](crate::Error::MissingApiKey): agents that should run offline
    /// name `offline/echo` themselves.
    pub async fn add_env_model_provider(
        &self,
        vars: impl Fn(&str) -> Option<String>,
        model_id: &str,
    ) -> Result<String, RuntimeError> {
        let provider = crate::model::env_provider(vars, model_id)?;
        let name = format!("{}/{model_id}", provider.kind);
        self.add_model_provider(provider).await?;
        Ok(name)
    }

    /// Adds or replaces an MCP server that agents may name.
    pub async fn add_mcp_server(&self, manifest: McpServerManifest) -> Result<(), RuntimeError> {
        self.service.mcp().write_mcp_server(&self.caller, manifest, McpServerWrite::Upsert).await.map_err(ServiceError::from)?;
        Ok(())
    }

    /// Saves an agent under `name`: a new agent, or a new version of the agent of that name
    /// when its spec changed.
    pub async fn save_agent(&self, name: &str, spec: AgentSpec) -> Result<SavedAgent, RuntimeError> {
        Ok(self.service.catalog().apply_agent(&self.caller, name, spec).await?)
    }

    /// Opens a session with the saved agent `agent_name`, pinned to its current version.
    pub async fn create_session(&self, agent_name: &str) -> Result<Session, RuntimeError> {
        Ok(self.service.catalog().create_session(&self.caller, agent_name, None).await?)
    }

    /// Starts a turn after the session's last one. The turn runs whether or not its events are
    /// read; dropping them and calling [`Runtime::subscribe`] later picks up where wanted.
    pub async fn start_turn(&self, session_id: &str, input: Vec<TurnInput>) -> Result<StartedTurn, RuntimeError> {
        self.start(session_id, input, None).await
    }

    /// Starts a turn like [`Runtime::start_turn`], carrying the application's
    /// `request_context` (a JSON object of at most 16 KiB): the turn's tools see it (native
    /// tools in their [`ToolScope`], MCP servers in their requests' `_meta`), so do its
    /// sub-agents, and the turn records it.
    pub async fn start_turn_with_context(
        &self,
        session_id: &str,
        input: Vec<TurnInput>,
        request_context: RequestContext,
    ) -> Result<StartedTurn, RuntimeError> {
        self.start(session_id, input, Some(request_context)).await
    }

    async fn start(
        &self,
        session_id: &str,
        input: Vec<TurnInput>,
        request_context: Option<RequestContext>,
    ) -> Result<StartedTurn, RuntimeError> {
        let request = CreateTurn { input, previous_turn_id: None, at_tip: false, request_context };
        let started = self.service.create_turn(&self.caller, session_id, request).await?;
        Ok(StartedTurn { events: TurnEvents::new(started.events(0)), turn: started.turn })
    }

    /// Follows a turn's events after sequence number `after` (0 for all), live while it runs.
    pub async fn subscribe(&self, session_id: &str, turn_id: &str, after: u64) -> Result<TurnEvents, RuntimeError> {
        let events = self.service.events().subscribe(&self.caller, session_id, turn_id, after).await?;
        Ok(TurnEvents::new(events))
    }

    /// A turn as it stands.
    pub async fn get_turn(&self, session_id: &str, turn_id: &str) -> Result<Turn, RuntimeError> {
        Ok(self.service.get_turn(&self.caller, session_id, turn_id).await?)
    }

    /// Cancels the session's running turn, if any.
    pub async fn cancel(&self, session_id: &str) -> Result<(), RuntimeError> {
        Ok(self.service.cancel_session(&self.caller, session_id).await?)
    }

    /// Stops the runtime: running turns are interrupted (and resumed by the next runtime on
    /// the same store), pending writes are flushed.
    pub async fn shutdown(&self) {
        self.service.shutdown(Duration::from_secs(5)).await;
    }
}

/// A turn just started, and its events from the first.
#[derive(Debug)]
pub struct StartedTurn {
    /// The turn as created (running).
    pub turn: Turn,
    /// Its events from the first; dropping them leaves the turn running.
    pub events: TurnEvents,
}

impl StartedTurn {
    /// Reads the turn's events to its end.
    pub async fn finish(self) -> Result<FinishedTurn, RuntimeError> {
        self.events.finish().await
    }
}

/// One event of a turn's stream, with its sequence number (what [`Runtime::subscribe`] takes
/// to go on after it).
#[derive(Clone, Debug, PartialEq)]
pub struct RuntimeEvent {
    /// The event's position in its turn's stream, from 1.
    pub sequence: u64,
    /// The event, as the server's API streams it.
    pub event: Event,
}

/// A turn's events as they become durable; ends after `turn.done`.
#[must_use = "a stream does nothing unless polled"]
pub struct TurnEvents {
    inner: EventStream,
}

impl std::fmt::Debug for TurnEvents {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("TurnEvents").finish_non_exhaustive()
    }
}

impl TurnEvents {
    fn new(inner: EventStream) -> TurnEvents {
        TurnEvents { inner }
    }

    /// Reads the rest of the stream.
    pub async fn finish(mut self) -> Result<FinishedTurn, RuntimeError> {
        use futures_util::StreamExt;
        let mut events = Vec::new();
        while let Some(event) = self.next().await {
            events.push(event?);
        }
        Ok(FinishedTurn { events })
    }
}

impl Stream for TurnEvents {
    type Item = Result<RuntimeEvent, RuntimeError>;

    fn poll_next(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(context).map(|event| {
            event.map(|streamed| {
                serde_json::from_str(&streamed.json)
                    .map(|event| RuntimeEvent { sequence: streamed.sequence, event })
                    .map_err(|error| RuntimeError::Event(error.to_string()))
            })
        })
    }
}

/// The events a turn streamed to its end.
#[derive(Clone, Debug, PartialEq)]
pub struct FinishedTurn {
    /// Every event read, in order; the last is `turn.done`.
    pub events: Vec<RuntimeEvent>,
}

impl FinishedTurn {
    /// The text of the main thread's last model message that has any: its deltas joined (the
    /// stream carries a message as a placeholder and deltas).
    pub fn answer(&self) -> String {
        let mut answer = (String::new(), String::new());
        for event in &self.events {
            match &event.event {
                Event::ModelMessageDelta(delta) if delta.thread_id == teamster_protocol::MAIN_THREAD_ID => {
                    let Some(text) = delta.content.as_deref().filter(|text| !text.is_empty()) else { continue };
                    if answer.0 != delta.id {
                        answer = (delta.id.clone(), String::new());
                    }
                    answer.1.push_str(text);
                }
                _ => {}
            }
        }
        answer.1
    }

    /// The main thread's last message as `turn.done` gives it whole: the answer, or the tool
    /// calls the turn stopped at (those awaiting approval among them). `None` when the turn did
    /// not end `done`.
    pub fn output(&self) -> Option<&ModelMessage> {
        self.events.iter().rev().find_map(|event| match &event.event {
            Event::TurnDone(done) => match &done.state {
                TurnState::Done { output, .. } => output.as_deref(),
                _ => None,
            },
            _ => None,
        })
    }

    /// What the turn waits for before it can go on: `tool.approval_required` and
    /// `tool.response_required` events, answered by the next turn's input.
    pub fn required_actions(&self) -> Vec<&Event> {
        self.events
            .iter()
            .map(|event| &event.event)
            .filter(|event| matches!(event, Event::ToolApprovalRequired(_) | Event::ToolResponseRequired(_)))
            .collect()
    }
}
