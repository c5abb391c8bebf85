//! Property-based fuzzing of the streaming decoders: the SSE framing and both providers' event
//! JSON, read through the same loop a response is read with (`http::decode_body`).
//!
//! Three kinds of input: arbitrary bytes built from SSE and JSON fragments; the recorded
//! cassettes (`tests/fixtures/<provider>/*.sse`) cut at arbitrary byte positions; and those
//! cassettes with one event's JSON mutated (a value replaced by one of another type, a huge
//! number, a long or odd string, a key removed or added) or with bytes flipped. Whole JSON
//! answers (what a server that ignores `stream` sends) get arbitrary bytes and mutations too. Whatever the
//! input, decoding ends without a panic in events and at most one error, and how the body is cut
//! into chunks never changes the result. Each property runs a fixed number of cases; failures
//! proptest shrinks are kept in `proptest-regressions/providers/fuzz.txt` and replayed first.

use proptest::prelude::*;
use proptest::test_runner::Config;

use super::anthropic::MessagesDecoder;
use super::http::{Decoder, decode_body};
use super::openai::ChatDecoder;
use crate::{Error, ModelEvent};

/// Cases per property: the three properties of both providers take about a second together.
const CASES: u32 = 256;

const OPENAI_CASSETTES: [&str; 8] = [
    include_str!("../../tests/fixtures/openai/error_midstream.sse"),
    include_str!("../../tests/fixtures/openai/parallel_tool_calls.sse"),
    include_str!("../../tests/fixtures/openai/plain_text.sse"),
    include_str!("../../tests/fixtures/openai/reasoning_content.sse"),
    include_str!("../../tests/fixtures/openai/refusal.sse"),
    include_str!("../../tests/fixtures/openai/truncated.sse"),
    include_str!("../../tests/fixtures/openai/usage_only_final.sse"),
    include_str!("../../tests/fixtures/openai/utf8_split.sse"),
];

const ANTHROPIC_CASSETTES: [&str; 8] = [
    include_str!("../../tests/fixtures/anthropic/cached_prompt.sse"),
    include_str!("../../tests/fixtures/anthropic/error_midstream.sse"),
    include_str!("../../tests/fixtures/anthropic/parallel_tool_use.sse"),
    include_str!("../../tests/fixtures/anthropic/plain_text.sse"),
    include_str!("../../tests/fixtures/anthropic/refusal.sse"),
    include_str!("../../tests/fixtures/anthropic/thinking.sse"),
    include_str!("../../tests/fixtures/anthropic/truncated.sse"),
    include_str!("../../tests/fixtures/anthropic/utf8_split.sse"),
];

/// Which provider's decoder reads a case.
#[derive(Clone, Copy, Debug)]
enum Provider {
    OpenAi,
    Anthropic,
}

impl Provider {
    fn cassettes(self) -> &'static [&'static str] {
        match self {
            Provider::OpenAi => &OPENAI_CASSETTES,
            Provider::Anthropic => &ANTHROPIC_CASSETTES,
        }
    }

    /// Decodes `body` cut at `cuts` (positions taken modulo its length).
    fn decode(self, body: &[u8], cuts: &[usize]) -> (Vec<ModelEvent>, Option<String>) {
        let chunks = split(body, cuts);
        let (events, error) = match self {
            Provider::OpenAi => decode_checked(ChatDecoder::default(), &chunks),
            Provider::Anthropic => decode_checked(MessagesDecoder::default(), &chunks),
        };
        // Errors are compared by what they say: `Error` has no `PartialEq`.
        (events, error.map(|error| format!("{error:?}")))
    }
}

/// Decodes and checks what every answer must be: events, then at most one error of a kind a
/// decoder may give (never one the HTTP or retry layers give).
fn decode_checked<D: Decoder>(decoder: D, chunks: &[&[u8]]) -> (Vec<ModelEvent>, Option<Error>) {
    let (events, error) = decode_body(decoder, chunks);
    if let Some(error) = &error {
        assert!(
            matches!(error, Error::Decode(_) | Error::Provider { .. } | Error::Transport(_)),
            "a decoder gave {error:?}"
        );
        if let Error::Provider { status, .. } = error {
            assert!((400..=599).contains(status), "an error event's status is an HTTP error: {error:?}");
        }
    }
    (events, error)
}

/// `body` cut at the given positions, in order, empty chunks included.
fn split<'a>(body: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut positions: Vec<usize> = cuts.iter().map(|cut| cut % (body.len() + 1)).collect();
    positions.sort_unstable();
    let mut chunks = Vec::with_capacity(positions.len() + 1);
    let mut start = 0;
    for position in positions {
        chunks.push(&body[start..position]);
        start = position;
    }
    chunks.push(&body[start..]);
    chunks
}

