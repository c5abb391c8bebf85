//! The twelve event types of a turn's stream, one extension (`tool.progress`), and the pieces
//! they are made of.
//!
//! An event is serialised once, when it happens, and those bytes are what every stream, replay
//! and list returns. `model.message` is first sent as a placeholder, then grows through
//! `model.message.delta`s with the same id; lists return the folded message (see [`fold`]).

use serde::{Deserialize, Serialize};

use crate::input::TurnInput;
use crate::turn::{Subject, TurnState};

/// One event of a turn, by `type`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type")]
pub enum Event {
    #[serde(rename = "turn.created")]
    TurnCreated(TurnCreated),
    #[serde(rename = "turn.done")]
    TurnDone(TurnDone),
    #[serde(rename = "model.message")]
    ModelMessage(ModelMessage),
    #[serde(rename = "model.message.delta")]
    ModelMessageDelta(ModelMessageDelta),
    #[serde(rename = "tool.response")]
    ToolResponse(ToolResponse),
    #[serde(rename = "thread.created")]
    ThreadCreated(ThreadCreated),
    #[serde(rename = "thread.done")]
    ThreadDone(ThreadDone),
    #[serde(rename = "mcp.initialize")]
    McpInitialize(McpInitialize),
    #[serde(rename = "mcp.auth_required")]
    McpAuthRequired(McpAuthRequired),
    #[serde(rename = "sandbox.created")]
    SandboxCreated(SandboxCreated),
    #[serde(rename = "tool.approval_required")]
    ToolApprovalRequired(ToolCallsPending),
    #[serde(rename = "tool.response_required")]
    ToolResponseRequired(ToolCallsPending),
    /// A Teamster extension, in the stream only (never listed) and shown to native clients
    /// that ask for it: the gateway dialect has no such event.
    #[serde(rename = "tool.progress")]
    ToolProgress(ToolProgress),
    /// A Teamster extension, in the stream only (never listed) and shown to native clients
    /// that ask for it: what a running command printed.
    #[serde(rename = "shell.output")]
    ShellOutput(ShellOutput),
}

