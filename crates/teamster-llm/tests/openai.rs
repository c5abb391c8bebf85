//! The OpenAI-compatible adapter against recorded chat-completions streams.
//!
//! Each fixture under `tests/fixtures/openai/` is a real-format SSE body. A one-shot local HTTP
//! server replays it, split into network chunks at chosen (often awkward) byte positions, and the
//! tests assert both the events the adapter produced and the request it sent.

mod support;

use std::time::Duration;

use futures_util::StreamExt;
use support::{Body, Reply, pieces, serve_once, split_at, text_of, tool_calls_of};
use teamster_llm::providers::OpenAiClient;
use teamster_llm::{
    AssistantToolCall, Error, Image, Message, ModelClient, ModelEvent, ModelRequest, TokenUsage, ToolDefinition,
};
use teamster_protocol::agent::{CacheControl, JsonSchemaFormat, ModelParams, ResponseFormat};
use teamster_protocol::event::FinishReason;

fn fixture(name: &str) -> Vec<u8> {
    support::fixture("openai", name)
}

fn simple_request() -> ModelRequest {
    ModelRequest {
        model: "gpt-4o-mini".into(),
        messages: vec![Message::user("Hi")],
        ..ModelRequest::default()
    }
}

/// Serves `reply`, runs `request` through the adapter, and returns every stream item.
async fn run(reply: Reply, request: ModelRequest) -> (Vec<Result<ModelEvent, Error>>, support::Recorded) {
    support::run_adapter(reply, request, |base_url| OpenAiClient::new(base_url, Some("sk-test".into()), reqwest::Client::new())).await
}

async fn events_of(reply: Reply) -> Vec<ModelEvent> {
    let (items, _) = run(reply, simple_request()).await;
    items.into_iter().map(|item| item.expect("no error")).collect()
}

#[tokio::test]
async fn plain_text_streams_text_then_finish_then_usage() {
    let events = events_of(Reply::sse(vec![fixture("plain_text.sse")])).await;
    let texts: Vec<ModelEvent> =
        ["Hello", "!", " How", " can", " I", " help", " you", " today", "?"].map(|t| ModelEvent::Text(t.into())).into();
    assert_eq!(events[..9], texts[..]);
    assert_eq!(
        events[9..],
        [
            ModelEvent::Finish(FinishReason::Stop),
            ModelEvent::Usage(TokenUsage { input_tokens: 19, output_tokens: 10, ..TokenUsage::default() }),
        ]
    );
}

#[tokio::test]
async fn every_fixture_decodes_the_same_whatever_the_chunking() {
    for name in ["plain_text.sse", "reasoning_content.sse", "utf8_split.sse", "parallel_tool_calls.sse", "refusal.sse"]
    {
        let bytes = fixture(name);
        let whole = events_of(Reply::sse(vec![bytes.clone()])).await;
        for size in [1, 2, 3, 5, 7, 13, 64, 1000] {
            let split = events_of(Reply::sse(pieces(&bytes, size))).await;
            // Fragments may arrive in other sizes only if the adapter merged or split them: it
            // must not, since every SSE event is one chunk whatever the network does.
            assert_eq!(split, whole, "{name} in pieces of {size} bytes");
        }
    }
}

