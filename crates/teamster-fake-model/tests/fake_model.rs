//! The fake model end to end: the binary's start-up line, the raw wire formats, every directive
//! through the real OpenAI and Anthropic adapters of `teamster-llm`, and the request log.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use teamster_fake_model::FakeModelServer;
use teamster_llm::providers::{AnthropicClient, OpenAiClient};
use teamster_llm::{
    AssistantToolCall, Error, Message, ModelClient, ModelEvent, ModelRequest, ThinkingBlock, TokenUsage, ToolDefinition,
};
use teamster_protocol::agent::{CacheControl, ModelParams};
use teamster_protocol::event::FinishReason;

fn request(messages: Vec<Message>) -> ModelRequest {
    ModelRequest { model: "fake-1".into(), messages, ..ModelRequest::default() }
}

fn user(text: &str) -> Message {
    Message::user(text)
}

async fn collect(server: &FakeModelServer, request: ModelRequest) -> Vec<Result<ModelEvent, Error>> {
    let client = OpenAiClient::new(server.base_url(), Some("sk-fake".into()), reqwest::Client::new());
    client.stream(request).collect().await
}

async fn events(server: &FakeModelServer, request: ModelRequest) -> Vec<ModelEvent> {
    collect(server, request).await.into_iter().map(|item| item.expect("no error")).collect()
}

async fn collect_anthropic(server: &FakeModelServer, request: ModelRequest) -> Vec<Result<ModelEvent, Error>> {
    let client = AnthropicClient::new(server.base_url(), Some("sk-ant-fake".into()), reqwest::Client::new());
    client.stream(request).collect().await
}

async fn anthropic_events(server: &FakeModelServer, request: ModelRequest) -> Vec<ModelEvent> {
    collect_anthropic(server, request).await.into_iter().map(|item| item.expect("no error")).collect()
}

/// Folds tool call fragments into `(id, name, arguments)` per index.
fn tool_calls_of(events: &[ModelEvent]) -> Vec<(String, String, String)> {
    let mut calls: Vec<(String, String, String)> = Vec::new();
    for event in events {
        if let ModelEvent::ToolCall { index, id, name, arguments } = event {
            let index = *index as usize;
            if calls.len() <= index {
                calls.resize(index + 1, Default::default());
            }
            let call = &mut calls[index];
            if let Some(id) = id {
                call.0 = id.clone();
            }
            if let Some(name) = name {
                call.1 = name.clone();
            }
            call.2.push_str(arguments);
        }
    }
    calls
}

