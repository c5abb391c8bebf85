//! The tool seam: [`ToolSource`] lists tools and calls them.
//!
//! Built-in tools live in [`builtin`]; [`selector`] picks an MCP server's tools for an agent
//! (enable, disable, preload and approval selectors); [`tool_sets`] holds the tool sets a
//! program serves in-process, which agents name as they name MCP servers. MCP servers and the
//! sandbox implement the same trait in their own crates. A tool failure is data: [`ToolOutput`] with `is_error`, sent back to the
//! model, never an `Err` that ends the turn.

pub mod builtin;
pub mod selector;
pub mod tool_sets;

use async_trait::async_trait;
use teamster_protocol::{RequestContext, ToolInfo};

/// A tool as the engine sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Tool {
    /// The name the model calls it by; unique within a turn.
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub input_schema: serde_json::Value,
    /// Where it comes from, as shown in `tool_calls[].tool_info`.
    pub info: ToolInfo,
    pub annotations: ToolAnnotations,
    /// Who must act before a call runs.
    pub gate: ToolGate,
}

/// What a call of a tool waits for. A gated call ends the turn with a required action; the
/// next turn's input resumes it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ToolGate {
    /// The server runs it at once.
    #[default]
    None,
    /// The server runs it once a human allows it (`tool.approval_required`).
    Approval,
    /// The client runs it and sends the result (`tool.response_required`).
    ClientSide,
}

/// Hints a tool gives about itself (MCP `readOnlyHint`, `destructiveHint`, `idempotentHint`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ToolAnnotations {
    pub read_only: bool,
    pub destructive: bool,
    pub idempotent: bool,
}

/// The result of a tool call, as text for the model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolOutput {
    pub content: String,
    pub is_error: bool,
}

impl ToolOutput {
    pub fn ok(content: impl Into<String>) -> ToolOutput {
        ToolOutput { content: content.into(), is_error: false }
    }

    pub fn error(content: impl Into<String>) -> ToolOutput {
        ToolOutput { content: content.into(), is_error: true }
    }
}

/// How far a running call has come, as the tool reported it (MCP `notifications/progress`):
/// `progress` grows with each report; `total` is known for some tools only.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolProgress {
    pub progress: f64,
    pub total: Option<f64>,
    pub message: Option<String>,
}

/// Which of a command's streams output came on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OutputStream {
    Stdout,
    Stderr,
}

impl OutputStream {
    /// The stream's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            OutputStream::Stdout => "stdout",
            OutputStream::Stderr => "stderr",
        }
    }
}

/// Where a running call's progress reports go. Reporting must not block: the tool's
/// connection calls it as reports arrive.
pub trait ProgressSink: Send + Sync {
    fn report(&self, progress: ToolProgress);

    /// Output a running command printed (the sandbox's `exec`), as it comes; sinks that show
    /// none ignore it.
    fn output(&self, stream: OutputStream, text: &str) {
        let _ = (stream, text);
    }
}

/// A [`ProgressSink`] that drops every report.
pub struct NoProgress;

impl ProgressSink for NoProgress {
    fn report(&self, _progress: ToolProgress) {}
}

/// Errors listing a source's tools (a call's errors are [`ToolOutput`]s).
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    #[error("tool source {source_name} is unavailable: {message}")]
    Unavailable { source_name: String, message: String },
}

/// A set of tools that can be listed and called.
#[async_trait]
pub trait ToolSource: Send + Sync {
    async fn list(&self) -> Result<Vec<Tool>, Error>;
    /// Calls a tool by name with JSON-text arguments.
    async fn call(&self, name: &str, arguments: &str) -> ToolOutput;

    /// Calls a tool like [`ToolSource::call`] within a turn: the progress it reports while it
    /// runs goes to `context.progress`, and sources that pass context on (MCP servers, in
    /// their request's `_meta`) hand on the turn's request context. Sources that do neither
    /// need not implement it.
    async fn call_in(&self, name: &str, arguments: &str, context: CallContext<'_>) -> ToolOutput {
        let _ = context;
        self.call(name, arguments).await
    }
}

/// What a call made within a turn carries besides its arguments.
#[derive(Clone, Copy)]
pub struct CallContext<'a> {
    /// Where the progress the tool reports while it runs goes.
    pub progress: &'a dyn ProgressSink,
    /// The turn's request context: the application's JSON object, `None` without one.
    pub request_context: Option<&'a RequestContext>,
}

impl CallContext<'static> {
    /// A call that reports nowhere and carries no request context.
    pub const NONE: CallContext<'static> = CallContext { progress: &NoProgress, request_context: None };
}

impl<'a> CallContext<'a> {
    /// A call whose progress goes to `progress`, without a request context.
    pub fn reporting(progress: &'a dyn ProgressSink) -> CallContext<'a> {
        CallContext { progress, request_context: None }
    }
}
