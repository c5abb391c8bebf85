//! Compaction: when a call's input would exceed the threshold, older history is summarised by
//! the model and replaced by the summary.
//!
//! The summary is written on a thread of its own (`thread.created`, the summarising model
//! calls, `thread.done` carrying a [`Compaction`] marker), so clients see it happen and its
//! usage counts in the turn's metrics. The marker says how many leading messages the summary
//! replaced, which is all [`crate::history_from_events`] needs to rebuild the same context.
//! The instructions, tool definitions and seed messages are never touched, so the request
//! prefix stays byte-identical; the most recent messages (at least the last model message and
//! its tool results) stay verbatim.

use teamster_llm::{Message, ModelClient, ModelRequest, ToolDefinition};
use teamster_protocol::agent::ModelParams;
use teamster_protocol::settings::ModelPricing;
use teamster_protocol::event::{AgentInfo, AgentParent, Compaction, ThreadCreated, ThreadDone, ThreadState};
use teamster_protocol::{Event, ids, timestamp};
use tokio_util::sync::CancellationToken;

use crate::context::{Conversation, SUMMARY_HEADER, is_summary, message_tokens};
use crate::sink::EventSink;
use crate::step::{StepEnd, model_step};
use crate::toolbox::ToolBox;
use crate::usage::{InputParts, Meter, estimate_tokens};

/// The title of a compaction thread.
pub const COMPACTION_TITLE: &str = "Context compaction";
/// The instructions of the summarising call.
const SUMMARY_INSTRUCTIONS: &str = "You summarize conversations between a user and an AI agent so that the agent \
can continue without the original messages. Keep every fact, name, number, decision, open question and \
unfinished task; keep what tools were called and what they returned when it still matters. Write plain, \
dense prose or bullet points. Answer with the summary only.";

/// Replaces the first `replaced` messages with the summary.
pub(crate) fn apply(messages: &mut Vec<Message>, replaced: usize, summary: &str) {
    let replaced = replaced.min(messages.len());
    messages.splice(..replaced, [Message::user(format!("{SUMMARY_HEADER}{summary}"))]);
}

/// Why compaction could not finish.
pub(crate) enum CompactionError {
    Interrupted,
    Failed(String),
}

/// The model and place that compaction writes with.
pub(crate) struct Summarizer<'a> {
    pub model: &'a dyn ModelClient,
    pub model_id: &'a str,
    pub pricing: Option<&'a ModelPricing>,
    pub parent_thread: &'a str,
    pub sink: &'a dyn EventSink,
    pub cancel: &'a CancellationToken,
}

/// Compacts the conversation so that the next request fits under `threshold` tokens where
/// that is possible. Returns `Ok(false)` when there is nothing that could be summarised.
pub(crate) async fn compact(
    conversation: &mut Conversation,
    definitions: &[ToolDefinition],
    threshold: u64,
    summarizer: &Summarizer<'_>,
    metrics: &mut Meter<'_>,
) -> Result<bool, CompactionError> {
    let available = threshold.saturating_sub(conversation.prefix_tokens(definitions));
    let Some(cut) = choose_cut(conversation, available / 2) else {
        tracing::warn!(threshold, "context over the compaction threshold, but nothing can be summarised");
        return Ok(false);
    };
    let older: Vec<String> = conversation.messages[..cut]
        .iter()
        .map(|message| transcript_line(&conversation.shown(message).message))
        .collect();
    let replaced_tokens: u64 = conversation.messages[..cut].iter().map(message_tokens).sum();

    let thread_id = ids::new_id("thread");
    let parent = AgentParent {
        thread_id: summarizer.parent_thread.to_owned(),
        tool_call_id: ids::new_id("compaction"),
    };
    summarizer.sink.emit_content(&Event::ThreadCreated(ThreadCreated {
        id: ids::new_id("evt"),
        created_at: timestamp::now(),
        thread_id: thread_id.clone(),
        title: COMPACTION_TITLE.to_owned(),
        agent_info: AgentInfo {
            kind: "dynamic".to_owned(),
            name: "context-compaction".to_owned(),
            input: format!("Summarize the {cut} oldest messages (about {replaced_tokens} tokens)."),
            model: None,
        },
        parent: parent.clone(),
        forked: false,
    }));

    // Each summarising call must itself fit under the threshold: the older messages go in
    // chunks, each summarised together with the summary so far.
    let summary_budget = (threshold / 4).clamp(256, 4096);
    let chunk_budget = (threshold * 6 / 10).saturating_sub(summary_budget).max(64);
    let mut summary = String::new();
    let mut last_message = None;
    let mut error = None;
    for chunk in chunks(&older, chunk_budget) {
        let mut input = String::new();
        if !summary.is_empty() {
            input.push_str("The summary so far:\n");
            input.push_str(&summary);
            input.push_str("\n\nThe conversation continues:\n");
        } else {
            input.push_str("The conversation to summarize:\n");
        }
        input.push_str(&chunk);
        let request = ModelRequest {
            model: summarizer.model_id.to_owned(),
            messages: vec![
                Message::System { content: SUMMARY_INSTRUCTIONS.to_owned() },
                Message::user(input),
            ],
            tools: Vec::new(),
            params: ModelParams { max_tokens: Some(summary_budget), ..ModelParams::default() },
            response_format: None,
            // A summary is read by the model, not by a person.
            sub_agent: true,
        };
        let parts = InputParts { harness: estimate_tokens(SUMMARY_INSTRUCTIONS), ..InputParts::default() };
        let step =
            model_step(summarizer.model, request, (&thread_id, None), &ToolBox::default(), parts, summarizer.sink, summarizer.cancel)
                .await;
        if let Some(usage) = &step.message.usage {
            metrics.add(usage, summarizer.pricing);
        }
        match step.end {
            StepEnd::Complete => {
                summary = step.message.text();
                last_message = Some(step.message);
            }
            StepEnd::Interrupted => {
                error = Some(CompactionError::Interrupted);
                last_message = Some(step.message);
                break;
            }
            StepEnd::Failed(failure) => {
                error = Some(CompactionError::Failed(format!("The context compaction call failed: {failure}")));
                last_message = Some(step.message);
                break;
            }
        }
    }
    if error.is_none() && summary.trim().is_empty() {
        error = Some(CompactionError::Failed("The context compaction call returned an empty summary.".to_owned()));
    }

    let (state, compaction) = match (&error, last_message) {
        (None, Some(output)) => (ThreadState::Done { output: Box::new(output) }, Some(Compaction {
            replaced_messages: cut as u64,
            replaced_tokens,
        })),
        (error, output) => (
            ThreadState::Error {
                error: match error {
                    Some(CompactionError::Failed(message)) => message.clone(),
                    _ => "The context compaction was interrupted.".to_owned(),
                },
                output: output.map(Box::new),
            },
            None,
        ),
    };
    summarizer.sink.emit_content(&Event::ThreadDone(ThreadDone {
        id: ids::new_id("evt"),
        created_at: timestamp::now(),
        thread_id,
        title: COMPACTION_TITLE.to_owned(),
        parent: Some(parent),
        state,
        compaction,
        metrics: None,
    }));
    match error {
        Some(error) => Err(error),
        None => {
            apply(&mut conversation.messages, cut, &summary);
            Ok(true)
        }
    }
}

