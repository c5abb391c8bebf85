//! The conversation a run takes and gives back: [`AgentItem`]s made of [`Part`]s, the
//! [`AgentRequest`] and [`RunSessionRequest`] that carry them in, the [`AgentResponse`] that
//! carries them out, and their translation to and from the engine's messages and events.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use teamster_llm::{AssistantToolCall, Message};
use teamster_protocol::{Event, MAIN_THREAD_ID};

use crate::Error;

/// One item of a conversation: a user message, an assistant message (text, reasoning and tool
/// calls), or the result of a tool call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentItem {
    /// What the user said. Only [`Part::Text`] parts are accepted.
    User {
        /// The message's parts.
        content: Vec<Part>,
    },
    /// What the model answered: [`Part::Reasoning`], [`Part::Text`] and [`Part::ToolCall`].
    Assistant {
        /// The message's parts, in the order the model wrote them.
        content: Vec<Part>,
    },
    /// What a tool call returned to the model.
    ToolResult {
        /// The id of the [`Part::ToolCall`] it answers.
        call_id: String,
        /// The tool that was called.
        tool_name: String,
        /// What the model was told: the tool's output, or what went wrong.
        output: String,
    },
}

impl AgentItem {
    /// A user message of one text part.
    pub fn user(text: impl Into<String>) -> AgentItem {
        AgentItem::User { content: vec![Part::Text { text: text.into() }] }
    }

    /// An assistant message of one text part (to replay an earlier answer).
    pub fn assistant(text: impl Into<String>) -> AgentItem {
        AgentItem::Assistant { content: vec![Part::Text { text: text.into() }] }
    }

    /// The text parts of the item, joined (empty for a tool result).
    pub fn text(&self) -> String {
        match self {
            AgentItem::User { content } | AgentItem::Assistant { content } => text_of(content),
            AgentItem::ToolResult { .. } => String::new(),
        }
    }
}

/// A piece of a message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Part {
    /// Text, from the user or the model.
    Text {
        /// The text.
        text: String,
    },
    /// The model's reasoning, for models that show it.
    Reasoning {
        /// The reasoning text.
        text: String,
    },
    /// A call the model made.
    ToolCall {
        /// The call's id, which its [`AgentItem::ToolResult`] names.
        call_id: String,
        /// The tool called.
        tool_name: String,
        /// The JSON text the model wrote as the arguments.
        arguments: String,
    },
}

