//! The conversation as the chat shows it: a session's events folded into entries (the user's
//! messages, model messages with their reasoning and tool calls, results beside their calls,
//! sub-agent threads, notes), and those entries as rows of styled text.
//!
//! Pure: the same fold serves a live stream and a history rebuilt from the session's events, so
//! a resumed session reads as it did while it ran.

use std::collections::HashMap;
use std::collections::hash_map::Entry as Slot;

use teamster_protocol::event::{Event, ModelMessage, ThreadState, ToolCall, fold};
use teamster_protocol::input::{Approval, TurnInput};
use teamster_protocol::{MAIN_THREAD_ID, TurnState};

/// The longest tool argument or result shown inline, in characters; the rest is elided.
const MAX_INLINE_CHARS: usize = 400;
/// The most lines of a tool result shown inline.
const MAX_RESULT_LINES: usize = 6;

/// How a row looks; the renderer maps each to a style.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tone {
    User,
    Assistant,
    Reasoning,
    Tool,
    ToolResult,
    Thread,
    Note,
    Error,
    Usage,
    Link,
}

/// One line of the transcript: its tone, how deep in sub-agent threads it is, and its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub tone: Tone,
    pub depth: usize,
    pub text: String,
}

/// Token and cost totals of the turns seen.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Totals {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// The summed cost, when the model's pricing is configured.
    pub cost_usd: Option<f64>,
}

/// Something shown in order.
#[derive(Clone, Debug, PartialEq)]
enum Entry {
    User(String),
    /// A model message, by id (its text grows as deltas arrive).
    Message(String),
    ThreadStarted { thread_id: String, title: String, agent: String },
    ThreadEnded { thread_id: String, title: String, error: Option<String> },
    Note { tone: Tone, text: String, thread_id: Option<String> },
}

/// The folded conversation.
#[derive(Debug, Default)]
pub struct Transcript {
    entries: Vec<Entry>,
    /// Model messages by id, folded.
    messages: HashMap<String, ModelMessage>,
    /// Tool results by call id.
    results: HashMap<String, String>,
    /// What running commands printed so far, by call id (the server streams a call's first
    /// 64 KiB at most).
    printed: HashMap<String, String>,
    /// Sub-agent nesting by thread id (the main thread is 0).
    depths: HashMap<String, usize>,
    /// Sub-agent threads' titles, which label their messages.
    titles: HashMap<String, String>,
    /// The required actions of the latest turn: what the user must answer before it goes on.
    pub pending: Vec<Event>,
    pub totals: Totals,
    /// The latest turn seen, and whether it still runs.
    pub last_turn_id: Option<String>,
    pub running: bool,
}

