//! The fake model end to end: the binary's start-up line, the raw wire format, every directive
//! through the real OpenAI adapter of `teamster-llm`, and the request log.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use teamster_fake_model::FakeModelServer;
use teamster_llm::providers::OpenAiClient;
use teamster_llm::{Error, Message, ModelClient, ModelEvent, ModelRequest, TokenUsage};
use teamster_protocol::event::FinishReason;

fn request(messages: Vec<Message>) -> ModelRequest {
    ModelRequest { model: "fake-1".into(), messages, ..ModelRequest::default() }
}

fn user(text: &str) -> Message {
    Message::User { content: text.into() }
}

async fn collect(server: &FakeModelServer, request: ModelRequest) -> Vec<Result<ModelEvent, Error>> {
    let client = OpenAiClient::new(server.base_url(), Some("sk-fake".into()), reqwest::Client::new());
    client.stream(request).collect().await
}

async fn events(server: &FakeModelServer, request: ModelRequest) -> Vec<ModelEvent> {
    collect(server, request).await.into_iter().map(|item| item.expect("no error")).collect()
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
    let mut calls: Vec<(String, String, String)> = vec![Default::default(); 2];
    for event in &first {
        if let ModelEvent::ToolCall { index, id, name, arguments } = event {
            let call = &mut calls[*index as usize];
            if let Some(id) = id {
                call.0 = id.clone();
            }
            if let Some(name) = name {
                call.1 = name.clone();
            }
            call.2.push_str(arguments);
        }
    }
    assert_eq!(
        calls,
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
            Message::Assistant { content: None, reasoning: None, tool_calls: vec![] },
            Message::Tool { tool_call_id: "call_1".into(), content: "18 degrees".into() },
        ]),
    )
    .await;
    assert_eq!(text_of(&second), "Tool result: 18 degrees");
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
            Message::Assistant { content: Some("ok".into()), reasoning: None, tool_calls: vec![] },
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