impl Event {
    /// The wire `type` of the event.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::TurnCreated(_) => "turn.created",
            Event::TurnDone(_) => "turn.done",
            Event::ModelMessage(_) => "model.message",
            Event::ModelMessageDelta(_) => "model.message.delta",
            Event::ToolResponse(_) => "tool.response",
            Event::ThreadCreated(_) => "thread.created",
            Event::ThreadDone(_) => "thread.done",
            Event::McpInitialize(_) => "mcp.initialize",
            Event::McpAuthRequired(_) => "mcp.auth_required",
            Event::SandboxCreated(_) => "sandbox.created",
            Event::ToolApprovalRequired(_) => "tool.approval_required",
            Event::ToolResponseRequired(_) => "tool.response_required",
            Event::ToolProgress(_) => "tool.progress",
            Event::ShellOutput(_) => "shell.output",
        }
    }

    /// The event id (for model messages, the message id shared with its deltas).
    pub fn id(&self) -> &str {
        match self {
            Event::TurnCreated(e) => &e.id,
            Event::TurnDone(e) => &e.id,
            Event::ModelMessage(e) => &e.id,
            Event::ModelMessageDelta(e) => &e.id,
            Event::ToolResponse(e) => &e.id,
            Event::ThreadCreated(e) => &e.id,
            Event::ThreadDone(e) => &e.id,
            Event::McpInitialize(e) => &e.id,
            Event::McpAuthRequired(e) => &e.id,
            Event::SandboxCreated(e) => &e.id,
            Event::ToolApprovalRequired(e) | Event::ToolResponseRequired(e) => &e.id,
            Event::ToolProgress(e) => &e.id,
            Event::ShellOutput(e) => &e.id,
        }
    }

    /// Whether the event is listed by the turn-events endpoint: content events only, never
    /// `turn.created`, `turn.done`, deltas or progress.
    pub fn is_turn_content(kind: &str) -> bool {
        !matches!(kind, "turn.created" | "turn.done" | "model.message.delta" | "tool.progress" | "shell.output")
    }

    /// Whether an event's stored JSON is a `tool.progress` (read without parsing it: the
    /// `type` tag is always serialised first).
    pub fn is_progress_json(json: &str) -> bool {
        json.starts_with(r#"{"type":"tool.progress""#)
    }

    /// Whether an event's stored JSON is a `shell.output` (read like
    /// [`Event::is_progress_json`]).
    pub fn is_shell_output_json(json: &str) -> bool {
        json.starts_with(r#"{"type":"shell.output""#)
    }

    /// Whether the event is an action a human must take before the turn can go on.
    pub fn is_required_action(&self) -> bool {
        matches!(
            self,
            Event::ToolApprovalRequired(_) | Event::ToolResponseRequired(_) | Event::McpAuthRequired(_)
        )
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TurnCreated {
    pub id: String,
    pub turn_id: String,
    pub previous_turn_id: Option<String>,
    /// What the turn was given.
    #[serde(default)]
    pub input: Vec<TurnInput>,
    /// The turn's state when created (`running`).
    pub state: TurnState,
    /// Who created the turn.
    pub created_by: Subject,
    pub created_at: String,
    pub thread_id: Option<String>,
}

/// The last event of a turn's stream. Written with seed 000's top-level copies of what
/// `state` says (see [`TurnDone`]'s `Serialize`): `status`, and `cancellation_reason` or
/// `message` where the state has one; read back from `state` alone.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TurnDone {
    pub id: String,
    /// How the turn ended.
    pub state: TurnState,
    pub created_at: String,
    pub thread_id: Option<String>,
}

impl Serialize for TurnDone {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        /// As written: the fields, then the copies of `state`'s.
        #[derive(Serialize)]
        struct Written<'a> {
            id: &'a str,
            state: &'a TurnState,
            created_at: &'a str,
            thread_id: &'a Option<String>,
            status: &'static str,
            #[serde(skip_serializing_if = "Option::is_none")]
            cancellation_reason: Option<&'a crate::turn::CancelReason>,
            #[serde(skip_serializing_if = "Option::is_none")]
            message: Option<&'a str>,
        }
        let (cancellation_reason, message) = match &self.state {
            TurnState::Cancelled { reason, .. } => (Some(reason), None),
            TurnState::Error { message, .. } => (None, Some(message.as_str())),
            TurnState::Running | TurnState::Done { .. } => (None, None),
        };
        Written {
            id: &self.id,
            state: &self.state,
            created_at: &self.created_at,
            thread_id: &self.thread_id,
            status: self.state.status(),
            cancellation_reason,
            message,
        }
        .serialize(serializer)
    }
}

/// A complete model message, also the placeholder that starts a streamed one.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ModelMessage {
    pub id: String,
    pub thread_id: String,
    pub created_at: String,
    /// The message's text, or its parts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<MessageContent>,
    /// The name of the agent that wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The model's refusal, when it refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    /// The model's reasoning, as text, when the provider shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// The provider's reasoning blocks exactly as received, signatures included (a Teamster
    /// extension, absent when there are none): they go back to the provider with the message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking_blocks: Option<Vec<ThinkingBlock>>,
    /// The tools the model called.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// Why the model stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<FinishReason>,
    /// The call's token usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// The user's instructions that joined the running turn right before this message (a
    /// Teamster extension, absent when there are none): the model saw them as user messages
    /// after the turn's earlier steps, and a rebuilt history puts them there again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steering: Option<Vec<Steer>>,
}

/// A user instruction sent while a turn ran (`POST /api/v1/sessions/{id}/steer`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Steer {
    pub id: String,
    /// The text the user steered with.
    pub content: crate::UserContent,
    pub created_at: String,
}

impl ModelMessage {
    /// The message text: the string content, or the text parts joined.
    pub fn text(&self) -> String {
        match &self.content {
            None => String::new(),
            Some(MessageContent::Text(text)) => text.clone(),
            Some(MessageContent::Parts(parts)) => parts
                .iter()
                .filter_map(|part| match part {
                    ContentPart::Text { text } => Some(text.as_str()),
                    ContentPart::Refusal { .. } => None,
                })
                .collect(),
        }
    }
}