#[tokio::test]
async fn reasoning_content_and_its_alias_come_before_the_text() {
    let events = events_of(Reply::sse(pieces(&fixture("reasoning_content.sse"), 100))).await;
    assert_eq!(
        events,
        [
            ModelEvent::Reasoning("The user".into()),
            ModelEvent::Reasoning(" asks 2+2.".into()),
            ModelEvent::Reasoning(" That is 4.".into()),
            ModelEvent::Reasoning(" (alias field)".into()),
            ModelEvent::Text("2 + 2".into()),
            ModelEvent::Text(" = 4".into()),
            ModelEvent::Finish(FinishReason::Stop),
            ModelEvent::Usage(TokenUsage {
                input_tokens: 30,
                output_tokens: 25,
                cache_read_tokens: 16,
                cache_write_tokens: 0,
                reasoning_tokens: 18,
            }),
        ]
    );
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
async fn two_parallel_tool_calls_with_split_arguments() {
    // Pieces of 5 bytes cut JSON tokens, keys and the `data:` prefixes everywhere.
    let events = events_of(Reply::sse(pieces(&fixture("parallel_tool_calls.sse"), 5))).await;
    assert_eq!(
        tool_calls_of(&events),
        [
            (
                "call_weather_1".to_owned(),
                "get_weather".to_owned(),
                r#"{"city": "Paris", "unit": "celsius"}"#.to_owned()
            ),
            ("call_time_2".to_owned(), "get_current_datetime".to_owned(), r#"{"timezone": "Europe/Paris"}"#.to_owned()),
        ]
    );
    // The first fragment of each call names it; the others carry only arguments.
    assert_eq!(
        events[0],
        ModelEvent::ToolCall {
            index: 0,
            id: Some("call_weather_1".into()),
            name: Some("get_weather".into()),
            arguments: String::new()
        }
    );
    assert_eq!(events[1], ModelEvent::ToolCall { index: 0, id: None, name: None, arguments: r#"{"ci"#.into() });
    assert_eq!(text_of(&events), "");
    let n = events.len();
    assert_eq!(events[n - 2], ModelEvent::Finish(FinishReason::ToolCalls));
    assert_eq!(
        events[n - 1],
        ModelEvent::Usage(TokenUsage {
            input_tokens: 120,
            output_tokens: 48,
            cache_read_tokens: 64,
            ..TokenUsage::default()
        })
    );
}

#[tokio::test]
async fn a_usage_only_final_chunk_without_done_ends_the_stream() {
    let bytes = fixture("usage_only_final.sse");
    let reply = Reply {
        status: 200,
        headers: vec![("content-type", "text/event-stream".into())],
        body: Body::CloseDelimited(pieces(&bytes, 97)),
    };
    assert_eq!(
        events_of(reply).await,
        [
            ModelEvent::Text("Done.".into()),
            ModelEvent::Finish(FinishReason::Length),
            ModelEvent::Usage(TokenUsage { input_tokens: 5, output_tokens: 2, ..TokenUsage::default() }),
        ]
    );
}

#[tokio::test]
async fn refusals_are_their_own_events() {
    let events = events_of(Reply::sse(vec![fixture("refusal.sse")])).await;
    assert_eq!(
        events,
        [
            ModelEvent::Refusal("I'm sorry,".into()),
            ModelEvent::Refusal(" I can't help with that.".into()),
            ModelEvent::Finish(FinishReason::Stop),
        ]
    );
}

#[tokio::test]
async fn an_error_object_mid_stream_ends_it_with_a_provider_error() {
    let (items, _) = run(Reply::sse(pieces(&fixture("error_midstream.sse"), 50)), simple_request()).await;
    assert_eq!(items.len(), 3, "{items:?}");
    assert_eq!(items[0].as_ref().unwrap(), &ModelEvent::Text("Partial".into()));
    assert_eq!(items[1].as_ref().unwrap(), &ModelEvent::Text(" answer".into()));
    match &items[2] {
        Err(Error::Provider { status, message }) => {
            assert_eq!(*status, 500);
            assert!(message.starts_with("The server had an error"), "{message}");
        }
        other => panic!("expected a provider error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_stream_cut_before_the_finish_is_a_transport_error() {
    let reply = Reply {
        status: 200,
        headers: vec![("content-type", "text/event-stream".into())],
        body: Body::CloseDelimited(vec![fixture("truncated.sse")]),
    };
    let (items, _) = run(reply, simple_request()).await;
    assert_eq!(items[0].as_ref().unwrap(), &ModelEvent::Text("This answer is cut".into()));
    assert!(matches!(items[1], Err(Error::Transport(_))), "{items:?}");
    assert!(items[1].as_ref().unwrap_err().is_transient());
    assert_eq!(items.len(), 2);
}

#[tokio::test]
async fn status_429_is_rate_limited_with_retry_after() {
    let mut reply = Reply::fixed(
        429,
        "application/json",
        r#"{"error":{"message":"Rate limit reached for gpt-4o","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#,
    );
    reply.headers.push(("retry-after", "7".into()));
    let (items, _) = run(reply, simple_request()).await;
    assert_eq!(items.len(), 1);
    match &items[0] {
        Err(error @ Error::RateLimited { retry_after, message }) => {
            assert_eq!(*retry_after, Some(Duration::from_secs(7)));
            assert_eq!(message, "Rate limit reached for gpt-4o");
            assert!(error.is_transient());
        }
        other => panic!("expected a rate limit, got {other:?}"),
    }
}

#[tokio::test]
async fn status_401_is_a_provider_error_with_the_error_message() {
    let reply = Reply::fixed(
        401,
        "application/json; charset=utf-8",
        r#"{"error":{"message":"Incorrect API key provided: sk-test. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#,
    );
    let (items, _) = run(reply, simple_request()).await;
    assert_eq!(items.len(), 1);
    match &items[0] {
        Err(error @ Error::Provider { status: 401, message }) => {
            assert!(message.starts_with("Incorrect API key provided"), "{message}");
            assert!(!error.is_transient());
        }
        other => panic!("expected a 401 provider error, got {other:?}"),
    }
}

#[tokio::test]
async fn status_500_keeps_a_truncated_raw_body() {
    let body = format!("upstream exploded: {}", "x".repeat(20_000));
    let (items, _) = run(Reply::fixed(500, "text/plain", body), simple_request()).await;
    assert_eq!(items.len(), 1);
    match &items[0] {
        Err(error @ Error::Provider { status: 500, message }) => {
            assert!(message.starts_with("upstream exploded: xxx"), "{message}");
            assert!(message.len() <= 4096, "{} bytes", message.len());
            assert!(error.is_transient());
        }
        other => panic!("expected a 500 provider error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_refused_connection_is_a_transport_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    let client = OpenAiClient::new(format!("http://{address}/v1"), None, reqwest::Client::new());
    let items: Vec<_> = client.stream(simple_request()).collect().await;
    assert_eq!(items.len(), 1);
    match &items[0] {
        Err(error @ Error::Transport(message)) => {
            assert!(message.to_lowercase().contains("connect"), "{message}");
            assert!(error.is_transient());
        }
        other => panic!("expected a transport error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_non_streamed_json_answer_is_replayed_as_events() {
    let body = r#"{"id":"chatcmpl-x","object":"chat.completion","created":1,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"Hi there","tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}"#;
    let events = events_of(Reply::fixed(200, "application/json", body)).await;
    assert_eq!(
        events,
        [
            ModelEvent::Text("Hi there".into()),
            ModelEvent::ToolCall {
                index: 0,
                id: Some("call_1".into()),
                name: Some("f".into()),
                arguments: "{}".into()
            },
            ModelEvent::Finish(FinishReason::ToolCalls),
            ModelEvent::Usage(TokenUsage { input_tokens: 3, output_tokens: 2, ..TokenUsage::default() }),
        ]
    );
}

#[tokio::test]
async fn the_request_carries_messages_tools_params_and_stream_options() {
    let mut extra = serde_json::Map::new();
    extra.insert("seed".into(), serde_json::json!(42));
    extra.insert("user".into(), serde_json::json!("u-1"));
    let request = ModelRequest {
        model: "gpt-4o".into(),
        messages: vec![
            Message::System { content: "You are terse.".into() },
            Message::user("Weather in Paris?"),
            Message::Assistant {
                content: None,
                reasoning: Some("Paris first.".into()),
                thinking: vec![],
                tool_calls: vec![AssistantToolCall {
                    id: "call_1".into(),
                    name: "get_weather".into(),
                    arguments: r#"{"city":"Paris"}"#.into(),
                }],
            },
            Message::Tool { tool_call_id: "call_1".into(), content: "18°C".into() },
            Message::Assistant { content: Some("It is 18°C.".into()), reasoning: None, thinking: vec![], tool_calls: vec![] },
            Message::user("Thanks"),
        ],
        tools: vec![ToolDefinition {
            name: "get_weather".into(),
            description: "Current weather of a city.".into(),
            parameters: serde_json::json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        }],
        params: ModelParams {
            max_tokens: Some(256),
            temperature: Some(0.2),
            top_p: Some(0.9),
            top_k: Some(40),
            parallel_tool_calls: Some(true),
            reasoning_effort: Some("low".into()),
            cache_control: Some(CacheControl { kind: "ephemeral".into() }),
            extra,
        },
        response_format: Some(ResponseFormat::JsonSchema {
            json_schema: JsonSchemaFormat {
                name: "weather".into(),
                description: Some("A weather report.".into()),
                schema: Some(serde_json::json!({"type": "object"})),
                strict: Some(true),
            },
        }),
        sub_agent: false,
    };
    let (items, recorded) = run(Reply::sse(vec![fixture("plain_text.sse")]), request).await;
    assert!(items.iter().all(Result::is_ok));
    assert_eq!(recorded.request_line, "POST /v1/chat/completions HTTP/1.1");
    assert_eq!(recorded.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(recorded.header("content-type"), Some("application/json"));
    assert_eq!(
        recorded.json(),
        serde_json::json!({
            "model": "gpt-4o",
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": null, "reasoning_content": "Paris first.", "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "18°C"},
                {"role": "assistant", "content": "It is 18°C."},
                {"role": "user", "content": "Thanks"},
            ],
            "tools": [{"type": "function", "function": {
                "name": "get_weather",
                "description": "Current weather of a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            }}],
            "stream": true,
            "stream_options": {"include_usage": true},
            "max_tokens": 256,
            "temperature": 0.2,
            "top_p": 0.9,
            "parallel_tool_calls": true,
            "reasoning_effort": "low",
            "response_format": {"type": "json_schema", "json_schema": {
                "name": "weather", "description": "A weather report.", "schema": {"type": "object"}, "strict": true,
            }},
            "seed": 42,
            "user": "u-1",
        })
    );
}

#[tokio::test]
async fn simple_response_formats_and_no_key_means_no_authorization() {
    for (format, expected) in [
        (ResponseFormat::Text, serde_json::json!({"type": "text"})),
        (ResponseFormat::JsonObject, serde_json::json!({"type": "json_object"})),
    ] {
        let (base_url, server) = serve_once(Reply::sse(vec![fixture("plain_text.sse")])).await;
        let client = OpenAiClient::new(format!("{base_url}/"), None, reqwest::Client::new());
        let request = ModelRequest { response_format: Some(format), ..simple_request() };
        let items: Vec<_> = client.stream(request).collect().await;
        assert!(items.iter().all(Result::is_ok));
        let recorded = server.await.unwrap();
        assert_eq!(recorded.request_line, "POST /v1/chat/completions HTTP/1.1");
        assert_eq!(recorded.header("authorization"), None);
        assert_eq!(recorded.json()["response_format"], expected);
    }
}

#[tokio::test]
async fn images_go_as_image_url_parts_after_the_text() {
    let image = Image { media_type: "image/png".into(), data: "iVBORw0K".into() };
    let request = ModelRequest {
        model: "gpt-4o".into(),
        messages: vec![
            Message::User { content: "What is this?".into(), images: vec![image.clone()] },
            Message::User { content: String::new(), images: vec![image] },
        ],
        ..ModelRequest::default()
    };
    let (items, recorded) = run(Reply::sse(vec![fixture("plain_text.sse")]), request).await;
    assert!(items.iter().all(Result::is_ok));
    let url = serde_json::json!({"url": "data:image/png;base64,iVBORw0K"});
    assert_eq!(
        recorded.json()["messages"],
        serde_json::json!([
            {"role": "user", "content": [{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": url}]},
            {"role": "user", "content": [{"type": "image_url", "image_url": url}]},
        ])
    );
}
