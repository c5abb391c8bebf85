//! The answer, decided once for both endpoints: directives are read from the last user message
//! and turned into a [`Plan`] (or a failure status), which each endpoint then renders in its own
//! wire format.

use std::time::Duration;

use axum::http::StatusCode;

use crate::FakeState;

/// The reasoning chunks `[reasoning]` adds.
pub(crate) const REASONING_CHUNKS: [&str; 3] = ["Let ", "me ", "think."];
/// The content chunks `[midstream-error]` sends before failing.
pub(crate) const MIDSTREAM_CHUNKS: [&str; 2] = ["Partial ", "answer"];
/// The message of the error `[midstream-error]` ends with.
pub(crate) const MIDSTREAM_MESSAGE: &str = "fake mid-stream failure";
/// The most `[tokens:N]` can ask for, so that a typo cannot exhaust memory.
const MAX_TOKENS_DIRECTIVE: u64 = 100_000;

/// A request to either endpoint, as the directives see it.
pub(crate) trait Chat {
    /// The text of the last user message, tool results aside: where the directives are.
    fn last_user_text(&self) -> String;
    /// The contents of the tool results the conversation ends with, joined by ` | `, if it
    /// ends with any.
    fn final_tool_result(&self) -> Option<String>;
    /// The texts of every user message, tool results aside, in order.
    fn user_texts(&self) -> Vec<String>;
    /// The system prompt, all of it.
    fn system_text(&self) -> String;
    /// Whether the request offers the model any tool.
    fn offers_tools(&self) -> bool;
}

/// Whether a request asks for a summary: a system prompt that says "summarize" and no tools.
fn asks_for_summary(chat: &impl Chat) -> bool {
    !chat.offers_tools() && chat.system_text().to_lowercase().contains("summarize")
}

/// A summariser that keeps what it was told to remember: every sentence of the user messages
/// that contains `remember` (any case), each once, in order.
fn summary(chat: &impl Chat) -> String {
    let mut kept: Vec<String> = Vec::new();
    for text in chat.user_texts() {
        for sentence in text.split_inclusive(['.', '\n']) {
            let sentence = sentence.trim();
            let start = sentence.to_lowercase().find("remember");
            if let Some(start) = start {
                let sentence = sentence[start..].to_owned();
                if !kept.contains(&sentence) {
                    kept.push(sentence);
                }
            }
        }
    }
    if kept.is_empty() { "Summary: nothing to remember.".to_owned() } else { format!("Summary: {}", kept.join(" ")) }
}

/// What a request gets: a failure status, or an answer.
pub(crate) enum Outcome<'a> {
    Fail(StatusCode),
    Answer(Plan<'a>),
}

/// What the model answers, before it is rendered as a stream or as one JSON.
pub(crate) struct Plan<'a> {
    pub(crate) reasoning: bool,
    /// `[thinking]`: the reasoning is signed anew per answer, and must come back with its calls.
    pub(crate) thinking: bool,
    pub(crate) body: PlanBody<'a>,
    pub(crate) delay: Option<Duration>,
}

pub(crate) enum PlanBody<'a> {
    /// A text sent word by word.
    Words(String),
    /// `tok1 ` ... `tokN `.
    Tokens(u64),
    /// `(id number, name, arguments)` per call.
    ToolCalls(Vec<(u64, &'a str, &'a str)>),
    /// Two chunks, then an error event.
    MidstreamError,
}

/// Decides the answer to `chat`, whose last user text is `text`.
pub(crate) fn decide<'a>(state: &FakeState, chat: &impl Chat, text: &'a str) -> Outcome<'a> {
    let directives = Directives::parse(text);
    let tool_result = chat.final_tool_result();
    if tool_result.is_none() {
        let flaky = directives.flaky.filter(|&(failures, _)| state.count_flaky_failure(text, failures));
        if let Some(status) = flaky.map(|(_, status)| status).or(directives.error) {
            return Outcome::Fail(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR));
        }
    }
    let body = if let Some(result) = tool_result {
        PlanBody::Words(format!("Tool result: {result}"))
    } else if asks_for_summary(chat) {
        PlanBody::Words(summary(chat))
    } else if let Some(json) = directives.json {
        PlanBody::Words(json.to_owned())
    } else if directives.midstream_error {
        PlanBody::MidstreamError
    } else if !directives.tools.is_empty() {
        let first = state.next_tool_call_numbers(directives.tools.len() as u64);
        PlanBody::ToolCalls(
            directives
                .tools
                .iter()
                .enumerate()
                .map(|(i, (name, arguments))| (first + i as u64, *name, *arguments))
                .collect(),
        )
    } else if let Some(count) = directives.tokens {
        PlanBody::Tokens(count)
    } else if directives.history {
        PlanBody::Words(format!("History: {}", chat.user_texts().join(" | ")))
    } else {
        PlanBody::Words(format!("You said: {text}"))
    };
    Outcome::Answer(Plan {
        reasoning: directives.reasoning || directives.thinking,
        thinking: directives.thinking,
        body,
        delay: directives.delay,
    })
}

