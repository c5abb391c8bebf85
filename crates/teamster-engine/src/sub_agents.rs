//! Sub-agents: threads the agent starts with the built-in [`RUN_SUB_AGENT`] tool.
//!
//! Each call runs a whole agent loop on a thread of its own (`thread.created`, its model
//! messages and tool events carrying its `thread_id`, `thread.done`), and its final answer is
//! the call's result for the parent. Several calls in one model message run concurrently, like
//! any tool calls. A sub-agent shares the turn's tools (and so the session's MCP connections),
//! sink, cancellation and metrics; it cannot ask the user questions, and it can start
//! sub-agents of its own only while the depth limit allows. A forked sub-agent starts from the
//! parent's exact instructions, tool list and history, so the provider's prompt cache still
//! hits, and cannot fork again.

use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use teamster_llm::Message;
use teamster_llm::registry::ResolvedModel;
use teamster_protocol::agent::StopWhen;
use teamster_protocol::event::{AgentInfo, AgentParent, ModelMessage, ThreadCreated, ThreadDone, ThreadState, ToolCall, ToolInfo};
use teamster_protocol::{Event, ids, timestamp};
use teamster_tools::{Tool, ToolAnnotations, ToolGate, ToolOutput, ToolSource};

/// The built-in tool that starts a sub-agent.
pub const RUN_SUB_AGENT: &str = "run_sub_agent";
/// The instructions of a dynamic sub-agent started without any.
const DEFAULT_INSTRUCTIONS: &str = "You are a sub-agent working for another agent. Do the task you are given \
with the tools you have, then answer with the result: your final answer is all the other agent will see.";
/// The longest name and task a call may give, in bytes.
const MAX_NAME_BYTES: usize = 128;
const MAX_TASK_BYTES: usize = 64 * 1024;

/// Turns a model name (`provider/model`) into something to call.
pub trait ModelResolver: Send + Sync {
    fn resolve(&self, name: &str) -> Result<ResolvedModel, String>;
}

/// A sub-agent the agent's author declared up front.
#[derive(Clone, Debug, PartialEq)]
pub struct NamedSubAgent {
    pub name: String,
    pub description: String,
    pub instructions: Option<String>,
    /// The parent's tools it may use, by name; `None` for all of them.
    pub tools: Option<Vec<String>>,
    /// `provider/model`; `None` for the parent's model.
    pub model: Option<String>,
    /// The most model calls one run may make; `None` for the parent's limit.
    pub max_iterations: Option<u64>,
    /// When a run ends early, with the results of the calls that ended it.
    pub stop_when: Option<StopWhen>,
    /// Whether its calls fork unless they say otherwise.
    pub fork: bool,
}

/// Which sub-agents an agent may start.
#[derive(Clone)]
pub struct SubAgentPolicy {
    /// Whether the model may start sub-agents it describes itself.
    pub dynamic: bool,
    pub named: Vec<NamedSubAgent>,
    /// How deep sub-agents may nest: 1 means sub-agents cannot start their own.
    pub max_depth: u32,
    pub models: Arc<dyn ModelResolver>,
}

impl SubAgentPolicy {
    /// Whether a thread at `depth` (0 for the main thread) is offered [`RUN_SUB_AGENT`].
    pub(crate) fn offered_at(&self, depth: u32) -> bool {
        depth < self.max_depth && (self.dynamic || !self.named.is_empty())
    }
}

/// The arguments of a [`RUN_SUB_AGENT`] call.
#[derive(Clone, Debug, Deserialize)]
pub(crate) struct SubAgentRequest {
    /// A short name, shown as the thread's title.
    pub name: String,
    /// What to do, in full: the sub-agent's first message.
    pub task: String,
    #[serde(default)]
    pub instructions: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    /// Start from a copy of the parent's context; the declared sub-agent's default when absent.
    #[serde(default)]
    pub fork: Option<bool>,
    /// A declared sub-agent to run, by name.
    #[serde(default)]
    pub agent: Option<String>,
}

