//! What the model sees of a thread, and the policy that keeps it within bounds.
//!
//! A request is the stable prefix (instructions, tool definitions, seed messages), which never
//! changes within a thread so that provider prompt caches keep hitting, followed by the
//! conversation, with large tool results previewed (see [`crate::large_results`]) and older
//! history replaced by a summary once it grows past the compaction threshold (see
//! [`crate::compaction`]).

use std::sync::Arc;

use teamster_llm::{Message, ToolDefinition};
use teamster_protocol::agent::ContextManagementConfig;

use crate::large_results::{DEFAULT_LARGE_RESULT_TOKENS, LargeResults, preview};
use crate::skills::system_prompt;
use crate::usage::{InputParts, estimate_tokens};

/// How a compaction summary message starts; it marks the message as harness framing.
pub(crate) const SUMMARY_HEADER: &str = "[Summary of the earlier conversation, written to keep the context small]\n";

/// Whether a user message is a compaction summary.
pub(crate) fn is_summary(content: &str) -> bool {
    content.starts_with(SUMMARY_HEADER)
}

/// The compaction threshold when the agent does not set one (the specs' default).
pub const DEFAULT_COMPACTION_THRESHOLD: u64 = 50_000;

/// How a thread's context is kept within bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContextPolicy {
    /// Compact older history when a call's estimated input would exceed this many tokens.
    pub compaction_threshold: Option<u64>,
    /// Preview tool results estimated above this many tokens.
    pub large_result_tokens: Option<u64>,
}

impl Default for ContextPolicy {
    fn default() -> Self {
        ContextPolicy::from_config(None)
    }
}

impl ContextPolicy {
    /// The policy an agent's `config.context_management` asks for; both mechanisms are on
    /// unless disabled.
    pub fn from_config(config: Option<&ContextManagementConfig>) -> ContextPolicy {
        let compaction = config.and_then(|config| config.compaction.as_ref());
        let large = config.and_then(|config| config.large_tool_response.as_ref());
        ContextPolicy {
            compaction_threshold: match compaction {
                Some(compaction) if !compaction.enabled => None,
                _ => Some(
                    compaction
                        .and_then(|compaction| compaction.compaction_threshold_tokens)
                        .unwrap_or(DEFAULT_COMPACTION_THRESHOLD)
                        .max(1),
                ),
            },
            large_result_tokens: match large {
                Some(toggle) if !toggle.enabled => None,
                _ => Some(DEFAULT_LARGE_RESULT_TOKENS),
            },
        }
    }
}

/// The messages of one thread, as the engine holds them: everything whole.
pub(crate) struct Conversation {
    pub instructions: Option<String>,
    /// The skills section of the system prompt (see [`crate::skills`]).
    pub skills: Option<String>,
    /// The agent's seed messages: part of the stable prefix, never compacted.
    pub seeds: Vec<Message>,
    /// The history and this turn's messages; compaction replaces a leading run of them.
    pub messages: Vec<Message>,
    pub policy: ContextPolicy,
    pub large_results: Arc<LargeResults>,
}

/// A request's messages and the estimated size of each part of its input.
pub(crate) struct Prepared {
    pub messages: Vec<Message>,
    pub parts: InputParts,
}

impl Conversation {
    /// The messages to send, and the estimated size of each part: instructions, tool
    /// definitions, harness framing (summaries, preview notes) and the rest.
    pub fn prepare(&self, definitions: &[ToolDefinition]) -> Prepared {
        let mut messages = Vec::with_capacity(self.seeds.len() + self.messages.len() + 1);
        let mut parts = InputParts { tool_definitions: definition_tokens(definitions), ..InputParts::default() };
        if let Some(content) = system_prompt(self.instructions.as_deref(), self.skills.as_deref()) {
            parts.instructions = self.instructions.as_deref().map(estimate_tokens).unwrap_or_default();
            parts.skills = self.skills.as_deref().map(estimate_tokens).unwrap_or_default();
            messages.push(Message::System { content });
        }
        messages.extend(self.seeds.iter().cloned());
        for message in &self.messages {
            let shown = self.shown(message);
            parts.harness += shown.harness_tokens;
            messages.push(shown.message);
        }
        parts.messages = messages
            .iter()
            .map(message_tokens)
            .sum::<u64>()
            .saturating_sub(parts.instructions + parts.skills + parts.harness);
        Prepared { messages, parts }
    }