/// The text parts of `parts`, joined.
pub(crate) fn text_of(parts: &[Part]) -> String {
    parts
        .iter()
        .filter_map(|part| match part {
            Part::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// A run of an [`Agent`](crate::Agent): the conversation so far, ending with the new input, and
/// the context of this caller.
#[derive(Clone, Debug)]
pub struct AgentRequest<Ctx> {
    /// The conversation, oldest first; a run never remembers earlier inputs.
    pub input: Vec<AgentItem>,
    /// The value instructions, toolkits and tools see for this run.
    pub context: Ctx,
}

/// A run on a [`RunSession`](crate::RunSession), whose context is already bound.
#[derive(Clone, Debug, Default)]
pub struct RunSessionRequest {
    /// The conversation, oldest first; a run never remembers earlier inputs.
    pub input: Vec<AgentItem>,
}

impl From<Vec<AgentItem>> for RunSessionRequest {
    fn from(input: Vec<AgentItem>) -> RunSessionRequest {
        RunSessionRequest { input }
    }
}

/// What a run produced.
///
/// ```
/// use teamster::{Agent, AgentItem, AgentRequest, Model, Part};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let agent: Agent<()> = Agent::builder("echo", Model::offline()).build()?;
/// let response = agent.run(AgentRequest { input: vec![AgentItem::user("Hi")], context: () }).await?;
/// // No tools were called: the output is the one assistant message, whose content is the answer.
/// assert_eq!(response.output, vec![AgentItem::Assistant { content: response.content.clone() }]);
/// assert!(matches!(&response.content[..], [Part::Text { .. }]));
/// assert!(response.usage.output_tokens > 0);
/// # Ok::<(), teamster::Error>(())
/// # }).unwrap();
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentResponse {
    /// Every item the run added to the conversation, in order: assistant messages (with their
    /// tool calls) and tool results. Append them to the conversation to go on.
    pub output: Vec<AgentItem>,
    /// The content of the last assistant message: the answer.
    pub content: Vec<Part>,
    /// Tokens used over every model call of the run.
    pub usage: Usage,
}

impl AgentResponse {
    /// The answer's text.
    pub fn text(&self) -> String {
        text_of(&self.content)
    }
}

/// Tokens a run used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens sent to the model, summed over the run's model calls.
    pub input_tokens: u64,
    /// Tokens the model wrote, summed over the run's model calls.
    pub output_tokens: u64,
}

/// The engine's messages for a conversation.
pub(crate) fn to_messages(items: &[AgentItem]) -> Result<Vec<Message>, Error> {
    if !items.iter().any(|item| matches!(item, AgentItem::User { .. })) {
        return Err(Error::InvalidInput("the input has no user message".to_owned()));
    }
    items
        .iter()
        .map(|item| match item {
            AgentItem::User { content } => {
                if let Some(part) = content.iter().find(|part| !matches!(part, Part::Text { .. })) {
                    return Err(Error::InvalidInput(format!("a user message may hold only text parts, not {part:?}")));
                }
                Ok(Message::user(text_of(content)))
            }
            AgentItem::Assistant { content } => {
                let text = text_of(content);
                let reasoning: String = content
                    .iter()
                    .filter_map(|part| match part {
                        Part::Reasoning { text } => Some(text.as_str()),
                        _ => None,
                    })
                    .collect();
                let tool_calls = content
                    .iter()
                    .filter_map(|part| match part {
                        Part::ToolCall { call_id, tool_name, arguments } => Some(AssistantToolCall {
                            id: call_id.clone(),
                            name: tool_name.clone(),
                            arguments: arguments.clone(),
                        }),
                        _ => None,
                    })
                    .collect();
                Ok(Message::Assistant {
                    content: (!text.is_empty()).then_some(text),
                    reasoning: (!reasoning.is_empty()).then_some(reasoning),
                    thinking: Vec::new(),
                    tool_calls,
                })
            }
            AgentItem::ToolResult { call_id, output, .. } => {
                Ok(Message::Tool { tool_call_id: call_id.clone(), content: output.clone() })
            }
        })
        .collect()
}

/// Folds the content events a run records into conversation items.
#[derive(Default)]
pub(crate) struct ItemFolder {
    /// Tool names by call id, to name each result.
    tool_names: HashMap<String, String>,
}

impl ItemFolder {
    /// The item a recorded event adds to the conversation, if it adds one: only the main
    /// thread's model messages and tool results do.
    pub(crate) fn item(&mut self, event: &Event) -> Option<AgentItem> {
        match event {
            Event::ModelMessage(message) if message.thread_id == MAIN_THREAD_ID => {
                let mut content = Vec::new();
                if let Some(reasoning) = message.reasoning_content.as_ref().filter(|text| !text.is_empty()) {
                    content.push(Part::Reasoning { text: reasoning.clone() });
                }
                let text = message.text();
                if !text.is_empty() {
                    content.push(Part::Text { text });
                }
                for call in message.tool_calls.iter().flatten() {
                    self.tool_names.insert(call.id.clone(), call.function.name.clone());
                    content.push(Part::ToolCall {
                        call_id: call.id.clone(),
                        tool_name: call.function.name.clone(),
                        arguments: call.function.arguments.clone(),
                    });
                }
                Some(AgentItem::Assistant { content })
            }
            Event::ToolResponse(response) if response.thread_id == MAIN_THREAD_ID => Some(AgentItem::ToolResult {
                call_id: response.tool_call_id.clone(),
                tool_name: self.tool_names.get(&response.tool_call_id).cloned().unwrap_or_default(),
                output: response.content.clone(),
            }),
            _ => None,
        }
    }
}