fn text_of(events: &[ModelEvent]) -> String {
    events
        .iter()
        .filter_map(|event| match event {
            ModelEvent::Text(text) => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

fn usage_of(events: &[ModelEvent]) -> TokenUsage {
    match events.last() {
        Some(ModelEvent::Usage(usage)) => *usage,
        other => panic!("the last event should be the usage, got {other:?}"),
    }
}

#[test]
fn the_binary_prints_its_address_first_and_serves() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fake-model"))
        .args(["--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start fake-model");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("read the first line");
    let address = line.trim().strip_prefix("listening on http://").expect("the address line").to_owned();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let status = runtime.block_on(async {
        reqwest::get(format!("http://{address}/healthz")).await.map(|response| response.status().as_u16())
    });
    child.kill().expect("stop fake-model");
    let _ = child.wait();
    assert_eq!(status.expect("healthz answers"), 200);
}

#[tokio::test]
async fn the_stream_is_in_the_real_chunk_format() {
    let server = FakeModelServer::start().await.unwrap();
    let body = serde_json::json!({
        "model": "gpt-fake",
        "stream": true,
        "stream_options": {"include_usage": true},
        "messages": [{"role": "system", "content": "Be nice."}, {"role": "user", "content": "hello world"}],
    });
    let response = reqwest::Client::new()
        .post(format!("{}/chat/completions", server.base_url()))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let text = response.text().await.unwrap();
    let frames: Vec<&str> = text.split("\n\n").filter(|frame| !frame.is_empty()).collect();
    assert_eq!(frames.last(), Some(&"data: [DONE]"));
    let chunks: Vec<serde_json::Value> = frames[..frames.len() - 1]
        .iter()
        .map(|frame| serde_json::from_str(frame.strip_prefix("data: ").unwrap()).unwrap())
        .collect();
    for chunk in &chunks {
        assert_eq!(chunk["object"], "chat.completion.chunk");
        assert_eq!(chunk["model"], "gpt-fake");
        assert_eq!(chunk["id"], chunks[0]["id"]);
    }
    assert_eq!(chunks[0]["choices"][0]["delta"], serde_json::json!({"role": "assistant", "content": ""}));
    let words: Vec<&str> =
        chunks[1..5].iter().map(|chunk| chunk["choices"][0]["delta"]["content"].as_str().unwrap()).collect();
    assert_eq!(words, ["You ", "said: ", "hello ", "world"]);
    assert_eq!(chunks[5]["choices"][0]["finish_reason"], "stop");
    assert_eq!(chunks[5]["usage"], serde_json::Value::Null);
    assert_eq!(chunks[6]["choices"], serde_json::json!([]));
    // "Be nice." and "hello world" are 19 characters: 19 / 4 = 4.
    assert_eq!(chunks[6]["usage"], serde_json::json!({"prompt_tokens": 4, "completion_tokens": 4, "total_tokens": 8}));
    assert_eq!(chunks.len(), 7);
}

#[tokio::test]
async fn echo_through_the_adapter() {
    let server = FakeModelServer::start().await.unwrap();
    let events = events(&server, request(vec![user("earlier"), user("What is up?")])).await;
    assert_eq!(text_of(&events), "You said: What is up?");
    let n = events.len();
    assert_eq!(events[n - 2], ModelEvent::Finish(FinishReason::Stop));
    assert_eq!(usage_of(&events), TokenUsage { input_tokens: 4, output_tokens: 5, ..TokenUsage::default() });
}

#[tokio::test]
async fn tool_directives_become_parallel_calls_and_tool_results_are_echoed() {
    let server = FakeModelServer::start().await.unwrap();
    let ask = user(r#"go [tool:get_weather {"city": "Paris", "unit": "celsius"}] [tool:get_current_datetime]"#);
    let first = events(&server, request(vec![ask.clone()])).await;
    assert_eq!(
        tool_calls_of(&first),
        [
            ("call_1".to_owned(), "get_weather".to_owned(), r#"{"city": "Paris", "unit": "celsius"}"#.to_owned()),
            ("call_2".to_owned(), "get_current_datetime".to_owned(), "{}".to_owned()),
        ]
    );
    let tool_chunks = first.iter().filter(|event| matches!(event, ModelEvent::ToolCall { .. })).count();
    assert!(tool_chunks >= 5, "arguments arrive in several fragments: {first:?}");
    assert_eq!(first[first.len() - 2], ModelEvent::Finish(FinishReason::ToolCalls));
    assert_eq!(usage_of(&first).output_tokens, tool_chunks as u64);

    let second = events(
        &server,
        request(vec![
            ask,
            Message::Assistant { content: None, reasoning: None, thinking: Vec::new(), tool_calls: vec![] },
            Message::Tool { tool_call_id: "call_1".into(), content: "18 degrees".into() },
            Message::Tool { tool_call_id: "call_2".into(), content: "noon".into() },
        ]),
    )
    .await;
    assert_eq!(text_of(&second), "Tool result: 18 degrees | noon", "every trailing result is echoed");
    assert!(second.contains(&ModelEvent::Finish(FinishReason::Stop)));

    // Ids keep counting across requests.
    let third = events(&server, request(vec![user("[tool:again]")])).await;
    assert!(matches!(&third[0], ModelEvent::ToolCall { id: Some(id), .. } if id == "call_3"), "{third:?}");
}

#[tokio::test]
async fn tokens_reasoning_and_history() {
    let server = FakeModelServer::start().await.unwrap();
    let tokens = events(&server, request(vec![user("[tokens:50]")])).await;
    let texts: Vec<&ModelEvent> = tokens.iter().filter(|event| matches!(event, ModelEvent::Text(_))).collect();
    assert_eq!(texts.len(), 50);
    assert_eq!(texts[0], &ModelEvent::Text("tok1 ".into()));
    assert_eq!(texts[49], &ModelEvent::Text("tok50 ".into()));
    assert_eq!(usage_of(&tokens).output_tokens, 50);

    let reasoning = events(&server, request(vec![user("hi [reasoning]")])).await;
    assert_eq!(
        reasoning[..3],
        [
            ModelEvent::Reasoning("Let ".into()),
            ModelEvent::Reasoning("me ".into()),
            ModelEvent::Reasoning("think.".into())
        ]
    );
    assert_eq!(text_of(&reasoning), "You said: hi [reasoning]");
    assert_eq!(usage_of(&reasoning).output_tokens, 3 + 4);

    let history = events(
        &server,
        request(vec![
            user("one"),
            Message::Assistant { content: Some("ok".into()), reasoning: None, thinking: Vec::new(), tool_calls: vec![] },
            user("two"),
            user("three [history]"),
        ]),
    )
    .await;
    assert_eq!(text_of(&history), "History: one | two | three [history]");
}

#[tokio::test]
async fn error_directives_are_classified_by_the_adapter() {
    let server = FakeModelServer::start().await.unwrap();
    let items = collect(&server, request(vec![user("[error:429]")])).await;
    assert!(
        matches!(items[..], [Err(Error::RateLimited { retry_after: Some(wait), .. })] if wait == Duration::from_secs(1)),
        "{items:?}"
    );
    let items = collect(&server, request(vec![user("[error:503]")])).await;
    assert!(
        matches!(&items[..], [Err(Error::Provider { status: 503, message })] if message == "fake error 503"),
        "{items:?}"
    );
    let items = collect(&server, request(vec![user("[midstream-error]")])).await;
    assert_eq!(items.len(), 3, "{items:?}");
    assert_eq!(items[0].as_ref().unwrap(), &ModelEvent::Text("Partial ".into()));
    assert_eq!(items[1].as_ref().unwrap(), &ModelEvent::Text("answer".into()));
    assert!(
        matches!(&items[2], Err(Error::Provider { message, .. }) if message == "fake mid-stream failure"),
        "{items:?}"
    );
}

#[tokio::test]
async fn delay_spaces_the_chunks() {
    let server = FakeModelServer::start().await.unwrap();
    let started = Instant::now();
    let events = events(&server, request(vec![user("[delay:25] [tokens:3]")])).await;
    // The role chunk, three tokens and the finish chunk each wait 25 ms first.
    assert!(started.elapsed() >= Duration::from_millis(5 * 25), "{:?}", started.elapsed());
    assert_eq!(text_of(&events), "tok1 tok2 tok3 ");
}

#[tokio::test]
async fn non_streaming_requests_get_a_chat_completion_and_everything_is_recorded() {
    let server = FakeModelServer::start().await.unwrap();
    let http = reqwest::Client::new();
    let base = format!("http://{}", server.address());
    let body = serde_json::json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "[tool:f {\"a\": 1}] [reasoning]"}]}]});
    let answer: serde_json::Value =
        http.post(format!("{base}/v1/chat/completions")).json(&body).send().await.unwrap().json().await.unwrap();
    assert_eq!(answer["object"], "chat.completion");
    let choice = &answer["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["content"], serde_json::Value::Null);
    assert_eq!(choice["message"]["reasoning_content"], "Let me think.");
    assert_eq!(
        choice["message"]["tool_calls"],
        serde_json::json!([{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}])
    );
    assert_eq!(answer["usage"]["completion_tokens"], 3 + 1 + 3);

    let recorded: serde_json::Value = http.get(format!("{base}/requests")).send().await.unwrap().json().await.unwrap();
    assert_eq!(recorded, serde_json::json!([body]));
    let bad = http.post(format!("{base}/chat/completions")).body("not json").send().await.unwrap();
    assert_eq!(bad.status(), 400);
    let cleared = http.delete(format!("{base}/requests")).send().await.unwrap();
    assert_eq!(cleared.status(), 204);
    let recorded: serde_json::Value = http.get(format!("{base}/requests")).send().await.unwrap().json().await.unwrap();
    assert_eq!(recorded, serde_json::json!([]));
}

