//! The offline demo model (`offline/echo`): what a new user without an API key talks to.
//!
//! It is not a language model and says so. It streams, word by word, a short reply that echoes
//! the user's last message. Its first reply in a conversation introduces it and says, once, how
//! to use a real model; a sub-agent's answers (read by another agent, not a person) never carry
//! that hint. It calls a tool the agent offers when the user names it (`look up
//! order_status {"order_id": "A1"}`: the JSON object after the name is the arguments), or, when
//! the user asks for the time or the date, the `get_current_datetime` tool; then it answers with
//! the tool's result. So the whole agent loop (model call, tool call, second model call), with
//! MCP tools and approvals, can be tried without a provider. Its usage figures are estimates (about four characters per input token, one token
//! per streamed word), so that usage and cost displays have something plausible to show.

use futures_util::stream;
use teamster_protocol::event::FinishReason;

use crate::{Message, ModelClient, ModelEvent, ModelRequest, ModelStream, TokenUsage};

/// The provider name of the offline demo model.
pub const OFFLINE_PROVIDER: &str = "offline";
/// The model name (and model id) of the offline demo model.
pub const OFFLINE_MODEL: &str = "echo";
/// The tool the offline model calls when asked for the time or the date.
const DATETIME_TOOL: &str = "get_current_datetime";

/// How to get a real model: said once per conversation, in the first reply.
const SETUP_HINT: &str = "I am Teamster's offline demo model, not a real LLM. To use a real model, set \
    OPENAI_API_KEY and restart Teamster, or add a provider in Settings.";
/// The most characters of the user's message a reply echoes.
const MAX_ECHO_CHARS: usize = 200;

/// Teamster's offline demo model: deterministic, instant, and honest about what it is.
#[derive(Clone, Debug, Default)]
pub struct OfflineModel;

impl OfflineModel {
    pub fn new() -> Self {
        OfflineModel
    }
}

impl ModelClient for OfflineModel {
    fn stream(&self, request: ModelRequest) -> ModelStream {
        let events = answer(&request);
        Box::pin(stream::iter(events.into_iter().map(Ok)))
    }
}

/// The whole answer to a request, as the events it streams.
fn answer(request: &ModelRequest) -> Vec<ModelEvent> {
    let input_tokens = estimate_input_tokens(&request.messages);
    let last_user = request.messages.iter().rev().find_map(|message| match message {
        Message::User { content, .. } => Some(content.as_str()),
        _ => None,
    });

    // After a tool call, the answer is the tool's result.
    if let Some(Message::Tool { tool_call_id, content }) = request.messages.last() {
        let tool_name = tool_name_of(&request.messages, tool_call_id).unwrap_or("the tool");
        let reply = if tool_name == DATETIME_TOOL {
            format!("The {DATETIME_TOOL} tool says it is {}.", content.trim())
        } else {
            format!("The tool {tool_name} answered: {}", content.trim())
        };
        return stream_words(&with_hint(reply, request), input_tokens);
    }

    // A fresh request (the last message is the user's) may ask for a tool.
    let fresh = matches!(request.messages.last(), Some(Message::User { .. }));
    let offers_datetime = request.tools.iter().any(|tool| tool.name == DATETIME_TOOL);
    let wanted = last_user.filter(|_| fresh).and_then(|text| {
        named_tool(text, request).or_else(|| {
            (offers_datetime && asks_for_time(text)).then(|| (DATETIME_TOOL.to_owned(), "{}".to_owned()))
        })
    });
    if let Some((name, arguments)) = wanted {
        let call_number = request
            .messages
            .iter()
            .filter_map(|message| match message {
                Message::Assistant { tool_calls, .. } => Some(tool_calls.len()),
                _ => None,
            })
            .sum::<usize>()
            + 1;
        return vec![
            ModelEvent::ToolCall {
                index: 0,
                id: Some(format!("offline_call_{call_number}")),
                name: Some(name),
                arguments,
            },
            ModelEvent::Finish(FinishReason::ToolCalls),
            ModelEvent::Usage(TokenUsage { input_tokens, output_tokens: 1, ..TokenUsage::default() }),
        ];
    }

    let reply = match last_user.map(str::trim).filter(|text| !text.is_empty()) {
        Some(text) => format!("You said: \"{}\"", shortened(text)),
        None => "Hello!".to_owned(),
    };
    stream_words(&with_hint(reply, request), input_tokens)
}

/// `reply`, followed by [`SETUP_HINT`] when a person reads it (not a sub-agent's answer) and no
/// earlier reply of the conversation gave the hint.
fn with_hint(reply: String, request: &ModelRequest) -> String {
    let hinted = request.messages.iter().any(|message| {
        matches!(message, Message::Assistant { content: Some(content), .. } if content.contains(SETUP_HINT))
    });
    match request.sub_agent || hinted {
        true => reply,
        false => format!("{reply}\n\n{SETUP_HINT}"),
    }
}