impl Transcript {
    /// Folds one event in.
    pub fn apply(&mut self, event: &Event) {
        match event {
            // A stream taken up again from its start repeats it: its input is shown once.
            Event::TurnCreated(created) if self.last_turn_id.as_ref() == Some(&created.turn_id) => self.running = true,
            Event::TurnCreated(created) => {
                self.last_turn_id = Some(created.turn_id.clone());
                self.running = true;
                self.pending.clear();
                for item in &created.input {
                    self.add_input(item);
                }
            }
            Event::ModelMessage(message) => match self.messages.entry(message.id.clone()) {
                Slot::Occupied(mut known) => {
                    known.insert(message.clone());
                }
                Slot::Vacant(new) => {
                    new.insert(message.clone());
                    self.entries.push(Entry::Message(message.id.clone()));
                }
            },
            Event::ModelMessageDelta(delta) => {
                let message = self.messages.entry(delta.id.clone()).or_insert_with(|| {
                    self.entries.push(Entry::Message(delta.id.clone()));
                    ModelMessage { id: delta.id.clone(), thread_id: delta.thread_id.clone(), ..ModelMessage::default() }
                });
                fold(message, delta);
            }
            Event::ToolResponse(response) => {
                self.printed.remove(&response.tool_call_id);
                self.results.insert(response.tool_call_id.clone(), response.content.clone());
            }
            Event::ShellOutput(output) if !self.results.contains_key(&output.tool_call_id) => {
                self.printed.entry(output.tool_call_id.clone()).or_default().push_str(&output.text);
            }
            Event::ThreadCreated(created) => {
                let depth = self.depth(&created.parent.thread_id) + 1;
                self.depths.insert(created.thread_id.clone(), depth);
                self.titles.insert(created.thread_id.clone(), created.title.clone());
                self.entries.push(Entry::ThreadStarted {
                    thread_id: created.thread_id.clone(),
                    title: created.title.clone(),
                    agent: created.agent_info.name.clone(),
                });
            }
            Event::ThreadDone(done) => {
                let error = match &done.state {
                    ThreadState::Done { .. } => None,
                    ThreadState::Error { error, .. } => Some(error.clone()),
                };
                self.entries.push(Entry::ThreadEnded { thread_id: done.thread_id.clone(), title: done.title.clone(), error });
            }
            Event::McpInitialize(init) => {
                for server in &init.mcp_servers {
                    if let Some(error) = &server.error {
                        self.note_in(Tone::Error, format!("MCP server {} is unavailable: {error}", server.name), Some(&init.thread_id));
                    }
                }
            }
            Event::McpAuthRequired(required) => {
                for server in &required.mcp_servers {
                    self.note_in(Tone::Link, format!("authorize {} at {}", server.name, server.auth_url), required.thread_id.as_deref());
                }
                self.pending.push(event.clone());
            }
            Event::ToolApprovalRequired(_) | Event::ToolResponseRequired(_) if !self.pending.contains(event) => {
                self.pending.push(event.clone());
            }
            Event::TurnDone(done) => {
                self.running = false;
                self.finish(&done.state);
            }
            // `sandbox.created` says nothing the calls that use it do not; events this chat does
            // not show, kinds added after it, and required actions seen already change nothing.
            _ => {}
        }
    }

    /// Adds a note of the chat's own (help, errors, command results).
    pub fn note(&mut self, tone: Tone, text: impl Into<String>) {
        self.entries.push(Entry::Note { tone, text: text.into(), thread_id: None });
    }

