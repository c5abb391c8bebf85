//! The turn runtime: everything about turns while they run and just after. It starts a turn's
//! task (see `runner`), holds its live log in memory (`live`), commits its events through the
//! group-commit writer (`writer`, fed by the engine's sink, `sink`), keeps its lease
//! (`leases`), takes over turns whose server stopped (`replicas`, `resume`), follows turns of
//! other replicas through the store (`replicas`, `subscribe`), and drops old streams
//! (`retention`).
//!
//! It knows nothing of agents, sessions' owners, providers or MCP: a turn's plan comes from a
//! [`PlanTurns`] given at start. It reads and writes the store through the three parts it uses
//! ([`RuntimeStores`]), and hands out running turns as opaque handles ([`RunningTurn`],
//! [`StartedTurn`]): the live log itself never leaves this crate.

mod clock;
pub mod cluster;
mod error;
mod history;
mod leases;
mod live;
mod metrics;
mod replicas;
mod resume;
mod retention;
mod runner;
mod running;
mod sink;
mod started;
mod subscribe;
mod writer;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use teamster_engine::TurnPlan;
use teamster_protocol::agent::AgentSpec;
use teamster_protocol::event::McpAuthRequired;
use teamster_protocol::{Event, TurnState};
use teamster_store::{CoordinationStore, EventLog, SessionRecord, SessionStore, StoreParts, TurnRecord};
use teamster_telemetry::Telemetry;

use crate::cluster::Cluster;
use crate::live::TurnLog;

pub use error::{Result, RuntimeError};
pub use leases::LeaseConfig;
pub use live::StreamedEvent;
pub use running::EndingTurn;
pub use running::RunningTurn;
pub use sink::TurnSink;
pub use started::StartedTurn;
pub use subscribe::EventStream;

/// How a planned turn starts.
pub enum TurnStart {
    /// The engine runs the plan, for at most `time_limit` (the agent's own limit, when it sets
    /// one, within the runtime's turn timeout) from the turn's creation.
    Run { plan: Box<TurnPlan>, time_limit: Option<Duration> },
    /// MCP servers need the user's authorization: the turn ends `done` with this
    /// `mcp.auth_required` in its `required_actions`, before any model call, and a turn with an
    /// empty input runs it again once the user has authorized them.
    NeedsAuthorization(McpAuthRequired),
}

/// Makes the engine's plan for a turn of a session from its history (the ancestors' content
/// events, then the turn's own `turn.created`). `admitted` is the agent spec the turn was
/// admitted with when it was created here (`None` for a turn taken over, whose spec is read
/// again). Content events of the planning itself (such as `mcp.initialize`) go to `sink`.
/// Errors are messages for the turn's error state.
#[async_trait]
pub trait PlanTurns: Send + Sync {
    async fn plan(
        &self,
        session: &SessionRecord,
        turn: &TurnRecord,
        admitted: Option<AgentSpec>,
        history: &[Event],
        sink: &TurnSink,
    ) -> Result<TurnStart, String>;

    /// After a turn's run, before its `turn.done` is written: what the turn's end must have
    /// settled by then (its tenant's spend in the store).
    async fn ended(&self, _turn: &TurnRecord) {}
}

/// The parts of the store the runtime reads and writes: sessions (a turn's session, queued
/// steering), the event log (turns and their streams) and coordination (leases, cancel
/// requests).
#[derive(Clone)]
pub struct RuntimeStores {
    pub sessions: Arc<dyn SessionStore>,
    pub events: Arc<dyn EventLog>,
    pub coordination: Arc<dyn CoordinationStore>,
}

impl From<&StoreParts> for RuntimeStores {
    fn from(parts: &StoreParts) -> RuntimeStores {
        RuntimeStores { sessions: parts.sessions.clone(), events: parts.events.clone(), coordination: parts.coordination.clone() }
    }
}

/// How the runtime runs turns.
#[derive(Clone, Copy, Debug)]
pub struct RuntimeConfig {
    pub turn_timeout: Duration,
    pub stream_retention: Duration,
    pub leases: LeaseConfig,
}

/// The running turns of this replica; cheap to clone.
#[derive(Clone)]
pub struct TurnRuntime {
    inner: Arc<State>,
}