/// `text` cut to [`MAX_ECHO_CHARS`] characters, with an ellipsis when cut.
fn shortened(text: &str) -> String {
    match text.char_indices().nth(MAX_ECHO_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// Streams `reply` one word (with the whitespace after it) per event, then finishes.
fn stream_words(reply: &str, input_tokens: u64) -> Vec<ModelEvent> {
    let mut events: Vec<ModelEvent> =
        reply.split_inclusive(' ').map(|word| ModelEvent::Text(word.to_owned())).collect();
    let output_tokens = events.len() as u64;
    events.push(ModelEvent::Finish(FinishReason::Stop));
    events.push(ModelEvent::Usage(TokenUsage { input_tokens, output_tokens, ..TokenUsage::default() }));
    events
}

/// About one token per four characters of every message, and at least one.
fn estimate_input_tokens(messages: &[Message]) -> u64 {
    let chars: usize = messages
        .iter()
        .map(|message| match message {
            Message::System { content } | Message::User { content, .. } | Message::Tool { content, .. } => {
                content.chars().count()
            }
            Message::Assistant { content, tool_calls, .. } => {
                content.as_deref().map_or(0, |content| content.chars().count())
                    + tool_calls.iter().map(|call| call.name.len() + call.arguments.chars().count()).sum::<usize>()
            }
        })
        .sum();
    (chars as u64 / 4).max(1)
}

/// The name of the tool the assistant called with `tool_call_id`.
fn tool_name_of<'a>(messages: &'a [Message], tool_call_id: &str) -> Option<&'a str> {
    messages.iter().rev().find_map(|message| match message {
        Message::Assistant { tool_calls, .. } => {
            tool_calls.iter().find(|call| call.id == tool_call_id).map(|call| call.name.as_str())
        }
        _ => None,
    })
}

/// The first offered tool the text names as a whole word, with the JSON object right after the
/// name as its arguments (`{}` when none follows or it does not parse).
fn named_tool(text: &str, request: &ModelRequest) -> Option<(String, String)> {
    let is_name_char = |c: char| c.is_alphanumeric() || matches!(c, '_' | '-' | '.');
    let mut start = None;
    for (index, c) in text.char_indices().chain([(text.len(), ' ')]) {
        match (is_name_char(c), start) {
            (true, None) => start = Some(index),
            (false, Some(from)) => {
                start = None;
                // A sentence's full stop is not part of the name.
                let word = text[from..index].trim_end_matches('.');
                if request.tools.iter().any(|tool| tool.name == word) {
                    return Some((word.to_owned(), arguments_after(&text[index..])));
                }
            }
            _ => {}
        }
    }
    None
}

/// The JSON object at the start of `rest` (after spaces), re-serialized, or `{}`.
fn arguments_after(rest: &str) -> String {
    let rest = rest.trim_start();
    if !rest.starts_with('{') {
        return "{}".to_owned();
    }
    let mut objects = serde_json::Deserializer::from_str(rest).into_iter::<serde_json::Map<String, serde_json::Value>>();
    match objects.next() {
        Some(Ok(object)) => serde_json::Value::Object(object).to_string(),
        _ => "{}".to_owned(),
    }
}