/// A reasoning block of an Anthropic answer, kept whole: a provider checks its signature (or the
/// redacted data) when the block is sent back, byte for byte.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type")]
pub enum ThinkingBlock {
    #[serde(rename = "thinking")]
    Thinking { thinking: String, signature: String },
    #[serde(rename = "redacted_thinking")]
    RedactedThinking { data: String },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum MessageContent {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type")]
pub enum ContentPart {
    #[serde(rename = "text")]
    Text { text: String },
    #[serde(rename = "refusal")]
    Refusal { refusal: String },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    Stop,
    Length,
    ToolCalls,
    ContentFilter,
    FunctionCall,
}

/// A tool call inside a complete model message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ToolCall {
    pub id: String,
    /// Always `function`.
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    /// The function called: its name and arguments.
    pub function: FunctionCall,
    /// Where the tool comes from: a built-in or an MCP server.
    pub tool_info: ToolInfo,
    /// Fields the model provider added, passed through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_specific_fields: Option<serde_json::Map<String, serde_json::Value>>,
}

fn function_type() -> String {
    "function".to_owned()
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FunctionCall {
    /// The tool's name as the model calls it.
    pub name: String,
    /// The arguments as JSON text, exactly as the model produced them.
    pub arguments: String,
}

/// Where a tool comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type")]
pub enum ToolInfo {
    #[serde(rename = "truefoundry-system")]
    System { name: String },
    #[serde(rename = "mcp")]
    Mcp { server_id: String, server_name: String, name: String },
}

/// Token usage of one model call.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Usage {
    /// Input tokens of the call, cached parts included.
    pub input_tokens: u64,
    /// Output tokens of the call, reasoning included.
    pub output_tokens: u64,
    /// Input tokens read from the provider's prompt cache, when it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_tokens: Option<u64>,
    /// Input tokens written to the provider's prompt cache, when it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_tokens: Option<u64>,
    /// Output tokens spent on reasoning (an extension: clients ignore unknown keys).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
    /// Where the input tokens went (estimated by part).
    pub input_tokens_breakdown: InputTokensBreakdown,
}

/// Where a call's input tokens went.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InputTokensBreakdown {
    /// Text the harness added: summaries of compacted history, notes on shortened tool results.
    pub harness: u64,
    /// The skills section of the system prompt.
    pub skills: u64,
    /// The agent's instructions.
    pub instructions: u64,
    /// The definitions of the tools offered.
    pub tool_definitions: u64,
    /// The conversation's messages.
    pub messages: u64,
}

/// A fragment of a streamed model message.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ModelMessageDelta {
    pub id: String,
    pub thread_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    /// Text to append to the message's content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Refusal text to append.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    /// Reasoning text to append.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// Complete reasoning blocks, appended in order (the Teamster extension of [`ModelMessage`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking_blocks: Option<Vec<ThinkingBlock>>,
    /// Fragments of tool calls, each merged into the call of its `index`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<DeltaToolCall>>,
    /// Why the model stopped, in the last fragment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<FinishReason>,
    /// The call's token usage, in the last fragment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeltaToolCall {
    /// Which of the message's tool calls this fragment belongs to.
    pub index: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Always `function` when present.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Fragments of the function's name and arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<DeltaFunction>,
    /// Where the tool comes from: a built-in or an MCP server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_info: Option<ToolInfo>,
    /// Fields the model provider added, passed through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_specific_fields: Option<serde_json::Map<String, serde_json::Value>>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeltaFunction {
    /// The function's name, in the first fragment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Text to append to the arguments (JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ToolResponse {
    pub id: String,
    pub thread_id: String,
    pub created_at: String,
    pub tool_call_id: String,
    /// The tool's result as the model reads it; a failed call's starts with `Error: `.
    pub content: String,
}

/// How a failed call's result reads, to the model and in its `tool.response`: this, then why.
pub const TOOL_ERROR_PREFIX: &str = "Error: ";

impl ToolResponse {
    /// Why the call failed, when its result says it did (see [`TOOL_ERROR_PREFIX`]).
    pub fn failure(&self) -> Option<&str> {
        self.content.strip_prefix(TOOL_ERROR_PREFIX)
    }
}