impl Plan<'_> {
    /// The content, reasoning and tool-call chunks the answer streams: its output tokens.
    pub(crate) fn chunk_count(&self) -> u64 {
        let reasoning = if self.reasoning { REASONING_CHUNKS.len() as u64 } else { 0 };
        let body = match &self.body {
            PlanBody::Words(text) => text.split_inclusive(' ').count() as u64,
            PlanBody::Tokens(count) => *count,
            PlanBody::ToolCalls(calls) => {
                calls.iter().map(|(_, _, arguments)| 1 + fragments(arguments).count() as u64).sum()
            }
            PlanBody::MidstreamError => MIDSTREAM_CHUNKS.len() as u64,
        };
        reasoning + body
    }

    /// The ids of the calls the answer makes, `prefix` and each call's number.
    pub(crate) fn call_ids(&self, prefix: &str) -> Vec<String> {
        match &self.body {
            PlanBody::ToolCalls(calls) => calls.iter().map(|(number, _, _)| format!("{prefix}{number}")).collect(),
            _ => Vec::new(),
        }
    }

    pub(crate) fn calls_tools(&self) -> bool {
        matches!(self.body, PlanBody::ToolCalls(_))
    }

    /// The whole text of a `Words` or `Tokens` answer.
    pub(crate) fn text(&self) -> Option<String> {
        match &self.body {
            PlanBody::Words(text) => Some(text.clone()),
            PlanBody::Tokens(count) => Some((1..=*count).map(|n| format!("tok{n} ")).collect()),
            PlanBody::ToolCalls(_) | PlanBody::MidstreamError => None,
        }
    }

    /// Sleeps as long as the streamed answer would have taken, for an answer sent whole.
    pub(crate) async fn wait_whole(&self) {
        if let Some(delay) = self.delay {
            tokio::time::sleep(delay.saturating_mul(u32::try_from(self.chunk_count()).unwrap_or(u32::MAX))).await;
        }
    }
}

/// Up to three argument fragments of roughly equal size, cut at character boundaries.
pub(crate) fn fragments(arguments: &str) -> impl Iterator<Item = &str> {
    let size = arguments.len().div_ceil(3).max(1);
    let mut rest = arguments;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut end = size.min(rest.len());
        while !rest.is_char_boundary(end) {
            end += 1;
        }
        let (piece, tail) = rest.split_at(end);
        rest = tail;
        Some(piece)
    })
}

/// The directives found in the last user message.
#[derive(Debug, Default, PartialEq)]
struct Directives<'a> {
    /// `(name, arguments)` per `[tool:...]`, in order.
    tools: Vec<(&'a str, &'a str)>,
    tokens: Option<u64>,
    delay: Option<Duration>,
    reasoning: bool,
    thinking: bool,
    history: bool,
    error: Option<u16>,
    /// `(failures, status)` of `[flaky:N:STATUS]`.
    flaky: Option<(u64, u16)>,
    /// The JSON value of `[json:VALUE]`.
    json: Option<&'a str>,
    midstream_error: bool,
}

impl<'a> Directives<'a> {
    fn parse(text: &'a str) -> Self {
        let mut directives = Directives::default();
        let mut rest = text;
        while let Some(start) = rest.find('[') {
            let inner = &rest[start + 1..];
            match directives.take(inner) {
                Some(consumed) => rest = &inner[consumed..],
                None => rest = inner,
            }
        }
        directives
    }

    /// Reads one directive at the start of `inner` (just after `[`); returns how many bytes it
    /// used, including the closing `]`.
    fn take(&mut self, inner: &'a str) -> Option<usize> {
        if let Some(after) = inner.strip_prefix("tool:") {
            let (name, arguments, used) = parse_tool(after)?;
            self.tools.push((name, arguments));
            return Some("tool:".len() + used);
        }
        for flag in ["reasoning]", "thinking]", "history]", "midstream-error]"] {
            if inner.starts_with(flag) {
                match flag {
                    "reasoning]" => self.reasoning = true,
                    "thinking]" => self.thinking = true,
                    "history]" => self.history = true,
                    _ => self.midstream_error = true,
                }
                return Some(flag.len());
            }
        }
        if let Some(after) = inner.strip_prefix("json:") {
            let mut values = serde_json::Deserializer::from_str(after).into_iter::<serde::de::IgnoredAny>();
            values.next()?.ok()?;
            let end = values.byte_offset();
            let close = after[end..].find(']').filter(|close| after[end..end + close].trim().is_empty())?;
            self.json = Some(after[..end].trim());
            return Some("json:".len() + end + close + 1);
        }
        if let Some(after) = inner.strip_prefix("flaky:") {
            let end = after.find(']')?;
            let (failures, status) = after[..end].split_once(':')?;
            self.flaky = Some((failures.trim().parse().ok()?, status.trim().parse().ok()?));
            return Some("flaky:".len() + end + 1);
        }
        for key in ["tokens:", "delay:", "error:"] {
            if let Some(after) = inner.strip_prefix(key) {
                let end = after.find(']')?;
                let number: u64 = after[..end].trim().parse().ok()?;
                match key {
                    "tokens:" => self.tokens = Some(number.min(MAX_TOKENS_DIRECTIVE)),
                    "delay:" => self.delay = Some(Duration::from_millis(number)),
                    _ => self.error = Some(u16::try_from(number).ok()?),
                }
                return Some(key.len() + end + 1);
            }
        }
        None
    }
}