    /// The call `call_id` of message `message_id` (or of any message, when that one lacks it).
    pub fn call(&self, message_id: &str, call_id: &str) -> Option<&ToolCall> {
        fn in_message<'a>(message: &'a ModelMessage, call_id: &str) -> Option<&'a ToolCall> {
            message.tool_calls.iter().flatten().find(|call| call.id == call_id)
        }
        self.messages
            .get(message_id)
            .and_then(|message| in_message(message, call_id))
            .or_else(|| self.messages.values().find_map(|message| in_message(message, call_id)))
    }

    /// The title of a sub-agent thread (`None` for the main thread and threads not seen).
    pub fn thread_title(&self, thread_id: &str) -> Option<&str> {
        self.titles.get(thread_id).map(String::as_str)
    }

    /// The transcript as rows; reasoning is shown whole when `show_reasoning`, else as one
    /// dimmed line.
    pub fn rows(&self, show_reasoning: bool) -> Vec<Row> {
        let mut rows = Vec::new();
        for entry in &self.entries {
            match entry {
                Entry::User(text) => {
                    // A blank line before each message of the user's sets the turns apart.
                    if !rows.is_empty() {
                        rows.push(Row { tone: Tone::Note, depth: 0, text: String::new() });
                    }
                    push_lines(&mut rows, Tone::User, 0, "› ", text);
                }
                Entry::Message(id) => {
                    if let Some(message) = self.messages.get(id) {
                        self.message_rows(&mut rows, message, show_reasoning);
                    }
                }
                Entry::ThreadStarted { thread_id, title, agent } => {
                    let depth = self.depth(thread_id);
                    rows.push(Row { tone: Tone::Thread, depth: depth - 1, text: format!("┌ sub-agent {agent}: {title}") });
                }
                Entry::ThreadEnded { thread_id, title, error } => {
                    let depth = self.depth(thread_id).saturating_sub(1);
                    let text = match error {
                        None => format!("└ {title} done"),
                        Some(error) => format!("└ {title} failed: {error}"),
                    };
                    rows.push(Row { tone: if error.is_some() { Tone::Error } else { Tone::Thread }, depth, text });
                }
                Entry::Note { tone, text, thread_id } => {
                    let depth = thread_id.as_deref().map_or(0, |thread| self.depth(thread));
                    push_lines(&mut rows, *tone, depth, "", text);
                }
            }
        }
        rows
    }

    fn message_rows(&self, rows: &mut Vec<Row>, message: &ModelMessage, show_reasoning: bool) {
        let depth = self.depth(&message.thread_id);
        for steer in message.steering.iter().flatten() {
            push_lines(rows, Tone::User, depth, "› (steer) ", &steer.content.to_text());
        }
        if let Some(reasoning) = message.reasoning_content.as_deref().filter(|text| !text.trim().is_empty()) {
            if show_reasoning {
                push_lines(rows, Tone::Reasoning, depth, "thinking: ", reasoning.trim());
            } else {
                let words = reasoning.split_whitespace().count();
                rows.push(Row { tone: Tone::Reasoning, depth, text: format!("▸ thought for {words} words (Ctrl-O shows)") });
            }
        }
        let text = message.text();
        if !text.is_empty() {
            // Parallel sub-agents interleave: each message says whose it is.
            let label = self.titles.get(&message.thread_id).map(|title| format!("[{title}] ")).unwrap_or_default();
            push_lines(rows, Tone::Assistant, depth, &label, &text);
        }
        if let Some(refusal) = message.refusal.as_deref().filter(|text| !text.is_empty()) {
            push_lines(rows, Tone::Error, depth, "refused: ", refusal);
        }
        for call in message.tool_calls.iter().flatten() {
            let arguments = elide(call.function.arguments.trim(), MAX_INLINE_CHARS);
            rows.push(Row { tone: Tone::Tool, depth, text: format!("→ {}({arguments})", call.function.name) });
            match self.results.get(&call.id) {
                Some(result) => {
                    let shown = elide(result, MAX_INLINE_CHARS);
                    let mut lines: Vec<&str> = shown.lines().collect();
                    let more = lines.len().saturating_sub(MAX_RESULT_LINES);
                    lines.truncate(MAX_RESULT_LINES);
                    for (index, line) in lines.iter().enumerate() {
                        let prefix = if index == 0 { "← " } else { "  " };
                        rows.push(Row { tone: Tone::ToolResult, depth, text: format!("{prefix}{line}") });
                    }
                    if more > 0 {
                        rows.push(Row { tone: Tone::ToolResult, depth, text: format!("  … {more} more lines") });
                    }
                }
                None if self.is_pending(&call.id) => {
                    rows.push(Row { tone: Tone::ToolResult, depth, text: "← waiting for you".to_owned() });
                }
                // A command that runs: the last lines it printed.
                None => {
                    let lines: Vec<&str> = self.printed.get(&call.id).map(|printed| printed.lines().collect()).unwrap_or_default();
                    for line in &lines[lines.len().saturating_sub(MAX_RESULT_LINES)..] {
                        rows.push(Row { tone: Tone::ToolResult, depth, text: format!("┆ {}", elide(line, MAX_INLINE_CHARS)) });
                    }
                }
            }
        }
    }

    fn is_pending(&self, call_id: &str) -> bool {
        self.pending.iter().any(|event| match event {
            Event::ToolApprovalRequired(pending) | Event::ToolResponseRequired(pending) => {
                pending.tool_calls.iter().any(|call| call.id == call_id)
            }
            _ => false,
        })
    }

    fn depth(&self, thread_id: &str) -> usize {
        if thread_id == MAIN_THREAD_ID { 0 } else { self.depths.get(thread_id).copied().unwrap_or(1) }
    }

    fn note_in(&mut self, tone: Tone, text: String, thread_id: Option<&str>) {
        self.entries.push(Entry::Note { tone, text, thread_id: thread_id.map(str::to_owned) });
    }

    fn add_input(&mut self, item: &TurnInput) {
        match item {
            TurnInput::Message { content } => self.entries.push(Entry::User(content.to_text())),
            TurnInput::ToolApproval { tool_call_id, approval, thread_id } => {
                let name = self.call("", tool_call_id).map_or("the tool", |call| call.function.name.as_str()).to_owned();
                let text = match approval {
                    Approval::Allow { always: None } => format!("✓ you allowed {name}"),
                    Approval::Allow { always: Some(_) } => format!("✓ you always allow {name}"),
                    Approval::Deny { reason: None } => format!("✗ you denied {name}"),
                    Approval::Deny { reason: Some(reason) } => format!("✗ you denied {name}: {reason}"),
                };
                self.note_in(Tone::User, text, Some(thread_id));
            }
            // The answer shows as the call's result.
            TurnInput::ToolResponse { .. } => {}
        }
    }

    fn finish(&mut self, state: &TurnState) {
        // Only a turn done waiting for the user leaves anything to answer.
        self.pending.clear();
        let metrics = match state {
            TurnState::Running => None,
            TurnState::Done { metrics, required_actions, .. } => {
                self.pending = required_actions.clone();
                metrics.as_ref()
            }
            TurnState::Cancelled { reason, metrics, .. } => {
                let reason = serde_json::to_value(reason).ok().and_then(|value| value.as_str().map(str::to_owned)).unwrap_or_default();
                self.note(Tone::Error, format!("turn cancelled ({reason})"));
                metrics.as_ref()
            }
            TurnState::Error { message, metrics, .. } => {
                self.note(Tone::Error, format!("turn failed: {message}"));
                metrics.as_ref()
            }
        };
        // A turn that paused before any model call has nothing to count.
        if let Some(metrics) = metrics.filter(|metrics| metrics.total_input_tokens + metrics.total_output_tokens > 0) {
            self.totals.input_tokens += metrics.total_input_tokens;
            self.totals.output_tokens += metrics.total_output_tokens;
            if let Some(cost) = metrics.total_cost_in_usd {
                *self.totals.cost_usd.get_or_insert(0.0) += cost;
            }
            let cost = metrics.total_cost_in_usd.map(|cost| format!(" · ${cost:.4}")).unwrap_or_default();
            self.note(
                Tone::Usage,
                format!("{} in · {} out tokens{cost}", metrics.total_input_tokens, metrics.total_output_tokens),
            );
        }
    }
}