/// How far a running tool call has come, as the tool reported it (MCP
/// `notifications/progress`): `progress` grows with each report of the call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ToolProgress {
    pub id: String,
    pub thread_id: String,
    pub created_at: String,
    pub tool_call_id: String,
    /// The tool that reports.
    pub tool_name: String,
    /// How far it is, in units of `total`.
    pub progress: f64,
    /// How far it will go, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    /// What the tool is doing, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// What a running command (the sandbox's `exec`) printed, as it came: each call's first
/// 64 KiB at most, the piece that reaches that cap `truncated` (the call's result says how
/// much was dropped).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ShellOutput {
    pub id: String,
    pub thread_id: String,
    pub created_at: String,
    pub tool_call_id: String,
    /// The tool that runs the command (`exec`, or the name an agent gave it).
    pub tool_name: String,
    /// `stdout` or `stderr`.
    pub stream: String,
    /// The text, as printed (invalid UTF-8 replaced).
    pub text: String,
    /// How many bytes of this stream were streamed before this piece.
    pub offset: u64,
    /// Whether this piece reached the call's cap on streamed output: nothing follows it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ThreadCreated {
    pub id: String,
    pub created_at: String,
    pub thread_id: String,
    /// The thread's title.
    pub title: String,
    /// The agent that runs in the thread.
    pub agent_info: AgentInfo,
    /// The thread and tool call that started it.
    pub parent: AgentParent,
    /// Set on a forked sub-agent's thread, which started from a copy of its parent's context
    /// (a Teamster extension). Thread listings leave these out unless asked.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub forked: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentInfo {
    /// Which kind of sub-agent it is.
    #[serde(rename = "type", default = "dynamic_type")]
    pub kind: String,
    /// The sub-agent's name.
    pub name: String,
    /// The task it was given.
    pub input: String,
    /// The model it runs on (`provider/model`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

fn dynamic_type() -> String {
    "dynamic".to_owned()
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentParent {
    /// The thread that started it.
    pub thread_id: String,
    /// The tool call that started it.
    pub tool_call_id: String,
}

/// A sub-agent thread's end. Written with seed 000's top-level copies of what `state` says
/// (see its `Serialize`): `status`, and `message` for an error; read back from `state` alone.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ThreadDone {
    pub id: String,
    pub created_at: String,
    pub thread_id: String,
    /// The thread's title.
    pub title: String,
    /// The thread and tool call that started it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<AgentParent>,
    /// How the thread ended.
    pub state: ThreadState,
    /// Set on the thread that compacted its parent's context (a Teamster extension; clients
    /// that do not know it see an ordinary sub-agent thread).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compaction: Option<Compaction>,
    /// The usage of the thread's own model calls (a Teamster extension: the per-thread
    /// breakdown of the turn's metrics).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<crate::TurnMetrics>,
}

impl Serialize for ThreadDone {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        /// As written: the fields, then the copies of `state`'s.
        #[derive(Serialize)]
        struct Written<'a> {
            id: &'a str,
            created_at: &'a str,
            thread_id: &'a str,
            title: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            parent: &'a Option<AgentParent>,
            state: &'a ThreadState,
            #[serde(skip_serializing_if = "Option::is_none")]
            compaction: &'a Option<Compaction>,
            #[serde(skip_serializing_if = "Option::is_none")]
            metrics: &'a Option<crate::TurnMetrics>,
            status: &'static str,
            #[serde(skip_serializing_if = "Option::is_none")]
            message: Option<&'a str>,
        }
        let (status, message) = match &self.state {
            ThreadState::Done { .. } => ("done", None),
            ThreadState::Error { error, .. } => ("error", Some(error.as_str())),
        };
        Written {
            id: &self.id,
            created_at: &self.created_at,
            thread_id: &self.thread_id,
            title: &self.title,
            parent: &self.parent,
            state: &self.state,
            compaction: &self.compaction,
            metrics: &self.metrics,
            status,
            message,
        }
        .serialize(serializer)
    }
}

/// What a context compaction replaced: the summary in the thread's output stands for the first
/// `replaced_messages` messages of the parent thread's history (seed messages not counted).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Compaction {
    /// How many messages a summary replaced.
    #[serde(deserialize_with = "crate::lenient::u64")]
    pub replaced_messages: u64,
    /// The estimated size of the replaced messages, in tokens.
    #[serde(default, deserialize_with = "crate::lenient::u64")]
    pub replaced_tokens: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "status")]
