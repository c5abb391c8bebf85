//! [`Agent`]: a reusable, stateless blueprint (model, instructions, tools, toolkits,
//! parameters), built with [`AgentBuilder`], that runs for any number of callers, each with its
//! own context.

use std::sync::Arc;

use teamster_engine::ModelResolver;
use teamster_llm::registry::ResolvedModel;
use teamster_protocol::agent::{AgentSpec, ModelParams, ResponseFormat};

use crate::{AgentRequest, AgentResponse, AgentStream, Error, Model, RunSession, Tool, Toolkit, ToolkitSession};

/// A reusable agent: what it is, never who it runs for. It is `Send + Sync` and cheap to clone,
/// so one agent serves every task and tenant; each run gets its caller's context.
///
/// ```
/// use teamster::{Agent, AgentItem, AgentRequest, Model};
///
/// # tokio_test_block_on(async {
/// let agent: Agent<()> = Agent::builder("greeter", Model::offline())
///     .instructions("You greet people.")
///     .build()?;
/// let response = agent.run(AgentRequest { input: vec![AgentItem::user("Hi!")], context: () }).await?;
/// assert!(response.text().contains("Hi!"));
/// # Ok::<(), teamster::Error>(())
/// # }).unwrap();
/// # fn tokio_test_block_on<F: std::future::Future>(future: F) -> F::Output {
/// #     tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(future)
/// # }
/// ```
pub struct Agent<Ctx> {
    definition: Arc<Definition<Ctx>>,
}

impl<Ctx> Clone for Agent<Ctx> {
    fn clone(&self) -> Agent<Ctx> {
        Agent { definition: self.definition.clone() }
    }
}

impl<Ctx> std::fmt::Debug for Agent<Ctx> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Agent")
            .field("name", &self.definition.name)
            .field("model", &self.definition.model)
            .finish_non_exhaustive()
    }
}

/// Makes instructions from a session's context.
type InstructionFunction<Ctx> = Arc<dyn Fn(&Ctx) -> Result<String, String> + Send + Sync>;

/// Instructions, written once or made from each session's context.
enum Instruction<Ctx> {
    Text(String),
    Function(InstructionFunction<Ctx>),
}

struct Definition<Ctx> {
    name: String,
    model: Model,
    instructions: Vec<Instruction<Ctx>>,
    tools: Vec<Arc<dyn Tool<Ctx>>>,
    toolkits: Vec<Arc<dyn Toolkit<Ctx>>>,
    params: ModelParams,
    response_format: Option<ResponseFormat>,
    iteration_limit: Option<u64>,
}

impl<Ctx: Send + Sync + 'static> Agent<Ctx> {
    /// Starts an agent named `name` on `model`.
    pub fn builder(name: impl Into<String>, model: Model) -> AgentBuilder<Ctx> {
        AgentBuilder {
            definition: Definition {
                name: name.into(),
                model,
                instructions: Vec::new(),
                tools: Vec::new(),
                toolkits: Vec::new(),
                params: ModelParams::default(),
                response_format: None,
                iteration_limit: None,
            },
        }
    }

    /// The agent's name.
    pub fn name(&self) -> &str {
        &self.definition.name
    }

    /// Runs once for `request`'s caller, in a run session opened for this run and closed after
    /// it, whatever happens.
    pub async fn run(&self, request: AgentRequest<Ctx>) -> Result<AgentResponse, Error> {
        self.run_stream(request).response().await
    }

    /// Runs once like [`Agent::run`], streaming as it goes. The run session is closed when the
    /// run ends, and when the stream is dropped before that.
    pub fn run_stream(&self, request: AgentRequest<Ctx>) -> AgentStream {
        let agent = self.clone();
        let AgentRequest { input, context } = request;
        AgentStream::new(move |sink| {
            Box::pin(async move {
                let session = agent.create_session(context).await?;
                // The session closes on drop too, should the stream be dropped mid-run.
                let result = session.run_with_sink(input, sink).await;
                session.close().await;
                result
            })
        })
    }

    /// Opens a run session for one context: resolves the instructions and prepares every
    /// toolkit for it. Close it with [`RunSession::close`] when done.
    pub async fn create_session(&self, context: Ctx) -> Result<RunSession<Ctx>, Error> {
        let definition = &*self.definition;
        let mut instructions = Vec::new();
        for instruction in &definition.instructions {
            instructions.push(match instruction {
                Instruction::Text(text) => text.clone(),
                Instruction::Function(function) => function(&context)
                    .map_err(|reason| Error::Instructions { agent: definition.name.clone(), reason })?,
            });
        }
        let mut toolkits = Vec::new();
        for toolkit in &definition.toolkits {
            match toolkit.create_session(&context).await {
                Ok(session) => toolkits.push(session),
                Err(reason) => {
                    close_all(toolkits).await;
                    return Err(Error::Toolkit { toolkit: toolkit.name().to_owned(), reason });
                }
            }
        }
        instructions.extend(toolkits.iter().filter_map(|toolkit| toolkit.instructions()));
        let engine = match self.engine_agent(instructions) {
            Ok(engine) => engine,
            Err(error) => {
                close_all(toolkits).await;
                return Err(error);
            }
        };
        RunSession::open(definition.name.clone(), engine, definition.tools.clone(), toolkits, context).await
    }

    /// The engine's agent for these instructions: the spec means here what it means to the
    /// server. A stateless run has nobody to ask, so questions and sub-agents are off.
    fn engine_agent(&self, instructions: Vec<String>) -> Result<teamster_engine::CompiledAgent, Error> {
        let definition = &*self.definition;
        let invalid = |reason: String| Error::InvalidAgent { agent: definition.name.clone(), reason };
        let mut config = serde_json::json!({
            "ask_user_questions": {"enabled": false},
            "dynamic_sub_agents": {"enabled": false},
        });
        if let Some(limit) = definition.iteration_limit {
            config["iteration_limit"] = limit.into();
        }
        let spec = serde_json::json!({
            "model": {"name": definition.model.name(), "params": definition.params},
            "instructions": (!instructions.is_empty()).then(|| instructions.join("\n\n")),
            "response_format": definition.response_format,
            "config": config,
        });
        let spec: AgentSpec = serde_json::from_value(spec).map_err(|error| invalid(error.to_string()))?;
        let models = Arc::new(OneModel(definition.model.resolved().clone()));
        teamster_engine::CompiledAgent::from_spec(&spec, models, |_| None).map_err(|error| invalid(error.to_string()))
    }
}

