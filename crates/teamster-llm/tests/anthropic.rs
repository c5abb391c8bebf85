//! The Anthropic Messages adapter against recorded Messages streams.
//!
//! Each fixture under `tests/fixtures/anthropic/` is a body in Anthropic's streaming format
//! (`event:` and `data:` lines). A one-shot local HTTP server replays it, split into network
//! chunks at chosen (often awkward) byte positions, and the tests assert both the events the
//! adapter produced and the request it sent.

mod support;

use std::time::Duration;

use futures_util::StreamExt;
use support::{Body, Reply, pieces, serve_once, split_at, text_of, tool_calls_of};
use teamster_llm::providers::AnthropicClient;
use teamster_llm::{
    AssistantToolCall, Error, Image, Message, ModelClient, ThinkingBlock, ModelEvent, ModelRequest, TokenUsage, ToolDefinition,
};
use teamster_protocol::agent::{CacheControl, JsonSchemaFormat, ModelParams, ResponseFormat};
use teamster_protocol::event::FinishReason;

fn fixture(name: &str) -> Vec<u8> {
    support::fixture("anthropic", name)
}

fn simple_request() -> ModelRequest {
    ModelRequest {
        model: "claude-sonnet-4-5".into(),
        messages: vec![Message::user("Hi")],
        ..ModelRequest::default()
    }
}

/// Serves `reply`, runs `request` through the adapter, and returns every stream item.
async fn run(reply: Reply, request: ModelRequest) -> (Vec<Result<ModelEvent, Error>>, support::Recorded) {
    support::run_adapter(reply, request, |base_url| AnthropicClient::new(base_url, Some("sk-ant-test".into()), reqwest::Client::new())).await
}

async fn events_of(reply: Reply) -> Vec<ModelEvent> {
    let (items, _) = run(reply, simple_request()).await;
    items.into_iter().map(|item| item.expect("no error")).collect()
}

/// A fixed error body in Anthropic's shape.
fn error_reply(status: u16, kind: &str, message: &str) -> Reply {
    let body = serde_json::json!({"type": "error", "error": {"type": kind, "message": message}});
    Reply::fixed(status, "application/json", body.to_string())
}

#[tokio::test]
async fn plain_text_streams_text_then_finish_then_usage() {
    let events = events_of(Reply::sse(vec![fixture("plain_text.sse")])).await;
    assert_eq!(
        events,
        [
            ModelEvent::Text("Hello".into()),
            ModelEvent::Text("!".into()),
            ModelEvent::Text(" How can".into()),
            ModelEvent::Text(" I help".into()),
            ModelEvent::Text(" you today?".into()),
            ModelEvent::Finish(FinishReason::Stop),
            ModelEvent::Usage(TokenUsage { input_tokens: 21, output_tokens: 12, ..TokenUsage::default() }),
        ]
    );
}

#[tokio::test]
async fn every_fixture_decodes_the_same_whatever_the_chunking() {
    for name in [
        "plain_text.sse",
        "utf8_split.sse",
        "parallel_tool_use.sse",
        "thinking.sse",
        "cached_prompt.sse",
        "refusal.sse",
    ] {
        let bytes = fixture(name);
        let whole = events_of(Reply::sse(vec![bytes.clone()])).await;
        for size in [1, 2, 3, 5, 7, 13, 64, 1000] {
            let split = events_of(Reply::sse(pieces(&bytes, size))).await;
            assert_eq!(split, whole, "{name} in pieces of {size} bytes");
        }
    }
}

#[tokio::test]
async fn a_character_split_across_network_chunks_is_decoded_whole() {
    let bytes = fixture("utf8_split.sse");
    let text = String::from_utf8(bytes.clone()).unwrap();
    // Cut inside "ü" (2 bytes), inside "😀" (4 bytes, after its second byte) and inside "你" (3).
    let offsets = [text.find('ü').unwrap() + 1, text.find('😀').unwrap() + 2, text.find('你').unwrap() + 1];
    for offset in offsets {
        assert!(!text.is_char_boundary(offset));
    }
    let events = events_of(Reply::sse(split_at(&bytes, &offsets))).await;
    assert_eq!(text_of(&events), "Grüße aus Zürich 😀 你好");
    assert_eq!(events.len(), 5);
}