pub enum ThreadState {
    #[serde(rename = "done")]
    Done {
        /// The thread's final message.
        #[serde(serialize_with = "tagged::message")]
        output: Box<ModelMessage>,
    },
    #[serde(rename = "error")]
    Error {
        /// What went wrong.
        error: String,
        /// The thread's final message.
        #[serde(default, skip_serializing_if = "Option::is_none", serialize_with = "tagged::optional_message")]
        output: Option<Box<ModelMessage>>,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct McpInitialize {
    pub id: String,
    pub created_at: String,
    pub thread_id: String,
    /// Each server the turn connected to, or why it could not.
    pub mcp_servers: Vec<McpServerInit>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct McpServerInit {
    pub id: String,
    /// The server's name, as the agent names it.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// How the server is reached: `streamable-http`, `sse` or `stdio`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport_type: Option<String>,
    /// Teamster extension: why the server could not be initialized; the turn goes on without
    /// its tools. Absent when it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct McpAuthRequired {
    pub id: String,
    pub created_at: String,
    pub thread_id: Option<String>,
    /// The servers that want the user's authorization.
    pub mcp_servers: Vec<McpServerAuth>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct McpServerAuth {
    pub id: String,
    /// The server's name.
    pub name: String,
    /// The page where the user authorizes it.
    pub auth_url: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SandboxCreated {
    pub id: String,
    pub created_at: String,
    /// The sandbox's id; files are downloaded under it.
    pub sandbox_id: String,
    pub thread_id: Option<String>,
}

/// `tool.approval_required` and `tool.response_required`: calls waiting for a human.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ToolCallsPending {
    pub id: String,
    pub created_at: String,
    pub thread_id: String,
    /// The calls that wait.
    pub tool_calls: Vec<ToolCallRef>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ToolCallRef {
    /// The tool call id.
    pub id: String,
    /// The id of the `model.message` that holds the call.
    pub source_event_id: String,
}

/// Serialisers for model messages nested in states (`turn.done.state.output`,
/// `thread.done.state.output`), which carry `"type": "model.message"` like the event itself.
pub(crate) mod tagged {
    use serde::{Serialize, Serializer};

    use super::ModelMessage;

    #[derive(Serialize)]
    #[serde(tag = "type")]
    enum Tagged<'a> {
        #[serde(rename = "model.message")]
        ModelMessage(&'a ModelMessage),
    }

    #[allow(clippy::borrowed_box)]
    pub fn message<S: Serializer>(message: &Box<ModelMessage>, serializer: S) -> Result<S::Ok, S::Error> {
        Tagged::ModelMessage(message).serialize(serializer)
    }

    pub fn optional_message<S: Serializer>(
        message: &Option<Box<ModelMessage>>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match message {
            Some(message) => serializer.serialize_some(&Tagged::ModelMessage(message)),
            None => serializer.serialize_none(),
        }
    }
}

/// Folds a delta into its message, as the client SDK's `merge_event_delta` does.
///
/// Text fields concatenate, tool calls grow by `index` with arguments concatenated, thinking
/// blocks are appended, and `finish_reason` and `usage` replace. Empty strings change nothing.
pub fn fold(message: &mut ModelMessage, delta: &ModelMessageDelta) {
    if let Some(text) = delta.content.as_deref().filter(|t| !t.is_empty()) {
        match &mut message.content {
            None => message.content = Some(MessageContent::Text(text.to_owned())),
            Some(MessageContent::Text(existing)) => existing.push_str(text),
            Some(MessageContent::Parts(parts)) => match parts.last_mut() {
                Some(ContentPart::Text { text: last }) => last.push_str(text),
                _ => parts.push(ContentPart::Text { text: text.to_owned() }),
            },
        }
    }
    append(&mut message.refusal, delta.refusal.as_deref());
    append(&mut message.reasoning_content, delta.reasoning_content.as_deref());
    if let Some(blocks) = delta.thinking_blocks.as_ref().filter(|blocks| !blocks.is_empty()) {
        message.thinking_blocks.get_or_insert_with(Vec::new).extend(blocks.iter().cloned());
    }
    for call in delta.tool_calls.iter().flatten() {
        let calls = message.tool_calls.get_or_insert_with(Vec::new);
        let index = call.index as usize;
        while calls.len() <= index {
            calls.push(ToolCall {
                id: String::new(),
                kind: function_type(),
                function: FunctionCall { name: String::new(), arguments: String::new() },
                tool_info: ToolInfo::System { name: String::new() },
                provider_specific_fields: None,
            });
        }
        let slot = &mut calls[index];
        if let Some(id) = call.id.as_deref().filter(|s| !s.is_empty()) {
            slot.id = id.to_owned();
        }
        if let Some(kind) = call.kind.as_deref().filter(|s| !s.is_empty()) {
            slot.kind = kind.to_owned();
        }
        if let Some(function) = &call.function {
            if let Some(name) = function.name.as_deref().filter(|s| !s.is_empty()) {
                slot.function.name = name.to_owned();
            }
            if let Some(arguments) = &function.arguments {
                slot.function.arguments.push_str(arguments);
            }
        }
        if let Some(info) = &call.tool_info {
            slot.tool_info = info.clone();
        }
        if let Some(fields) = &call.provider_specific_fields {
            let target = slot.provider_specific_fields.get_or_insert_with(Default::default);
            for (key, value) in fields {
                target.insert(key.clone(), value.clone());
            }
        }
    }
    if delta.finish_reason.is_some() {
        message.finish_reason = delta.finish_reason;
    }
    if delta.usage.is_some() {
        message.usage = delta.usage.clone();
    }
}

fn append(target: &mut Option<String>, fragment: Option<&str>) {
    if let Some(fragment) = fragment.filter(|f| !f.is_empty()) {
        target.get_or_insert_with(String::new).push_str(fragment);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_type_round_trips_through_its_wire_name() {
        let samples = [
            r#"{"type":"turn.created","id":"e1","turn_id":"t1","previous_turn_id":null,"input":[{"type":"user.message","content":"hi"}],"state":{"status":"running"},"created_by":{"subject_id":"u","subject_type":"user","subject_slug":"u"},"created_at":"2025-01-01T00:00:00.000Z","thread_id":"main"}"#,
            r#"{"type":"turn.done","id":"e2","state":{"status":"cancelled","reason":"client-cancelled","completed_at":"2025-01-01T00:00:00.000Z"},"created_at":"2025-01-01T00:00:00.000Z","thread_id":null,"status":"cancelled","cancellation_reason":"client-cancelled"}"#,
            r#"{"type":"turn.done","id":"e3","state":{"status":"error","message":"boom","completed_at":"2025-01-01T00:00:00.000Z"},"created_at":"2025-01-01T00:00:00.000Z","thread_id":null,"status":"error","message":"boom"}"#,
            r#"{"type":"model.message","id":"m1","thread_id":"main","created_at":"x","content":[{"type":"text","text":"a"},{"type":"refusal","refusal":"no"}],"finish_reason":"stop"}"#,
            r#"{"type":"model.message.delta","id":"m1","thread_id":"main","tool_calls":[{"index":0,"function":{"arguments":"{"}}]}"#,
            r#"{"type":"model.message","id":"m2","thread_id":"main","created_at":"x","reasoning_content":"hm","thinking_blocks":[{"type":"thinking","thinking":"hm","signature":"EqQB+/="},{"type":"redacted_thinking","data":"c2VjcmV0"}]}"#,
            r#"{"type":"tool.response","id":"r1","thread_id":"main","created_at":"x","tool_call_id":"c1","content":"ok"}"#,
            r#"{"type":"thread.created","id":"th","created_at":"x","thread_id":"t2","title":"research","agent_info":{"type":"dynamic","name":"r","input":"go"},"parent":{"thread_id":"main","tool_call_id":"c1"}}"#,
            r#"{"type":"thread.done","id":"td","created_at":"x","thread_id":"t2","title":"research","state":{"status":"error","error":"boom"},"status":"error","message":"boom"}"#,
            r#"{"type":"mcp.initialize","id":"mi","created_at":"x","thread_id":"main","mcp_servers":[{"id":"s","name":"gh","transport_type":"streamable-http"}]}"#,
            r#"{"type":"mcp.auth_required","id":"ma","created_at":"x","thread_id":null,"mcp_servers":[{"id":"s","name":"gh","auth_url":"http://a"}]}"#,
            r#"{"type":"sandbox.created","id":"sc","created_at":"x","sandbox_id":"sb","thread_id":null}"#,
            r#"{"type":"tool.approval_required","id":"ar","created_at":"x","thread_id":"main","tool_calls":[{"id":"c1","source_event_id":"m1"}]}"#,
            r#"{"type":"tool.response_required","id":"rr","created_at":"x","thread_id":"main","tool_calls":[{"id":"c2","source_event_id":"m1"}]}"#,
        ];
        for sample in samples {
            let event: Event = serde_json::from_str(sample).unwrap_or_else(|e| panic!("{sample}: {e}"));
            let expected: serde_json::Value = serde_json::from_str(sample).unwrap();
            assert_eq!(expected["type"], event.kind());
            let again: Event = serde_json::from_value(serde_json::to_value(&event).unwrap()).unwrap();
            assert_eq!(again, event);
        }
    }

    #[test]
    fn messages_inside_states_carry_their_type() {
        let state = crate::TurnState::Done {
            output: Some(Box::new(ModelMessage { id: "m".into(), thread_id: "main".into(), ..Default::default() })),
            required_actions: Vec::new(),
            completed_at: "x".into(),
            metrics: None,
        };
        let value = serde_json::to_value(&state).unwrap();
        assert_eq!(value["output"]["type"], "model.message");
        let thread = ThreadState::Done { output: Box::new(ModelMessage::default()) };
        assert_eq!(serde_json::to_value(&thread).unwrap()["output"]["type"], "model.message");
        let again: crate::TurnState = serde_json::from_value(value).unwrap();
        assert_eq!(again, state);
    }

    #[test]
    fn folding_deltas_rebuilds_the_message() {
        let mut message = ModelMessage { id: "m".into(), thread_id: "main".into(), ..Default::default() };
        let deltas: Vec<ModelMessageDelta> = serde_json::from_str(
            r#"[{"id":"m","thread_id":"main","content":"Hel","reasoning_content":"think"},
                {"id":"m","thread_id":"main","thinking_blocks":[{"type":"thinking","thinking":"think","signature":"s1"}]},
                {"id":"m","thread_id":"main","thinking_blocks":[{"type":"redacted_thinking","data":"d1"}]},
                {"id":"m","thread_id":"main","content":"lo","tool_calls":[{"index":1,"id":"c2","function":{"name":"b","arguments":"{\"x\""}}]},
                {"id":"m","thread_id":"main","content":"","tool_calls":[{"index":1,"function":{"arguments":":1}"}},{"index":0,"id":"c1","function":{"name":"a","arguments":"{}"},"tool_info":{"type":"truefoundry-system","name":"a"}}]},
                {"id":"m","thread_id":"main","finish_reason":"tool_calls","usage":{"input_tokens":3,"output_tokens":2,"input_tokens_breakdown":{"harness":0,"skills":0,"instructions":1,"tool_definitions":0,"messages":2}}}]"#,
        )
        .unwrap();
        for delta in &deltas {
            fold(&mut message, delta);
        }
        assert_eq!(message.text(), "Hello");
        assert_eq!(message.reasoning_content.as_deref(), Some("think"));
        assert_eq!(
            message.thinking_blocks,
            Some(vec![
                ThinkingBlock::Thinking { thinking: "think".into(), signature: "s1".into() },
                ThinkingBlock::RedactedThinking { data: "d1".into() },
            ])
        );
        let calls = message.tool_calls.as_ref().unwrap();
        assert_eq!(calls[0].function.name, "a");
        assert_eq!(calls[1].function.arguments, r#"{"x":1}"#);
        assert_eq!(message.finish_reason, Some(FinishReason::ToolCalls));
        assert_eq!(message.usage.as_ref().unwrap().input_tokens, 3);
    }
}
