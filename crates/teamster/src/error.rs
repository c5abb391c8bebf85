//! What can go wrong when building or running an agent.

/// Why an agent could not be built or a run could not finish.
///
/// A tool that fails is not an error here: its failure goes back to the model as the tool's
/// result (see [`ToolError`](crate::ToolError)), and the run goes on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The model could not be set up (an unknown provider kind, a bad base URL).
    #[error("model {model:?} cannot be used: {reason}")]
    Model {
        /// The model's name or id.
        model: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No model key was found where one was looked for (the environment's `OPENAI_API_KEY`
    /// and `ANTHROPIC_API_KEY`). Set one, or run on [`Model::offline`](crate::Model::offline)
    /// by choice.
    #[error("no model key: set {} (or run on the offline demo model, Model::offline(), by choice)", variables.join(" or "))]
    MissingApiKey {
        /// The variables that were looked for.
        variables: Vec<String>,
    },
    /// The agent's definition is not valid (a duplicate tool name, an empty name).
    #[error("invalid agent {agent:?}: {reason}")]
    InvalidAgent {
        /// The agent's name.
        agent: String,
        /// What is wrong with its definition.
        reason: String,
    },
    /// A context-dependent instruction function failed for this context.
    #[error("the instructions of agent {agent:?} failed: {reason}")]
    Instructions {
        /// The agent's name.
        agent: String,
        /// The function's error.
        reason: String,
    },
    /// A toolkit could not create its session for this context.
    #[error("toolkit {toolkit:?} could not start: {reason}")]
    Toolkit {
        /// The toolkit's name.
        toolkit: String,
        /// Its error.
        reason: String,
    },
    /// The input cannot be sent to a model (for example an empty conversation).
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// The run session was closed; create a new one.
    #[error("the run session is closed")]
    SessionClosed,
    /// The run stopped before an answer: the model failed, or the iteration limit was hit. The
    /// message says why in words a user can act on.
    #[error("the run failed: {0}")]
    Run(String),
    /// The agent stopped to wait for a human (an approval or a question), which a stateless
    /// run cannot give; use the embedded runtime for agents that need one.
    #[error("the run needs a human decision, which a stateless run cannot take")]
    NeedsHuman,
}
