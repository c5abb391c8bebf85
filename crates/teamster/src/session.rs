//! [`RunSession`]: an agent bound to one context, with its toolkits prepared, running as many
//! times as its owner wants until it is closed.

use std::sync::{Arc, Mutex, PoisonError};

use teamster_engine::{ToolBox, TurnOutcome};
use teamster_protocol::TurnMetrics;
use teamster_tools::ToolSource;

use crate::agent::close_all;
use crate::tool::BoundTools;
use crate::items::to_messages;
use crate::stream::{RunSink, run_plan};
use crate::{AgentItem, AgentResponse, AgentStream, Error, RunSessionRequest, Tool, ToolkitSession};

/// An agent bound to one context: its instructions resolved and its toolkits prepared for that
/// context, reused by every run until [`RunSession::close`]. Each run starts from the input it
/// is given; the session keeps no conversation.
///
/// Dropping a session without closing it closes its toolkit sessions in the background.
///
/// ```
/// use teamster::{Agent, AgentItem, Error, Model};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let agent: Agent<String> = Agent::builder("helper", Model::offline()).build()?;
/// let session = agent.create_session("user-7".to_owned()).await?;
///
/// // The caller keeps the conversation: each run gets it whole, and its output is appended.
/// let mut conversation = vec![AgentItem::user("Hello")];
/// let first = session.run(conversation.clone()).await?;
/// conversation.extend(first.output);
/// conversation.push(AgentItem::user("And again"));
/// let second = session.run(conversation).await?;
/// assert!(second.text().contains("And again"));
///
/// session.close().await;
/// assert_eq!(session.run(vec![AgentItem::user("Hi")]).await, Err(Error::SessionClosed));
/// # Ok::<(), Error>(())
/// # }).unwrap();
/// ```
pub struct RunSession<Ctx: 'static> {
    state: Arc<SessionState<Ctx>>,
}

impl<Ctx: 'static> Clone for RunSession<Ctx> {
    fn clone(&self) -> RunSession<Ctx> {
        RunSession { state: self.state.clone() }
    }
}

impl<Ctx: 'static> std::fmt::Debug for RunSession<Ctx> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("RunSession").field("agent", &self.state.agent).finish_non_exhaustive()
    }
}

pub(crate) struct SessionState<Ctx: 'static> {
    agent: String,
    engine: teamster_engine::CompiledAgent,
    toolbox: ToolBox,
    /// The toolkits' sessions; `None` once closed.
    toolkits: Mutex<Option<Vec<Box<dyn ToolkitSession<Ctx>>>>>,
}

impl<Ctx: Send + Sync + 'static> RunSession<Ctx> {
    pub(crate) async fn open(
        agent: String,
        engine: teamster_engine::CompiledAgent,
        tools: Vec<Arc<dyn Tool<Ctx>>>,
        toolkits: Vec<Box<dyn ToolkitSession<Ctx>>>,
        context: Ctx,
    ) -> Result<RunSession<Ctx>, Error> {
        let tools: Vec<Arc<dyn Tool<Ctx>>> =
            tools.into_iter().chain(toolkits.iter().flat_map(|toolkit| toolkit.tools())).collect();
        let (source, shared) = BoundTools::new(tools.into_iter().map(|tool| (tool, false)), context);
        if let Some(name) = shared {
            close_all(toolkits).await;
            return Err(Error::InvalidAgent { agent, reason: format!("two tools are named {name:?}") });
        }
        let toolbox = ToolBox::collect(vec![Arc::new(source) as Arc<dyn ToolSource>]).await;
        Ok(RunSession { state: Arc::new(SessionState { agent, engine, toolbox, toolkits: Mutex::new(Some(toolkits)) }) })
    }

    /// Runs the agent once over `request`'s conversation and returns what it produced.
    pub async fn run(&self, request: impl Into<RunSessionRequest>) -> Result<AgentResponse, Error> {
        self.run_stream(request).response().await
    }

    /// Runs the agent once over `request`'s conversation, streaming as it goes.
    pub fn run_stream(&self, request: impl Into<RunSessionRequest>) -> AgentStream {
        let session = self.clone();
        let input = request.into().input;
        AgentStream::new(move |sink| Box::pin(async move { session.run_with_sink(input, sink).await }))
    }

    /// Runs the engine's turn loop over `input`, sending its events to `sink`.
    pub(crate) async fn run_with_sink(
        &self,
        input: Vec<AgentItem>,
        sink: RunSink,
    ) -> Result<(TurnOutcome, TurnMetrics), Error> {
        if self.is_closed() {
            return Err(Error::SessionClosed);
        }
        let plan = self.state.engine.plan_messages(to_messages(&input)?, self.state.toolbox.clone());
        Ok(run_plan(plan, sink).await)
    }

    /// Closes the toolkits' sessions. Runs afterwards fail with [`Error::SessionClosed`]; closing
    /// again does nothing.
    pub async fn close(&self) {
        let toolkits = self.state.toolkits.lock().unwrap_or_else(PoisonError::into_inner).take();
        for toolkit in toolkits.into_iter().flatten() {
            toolkit.close().await;
        }
    }

    /// Whether [`RunSession::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.state.is_closed()
    }
}

impl<Ctx: 'static> SessionState<Ctx> {
    fn is_closed(&self) -> bool {
        self.toolkits.lock().unwrap_or_else(PoisonError::into_inner).is_none()
    }
}

impl<Ctx: 'static> Drop for SessionState<Ctx> {
    fn drop(&mut self) {
        let toolkits = self.toolkits.get_mut().unwrap_or_else(PoisonError::into_inner).take();
        let Some(toolkits) = toolkits.filter(|toolkits| !toolkits.is_empty()) else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    for toolkit in toolkits {
                        toolkit.close().await;
                    }
                });
            }
            Err(_) => tracing::warn!(agent = %self.agent, "a run session dropped outside a runtime left its toolkits open"),
        }
    }
}