/// Where to cut: the earliest message boundary after which the rest fits in `tail_budget`
/// tokens, or else the latest boundary (keeping only the last model message and its tool
/// results). A boundary is a user or model message: tool results stay with their call.
fn choose_cut(conversation: &Conversation, tail_budget: u64) -> Option<usize> {
    let messages = &conversation.messages;
    let boundaries: Vec<usize> = (1..messages.len()).filter(|&index| !matches!(messages[index], Message::Tool { .. })).collect();
    // A lone summary at the front gains nothing from being summarised again.
    let useful = |cut: usize| !(cut == 1 && matches!(&messages[0], Message::User { content, .. } if is_summary(content)));
    boundaries
        .iter()
        .copied()
        .filter(|&cut| useful(cut))
        .find(|&cut| conversation.tail_tokens(cut) <= tail_budget)
        .or_else(|| boundaries.last().copied().filter(|&cut| useful(cut)))
}

/// One message as a line of the transcript the summariser reads.
fn transcript_line(message: &Message) -> String {
    match message {
        Message::System { content } => format!("System: {content}"),
        Message::User { content, .. } => format!("User: {content}"),
        Message::Assistant { content, tool_calls, .. } => {
            let mut line = format!("Agent: {}", content.as_deref().unwrap_or_default());
            for call in tool_calls {
                line.push_str(&format!("\nAgent called tool {} with {}", call.name, call.arguments));
            }
            line
        }
        Message::Tool { tool_call_id, content } => format!("Tool result ({tool_call_id}): {content}"),
    }
}

/// Groups transcript lines into chunks of at most `budget` tokens; a longer line is cut.
fn chunks(lines: &[String], budget: u64) -> Vec<String> {
    let max_bytes = (budget.max(16) * 4) as usize;
    let mut chunks = Vec::new();
    let mut current = String::new();
    for line in lines {
        let line = truncate(line, max_bytes);
        if !current.is_empty() && current.len() + line.len() + 1 > max_bytes {
            chunks.push(std::mem::take(&mut current));
        }
        if !current.is_empty() {
            current.push('\n');
        }
        current.push_str(&line);
    }
    if !current.is_empty() {
        chunks.push(current);
    }
    chunks
}

/// `text` cut to at most `max_bytes` on a character boundary, saying that it was cut.
fn truncate(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_owned();
    }
    const CUT: &str = " [...]";
    let mut end = max_bytes.saturating_sub(CUT.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{CUT}", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_respect_the_budget_and_cut_long_lines() {
        let lines: Vec<String> = vec!["a".repeat(30), "b".repeat(30), "é".repeat(200)];
        let chunks = chunks(&lines, 16);
        assert!(chunks.iter().all(|chunk| chunk.len() <= 64), "{chunks:?}");
        assert_eq!(chunks.len(), 2);
        assert!(chunks[1].ends_with(" [...]"));
    }

    #[test]
    fn a_summary_replaces_the_leading_messages() {
        let mut messages = vec![
            Message::user("one"),
            Message::user("two"),
            Message::user("three"),
        ];
        apply(&mut messages, 2, "S");
        assert_eq!(messages.len(), 2);
        assert!(matches!(&messages[0], Message::User { content, .. } if is_summary(content) && content.ends_with('S')));
        assert!(matches!(&messages[1], Message::User { content, .. } if content == "three"));
    }
}