/// Whether a message asks for the time or the date ("what time is it?", "today's date").
fn asks_for_time(text: &str) -> bool {
    let lower = text.to_lowercase();
    lower.contains("what day")
        || lower
            .split(|c: char| !c.is_alphanumeric())
            .any(|word| matches!(word, "time" | "date" | "datetime" | "clock"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AssistantToolCall, ToolDefinition};

    fn text_of(events: &[ModelEvent]) -> String {
        events
            .iter()
            .filter_map(|event| match event {
                ModelEvent::Text(text) => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    fn datetime_tool() -> ToolDefinition {
        ToolDefinition {
            name: DATETIME_TOOL.into(),
            description: "now".into(),
            parameters: serde_json::json!({"type": "object"}),
        }
    }

    #[test]
    fn echoes_the_last_user_message_word_by_word_with_setup_hint() {
        let request = ModelRequest {
            model: OFFLINE_MODEL.into(),
            messages: vec![
                Message::System { content: "You are helpful.".into() },
                Message::user("first"),
                Message::user("hello there"),
            ],
            ..ModelRequest::default()
        };
        let events = answer(&request);
        let text = text_of(&events);
        assert!(text.contains("offline demo model"), "{text}");
        assert!(text.contains("You said: \"hello there\""), "{text}");
        assert!(text.contains("OPENAI_API_KEY") && text.contains("add a provider in Settings"), "{text}");
        let words = events.iter().filter(|event| matches!(event, ModelEvent::Text(_))).count();
        assert_eq!(words, text.split(' ').count());
        let n = events.len();
        assert_eq!(events[n - 2], ModelEvent::Finish(FinishReason::Stop));
        let chars = "You are helpful.".len() + "first".len() + "hello there".len();
        assert_eq!(
            events[n - 1],
            ModelEvent::Usage(TokenUsage {
                input_tokens: (chars / 4) as u64,
                output_tokens: words as u64,
                ..TokenUsage::default()
            })
        );
    }

    #[test]
    fn replies_are_short_and_the_hint_comes_once_and_never_to_a_sub_agent() {
        let mut request = ModelRequest { model: OFFLINE_MODEL.into(), messages: vec![Message::user("hi")], ..ModelRequest::default() };
        let first = text_of(&answer(&request));
        assert_eq!(first, format!("You said: \"hi\"\n\n{SETUP_HINT}"));
        assert!(first.len() < 200, "{first}");

        // The next reply of the same conversation echoes only.
        request.messages.push(Message::Assistant { content: Some(first), reasoning: None, thinking: Vec::new(), tool_calls: Vec::new() });
        request.messages.push(Message::user("again"));
        assert_eq!(text_of(&answer(&request)), "You said: \"again\"");

        // A sub-agent's first answer carries no hint.
        let sub_agent =
            ModelRequest { model: OFFLINE_MODEL.into(), messages: vec![Message::user("go west")], sub_agent: true, ..ModelRequest::default() };
        assert_eq!(text_of(&answer(&sub_agent)), "You said: \"go west\"");

        // A long message is echoed in part.
        let long = ModelRequest { model: OFFLINE_MODEL.into(), messages: vec![Message::user("x".repeat(5000))], sub_agent: true, ..ModelRequest::default() };
        assert_eq!(text_of(&answer(&long)), format!("You said: \"{}…\"", "x".repeat(MAX_ECHO_CHARS)));
    }

    #[test]
    fn asks_the_datetime_tool_then_answers_with_its_result() {
        let mut request = ModelRequest {
            model: OFFLINE_MODEL.into(),
            messages: vec![Message::user("What time is it?")],
            tools: vec![datetime_tool()],
            ..ModelRequest::default()
        };
        let events = answer(&request);
        assert_eq!(
            events[..2],
            [
                ModelEvent::ToolCall {
                    index: 0,
                    id: Some("offline_call_1".into()),
                    name: Some(DATETIME_TOOL.into()),
                    arguments: "{}".into()
                },
                ModelEvent::Finish(FinishReason::ToolCalls),
            ]
        );
        request.messages.push(Message::Assistant {
            content: None,
            reasoning: None,
            thinking: Vec::new(),
            tool_calls: vec![AssistantToolCall {
                id: "offline_call_1".into(),
                name: DATETIME_TOOL.into(),
                arguments: "{}".into(),
            }],
        });
        request
            .messages
            .push(Message::Tool { tool_call_id: "offline_call_1".into(), content: "2025-01-02T03:04:05Z".into() });
        let events = answer(&request);
        let text = text_of(&events);
        assert!(text.contains("2025-01-02T03:04:05Z") && text.contains("offline demo model"), "{text}");
        assert!(events.contains(&ModelEvent::Finish(FinishReason::Stop)));
    }

    #[test]
    fn calls_a_tool_the_user_names_with_the_object_after_it() {
        let tool = |name: &str| ToolDefinition {
            name: name.into(),
            description: String::new(),
            parameters: serde_json::json!({"type": "object"}),
        };
        let cases = [
            ("please run order_status {\"order_id\": \"A1\"} now", Some(("order_status", r#"{"order_id":"A1"}"#))),
            ("Call refund_order.", Some(("refund_order", "{}"))),
            ("order_status {not json", Some(("order_status", "{}"))),
            // A name inside a longer word is not the tool's.
            ("my_order_status_page", None),
            // Named tools come first, then the clock question.
            ("what time is it? refund_order", Some(("refund_order", "{}"))),
            ("what time is it?", Some((DATETIME_TOOL, "{}"))),
            ("nothing to call", None),
        ];
        for (text, expected) in cases {
            let request = ModelRequest {
                model: OFFLINE_MODEL.into(),
                messages: vec![Message::user(text)],
                tools: vec![tool("order_status"), tool("refund_order"), datetime_tool()],
                ..ModelRequest::default()
            };
            let called = answer(&request).into_iter().find_map(|event| match event {
                ModelEvent::ToolCall { name, arguments, .. } => Some((name.unwrap_or_default(), arguments)),
                _ => None,
            });
            let expected = expected.map(|(name, arguments)| (name.to_owned(), arguments.to_owned()));
            assert_eq!(called, expected, "{text}");
        }
    }

    #[test]
    fn time_questions_without_the_tool_are_echoed() {
        let request = ModelRequest {
            model: OFFLINE_MODEL.into(),
            messages: vec![Message::user("what's the date today?")],
            ..ModelRequest::default()
        };
        assert!(text_of(&answer(&request)).contains("You said"));
        assert!(!asks_for_time("sometimes I update things"));
        assert!(asks_for_time("What day is it"));
    }
}