impl SubAgentRequest {
    /// Whether the call forks: as it says, or as its declared sub-agent does by default.
    pub fn forks(&self, declared: Option<&NamedSubAgent>) -> bool {
        self.fork.unwrap_or_else(|| declared.is_some_and(|agent| agent.fork))
    }

    /// Parses and checks a call's arguments; the error is for the model.
    pub fn parse(arguments: &str) -> Result<SubAgentRequest, String> {
        let request: SubAgentRequest =
            serde_json::from_str(arguments).map_err(|error| format!("Invalid arguments for {RUN_SUB_AGENT}: {error}."))?;
        if request.name.trim().is_empty() || request.name.len() > MAX_NAME_BYTES {
            return Err(format!("The sub-agent's name must be 1 to {MAX_NAME_BYTES} bytes."));
        }
        if request.task.trim().is_empty() || request.task.len() > MAX_TASK_BYTES {
            return Err(format!("The task must be 1 to {MAX_TASK_BYTES} bytes."));
        }
        Ok(request)
    }
}

/// The tool definition of [`RUN_SUB_AGENT`]; the engine runs its calls itself.
pub(crate) struct SubAgentTool {
    pub description: String,
}

impl SubAgentTool {
    pub fn new(policy: &SubAgentPolicy) -> SubAgentTool {
        let mut description = String::from(
            "Starts a sub-agent that works on a task on its own and returns its final answer. Several \
             calls in one message run at the same time: use them to split independent work.",
        );
        if !policy.dynamic {
            description.push_str(" Only the declared sub-agents below can be started; name one in `agent`.");
        }
        if !policy.named.is_empty() {
            description.push_str("\nDeclared sub-agents (set `agent` to one of these names):");
            for agent in &policy.named {
                description.push_str(&format!("\n- {}: {}", agent.name, agent.description));
            }
        }
        SubAgentTool { description }
    }
}

#[async_trait]
impl ToolSource for SubAgentTool {
    async fn list(&self) -> Result<Vec<Tool>, teamster_tools::Error> {
        Ok(vec![Tool {
            name: RUN_SUB_AGENT.to_owned(),
            description: self.description.clone(),
            input_schema: serde_json::json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "A short name for the sub-agent."},
                    "task": {"type": "string", "description": "The task, in full: the sub-agent sees nothing else."},
                    "instructions": {"type": "string", "description": "Instructions for the sub-agent (optional)."},
                    "model": {"type": "string", "description": "A model as provider/model (optional)."},
                    "fork": {"type": "boolean", "description": "Start from a copy of your own context (optional)."},
                    "agent": {"type": "string", "description": "A declared sub-agent to run (optional)."}
                },
                "required": ["name", "task"]
            }),
            info: ToolInfo::System { name: RUN_SUB_AGENT.to_owned() },
            annotations: ToolAnnotations { read_only: false, destructive: false, idempotent: false },
            gate: ToolGate::None,
        }])
    }

    async fn call(&self, _name: &str, _arguments: &str) -> ToolOutput {
        ToolOutput::error("run_sub_agent is run by the engine.")
    }
}

/// The `thread.created` of a sub-agent.
pub(crate) fn created_event(
    thread_id: &str,
    request: &SubAgentRequest,
    model: Option<&str>,
    parent: &AgentParent,
    forked: bool,
) -> Event {
    Event::ThreadCreated(ThreadCreated {
        id: ids::new_id("evt"),
        created_at: timestamp::now(),
        thread_id: thread_id.to_owned(),
        title: request.name.clone(),
        agent_info: AgentInfo {
            kind: "dynamic".to_owned(),
            name: request.name.clone(),
            input: request.task.clone(),
            model: model.map(str::to_owned),
        },
        parent: parent.clone(),
        forked,
    })
}

/// Whether a thread that ran `step` (the names of its last step's calls, `made` calls in all)
/// stops by `stop`, and why, in words for its parent.
pub(crate) fn stops(stop: &StopWhen, step: &[&str], made: u64) -> Option<String> {
    if let Some(tool) = stop.tool_called.as_deref().filter(|tool| step.contains(tool)) {
        return Some(format!("after calling {tool}"));
    }
    stop.tool_calls.filter(|limit| made >= *limit).map(|limit| format!("after its limit of {limit} tool calls"))
}