/// The `(event name, data)` of each frame of a Messages stream.
fn anthropic_frames(text: &str) -> Vec<(String, serde_json::Value)> {
    text.split("\n\n")
        .filter(|frame| !frame.is_empty())
        .map(|frame| {
            let (event, data) = frame.split_once('\n').expect("an event line and a data line");
            let name = event.strip_prefix("event: ").expect("the event line").to_owned();
            let data: serde_json::Value =
                serde_json::from_str(data.strip_prefix("data: ").expect("the data line")).unwrap();
            assert_eq!(data["type"], name.as_str(), "the data names its event");
            (name, data)
        })
        .collect()
}

#[tokio::test]
async fn the_messages_stream_is_in_the_real_event_format() {
    let server = FakeModelServer::start().await.unwrap();
    let body = serde_json::json!({
        "model": "claude-fake",
        "max_tokens": 100,
        "stream": true,
        "system": "Be nice.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hello world"}]}],
    });
    let response = reqwest::Client::new()
        .post(format!("{}/messages", server.base_url()))
        .header("anthropic-version", "2023-06-01")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let frames = anthropic_frames(&response.text().await.unwrap());
    let names: Vec<&str> = frames.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "ping",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
    );
    let message = &frames[0].1["message"];
    assert_eq!(message["model"], "claude-fake");
    assert_eq!(message["role"], "assistant");
    assert_eq!(message["content"], serde_json::json!([]));
    // "Be nice." and "hello world" are 19 characters: 19 / 4 = 4.
    assert_eq!(
        message["usage"],
        serde_json::json!({"input_tokens": 4, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 1})
    );
    assert_eq!(frames[2].1["content_block"], serde_json::json!({"type": "text", "text": ""}));
    let words: Vec<&str> = frames[3..7]
        .iter()
        .map(|(_, data)| {
            assert_eq!(data["index"], 0);
            assert_eq!(data["delta"]["type"], "text_delta");
            data["delta"]["text"].as_str().unwrap()
        })
        .collect();
    assert_eq!(words, ["You ", "said: ", "hello ", "world"]);
    assert_eq!(frames[8].1["delta"], serde_json::json!({"stop_reason": "end_turn", "stop_sequence": null}));
    assert_eq!(frames[8].1["usage"], serde_json::json!({"output_tokens": 4}));
}