struct State {
    stores: RuntimeStores,
    writer: writer::EventWriter,
    live: live::LiveTurns,
    /// The leases of the turns this replica runs.
    leases: Arc<leases::Leases>,
    /// Histories of recently finished turns, so chained turns need not re-read the chain.
    history: history::HistoryCache,
    /// Readers of turns running on other replicas; `None` when the store has no change feed
    /// (no other process shares it).
    cluster: Option<Arc<Cluster>>,
    planner: Arc<dyn PlanTurns>,
    turn_timeout: Duration,
    stream_retention: Duration,
    /// The process's metrics, which turns and the writer add to.
    telemetry: Arc<Telemetry>,
}

impl TurnRuntime {
    /// Starts the writer, the lease keeper, the takeover of turns whose server stopped and the
    /// stream retention sweeper; they stop once the runtime is dropped.
    pub fn start(
        stores: RuntimeStores,
        cluster: Option<Arc<Cluster>>,
        planner: Arc<dyn PlanTurns>,
        config: RuntimeConfig,
        telemetry: Arc<Telemetry>,
    ) -> TurnRuntime {
        let leases = Arc::new(leases::Leases::new(config.leases));
        let runtime = TurnRuntime {
            inner: Arc::new(State {
                writer: writer::EventWriter::start(stores.events.clone(), leases.clone(), telemetry.clone()),
                stores,
                live: live::LiveTurns::default(),
                leases,
                history: history::HistoryCache::default(),
                cluster,
                planner,
                turn_timeout: config.turn_timeout,
                stream_retention: config.stream_retention,
                telemetry,
            }),
        };
        leases::start_keeper(&runtime);
        replicas::start_takeovers(&runtime);
        retention::start_sweeper(&runtime);
        runtime
    }

    fn sessions(&self) -> &dyn SessionStore {
        self.inner.stores.sessions.as_ref()
    }

    fn events(&self) -> &dyn EventLog {
        self.inner.stores.events.as_ref()
    }

    fn coordination(&self) -> &dyn CoordinationStore {
        self.inner.stores.coordination.as_ref()
    }

    /// Runs a turn whose record and `turn.created` (`created`, its first stream event) were
    /// just stored, with the agent spec it was admitted with, once `ending_previous` (if any)
    /// has ended.
    pub fn begin(
        &self,
        session: SessionRecord,
        turn: TurnRecord,
        created: Arc<str>,
        admitted: AgentSpec,
        ending_previous: Option<EndingTurn>,
    ) -> RunningTurn {
        let log = TurnLog::new(&turn.id, &session.id, vec![created.clone()]);
        self.inner.live.insert(log.clone());
        runner::spawn(self.clone(), log.clone(), session, turn, runner::NewTurn { created, admitted, ending_previous });
        RunningTurn::new(log)
    }

    /// The number of turns running in this process.
    pub fn running_turns(&self) -> usize {
        self.inner.live.len()
    }

    /// The session's turn running in this process, if any.
    pub fn running_in_session(&self, session_id: &str) -> Option<RunningTurn> {
        self.inner.live.running_in_session(session_id).map(RunningTurn::new)
    }

    /// A turn's final state as soon as it has decided it (the store catches up a moment
    /// later), if it runs in this process.
    pub fn decided_state(&self, turn_id: &str) -> Option<TurnState> {
        self.inner.live.get(turn_id).and_then(|log| log.final_state())
    }

    /// Waits until every event queued so far is committed.
    pub async fn flush(&self) {
        self.inner.writer.flush().await;
    }

    /// Hands every running turn over, on shutdown: stops them here without recording an end,
    /// waits up to `grace` for them to stop and for the writer to settle, then releases their
    /// leases, so that another replica (or this server, once restarted) resumes them at once.
    pub async fn shutdown(&self, grace: Duration) {
        let running = self.inner.live.all();
        let handed_over = self.inner.leases.hand_over_all();
        let stopped = futures_util::future::join_all(running.iter().map(|log| log.wait_finished()));
        let _ = tokio::time::timeout(grace, stopped).await;
        self.inner.writer.flush().await;
        let owner = &self.inner.leases.owner;
        let released = handed_over.iter().map(|lease| self.coordination().release_lease(owner, lease));
        for (lease, result) in handed_over.iter().zip(futures_util::future::join_all(released).await) {
            if let Err(error) = result {
                tracing::warn!(turn_id = %lease.turn_id, %error, "releasing a lease failed; it expires on its own");
            }
        }
    }
}
