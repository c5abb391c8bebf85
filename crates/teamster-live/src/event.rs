//! [`LiveEvent`]: one event of the live channel, in the control layer's vocabulary. On the wire
//! each is an SSE message whose `event:` is its [`name`](LiveEvent::name) and whose data is the
//! JSON of the event, `type` (the same name) included.

use serde::{Deserialize, Serialize};
use teamster_protocol::control::{Plan, QueuedMessage, TaskList};
use teamster_protocol::session::Session;
use teamster_protocol::workspace::WorkspaceStatus;

use crate::display::{AgentEndStatus, DisplayState, SubagentStatus, SubagentView, UsageTotals};

/// One event of the live channel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum LiveEvent {
    /// A turn started.
    AgentStart {
        /// The turn's id.
        turn_id: String,
    },
    /// A turn ended.
    AgentEnd {
        /// The turn's id.
        turn_id: String,
        /// How it ended.
        status: AgentEndStatus,
        /// Why it was cancelled, or what went wrong.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// The agent started a message (the main thread's).
    MessageStart {
        /// The message's id (its `model.message` event's).
        message_id: String,
    },
    /// More of the message: text or reasoning, as it streams.
    MessageUpdate {
        /// The message's id (its `model.message` event's).
        message_id: String,
        /// More text.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text_delta: Option<String>,
        /// More reasoning, when the model shows it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reasoning_delta: Option<String>,
    },
    /// The message is complete.
    MessageEnd {
        /// The message's id (its `model.message` event's).
        message_id: String,
        /// Its whole text.
        text: String,
        /// Its reasoning, when the model showed it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reasoning: Option<String>,
    },
    /// The model began a tool call's input.
    ToolInputStart {
        /// The tool call's id.
        tool_call_id: String,
        /// The tool's name.
        tool_name: String,
    },
    /// More of a tool call's input (JSON text, as it streams).
    ToolInputDelta {
        /// The tool call's id.
        tool_call_id: String,
        /// More of it.
        delta: String,
    },
    /// A tool call's input is complete.
    ToolInputEnd {
        /// The tool call's id.
        tool_call_id: String,
    },
    /// The model called a tool, with its whole input; an approval, when the call needs one,
    /// follows as `tool_approval_required`.
    ToolStart {
        /// The tool call's id.
        tool_call_id: String,
        /// The tool's name.
        tool_name: String,
        /// The call's input (JSON text).
        arguments: String,
    },
    /// A running tool call reported progress.
    ToolUpdate {
        /// The tool call's id.
        tool_call_id: String,
        /// The tool's name.
        tool_name: String,
        /// How far it is, in units of `total`.
        progress: f64,
        /// How far it will go, when known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        total: Option<f64>,
        /// What happened, in words.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// A tool call answered.
    ToolEnd {
        /// The tool call's id.
        tool_call_id: String,
        /// The tool's name.
        tool_name: String,
        /// Its answer.
        result: String,
    },
    /// A tool call waits for the user's approval.
    ToolApprovalRequired {
        /// The tool call's id.
        tool_call_id: String,
        /// The tool's name.
        tool_name: String,
        /// The call's input (JSON text).
        arguments: String,
    },
    /// A tool call waits for the user's answer (`ask_user_question`, a plan to review): its
    /// input is the payload to show.
    ToolSuspended {
        /// The tool call's id.
        tool_call_id: String,
        /// The tool's name.
        tool_name: String,
        /// What to show the user: the call's input (JSON).
        suspend_payload: serde_json::Value,
    },
    /// The session's token usage changed.
    UsageUpdate {
        /// The totals so far.
        usage: UsageTotals,
    },
    /// Something went wrong.
    Error {
        /// What happened, in words.
        message: String,
    },
    /// A running command printed this (the sandbox's `exec`, on the main thread).
    ShellOutput {
        tool_call_id: String,
        tool_name: String,
        /// `stdout` or `stderr`.
        stream: String,
        text: String,
    },
    /// The session's workspace changed state (made, destroyed, or failed to be made).
    WorkspaceStatusChanged {
        status: WorkspaceStatus,
        /// Its sandbox, once it is ready.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sandbox_id: Option<String>,
        /// Why it could not be made.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// The session's workspace is ready (after a `workspace_status_changed` saying so).
    WorkspaceReady {
        sandbox_id: String,
    },
    /// The session's workspace could not be made (after a `workspace_status_changed` saying so).
    WorkspaceError {
        error: String,
    },
    /// Something worth telling the user (an MCP server to authorize, a sandbox made).
    Info {
        /// What happened, in words.
        message: String,
    },
    /// The session's mode changed (`None`: the agent's default).
    ModeChanged {
        /// The mode in force.
        mode: Option<String>,
    },
    /// The model of the session's next turns changed (`None`: the agent's or the mode's).
    ModelChanged {
        /// The model (`provider/model`).
        model: Option<String>,
    },
    /// The session state changed.
    StateChanged {
        /// The state, whole.
        state: serde_json::Value,
    },
    /// The task list changed.
    TaskUpdated {
        /// The task list, whole.
        tasks: TaskList,
    },
    /// The plans changed.
    PlansChanged {
        /// The plans, whole.
        plans: Vec<Plan>,
    },
    /// The queued follow-ups changed; `follow_up` is the one just queued, if one was.
    FollowUpQueued {
        /// The one just queued, if one was.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        follow_up: Option<QueuedMessage>,
        /// Every queued follow-up, in the order they will run.
        follow_ups: Vec<QueuedMessage>,
    },
    /// A sub-agent started, in a thread of its own.
    SubagentStart {
        /// The sub-agent's thread.
        thread_id: String,
        /// The sub-agent's name.
        agent_name: String,
        /// The task it was given.
        task: String,
        /// The model (`provider/model`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        /// The tool call that started it.
        tool_call_id: String,
    },
    /// A sub-agent's text, as it streams.
    SubagentTextDelta {
        /// The sub-agent's thread.
        thread_id: String,
        /// More of it.
        delta: String,
    },
    /// A sub-agent called a tool.
    SubagentToolStart {
        /// The sub-agent's thread.
        thread_id: String,
        /// The tool call's id.
        tool_call_id: String,
        /// The tool's name.
        tool_name: String,
        /// The call's input (JSON text).
        arguments: String,
    },
    /// A sub-agent's tool call answered.
    SubagentToolEnd {
        /// The sub-agent's thread.
        thread_id: String,
        /// The tool call's id.
        tool_call_id: String,
        /// The tool's name.
        tool_name: String,
        /// Its answer.
        result: String,
    },
    /// A sub-agent ended.
    SubagentEnd {
        /// The sub-agent's thread.
        thread_id: String,
        /// How it ended.
        status: SubagentStatus,
        /// Its answer.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<String>,
        /// What went wrong, when it failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// The model a declared sub-agent runs on in this session was chosen (or given back to its
    /// declaration's): the sub-agents started from now on run on it.
    SubagentModelChanged {
        /// The declared sub-agent's name.
        agent_name: String,
        /// The model (`provider/model`); `None` for its declaration's.
        #[serde(default)]
        model: Option<String>,
    },
    /// The session (the seed's thread) changed: its title.
    ThreadChanged {
        /// The session's id.
        session_id: String,
        /// Its title now.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        title: Option<String>,
    },
    /// A session of the caller's was created (on the caller's channel).
    ThreadCreated {
        /// The session, as `GET /sessions/{id}` shows it.
        session: Box<Session>,
    },
    /// A session of the caller's was deleted (on the caller's channel).
    ThreadDeleted {
        /// The session's id.
        session_id: String,
    },
    /// The display state, whole.
    DisplayStateChanged {
        /// The display state.
        display: Box<DisplayState>,
    },
    /// One event of a turn as it was stored, before the events it translates into: for
    /// library subscribers that asked for them. The HTTP channels never send it.
    #[serde(skip)]
    TurnEvent {
        /// The turn's id.
        turn_id: String,
        /// The event's position in the turn's stream, from 1.
        sequence: u64,
        /// The event.
        event: Box<teamster_protocol::Event>,
    },
}

impl LiveEvent {
    /// Folds the event into `display`. `display_state_changed` replaces it whole.
    pub fn fold_into(&self, display: &mut DisplayState) {
        match self {
            LiveEvent::AgentStart { turn_id } => {
                display.running_turn_id = Some(turn_id.clone());
                display.last_turn_id = Some(turn_id.clone());
                display.last_turn_status = None;
                display.streaming_message_id = None;
                display.streaming_text.clear();
                display.last_answer = None;
                display.tool_calls.clear();
                display.subagents.clear();
                display.error = None;
            }
            LiveEvent::AgentEnd { status, .. } => {
                display.running_turn_id = None;
                display.last_turn_status = Some(*status);
                display.streaming_message_id = None;
                display.streaming_text.clear();
            }
            LiveEvent::MessageStart { message_id } => {
                display.streaming_message_id = Some(message_id.clone());
                display.streaming_text.clear();
            }
            LiveEvent::MessageUpdate { text_delta, .. } => {
                if let Some(text) = text_delta {
                    display.streaming_text.push_str(text);
                }
            }
            LiveEvent::MessageEnd { text, .. } => {
                display.streaming_message_id = None;
                display.streaming_text.clear();
                if !text.is_empty() {
                    display.last_answer = Some(text.clone());
                }
            }
            LiveEvent::ToolInputStart { tool_call_id, tool_name } => {
                let call = display.call(tool_call_id);
                call.tool_name.clone_from(tool_name);
                call.status = "input".to_owned();
            }
            LiveEvent::ToolInputDelta { tool_call_id, delta } => display.call(tool_call_id).arguments.push_str(delta),
            LiveEvent::ToolInputEnd { .. } => {}
            LiveEvent::ToolStart { tool_call_id, tool_name, arguments } => {
                let call = display.call(tool_call_id);
                call.tool_name.clone_from(tool_name);
                call.arguments.clone_from(arguments);
                call.status = "running".to_owned();
            }
            LiveEvent::ToolUpdate { tool_call_id, progress, total, .. } => {
                display.call(tool_call_id).progress = Some((*progress, *total));
            }
            LiveEvent::ToolEnd { tool_call_id, result, .. } => {
                let call = display.call(tool_call_id);
                call.status = "done".to_owned();
                call.result = Some(result.clone());
            }
            LiveEvent::ToolApprovalRequired { tool_call_id, .. } => display.call(tool_call_id).status = "awaiting_approval".to_owned(),
            LiveEvent::ToolSuspended { tool_call_id, .. } => display.call(tool_call_id).status = "awaiting_answer".to_owned(),
            LiveEvent::UsageUpdate { usage } => display.usage = usage.clone(),
            LiveEvent::Error { message } => display.error = Some(message.clone()),
            LiveEvent::Info { .. } | LiveEvent::WorkspaceReady { .. } | LiveEvent::WorkspaceError { .. } | LiveEvent::ShellOutput { .. } => {}
            LiveEvent::WorkspaceStatusChanged { status, .. } => display.workspace = *status,
            LiveEvent::ModeChanged { mode } => display.mode.clone_from(mode),
            LiveEvent::ModelChanged { model } => display.model.clone_from(model),
            LiveEvent::StateChanged { state } => display.state = Some(state.clone()),
            LiveEvent::TaskUpdated { tasks } => display.tasks = tasks.clone(),
            LiveEvent::PlansChanged { plans } => display.plans = plans.clone(),
            LiveEvent::FollowUpQueued { follow_ups, .. } => display.follow_ups = follow_ups.clone(),
            LiveEvent::SubagentStart { thread_id, agent_name, task, model, .. } => {
                display.subagents.insert(
                    thread_id.clone(),
                    SubagentView {
                        agent_name: agent_name.clone(),
                        task: task.clone(),
                        model: model.clone(),
                        status: "running".to_owned(),
                        text: String::new(),
                        tools: Vec::new(),
                    },
                );
            }
            LiveEvent::SubagentTextDelta { thread_id, delta } => {
                if let Some(subagent) = display.subagents.get_mut(thread_id) {
                    subagent.text.push_str(delta);
                }
            }
            LiveEvent::SubagentToolStart { thread_id, tool_name, .. } => {
                if let Some(subagent) = display.subagents.get_mut(thread_id) {
                    subagent.tools.push(tool_name.clone());
                }
            }
            LiveEvent::SubagentToolEnd { .. } => {}
            LiveEvent::SubagentEnd { thread_id, status, result, .. } => {
                if let Some(subagent) = display.subagents.get_mut(thread_id) {
                    subagent.status = match status {
                        SubagentStatus::Done => "done",
                        SubagentStatus::Error => "error",
                    }
                    .to_owned();
                    if let Some(result) = result {
                        subagent.text.clone_from(result);
                    }
                }
            }
            LiveEvent::SubagentModelChanged { agent_name, model } => match model {
                Some(model) => {
                    display.subagent_models.insert(agent_name.clone(), model.clone());
                }
                None => {
                    display.subagent_models.remove(agent_name);
                }
            },
            LiveEvent::ThreadChanged { title, .. } => display.title.clone_from(title),
            LiveEvent::ThreadCreated { .. } | LiveEvent::ThreadDeleted { .. } | LiveEvent::TurnEvent { .. } => {}
            LiveEvent::DisplayStateChanged { display: snapshot } => *display = (**snapshot).clone(),
        }
    }

    /// The events saying the session's workspace is now in `status`: the change, then
    /// `workspace_ready` or `workspace_error` when it is one of those.
    pub fn workspace(status: WorkspaceStatus, sandbox_id: Option<&str>, error: Option<&str>) -> Vec<LiveEvent> {
        let changed = LiveEvent::WorkspaceStatusChanged { status, sandbox_id: sandbox_id.map(str::to_owned), error: error.map(str::to_owned) };
        let outcome = match status {
            WorkspaceStatus::Ready => sandbox_id.map(|sandbox_id| LiveEvent::WorkspaceReady { sandbox_id: sandbox_id.to_owned() }),
            WorkspaceStatus::Error => Some(LiveEvent::WorkspaceError { error: error.unwrap_or("the workspace could not be made").to_owned() }),
            _ => None,
        };
        std::iter::once(changed).chain(outcome).collect()
    }

    /// The event's name: its SSE `event:` and its `type`.
    pub fn name(&self) -> &'static str {
        match self {
            LiveEvent::AgentStart { .. } => "agent_start",
            LiveEvent::AgentEnd { .. } => "agent_end",
            LiveEvent::MessageStart { .. } => "message_start",
            LiveEvent::MessageUpdate { .. } => "message_update",
            LiveEvent::MessageEnd { .. } => "message_end",
            LiveEvent::ToolInputStart { .. } => "tool_input_start",
            LiveEvent::ToolInputDelta { .. } => "tool_input_delta",
            LiveEvent::ToolInputEnd { .. } => "tool_input_end",
            LiveEvent::ToolStart { .. } => "tool_start",
            LiveEvent::ToolUpdate { .. } => "tool_update",
            LiveEvent::ToolEnd { .. } => "tool_end",
            LiveEvent::ToolApprovalRequired { .. } => "tool_approval_required",
            LiveEvent::ToolSuspended { .. } => "tool_suspended",
            LiveEvent::UsageUpdate { .. } => "usage_update",
            LiveEvent::Error { .. } => "error",
            LiveEvent::Info { .. } => "info",
            LiveEvent::ShellOutput { .. } => "shell_output",
            LiveEvent::WorkspaceStatusChanged { .. } => "workspace_status_changed",
            LiveEvent::WorkspaceReady { .. } => "workspace_ready",
            LiveEvent::WorkspaceError { .. } => "workspace_error",
            LiveEvent::ModeChanged { .. } => "mode_changed",
            LiveEvent::ModelChanged { .. } => "model_changed",
            LiveEvent::StateChanged { .. } => "state_changed",
            LiveEvent::TaskUpdated { .. } => "task_updated",
            LiveEvent::PlansChanged { .. } => "plans_changed",
            LiveEvent::FollowUpQueued { .. } => "follow_up_queued",
            LiveEvent::SubagentStart { .. } => "subagent_start",
            LiveEvent::SubagentTextDelta { .. } => "subagent_text_delta",
            LiveEvent::SubagentToolStart { .. } => "subagent_tool_start",
            LiveEvent::SubagentToolEnd { .. } => "subagent_tool_end",
            LiveEvent::SubagentEnd { .. } => "subagent_end",
            LiveEvent::SubagentModelChanged { .. } => "subagent_model_changed",
            LiveEvent::ThreadChanged { .. } => "thread_changed",
            LiveEvent::ThreadCreated { .. } => "thread_created",
            LiveEvent::ThreadDeleted { .. } => "thread_deleted",
            LiveEvent::DisplayStateChanged { .. } => "display_state_changed",
            LiveEvent::TurnEvent { .. } => "turn_event",
        }
    }

    /// Whether the event comes many times a second while a model streams: a display state
    /// change after it may wait to be coalesced with the next ones.
    pub fn is_high_frequency(&self) -> bool {
        matches!(
            self,
            LiveEvent::MessageUpdate { .. }
                | LiveEvent::ToolInputDelta { .. }
                | LiveEvent::ToolUpdate { .. }
                | LiveEvent::ShellOutput { .. }
                | LiveEvent::SubagentTextDelta { .. }
                | LiveEvent::TurnEvent { .. }
        )
    }
}