/// The parent's result for a sub-agent stopped by its `stop_when`: what it said, if anything,
/// and the results of its last step's calls, cut as one tool result is.
pub(crate) fn stopped_answer(output: &ModelMessage, why: &str, results: &[(String, String)]) -> String {
    let mut answer = format!("The sub-agent stopped {why}.");
    let text = output.text();
    if !text.trim().is_empty() {
        answer.push_str(&format!("\n\nIt said:\n{text}"));
    }
    for (name, result) in results {
        answer.push_str(&format!("\n\n{name} returned:\n{result}"));
    }
    crate::toolbox::within_event_limit(ToolOutput::ok(answer)).content
}

/// The `thread.done` of a sub-agent.
pub(crate) fn done_event(
    thread_id: &str,
    title: &str,
    parent: &AgentParent,
    state: ThreadState,
    metrics: teamster_protocol::TurnMetrics,
) -> Event {
    Event::ThreadDone(ThreadDone {
        id: ids::new_id("evt"),
        created_at: timestamp::now(),
        thread_id: thread_id.to_owned(),
        title: title.to_owned(),
        parent: Some(parent.clone()),
        state,
        compaction: None,
        metrics: Some(metrics),
    })
}

/// The instructions a sub-agent runs with.
pub(crate) fn instructions_for(request: &SubAgentRequest, named: Option<&NamedSubAgent>) -> String {
    request
        .instructions
        .clone()
        .or_else(|| named.and_then(|agent| agent.instructions.clone()))
        .unwrap_or_else(|| DEFAULT_INSTRUCTIONS.to_owned())
}

/// The parent's result for a sub-agent that answered.
pub(crate) fn answer_of(output: &ModelMessage) -> String {
    let text = output.text();
    if text.trim().is_empty() { "The sub-agent finished without an answer.".to_owned() } else { text }
}

/// The messages a forked sub-agent starts from: the parent's conversation before the model
/// message that started it (which ends with that message's tool calls), then the task.
pub(crate) fn forked_messages(parent: &[Message], task: &str) -> Vec<Message> {
    let cut = parent.iter().rposition(|message| matches!(message, Message::Assistant { .. })).unwrap_or(parent.len());
    let mut messages = parent[..cut].to_vec();
    messages.push(Message::user(task.to_owned()));
    messages
}

/// The call that started a sub-agent thread, found in `events`, and its request.
pub(crate) fn spawning_call<'a>(events: &'a [Event], parent: &AgentParent) -> Option<(&'a ToolCall, SubAgentRequest)> {
    events.iter().find_map(|event| match event {
        Event::ModelMessage(message) if message.thread_id == parent.thread_id => message
            .tool_calls
            .iter()
            .flatten()
            .find(|call| call.id == parent.tool_call_id)
            .and_then(|call| SubAgentRequest::parse(&call.function.arguments).ok().map(|request| (call, request))),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_checked() {
        assert!(SubAgentRequest::parse(r#"{"name":"a","task":"do it"}"#).is_ok());
        assert!(SubAgentRequest::parse(r#"{"name":"","task":"do it"}"#).unwrap_err().contains("name"));
        assert!(SubAgentRequest::parse(r#"{"name":"a","task":" "}"#).unwrap_err().contains("task"));
        assert!(SubAgentRequest::parse("{").unwrap_err().contains("Invalid arguments"));
    }

    #[test]
    fn a_fork_starts_before_the_spawning_message() {
        let parent = vec![
            Message::user("hi"),
            Message::Assistant { content: Some("a".into()), reasoning: None, thinking: Vec::new(), tool_calls: Vec::new() },
            Message::user("go"),
            Message::Assistant { content: None, reasoning: None, thinking: Vec::new(), tool_calls: Vec::new() },
        ];
        let forked = forked_messages(&parent, "sub task");
        assert_eq!(forked.len(), 4);
        assert!(matches!(&forked[2], Message::User { content, .. } if content == "go"));
        assert!(matches!(&forked[3], Message::User { content, .. } if content == "sub task"));
    }
}