/// Parses `NAME]` or `NAME ARGS]`: the name, the arguments and the bytes used.
fn parse_tool(after: &str) -> Option<(&str, &str, usize)> {
    let name_end = after.find(|c: char| c.is_whitespace() || c == ']')?;
    let name = &after[..name_end];
    if name.is_empty() {
        return None;
    }
    let rest = &after[name_end..];
    let arguments_start = name_end + (rest.len() - rest.trim_start().len());
    let rest = rest.trim_start();
    if rest.starts_with(']') {
        return Some((name, "{}", arguments_start + 1));
    }
    // A JSON value followed by `]`, taken verbatim.
    let mut values = serde_json::Deserializer::from_str(rest).into_iter::<serde::de::IgnoredAny>();
    if let Some(Ok(_)) = values.next() {
        let json_end = values.byte_offset();
        let after_json = &rest[json_end..];
        if after_json.trim_start().starts_with(']') {
            let close = json_end + (after_json.len() - after_json.trim_start().len());
            return Some((name, &rest[..json_end], arguments_start + close + 1));
        }
    }
    // Not JSON: everything up to the next `]`.
    let close = rest.find(']')?;
    Some((name, rest[..close].trim(), arguments_start + close + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives_parse_with_json_arguments_and_ignore_strangers() {
        let text = r#"please [tool:get_weather {"city": "Pa]ris", "n": [1, 2]}] and [tool:now] [tool:bad not json]
            [tokens:50] [delay:20] [reasoning] [thinking] [history] [error:429] [flaky:2:529] [midstream-error] [unknown]
            [tokens:x] [flaky:3] [json: {"a": [1, "]"]} ] [json:nope]"#;
        let directives = Directives::parse(text);
        assert_eq!(
            directives,
            Directives {
                tools: vec![("get_weather", r#"{"city": "Pa]ris", "n": [1, 2]}"#), ("now", "{}"), ("bad", "not json"),],
                tokens: Some(50),
                delay: Some(Duration::from_millis(20)),
                reasoning: true,
                thinking: true,
                history: true,
                error: Some(429),
                flaky: Some((2, 529)),
                json: Some(r#"{"a": [1, "]"]}"#),
                midstream_error: true,
            }
        );
        assert_eq!(Directives::parse("no directives [here"), Directives::default());
    }

    #[test]
    fn fragments_cover_the_arguments_at_character_boundaries() {
        for arguments in ["{}", r#"{"city": "Zürich"}"#, "ü", "x"] {
            let pieces: Vec<&str> = fragments(arguments).collect();
            assert!(!pieces.is_empty() && pieces.len() <= 3, "{pieces:?}");
            assert_eq!(pieces.concat(), arguments);
        }
        assert_eq!(fragments("").count(), 0);
    }

    struct Transcript {
        system: &'static str,
        tools: bool,
        users: Vec<&'static str>,
    }

    impl Chat for Transcript {
        fn last_user_text(&self) -> String {
            self.users.last().copied().unwrap_or_default().to_owned()
        }
        fn final_tool_result(&self) -> Option<String> {
            None
        }
        fn user_texts(&self) -> Vec<String> {
            self.users.iter().map(|text| (*text).to_owned()).collect()
        }
        fn system_text(&self) -> String {
            self.system.to_owned()
        }
        fn offers_tools(&self) -> bool {
            self.tools
        }
    }

    #[test]
    fn a_summary_request_keeps_what_to_remember() {
        let users = vec!["Hi. Please remember: the code is 4711. Filler words.", "Also REMEMBER the dog.\nbye"];
        let chat = Transcript { system: "You Summarize conversations.", tools: false, users };
        assert!(asks_for_summary(&chat));
        assert_eq!(summary(&chat), "Summary: remember: the code is 4711. REMEMBER the dog.");
        let with_tools = Transcript { tools: true, ..chat };
        assert!(!asks_for_summary(&with_tools), "an agent call that mentions summaries is no summary request");
        let plain = Transcript { system: "summarize", tools: false, users: vec!["nothing here"] };
        assert_eq!(summary(&plain), "Summary: nothing to remember.");
    }
}