fn provider() -> impl Strategy<Value = Provider> {
    prop_oneof![Just(Provider::OpenAi), Just(Provider::Anthropic)]
}

fn cuts() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(any::<usize>(), 0..12)
}

/// Bytes that look like an event stream often enough to get past the framing: SSE field names and
/// line ends, JSON punctuation and the providers' event names, among arbitrary bytes.
fn stream_bytes() -> impl Strategy<Value = Vec<u8>> {
    let fragment = prop_oneof![
        4 => prop::sample::select(vec![
            "data: ", "data:", "event: ", ": ping", "id: 1", "retry: 5", "\n", "\n\n", "\r\n", "\r", "[DONE]",
            "{", "}", "[", "]", "\"", ",", ":", "null", "true", "1e999", "-1", "18446744073709551616",
            "{\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":18446744073709551615}}}",
            "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"a\",\"name\":\"b\"}}",
            "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\"}}",
            "{\"type\":\"content_block_stop\",\"index\":0}", "{\"type\":\"message_stop\"}",
            "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"x\"}}",
            "{\"choices\":[{\"delta\":{\"content\":\"hi\",\"tool_calls\":[{\"index\":4294967295}]},\"finish_reason\":\"stop\"}]}",
            "{\"error\":{\"code\":99999999999,\"message\":\"x\"}}", "é", "😀",
        ].into_iter().map(|text| text.as_bytes().to_vec()).collect::<Vec<_>>()),
        1 => prop::collection::vec(any::<u8>(), 1..8),
    ];
    prop::collection::vec(fragment, 0..40).prop_map(|fragments| fragments.concat())
}

/// A JSON value of any shape, with the edge cases a decoder must survive.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::{Value, json};
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        prop::sample::select(vec![json!(u64::MAX), json!(-1), json!(0), json!(1.5), json!(-1e308), json!(4294967296u64)]),
        ".{0,12}".prop_map(Value::String),
        (1usize..20_000).prop_map(|length| Value::String("ж".repeat(length))),
        prop::sample::select(vec!["text", "tool_use", "thinking", "text_delta", "input_json_delta", "message_stop", "stop"])
            .prop_map(|text| Value::String(text.to_owned())),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
            prop::collection::btree_map(key(), inner, 0..4).prop_map(|map| serde_json::Value::Object(map.into_iter().collect())),
        ]
    })
}

/// Object keys: mostly ones the providers' JSON has, so that mutations reach the decoders.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec![
            "type", "index", "delta", "content", "content_block", "usage", "message", "error", "choices",
            "finish_reason", "tool_calls", "function", "arguments", "name", "id", "text", "partial_json",
            "thinking", "signature", "stop_reason", "input_tokens", "output_tokens", "cache_read_input_tokens",
            "cache_creation_input_tokens", "prompt_tokens", "completion_tokens", "code", "status", "refusal",
        ]).prop_map(str::to_owned),
        1 => "[a-z_]{1,8}",
    ]
}

/// One change to a JSON value, at the node that `at` picks (modulo the number of nodes).
#[derive(Clone, Debug)]
enum Mutation {
    Replace { at: usize, with: serde_json::Value },
    Remove { at: usize },
    Insert { at: usize, key: String, with: serde_json::Value },
    /// Every number in the value becomes the same extreme one.
    Extreme { number: serde_json::Number },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), json_value()).prop_map(|(at, with)| Mutation::Replace { at, with }),
        any::<usize>().prop_map(|at| Mutation::Remove { at }),
        (any::<usize>(), key(), json_value()).prop_map(|(at, key, with)| Mutation::Insert { at, key, with }),
        prop::sample::select(vec![
            serde_json::Number::from(u64::MAX),
            serde_json::Number::from(i64::MIN),
            serde_json::Number::from(u64::from(u32::MAX) + 1),
            serde_json::Number::from_f64(1e308).expect("finite"),
        ])
        .prop_map(|number| Mutation::Extreme { number }),
    ]
}

impl Mutation {
    fn apply(&self, value: &mut serde_json::Value) {
        if let Mutation::Extreme { number } = self {
            return replace_numbers(value, number);
        }
        let count = count_nodes(value);
        let at = match self {
            Mutation::Replace { at, .. } | Mutation::Remove { at } | Mutation::Insert { at, .. } => at % count,
            Mutation::Extreme { .. } => return,
        };
        let mut seen = 0;
        visit(value, at, &mut seen, self);
    }
}