#[tokio::test]
async fn messages_directives_through_the_anthropic_adapter() {
    let server = FakeModelServer::start().await.unwrap();
    let echo = anthropic_events(&server, request(vec![user("earlier"), user("What is up?")])).await;
    assert_eq!(text_of(&echo), "You said: What is up?");
    assert_eq!(echo[echo.len() - 2], ModelEvent::Finish(FinishReason::Stop));
    assert_eq!(usage_of(&echo), TokenUsage { input_tokens: 4, output_tokens: 5, ..TokenUsage::default() });

    let ask =
        user(r#"go [tool:get_weather {"city": "Paris", "unit": "celsius"}] [tool:get_current_datetime] [reasoning]"#);
    let first = anthropic_events(&server, request(vec![ask.clone()])).await;
    assert_eq!(
        first[..3],
        [
            ModelEvent::Reasoning("Let ".into()),
            ModelEvent::Reasoning("me ".into()),
            ModelEvent::Reasoning("think.".into()),
        ]
    );
    assert_eq!(
        tool_calls_of(&first),
        [
            ("toolu_1".to_owned(), "get_weather".to_owned(), r#"{"city": "Paris", "unit": "celsius"}"#.to_owned()),
            ("toolu_2".to_owned(), "get_current_datetime".to_owned(), "{}".to_owned()),
        ]
    );
    assert_eq!(first[first.len() - 2], ModelEvent::Finish(FinishReason::ToolCalls));
    // Three reasoning chunks, then a header and the argument fragments of each call (`{}` is cut
    // in two).
    assert_eq!(usage_of(&first).output_tokens, 3 + (1 + 3) + (1 + 2));

    // The tool results travel as one user message of `tool_result` blocks; all are echoed.
    let second = anthropic_events(
        &server,
        request(vec![
            ask,
            Message::Assistant { content: None, reasoning: None, thinking: Vec::new(), tool_calls: vec![] },
            Message::Tool { tool_call_id: "toolu_1".into(), content: "18 degrees".into() },
            Message::Tool { tool_call_id: "toolu_2".into(), content: "noon".into() },
        ]),
    )
    .await;
    assert_eq!(text_of(&second), "Tool result: 18 degrees | noon");

    let tokens = anthropic_events(&server, request(vec![user("[tokens:20]")])).await;
    assert_eq!(text_of(&tokens), (1..=20).map(|n| format!("tok{n} ")).collect::<String>());
    assert_eq!(usage_of(&tokens).output_tokens, 20);

    let history = anthropic_events(
        &server,
        request(vec![
            user("one"),
            Message::Assistant { content: Some("ok".into()), reasoning: None, thinking: Vec::new(), tool_calls: vec![] },
            user("two [history]"),
        ]),
    )
    .await;
    assert_eq!(text_of(&history), "History: one | two [history]");
}

fn thinking_of(events: &[ModelEvent]) -> Vec<ThinkingBlock> {
    events
        .iter()
        .filter_map(|event| match event {
            ModelEvent::Thinking(block) => Some(block.clone()),
            _ => None,
        })
        .collect()
}

/// The conversation after a tool call answered with `thinking` and `reasoning`.
fn tool_step(ask: &Message, events: &[ModelEvent], reasoning: Option<&str>, thinking: Vec<ThinkingBlock>) -> ModelRequest {
    let (id, name, arguments) = tool_calls_of(events).remove(0);
    request(vec![
        ask.clone(),
        Message::Assistant {
            content: None,
            reasoning: reasoning.map(str::to_owned),
            thinking,
            tool_calls: vec![AssistantToolCall { id: id.clone(), name, arguments }],
        },
        Message::Tool { tool_call_id: id, content: "done".into() },
    ])
}

fn refusal_of(items: &[Result<ModelEvent, Error>]) -> String {
    match items {
        [Err(Error::Provider { status: 400, message })] => message.clone(),
        other => panic!("expected a 400, got {other:?}"),
    }
}

#[tokio::test]
async fn signed_thinking_must_come_back_byte_for_byte_with_its_tool_call() {
    let server = FakeModelServer::start().await.unwrap();
    let ask = user("[thinking] [tool:f]");
    let first = anthropic_events(&server, request(vec![ask.clone()])).await;
    let blocks = thinking_of(&first);
    let [ThinkingBlock::Thinking { thinking, signature }, ThinkingBlock::RedactedThinking { data }] = &blocks[..] else {
        panic!("a signed thinking block and a redacted one: {blocks:?}");
    };
    assert_eq!(thinking, "Let me think.");
    assert!(signature.contains('+') && signature.contains('/') && data.contains('+'), "{signature} {data}");

    let answered = anthropic_events(&server, tool_step(&ask, &first, None, blocks.clone())).await;
    assert_eq!(text_of(&answered), "Tool result: done");
    let again = thinking_of(&answered);
    assert!(
        matches!(&again[..], [ThinkingBlock::Thinking { signature: other, .. }, _] if other != signature),
        "every answer is signed anew: {again:?}"
    );

    let mut altered = blocks.clone();
    altered[0] = ThinkingBlock::Thinking { thinking: thinking.clone(), signature: format!("{signature} ") };
    let refused = collect_anthropic(&server, tool_step(&ask, &first, None, altered)).await;
    assert_eq!(refusal_of(&refused), "messages.1: Invalid `signature` in `thinking` block");
    let dropped = collect_anthropic(&server, tool_step(&ask, &first, None, blocks[..1].to_vec())).await;
    assert!(refusal_of(&dropped).contains("did not come back exactly as it was sent"));
    let reordered = collect_anthropic(&server, tool_step(&ask, &first, None, blocks.iter().rev().cloned().collect())).await;
    assert!(refusal_of(&reordered).contains("did not come back exactly as it was sent"));

    // The OpenAI endpoint wants its `reasoning_content` back with the call.
    let first = events(&server, request(vec![ask.clone()])).await;
    let answered = events(&server, tool_step(&ask, &first, Some("Let me think."), Vec::new())).await;
    assert_eq!(text_of(&answered), "Tool result: done");
    let refused = collect(&server, tool_step(&ask, &first, None, Vec::new())).await;
    assert!(refusal_of(&refused).starts_with("messages.1: the reasoning of the answer that called call_"));
}

#[tokio::test]
async fn messages_errors_are_classified_by_the_anthropic_adapter() {
    let server = FakeModelServer::start().await.unwrap();
    let items = collect_anthropic(&server, request(vec![user("[error:429]")])).await;
    assert!(
        matches!(items[..], [Err(Error::RateLimited { retry_after: Some(wait), .. })] if wait == Duration::from_secs(1)),
        "{items:?}"
    );
    let items = collect_anthropic(&server, request(vec![user("[error:529]")])).await;
    match &items[..] {
        [Err(error @ Error::Provider { status: 529, message })] => {
            assert_eq!(message, "fake error 529");
            assert!(error.is_transient());
        }
        other => panic!("expected an overload, got {other:?}"),
    }
    let items = collect_anthropic(&server, request(vec![user("[midstream-error]")])).await;
    assert_eq!(items.len(), 3, "{items:?}");
    assert_eq!(items[0].as_ref().unwrap(), &ModelEvent::Text("Partial ".into()));
    assert_eq!(items[1].as_ref().unwrap(), &ModelEvent::Text("answer".into()));
    assert!(
        matches!(&items[2], Err(Error::Provider { status: 529, message }) if message == "fake mid-stream failure"),
        "{items:?}"
    );

    let raw = reqwest::Client::new()
        .post(format!("{}/messages", server.base_url()))
        .json(&serde_json::json!({"messages": [{"role": "user", "content": "[error:529]"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), 529);
    let body: serde_json::Value = raw.json().await.unwrap();
    assert_eq!(
        body,
        serde_json::json!({"type": "error", "error": {"type": "overloaded_error", "message": "fake error 529"}})
    );
}

#[tokio::test]
async fn flaky_messages_fail_their_first_requests_on_both_endpoints() {
    let server = FakeModelServer::start().await.unwrap();
    let flaky = request(vec![user("[flaky:2:429] [tokens:2]")]);
    for _ in 0..2 {
        let items = collect(&server, flaky.clone()).await;
        assert!(matches!(items[..], [Err(Error::RateLimited { .. })]), "{items:?}");
    }
    // The third request gets the answer the rest of the message asks for.
    assert_eq!(text_of(&events(&server, flaky.clone()).await), "tok1 tok2 ");
    assert_eq!(text_of(&events(&server, flaky).await), "tok1 tok2 ");

    let flaky = request(vec![user("[flaky:1:529] hello")]);
    let items = collect_anthropic(&server, flaky.clone()).await;
    assert!(matches!(&items[..], [Err(Error::Provider { status: 529, .. })]), "{items:?}");
    assert_eq!(text_of(&anthropic_events(&server, flaky).await), "You said: [flaky:1:529] hello");
    // Another message counts on its own.
    let items = collect_anthropic(&server, request(vec![user("[flaky:1:529] again")])).await;
    assert!(matches!(&items[..], [Err(Error::Provider { status: 529, .. })]), "{items:?}");
}

#[tokio::test]
async fn cache_control_makes_the_prefix_written_then_read() {
    let server = FakeModelServer::start().await.unwrap();
    let system = "You are a weather assistant. Answer briefly, in metric units.";
    assert_eq!(system.chars().count(), 61);
    let cached = |text: &str, cache: bool| ModelRequest {
        model: "claude-fake".into(),
        messages: vec![Message::System { content: system.into() }, user(text)],
        tools: vec![ToolDefinition {
            name: "get_weather".into(),
            description: "Current weather of a city.".into(),
            parameters: serde_json::json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        }],
        params: ModelParams {
            cache_control: cache.then(|| CacheControl { kind: "ephemeral".into() }),
            ..ModelParams::default()
        },
        ..ModelRequest::default()
    };
    // 61 + 11 characters make 18 prompt tokens; the system prompt's 61 make a 15-token prefix.
    let first = usage_of(&anthropic_events(&server, cached("Paris today", true)).await);
    assert_eq!(
        first,
        TokenUsage { input_tokens: 18, output_tokens: 4, cache_write_tokens: 15, ..TokenUsage::default() }
    );
    let second = usage_of(&anthropic_events(&server, cached("Lyon today?", true)).await);
    assert_eq!(
        second,
        TokenUsage { input_tokens: 18, output_tokens: 4, cache_read_tokens: 15, ..TokenUsage::default() }
    );
    let uncached = usage_of(&anthropic_events(&server, cached("Nice today?", false)).await);
    assert_eq!(uncached, TokenUsage { input_tokens: 18, output_tokens: 4, ..TokenUsage::default() });

    // What reached the fake: Anthropic's raw figures, `input_tokens` being the uncached rest.
    let recorded: Vec<serde_json::Value> =
        reqwest::get(format!("http://{}/requests", server.address())).await.unwrap().json().await.unwrap();
    assert_eq!(recorded.len(), 3);
    assert_eq!(recorded[0]["system"][0]["cache_control"], serde_json::json!({"type": "ephemeral"}));
    assert!(recorded[2].get("system").and_then(|system| system[0].get("cache_control")).is_none());
    let raw =
        reqwest::Client::new().post(format!("{}/messages", server.base_url())).json(&recorded[1]).send().await.unwrap();
    let frames = anthropic_frames(&raw.text().await.unwrap());
    assert_eq!(frames[0].1["message"]["usage"]["input_tokens"], 18 - 15);
    assert_eq!(frames[0].1["message"]["usage"]["cache_read_input_tokens"], 15);
}

#[tokio::test]
async fn non_streaming_messages_get_a_message_and_are_recorded() {
    let server = FakeModelServer::start().await.unwrap();
    let http = reqwest::Client::new();
    let base = format!("http://{}", server.address());
    let body = serde_json::json!({
        "model": "claude-fake",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "[tool:f {\"a\": 1}] [tool:g not json] [reasoning]"}]}],
    });
    let answer: serde_json::Value =
        http.post(format!("{base}/v1/messages")).json(&body).send().await.unwrap().json().await.unwrap();
    assert_eq!(answer["type"], "message");
    assert_eq!(answer["model"], "claude-fake");
    assert_eq!(answer["stop_reason"], "tool_use");
    assert_eq!(
        answer["content"],
        serde_json::json!([
            {"type": "thinking", "thinking": "Let me think.", "signature": "fake-signature"},
            {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}},
            {"type": "tool_use", "id": "toolu_2", "name": "g", "input": {}},
        ])
    );
    assert_eq!(answer["usage"]["output_tokens"], 3 + (1 + 3) + (1 + 3));

    let recorded: serde_json::Value = http.get(format!("{base}/requests")).send().await.unwrap().json().await.unwrap();
    assert_eq!(recorded, serde_json::json!([body]));
    let bad = http.post(format!("{base}/messages")).body("not json").send().await.unwrap();
    assert_eq!(bad.status(), 400);
    let bad: serde_json::Value = bad.json().await.unwrap();
    assert_eq!(bad["type"], "error");
    assert_eq!(bad["error"]["type"], "invalid_request_error");
}