/// Pushes `text` line by line, the first line after `prefix`.
fn push_lines(rows: &mut Vec<Row>, tone: Tone, depth: usize, prefix: &str, text: &str) {
    for (index, line) in text.split('\n').enumerate() {
        let text = if index == 0 { format!("{prefix}{line}") } else { line.to_owned() };
        rows.push(Row { tone, depth, text });
    }
}

/// `text` cut to `max` characters, saying how much was left out.
pub fn elide(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_owned();
    }
    let kept: String = text.chars().take(max).collect();
    format!("{kept}… ({} more characters)", count - max)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Folds a script of events (one JSON object per line) and renders it; `#` lines and blank
    /// lines are skipped.
    fn render(script: &str, show_reasoning: bool) -> String {
        let mut transcript = Transcript::default();
        for line in script.lines().map(str::trim).filter(|line| !line.is_empty() && !line.starts_with('#')) {
            let event: Event = serde_json::from_str(line).unwrap_or_else(|error| panic!("{error}: {line}"));
            transcript.apply(&event);
        }
        transcript
            .rows(show_reasoning)
            .iter()
            .map(|row| format!("{:?}{}|{}", row.tone, "  ".repeat(row.depth), row.text))
            .collect::<Vec<_>>()
            .join("\n")
    }

    const CREATED: &str = r#"{"type":"turn.created","id":"e1","turn_id":"t1","previous_turn_id":null,"input":[{"type":"user.message","content":"hi"}],"state":{"status":"running"},"created_by":{"subject_id":"local","subject_type":"user","subject_slug":"local"},"created_at":"2026-01-01T00:00:00Z","thread_id":null}"#;

    #[test]
    fn events_fold_into_the_transcript() {
        let cases: &[(&str, String, bool, &str)] = &[
            (
                "streamed text and collapsed reasoning",
                format!(
                    "{CREATED}
                    {{\"type\":\"model.message\",\"id\":\"m1\",\"thread_id\":\"main\",\"created_at\":\"x\"}}
                    {{\"type\":\"model.message.delta\",\"id\":\"m1\",\"thread_id\":\"main\",\"reasoning_content\":\"Let me think.\"}}
                    {{\"type\":\"model.message.delta\",\"id\":\"m1\",\"thread_id\":\"main\",\"content\":\"Hello \"}}
                    {{\"type\":\"model.message.delta\",\"id\":\"m1\",\"thread_id\":\"main\",\"content\":\"there\\nsecond line\"}}"
                ),
                false,
                "User|› hi\nReasoning|▸ thought for 3 words (Ctrl-O shows)\nAssistant|Hello there\nAssistant|second line",
            ),
            (
                "reasoning shown",
                format!(
                    "{CREATED}
                    {{\"type\":\"model.message\",\"id\":\"m1\",\"thread_id\":\"main\",\"created_at\":\"x\",\"reasoning_content\":\"Hmm.\",\"content\":\"Yes\"}}"
                ),
                true,
                "User|› hi\nReasoning|thinking: Hmm.\nAssistant|Yes",
            ),
            (
                "a tool call with its result inline, then usage",
                format!(
                    "{CREATED}
                    {{\"type\":\"model.message\",\"id\":\"m1\",\"thread_id\":\"main\",\"created_at\":\"x\"}}
                    {{\"type\":\"model.message.delta\",\"id\":\"m1\",\"thread_id\":\"main\",\"tool_calls\":[{{\"index\":0,\"id\":\"c1\",\"function\":{{\"name\":\"echo\",\"arguments\":\"{{\\\"te\"}},\"tool_info\":{{\"type\":\"truefoundry-system\",\"name\":\"echo\"}}}}]}}
                    {{\"type\":\"model.message.delta\",\"id\":\"m1\",\"thread_id\":\"main\",\"tool_calls\":[{{\"index\":0,\"function\":{{\"arguments\":\"xt\\\":1}}\"}}}}]}}
                    {{\"type\":\"tool.response\",\"id\":\"r1\",\"thread_id\":\"main\",\"created_at\":\"x\",\"tool_call_id\":\"c1\",\"content\":\"one\\ntwo\"}}
                    {{\"type\":\"model.message\",\"id\":\"m2\",\"thread_id\":\"main\",\"created_at\":\"x\",\"content\":\"Done.\"}}
                    {{\"type\":\"turn.done\",\"id\":\"e9\",\"created_at\":\"x\",\"thread_id\":null,\"state\":{{\"status\":\"done\",\"output\":null,\"required_actions\":[],\"completed_at\":\"x\",\"metrics\":{{\"total_input_tokens\":10,\"total_output_tokens\":4,\"total_tokens\":14,\"total_cost_in_usd\":0.5}}}}}}"
                ),
                false,
                "User|› hi\nTool|→ echo({\"text\":1})\nToolResult|← one\nToolResult|  two\nAssistant|Done.\nUsage|10 in · 4 out tokens · $0.5000",
            ),
            (
                "a sub-agent thread is nested",
                format!(
                    "{CREATED}
                    {{\"type\":\"thread.created\",\"id\":\"h1\",\"created_at\":\"x\",\"thread_id\":\"th1\",\"title\":\"left\",\"agent_info\":{{\"name\":\"helper\",\"input\":\"go\"}},\"parent\":{{\"thread_id\":\"main\",\"tool_call_id\":\"c0\"}}}}
                    {{\"type\":\"model.message\",\"id\":\"m3\",\"thread_id\":\"th1\",\"created_at\":\"x\",\"content\":\"inside\"}}
                    {{\"type\":\"thread.done\",\"id\":\"h2\",\"created_at\":\"x\",\"thread_id\":\"th1\",\"title\":\"left\",\"state\":{{\"status\":\"done\",\"output\":{{\"id\":\"m3\",\"thread_id\":\"th1\",\"created_at\":\"x\"}}}}}}"
                ),
                false,
                "User|› hi\nThread|┌ sub-agent helper: left\nAssistant  |[left] inside\nThread|└ left done",
            ),
            (
                "a question waits, and the answer resumes it",
                format!(
                    "{CREATED}
                    {{\"type\":\"model.message\",\"id\":\"m1\",\"thread_id\":\"main\",\"created_at\":\"x\",\"tool_calls\":[{{\"id\":\"c1\",\"function\":{{\"name\":\"ask_user_question\",\"arguments\":\"{{}}\"}},\"tool_info\":{{\"type\":\"truefoundry-system\",\"name\":\"ask_user_question\"}}}}]}}
                    {{\"type\":\"tool.response_required\",\"id\":\"q1\",\"created_at\":\"x\",\"thread_id\":\"main\",\"tool_calls\":[{{\"id\":\"c1\",\"source_event_id\":\"m1\"}}]}}
                    {{\"type\":\"turn.done\",\"id\":\"e9\",\"created_at\":\"x\",\"thread_id\":null,\"state\":{{\"status\":\"done\",\"output\":null,\"required_actions\":[{{\"type\":\"tool.response_required\",\"id\":\"q1\",\"created_at\":\"x\",\"thread_id\":\"main\",\"tool_calls\":[{{\"id\":\"c1\",\"source_event_id\":\"m1\"}}]}}],\"completed_at\":\"x\"}}}}"
                ),
                false,
                "User|› hi\nTool|→ ask_user_question({})\nToolResult|← waiting for you",
            ),
            (
                "an approval answer, a cancelled turn and an MCP link",
                "{\"type\":\"turn.created\",\"id\":\"e1\",\"turn_id\":\"t2\",\"previous_turn_id\":\"t1\",\"input\":[{\"type\":\"user.tool_approval\",\"thread_id\":\"main\",\"tool_call_id\":\"c9\",\"approval\":{\"status\":\"deny\",\"reason\":\"no\"}}],\"state\":{\"status\":\"running\"},\"created_by\":{\"subject_id\":\"l\",\"subject_type\":\"user\",\"subject_slug\":\"l\"},\"created_at\":\"x\",\"thread_id\":null}
                    {\"type\":\"mcp.auth_required\",\"id\":\"a1\",\"created_at\":\"x\",\"thread_id\":\"main\",\"mcp_servers\":[{\"id\":\"s\",\"name\":\"docs\",\"auth_url\":\"http://auth/x\"}]}
                    {\"type\":\"turn.done\",\"id\":\"e9\",\"created_at\":\"x\",\"thread_id\":null,\"state\":{\"status\":\"cancelled\",\"reason\":\"client-cancelled\",\"completed_at\":\"x\"}}"
                    .to_owned(),
                false,
                "User|✗ you denied the tool: no\nLink|authorize docs at http://auth/x\nError|turn cancelled (client-cancelled)",
            ),
            (
                "turns are set apart, and steering shows where the model took it",
                format!(
                    "{CREATED}
                    {{\"type\":\"model.message\",\"id\":\"m1\",\"thread_id\":\"main\",\"created_at\":\"x\",\"content\":\"One\"}}
                    {{\"type\":\"model.message\",\"id\":\"m2\",\"thread_id\":\"main\",\"created_at\":\"x\",\"content\":\"Two\",\"steering\":[{{\"id\":\"q\",\"content\":\"shorter\",\"created_at\":\"x\"}}]}}
                    {}",
                    CREATED.replace("\"t1\"", "\"t2\"").replace("hi", "again")
                ),
                false,
                "User|› hi\nAssistant|One\nUser|› (steer) shorter\nAssistant|Two\nNote|\nUser|› again",
            ),
            (
                "a stream taken up again from its start shows its input once and its text whole",
                format!(
                    "{CREATED}
                    {{\"type\":\"model.message\",\"id\":\"m1\",\"thread_id\":\"main\",\"created_at\":\"x\"}}
                    {{\"type\":\"model.message.delta\",\"id\":\"m1\",\"thread_id\":\"main\",\"content\":\"Hel\"}}
                    {CREATED}
                    {{\"type\":\"model.message\",\"id\":\"m1\",\"thread_id\":\"main\",\"created_at\":\"x\"}}
                    {{\"type\":\"model.message.delta\",\"id\":\"m1\",\"thread_id\":\"main\",\"content\":\"Hel\"}}
                    {{\"type\":\"model.message.delta\",\"id\":\"m1\",\"thread_id\":\"main\",\"content\":\"lo\"}}"
                ),
                false,
                "User|› hi\nAssistant|Hello",
            ),
        ];
        for (name, script, show_reasoning, expected) in cases {
            assert_eq!(render(script, *show_reasoning), *expected, "{name}");
        }
    }

    #[test]
    fn long_text_is_elided_saying_how_much() {
        assert_eq!(elide("abcdef", 4), "abcd… (2 more characters)");
        assert_eq!(elide("abc", 4), "abc");
    }
}