fn replace_numbers(value: &mut serde_json::Value, number: &serde_json::Number) {
    match value {
        serde_json::Value::Number(old) => *old = number.clone(),
        serde_json::Value::Array(items) => items.iter_mut().for_each(|item| replace_numbers(item, number)),
        serde_json::Value::Object(map) => map.values_mut().for_each(|item| replace_numbers(item, number)),
        _ => {}
    }
}

fn count_nodes(value: &serde_json::Value) -> usize {
    1 + match value {
        serde_json::Value::Array(items) => items.iter().map(count_nodes).sum(),
        serde_json::Value::Object(map) => map.values().map(count_nodes).sum(),
        _ => 0,
    }
}

/// Walks the nodes in pre-order and applies `mutation` at node `at`. Returns whether it did; a
/// `Remove` of a child is done by its parent.
fn visit(value: &mut serde_json::Value, at: usize, seen: &mut usize, mutation: &Mutation) -> bool {
    let here = *seen;
    *seen += 1;
    if here == at {
        match mutation {
            Mutation::Replace { with, .. } => *value = with.clone(),
            Mutation::Remove { .. } => *value = serde_json::Value::Null,
            Mutation::Extreme { .. } => {}
            Mutation::Insert { key, with, .. } => match value {
                serde_json::Value::Object(map) => {
                    map.insert(key.clone(), with.clone());
                }
                serde_json::Value::Array(items) => items.push(with.clone()),
                other => *other = with.clone(),
            },
        }
        return true;
    }
    match value {
        serde_json::Value::Array(items) => {
            for index in 0..items.len() {
                if *seen + count_nodes(&items[index]) <= at {
                    *seen += count_nodes(&items[index]);
                    continue;
                }
                if matches!(mutation, Mutation::Remove { .. }) && *seen == at {
                    items.remove(index);
                    return true;
                }
                return visit(&mut items[index], at, seen, mutation);
            }
            false
        }
        serde_json::Value::Object(map) => {
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                let size = count_nodes(&map[&key]);
                if *seen + size <= at {
                    *seen += size;
                    continue;
                }
                if matches!(mutation, Mutation::Remove { .. }) && *seen == at {
                    map.remove(&key);
                    return true;
                }
                return visit(map.get_mut(&key).expect("the key was just listed"), at, seen, mutation);
            }
            false
        }
        _ => false,
    }
}