#[tokio::test]
async fn tool_calls_after_a_text_block_are_numbered_among_themselves() {
    // Pieces of 5 bytes cut JSON tokens, keys and the `event:`/`data:` prefixes everywhere.
    let events = events_of(Reply::sse(pieces(&fixture("parallel_tool_use.sse"), 5))).await;
    assert_eq!(text_of(&events), "I'll check both.");
    assert_eq!(
        tool_calls_of(&events),
        [
            (
                "toolu_01Weather".to_owned(),
                "get_weather".to_owned(),
                r#"{"city": "Paris", "unit": "celsius"}"#.to_owned()
            ),
            (
                "toolu_02Time".to_owned(),
                "get_current_datetime".to_owned(),
                r#"{"timezone": "Europe/Paris"}"#.to_owned()
            ),
            // A call whose input stream is empty still gets an object.
            ("toolu_03Cities".to_owned(), "list_cities".to_owned(), "{}".to_owned()),
        ]
    );
    // The text block is content block 0, yet the first call is tool call 0.
    assert_eq!(
        events[1],
        ModelEvent::ToolCall {
            index: 0,
            id: Some("toolu_01Weather".into()),
            name: Some("get_weather".into()),
            arguments: String::new()
        }
    );
    assert_eq!(events[2], ModelEvent::ToolCall { index: 0, id: None, name: None, arguments: r#"{"ci"#.into() });
    let n = events.len();
    assert_eq!(events[n - 2], ModelEvent::Finish(FinishReason::ToolCalls));
    assert_eq!(
        events[n - 1],
        ModelEvent::Usage(TokenUsage { input_tokens: 540, output_tokens: 98, ..TokenUsage::default() })
    );
}

#[tokio::test]
async fn thinking_streams_as_reasoning_and_then_as_whole_signed_blocks() {
    let events = events_of(Reply::sse(pieces(&fixture("thinking.sse"), 100))).await;
    assert_eq!(
        events,
        [
            ModelEvent::Reasoning("The user asks 2+2.".into()),
            ModelEvent::Reasoning(" That is 4.".into()),
            ModelEvent::Thinking(ThinkingBlock::Thinking {
                thinking: "The user asks 2+2. That is 4.".into(),
                signature: "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds".into(),
            }),
            ModelEvent::Thinking(ThinkingBlock::RedactedThinking {
                data: "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP".into(),
            }),
            ModelEvent::Text("2 + 2".into()),
            ModelEvent::Text(" = 4".into()),
            ModelEvent::Finish(FinishReason::Stop),
            ModelEvent::Usage(TokenUsage { input_tokens: 36, output_tokens: 41, ..TokenUsage::default() }),
        ]
    );
}

#[tokio::test]
async fn input_tokens_count_the_whole_prompt_with_its_cached_parts() {
    let events = events_of(Reply::sse(vec![fixture("cached_prompt.sse")])).await;
    assert_eq!(
        events,
        [
            ModelEvent::Text("Cached.".into()),
            ModelEvent::Finish(FinishReason::Length),
            ModelEvent::Usage(TokenUsage {
                input_tokens: 25 + 1800 + 200,
                output_tokens: 9,
                cache_read_tokens: 1800,
                cache_write_tokens: 200,
                reasoning_tokens: 0,
            }),
        ]
    );
}

#[tokio::test]
async fn a_refusal_finishes_as_content_filter() {
    let events = events_of(Reply::sse(vec![fixture("refusal.sse")])).await;
    assert_eq!(events[0], ModelEvent::Text("I can't help with that.".into()));
    assert_eq!(events[1], ModelEvent::Finish(FinishReason::ContentFilter));
}

#[tokio::test]
async fn an_error_event_mid_stream_follows_the_partial_text() {
    let (items, _) = run(Reply::sse(pieces(&fixture("error_midstream.sse"), 50)), simple_request()).await;
    assert_eq!(items.len(), 3, "{items:?}");
    assert_eq!(items[0].as_ref().unwrap(), &ModelEvent::Text("Partial".into()));
    assert_eq!(items[1].as_ref().unwrap(), &ModelEvent::Text(" answer".into()));
    match &items[2] {
        Err(error @ Error::Provider { status: 529, message }) => {
            assert_eq!(message, "Overloaded");
            assert!(error.is_transient());
        }
        other => panic!("expected an overloaded error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_stream_cut_before_message_stop_is_a_transport_error() {
    let reply = Reply {
        status: 200,
        headers: vec![("content-type", "text/event-stream".into())],
        body: Body::CloseDelimited(vec![fixture("truncated.sse")]),
    };
    let (items, _) = run(reply, simple_request()).await;
    // Even with a stop reason, only `message_stop` completes the answer.
    assert_eq!(items[0].as_ref().unwrap(), &ModelEvent::Text("This answer is cut".into()));
    assert_eq!(items[1].as_ref().unwrap(), &ModelEvent::Finish(FinishReason::Stop));
    match &items[2] {
        Err(error @ Error::Transport(message)) => {
            assert!(message.contains("ended before the answer was complete"), "{message}");
            assert!(error.is_transient());
        }
        other => panic!("expected a transport error, got {other:?}"),
    }
    assert_eq!(items.len(), 3);
}

#[tokio::test]
async fn status_429_is_rate_limited_with_retry_after() {
    let message = "Number of request tokens has exceeded your per-minute rate limit";
    let mut reply = error_reply(429, "rate_limit_error", message);
    reply.headers.push(("retry-after", "12".into()));
    let (items, _) = run(reply, simple_request()).await;
    match &items[..] {
        [Err(error @ Error::RateLimited { retry_after, message: said })] => {
            assert_eq!(*retry_after, Some(Duration::from_secs(12)));
            assert_eq!(said, message);
            assert!(error.is_transient());
        }
        other => panic!("expected a rate limit, got {other:?}"),
    }
}

#[tokio::test]
async fn status_529_is_a_transient_overload() {
    let (items, _) = run(error_reply(529, "overloaded_error", "Overloaded"), simple_request()).await;
    match &items[..] {
        [Err(error @ Error::Provider { status: 529, message })] => {
            assert_eq!(message, "Overloaded");
            assert!(error.is_transient());
        }
        other => panic!("expected an overloaded error, got {other:?}"),
    }
}

#[tokio::test]
async fn status_401_is_a_permanent_provider_error() {
    let (items, _) = run(error_reply(401, "authentication_error", "invalid x-api-key"), simple_request()).await;
    match &items[..] {
        [Err(error @ Error::Provider { status: 401, message })] => {
            assert_eq!(message, "invalid x-api-key");
            assert!(!error.is_transient());
        }
        other => panic!("expected an authentication error, got {other:?}"),
    }
}

#[tokio::test]
async fn the_request_carries_headers_system_grouped_tool_results_cache_marks_and_params() {
    let mut extra = serde_json::Map::new();
    extra.insert("metadata".into(), serde_json::json!({"user_id": "u-1"}));
    extra.insert("model".into(), serde_json::json!("not-this-one"));
    let request = ModelRequest {
        model: "claude-sonnet-4-5".into(),
        messages: vec![
            Message::System { content: "You are terse.".into() },
            Message::user("Weather and time in Paris?"),
            Message::Assistant {
                content: None,
                reasoning: Some("never sent".into()),
                thinking: vec![],
                tool_calls: vec![
                    AssistantToolCall {
                        id: "toolu_1".into(),
                        name: "get_weather".into(),
                        arguments: r#"{"city":"Paris"}"#.into(),
                    },
                    AssistantToolCall {
                        id: "toolu_2".into(),
                        name: "get_current_datetime".into(),
                        arguments: "".into(),
                    },
                ],
            },
            Message::Tool { tool_call_id: "toolu_1".into(), content: "18°C".into() },
            Message::Tool { tool_call_id: "toolu_2".into(), content: "12:00".into() },
        ],
        tools: vec![
            ToolDefinition {
                name: "get_weather".into(),
                description: "Current weather of a city.".into(),
                parameters: serde_json::json!({"type": "object", "properties": {"city": {"type": "string"}}}),
            },
            ToolDefinition {
                name: "get_current_datetime".into(),
                description: "The time now.".into(),
                parameters: serde_json::json!({"type": "object", "properties": {}}),
            },
        ],
        params: ModelParams {
            max_tokens: Some(512),
            temperature: Some(0.2),
            top_p: Some(0.9),
            top_k: Some(40),
            parallel_tool_calls: Some(false),
            reasoning_effort: Some("low".into()),
            cache_control: Some(CacheControl { kind: "ephemeral".into() }),
            extra,
        },
        response_format: Some(ResponseFormat::JsonSchema {
            json_schema: JsonSchemaFormat {
                name: "weather".into(),
                description: None,
                schema: Some(serde_json::json!({"type": "object", "additionalProperties": false})),
                strict: Some(true),
            },
        }),
        sub_agent: false,
    };
    let (items, recorded) = run(Reply::sse(vec![fixture("plain_text.sse")]), request).await;
    assert!(items.iter().all(Result::is_ok), "{items:?}");
    assert_eq!(recorded.request_line, "POST /v1/messages HTTP/1.1");
    assert_eq!(recorded.header("x-api-key"), Some("sk-ant-test"));
    assert_eq!(recorded.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(recorded.header("content-type"), Some("application/json"));
    assert_eq!(recorded.header("authorization"), None);
    let ephemeral = serde_json::json!({"type": "ephemeral"});
    assert_eq!(
        recorded.json(),
        serde_json::json!({
            "model": "claude-sonnet-4-5",
            // 512 does not exceed the thinking budget, so the answer keeps 512 on top of it.
            "max_tokens": 512 + 1024,
            "system": [{"type": "text", "text": "You are terse.", "cache_control": ephemeral}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Weather and time in Paris?"}]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "get_current_datetime", "input": {}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18°C"},
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": "12:00", "cache_control": ephemeral},
                ]},
            ],
            "tools": [
                {
                    "name": "get_weather",
                    "description": "Current weather of a city.",
                    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
                },
                {
                    "name": "get_current_datetime",
                    "description": "The time now.",
                    "input_schema": {"type": "object", "properties": {}},
                    "cache_control": ephemeral,
                },
            ],
            "tool_choice": {"type": "auto", "disable_parallel_tool_use": true},
            "stream": true,
            "temperature": 0.2,
            "top_p": 0.9,
            "top_k": 40,
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "output_config": {"format": {"type": "json_schema", "schema": {"type": "object", "additionalProperties": false}}},
            "metadata": {"user_id": "u-1"},
        })
    );
}

#[tokio::test]
async fn without_cache_control_or_key_nothing_of_them_is_sent() {
    let (base_url, server) = serve_once(Reply::sse(vec![fixture("plain_text.sse")])).await;
    let client = AnthropicClient::new(format!("{base_url}/"), None, reqwest::Client::new());
    let request = ModelRequest {
        messages: vec![Message::System { content: "Be nice.".into() }, Message::user("Hi")],
        response_format: Some(ResponseFormat::JsonObject),
        ..simple_request()
    };
    let items: Vec<_> = client.stream(request).collect().await;
    assert!(items.iter().all(Result::is_ok));
    let recorded = server.await.unwrap();
    assert_eq!(recorded.request_line, "POST /v1/messages HTTP/1.1");
    assert_eq!(recorded.header("x-api-key"), None);
    let body = recorded.json();
    assert!(!body.to_string().contains("cache_control"), "{body}");
    assert_eq!(body["max_tokens"], 4096);
    // `json_object` has no switch at Anthropic: an instruction follows the system prompt.
    let system = body["system"].as_array().unwrap();
    assert_eq!(system.len(), 2);
    assert_eq!(system[0], serde_json::json!({"type": "text", "text": "Be nice."}));
    assert!(system[1]["text"].as_str().unwrap().contains("JSON object"));
}

#[tokio::test]
async fn images_go_as_base64_image_blocks_of_the_user_turn() {
    let request = ModelRequest {
        model: "claude-sonnet-4-5".into(),
        messages: vec![Message::User {
            content: "What is this?".into(),
            images: vec![Image { media_type: "image/jpeg".into(), data: "/9j/4AAQ".into() }],
        }],
        ..ModelRequest::default()
    };
    let (items, recorded) = run(Reply::sse(vec![fixture("plain_text.sse")]), request).await;
    assert!(items.iter().all(Result::is_ok));
    assert_eq!(
        recorded.json()["messages"],
        serde_json::json!([{"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQ"}},
        ]}])
    );
}