/// Closes toolkit sessions a session that failed to open had prepared.
pub(crate) async fn close_all<Ctx>(toolkits: Vec<Box<dyn ToolkitSession<Ctx>>>) {
    for toolkit in toolkits {
        toolkit.close().await;
    }
}

/// The one model an agent names.
struct OneModel(ResolvedModel);

impl ModelResolver for OneModel {
    fn resolve(&self, _name: &str) -> Result<ResolvedModel, String> {
        Ok(self.0.clone())
    }
}

/// Builds an [`Agent`].
pub struct AgentBuilder<Ctx> {
    definition: Definition<Ctx>,
}

impl<Ctx> std::fmt::Debug for AgentBuilder<Ctx> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("AgentBuilder").field("name", &self.definition.name).finish_non_exhaustive()
    }
}

impl<Ctx: Send + Sync + 'static> AgentBuilder<Ctx> {
    /// Adds instructions (the system prompt); several are joined by blank lines, in order.
    pub fn instructions(mut self, text: impl Into<String>) -> Self {
        self.definition.instructions.push(Instruction::Text(text.into()));
        self
    }

    /// Adds instructions made from each session's context when the session opens. An `Err`
    /// fails the session with [`Error::Instructions`].
    pub fn dynamic_instructions(
        mut self,
        function: impl Fn(&Ctx) -> Result<String, String> + Send + Sync + 'static,
    ) -> Self {
        self.definition.instructions.push(Instruction::Function(Arc::new(function)));
        self
    }

    /// Adds a tool (see [`tool`](crate::tool)).
    pub fn tool(mut self, tool: Arc<dyn Tool<Ctx>>) -> Self {
        self.definition.tools.push(tool);
        self
    }

    /// Adds a toolkit, prepared anew for each run session.
    pub fn toolkit(mut self, toolkit: impl Toolkit<Ctx> + 'static) -> Self {
        self.definition.toolkits.push(Arc::new(toolkit));
        self
    }

    /// Sets the model parameters (temperature, maximum tokens, ...).
    pub fn params(mut self, params: ModelParams) -> Self {
        self.definition.params = params;
        self
    }

    /// Asks the model for JSON, or for JSON of a schema.
    pub fn response_format(mut self, format: ResponseFormat) -> Self {
        self.definition.response_format = Some(format);
        self
    }

    /// The most model calls one run may make (default 100, at most 1000); a run that needs
    /// more fails with [`Error::Run`].
    pub fn iteration_limit(mut self, limit: u64) -> Self {
        self.definition.iteration_limit = Some(limit);
        self
    }

    /// Checks the definition and makes the agent.
    pub fn build(self) -> Result<Agent<Ctx>, Error> {
        let definition = self.definition;
        let invalid = |reason: String| Error::InvalidAgent { agent: definition.name.clone(), reason };
        if definition.name.trim().is_empty() {
            return Err(invalid("the name is empty".to_owned()));
        }
        let mut names = std::collections::HashSet::new();
        for tool in &definition.tools {
            if !names.insert(tool.name()) {
                return Err(invalid(format!("two tools are named {:?}", tool.name())));
            }
        }
        let agent = Agent { definition: Arc::new(definition) };
        // The spec must make sense before any session opens.
        agent.engine_agent(Vec::new())?;
        Ok(agent)
    }
}