/// A cassette with the JSON of its `event`-th payload (modulo their number) mutated.
fn mutate_cassette(cassette: &str, event: usize, mutation: &Mutation) -> String {
    let mut frames: Vec<String> = cassette.split("\n\n").map(str::to_owned).collect();
    let candidates: Vec<usize> = (0..frames.len())
        .filter(|&index| frames[index].lines().any(|line| line.starts_with("data: {")))
        .collect();
    if candidates.is_empty() {
        return cassette.to_owned();
    }
    let frame = &mut frames[candidates[event % candidates.len()]];
    *frame = frame
        .lines()
        .map(|line| match line.strip_prefix("data: ").map(serde_json::from_str::<serde_json::Value>) {
            Some(Ok(mut value)) => {
                mutation.apply(&mut value);
                format!("data: {value}")
            }
            _ => line.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    frames.join("\n\n")
}

proptest! {
    #![proptest_config(Config { cases: CASES, ..Config::default() })]

    /// Arbitrary bytes end in events and at most one typed error, however they are cut.
    #[test]
    fn arbitrary_bytes_decode_the_same_however_cut(provider in provider(), body in stream_bytes(), cuts in cuts()) {
        let whole = provider.decode(&body, &[]);
        prop_assert_eq!(provider.decode(&body, &cuts), whole);
    }

    /// A recorded answer cut at arbitrary byte positions (inside UTF-8 characters, `\r\n` pairs,
    /// JSON tokens) decodes exactly as the whole body does.
    #[test]
    fn recorded_answers_decode_the_same_however_cut(provider in provider(), cassette in any::<usize>(), cuts in cuts()) {
        let cassettes = provider.cassettes();
        let body = cassettes[cassette % cassettes.len()].as_bytes();
        prop_assert_eq!(provider.decode(body, &cuts), provider.decode(body, &[]));
    }

    /// A recorded answer with one event's JSON mutated, or some bytes flipped, still ends in
    /// events and at most one typed error, whatever the cuts.
    #[test]
    fn mutated_answers_never_panic(
        provider in provider(),
        cassette in any::<usize>(),
        event in any::<usize>(),
        mutation in mutation(),
        flips in prop::collection::vec((any::<usize>(), any::<u8>()), 0..3),
        cuts in cuts(),
    ) {
        let cassettes = provider.cassettes();
        let mut body = mutate_cassette(cassettes[cassette % cassettes.len()], event, &mutation).into_bytes();
        for (position, byte) in flips {
            let length = body.len();
            body[position % length] ^= byte;
        }
        prop_assert_eq!(provider.decode(&body, &cuts), provider.decode(&body, &[]));
    }
}

/// Whole (non-streamed) answers, which some servers send even when asked to stream.
fn whole_answer(provider: Provider) -> serde_json::Value {
    match provider {
        Provider::OpenAi => serde_json::json!({
            "choices": [{"message": {"content": "hi", "reasoning_content": "thought", "refusal": null,
                "tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 2},
                "completion_tokens_details": {"reasoning_tokens": 1}}
        }),
        Provider::Anthropic => serde_json::json!({
            "content": [{"type": "thinking", "thinking": "hmm", "signature": "sig"}, {"type": "redacted_thinking", "data": "x"},
                {"type": "text", "text": "hi"}, {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}}],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 2, "cache_creation_input_tokens": 1}
        }),
    }
}

/// Decodes a whole JSON answer as the read loop does: its events, then the usage.
fn decode_whole(provider: Provider, body: &[u8]) -> (Vec<ModelEvent>, Option<Error>) {
    fn run<D: Decoder>(mut decoder: D, body: &[u8]) -> (Vec<ModelEvent>, Option<Error>) {
        let mut events = std::collections::VecDeque::new();
        let error = match decoder.take_json(body, &mut events) {
            Ok(()) => {
                decoder.finish(&mut events);
                None
            }
            Err(error) => Some(error),
        };
        (events.into_iter().collect(), error)
    }
    match provider {
        Provider::OpenAi => run(ChatDecoder::default(), body),
        Provider::Anthropic => run(MessagesDecoder::default(), body),
    }
}

proptest! {
    #![proptest_config(Config { cases: CASES, ..Config::default() })]

    /// Whole answers, arbitrary or mutated, give events or one decoder error, never a panic.
    #[test]
    fn whole_answers_never_panic(
        provider in provider(),
        mutations in prop::collection::vec(mutation(), 0..3),
        bytes in prop::option::of(prop::collection::vec(any::<u8>(), 0..64)),
    ) {
        let body = match bytes {
            Some(bytes) => bytes,
            None => {
                let mut answer = whole_answer(provider);
                for mutation in &mutations {
                    mutation.apply(&mut answer);
                }
                answer.to_string().into_bytes()
            }
        };
        let (_, error) = decode_whole(provider, &body);
        if let Some(error) = error {
            prop_assert!(matches!(error, Error::Decode(_) | Error::Provider { .. }), "{error:?}");
        }
    }
}

#[test]
fn whole_answers_decode() {
    for provider in [Provider::OpenAi, Provider::Anthropic] {
        let (events, error) = decode_whole(provider, whole_answer(provider).to_string().as_bytes());
        assert!(error.is_none() && events.len() >= 4, "{provider:?}: {events:?} {error:?}");
    }
}

/// Found by `mutated_answers_never_panic`: token counts whose sum passes `u64::MAX` overflowed.
#[test]
fn huge_anthropic_token_counts_saturate() {
    let usage = r#"{"type":"message_start","message":{"usage":{"input_tokens":18446744073709551615,"cache_read_input_tokens":1,"cache_creation_input_tokens":1}}}"#;
    let body = format!("data: {usage}\n\ndata: {{\"type\":\"message_stop\"}}\n\n");
    let (events, error) = Provider::Anthropic.decode(body.as_bytes(), &[]);
    assert_eq!(error, None);
    assert!(matches!(&events[..], [ModelEvent::Usage(usage)] if usage.input_tokens == u64::MAX), "{events:?}");
}

/// Found by `arbitrary_bytes_decode_the_same_however_cut`: a bad line dropped the events its
/// chunk had completed before it, so the result depended on where the network cut the body.
#[test]
fn events_before_a_bad_line_count_in_any_chunk() {
    let body = b"data: [DONE]\n\n: ping\x80\n";
    assert_eq!(Provider::OpenAi.decode(body, &[]), (Vec::new(), None));
    let body = b"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: \xff\n";
    let (events, error) = Provider::OpenAi.decode(body, &[]);
    assert_eq!(events, [ModelEvent::Text("hi".into())]);
    assert!(error.is_some_and(|error| error.contains("UTF-8")));
}