    /// Records a tool result: it replaces the placeholder result of the same call (which a
    /// history rebuilt while the call waited for a human holds), or is appended.
    pub fn settle(&mut self, result: Message) {
        let Message::Tool { tool_call_id, .. } = &result else {
            self.messages.push(result);
            return;
        };
        let placeholder = self
            .messages
            .iter()
            .rposition(|message| matches!(message, Message::Tool { tool_call_id: id, .. } if id == tool_call_id));
        match placeholder {
            Some(index) => self.messages[index] = result,
            None => self.messages.push(result),
        }
    }

    /// The estimated size of `messages[from..]` as sent.
    pub fn tail_tokens(&self, from: usize) -> u64 {
        self.messages[from..].iter().map(|message| message_tokens(&self.shown(message).message)).sum()
    }

    /// The estimated size of the prefix that compaction never touches.
    pub fn prefix_tokens(&self, definitions: &[ToolDefinition]) -> u64 {
        self.instructions.as_deref().map(estimate_tokens).unwrap_or_default()
            + self.skills.as_deref().map(estimate_tokens).unwrap_or_default()
            + definition_tokens(definitions)
            + self.seeds.iter().map(message_tokens).sum::<u64>()
    }

    /// A message as the model is shown it: large tool results previewed, summaries counted as
    /// harness framing.
    pub fn shown(&self, message: &Message) -> Shown {
        match message {
            Message::Tool { tool_call_id, content } => {
                let previewed = self.policy.large_result_tokens.and_then(|threshold| {
                    preview(tool_call_id, content, threshold, self.large_results.file_path(tool_call_id))
                });
                match previewed {
                    Some((shown, note_tokens)) => {
                        self.large_results.insert(tool_call_id, content);
                        Shown {
                            message: Message::Tool { tool_call_id: tool_call_id.clone(), content: shown },
                            harness_tokens: note_tokens,
                        }
                    }
                    None => Shown { message: message.clone(), harness_tokens: 0 },
                }
            }
            Message::User { content, .. } if is_summary(content) => {
                Shown { message: message.clone(), harness_tokens: estimate_tokens(content) }
            }
            _ => Shown { message: message.clone(), harness_tokens: 0 },
        }
    }
}

pub(crate) struct Shown {
    pub message: Message,
    pub harness_tokens: u64,
}

fn definition_tokens(definitions: &[ToolDefinition]) -> u64 {
    definitions
        .iter()
        .map(|tool| {
            estimate_tokens(&tool.name) + estimate_tokens(&tool.description) + estimate_tokens(&tool.parameters.to_string())
        })
        .sum()
}

/// What an attached image is counted as: about what providers charge for a mid-sized one.
const IMAGE_TOKENS: u64 = 1_000;

/// The estimated size of a message, in tokens.
pub(crate) fn message_tokens(message: &Message) -> u64 {
    match message {
        Message::System { content } => estimate_tokens(content),
        Message::User { content, images } => estimate_tokens(content) + IMAGE_TOKENS * images.len() as u64,
        Message::Assistant { content, tool_calls, .. } => {
            estimate_tokens(content.as_deref().unwrap_or_default())
                + tool_calls
                    .iter()
                    .map(|call| estimate_tokens(&call.arguments) + estimate_tokens(&call.name) + 4)
                    .sum::<u64>()
        }
        Message::Tool { content, .. } => estimate_tokens(content),
    }
}

#[cfg(test)]
mod tests {
    use teamster_protocol::agent::{CompactionConfig, Toggle};

    use super::*;

    #[test]
    fn both_mechanisms_are_on_by_default_and_can_be_turned_off() {
        assert_eq!(
            ContextPolicy::from_config(None),
            ContextPolicy {
                compaction_threshold: Some(DEFAULT_COMPACTION_THRESHOLD),
                large_result_tokens: Some(DEFAULT_LARGE_RESULT_TOKENS)
            }
        );
        let config = ContextManagementConfig {
            compaction: Some(CompactionConfig { enabled: true, compaction_threshold_tokens: Some(900) }),
            large_tool_response: Some(Toggle { enabled: false }),
        };
        assert_eq!(
            ContextPolicy::from_config(Some(&config)),
            ContextPolicy { compaction_threshold: Some(900), large_result_tokens: None }
        );
        let off = ContextManagementConfig {
            compaction: Some(CompactionConfig { enabled: false, compaction_threshold_tokens: Some(900) }),
            large_tool_response: None,
        };
        assert_eq!(ContextPolicy::from_config(Some(&off)).compaction_threshold, None);
    }
}
