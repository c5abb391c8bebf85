//! Retries and the concurrency limit, with the real OpenAI adapter against a local server that
//! answers a scripted list of replies and records every request.

mod support;

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::future::join_all;
use support::{Reply, ScriptedServer};
use teamster_llm::limit::LimitedClient;
use teamster_llm::providers::OpenAiClient;
use teamster_llm::registry::{ModelRegistry, RegistryOptions};
use teamster_llm::retry::{RetryPolicy, RetryingClient};
use teamster_llm::{Error, GiveUpReason, Message, ModelClient, ModelEvent, ModelRequest};
use teamster_protocol::event::FinishReason;
use teamster_protocol::settings::{ConfiguredModel, ModelProviderManifest};

/// The text of `plain_text.sse`.
const PLAIN_TEXT: &str = "Hello! How can I help you today?";

/// Quick retries, and patience for a provider's one-second `Retry-After`.
fn quick() -> RetryPolicy {
    RetryPolicy { max_attempts: 3, base_delay: Duration::from_millis(5), max_delay: Duration::from_secs(2) }
}

fn success() -> Reply {
    let path = format!("{}/tests/fixtures/openai/plain_text.sse", env!("CARGO_MANIFEST_DIR"));
    Reply::sse(vec![std::fs::read(&path).unwrap_or_else(|error| panic!("reading {path}: {error}"))])
}

fn failure(status: u16, message: &str) -> Reply {
    Reply::fixed(status, "application/json", format!(r#"{{"error":{{"message":"{message}","type":"test"}}}}"#))
}

fn rate_limited(retry_after_seconds: u64) -> Reply {
    let mut reply = failure(429, "Rate limit reached for gpt-4o");
    reply.headers.push(("retry-after", retry_after_seconds.to_string()));
    reply
}

fn request() -> ModelRequest {
    ModelRequest {
        model: "gpt-4o-mini".into(),
        messages: vec![Message::user("Hi")],
        ..ModelRequest::default()
    }
}

/// The real adapter for `server`, behind a limit and retries, as the registry wraps it.
fn client(server: &ScriptedServer, policy: RetryPolicy) -> RetryingClient<LimitedClient<OpenAiClient>> {
    let adapter = OpenAiClient::new(server.base_url.clone(), Some("sk-test".into()), reqwest::Client::new());
    RetryingClient::new(LimitedClient::new(adapter, 64), policy, "test")
}

/// A registry whose provider `local` is `server`, allowing `max_concurrent_requests`.
fn registry(server: &ScriptedServer, max_concurrent_requests: u64) -> ModelRegistry {
    let manifest = ModelProviderManifest {
        kind: "custom".into(),
        name: Some("local".into()),
        base_url: Some(server.base_url.clone()),
        auth: None,
        models: vec![ConfiguredModel {
            name: "m".into(),
            model_id: "gpt-4o-mini".into(),
            properties: Default::default(),
        }],
        max_concurrent_requests: Some(max_concurrent_requests),
    };
    ModelRegistry::with_options([manifest], reqwest::Client::new(), RegistryOptions { retry: quick() })
}

async fn collect(client: &dyn ModelClient) -> Vec<Result<ModelEvent, Error>> {
    tokio::time::timeout(Duration::from_secs(20), client.stream(request()).collect::<Vec<_>>())
        .await
        .expect("the stream ends")
}

/// Asserts that `items` are exactly one clean answer with the text of `plain_text.sse`.
fn assert_one_clean_answer(items: &[Result<ModelEvent, Error>]) {
    let events: Vec<&ModelEvent> = items.iter().map(|item| item.as_ref().expect("no error")).collect();
    let text: String = events
        .iter()
        .filter_map(|event| match event {
            ModelEvent::Text(text) => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, PLAIN_TEXT);
    let finishes = events.iter().filter(|event| matches!(event, ModelEvent::Finish(_))).count();
    assert_eq!(finishes, 1, "{events:?}");
    assert!(events.contains(&&ModelEvent::Finish(FinishReason::Stop)), "{events:?}");
}

fn the_error(items: &[Result<ModelEvent, Error>]) -> &Error {
    match items {
        [Err(error)] => error,
        other => panic!("expected one error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_429_is_retried_after_the_providers_retry_after() {
    let server = ScriptedServer::start(vec![rate_limited(1), success()]).await;
    let started = Instant::now();
    let items = collect(&client(&server, quick())).await;
    let elapsed = started.elapsed();
    assert_one_clean_answer(&items);
    assert_eq!(server.request_count(), 2);
    // Only a lower bound: the retry waited the second the provider asked for.
    assert!(elapsed >= Duration::from_secs(1), "retried after {elapsed:?}");
}

#[tokio::test]
async fn two_503s_then_success_give_one_clean_answer_of_the_same_request() {
    let server = ScriptedServer::start(vec![failure(503, "overloaded"), failure(503, "overloaded"), success()]).await;
    let resolved = registry(&server, 64).resolve("local/m").expect("the model resolves");
    let items = collect(resolved.client.as_ref()).await;
    assert_one_clean_answer(&items);
    let bodies = server.request_bodies();
    assert_eq!(bodies.len(), 3);
    assert!(bodies.iter().all(|body| *body == bodies[0]), "every attempt sends the same request");
}

#[tokio::test]
async fn a_401_is_returned_at_once_with_the_providers_message() {
    let server = ScriptedServer::start(vec![failure(401, "Incorrect API key provided"), success()]).await;
    let items = collect(&client(&server, quick())).await;
    let error = the_error(&items);
    assert!(matches!(error, Error::Provider { status: 401, .. }), "{error:?}");
    assert_eq!(error.to_string(), "provider answered 401: Incorrect API key provided");
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn exhausted_attempts_return_the_last_error_with_the_providers_message() {
    let server = ScriptedServer::start(vec![
        failure(503, "first"),
        failure(502, "second"),
        failure(500, "third"),
        success(),
    ])
    .await;
    let items = collect(&client(&server, quick())).await;
    let error = the_error(&items);
    match error {
        Error::GaveUp { last, reason: GiveUpReason::AttemptsExhausted(3) } => {
            assert!(matches!(**last, Error::Provider { status: 500, .. }), "{last:?}");
        }
        other => panic!("expected to give up after 3 attempts, got {other:?}"),
    }
    assert_eq!(error.to_string(), "provider answered 500: third (after 3 attempts)");
    assert!(error.is_transient());
    assert_eq!(server.request_count(), 3);
}

#[tokio::test]
async fn exhausted_rate_limits_keep_the_providers_message() {
    let limited = || failure(429, "Rate limit reached for gpt-4o");
    let server = ScriptedServer::start(vec![limited(), limited()]).await;
    let policy = RetryPolicy { max_attempts: 2, ..quick() };
    let items = collect(&client(&server, policy)).await;
    assert_eq!(
        the_error(&items).to_string(),
        "rate limited by the provider: Rate limit reached for gpt-4o (after 2 attempts)"
    );
    assert_eq!(server.request_count(), 2);
}

#[tokio::test]
async fn an_error_after_the_first_event_is_passed_through_and_not_retried() {
    let path = format!("{}/tests/fixtures/openai/error_midstream.sse", env!("CARGO_MANIFEST_DIR"));
    let midstream = Reply::sse(vec![std::fs::read(&path).expect("the fixture")]);
    let server = ScriptedServer::start(vec![midstream, success()]).await;
    let items = collect(&client(&server, quick())).await;
    assert_eq!(items.len(), 3, "{items:?}");
    assert_eq!(items[0].as_ref().unwrap(), &ModelEvent::Text("Partial".into()));
    assert_eq!(items[1].as_ref().unwrap(), &ModelEvent::Text(" answer".into()));
    match &items[2] {
        Err(error @ Error::Provider { status: 500, message }) => {
            assert!(message.starts_with("The server had an error"), "{message}");
            // Transient, so it would have been retried had it come first.
            assert!(error.is_transient());
        }
        other => panic!("expected the provider's error, got {other:?}"),
    }
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn a_retry_after_longer_than_the_longest_delay_is_not_waited_for() {
    let server = ScriptedServer::start(vec![rate_limited(120), success()]).await;
    let items = collect(&client(&server, quick())).await;
    let error = the_error(&items);
    assert!(
        matches!(error, Error::GaveUp { reason: GiveUpReason::WaitTooLong(limit), .. } if *limit == quick().max_delay),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "rate limited by the provider (retry after 120s): Rate limit reached for gpt-4o \
         (not retried: the provider's wait is longer than the 2s limit)"
    );
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn dropping_the_stream_during_a_wait_stops_it() {
    let server = ScriptedServer::start(vec![rate_limited(1), success()]).await;
    let client = client(&server, quick());
    let mut stream = client.stream(request());
    let waited = tokio::time::timeout(Duration::from_millis(300), stream.next()).await;
    assert!(waited.is_err(), "the stream waits to retry: {waited:?}");
    assert_eq!(server.request_count(), 1);
    drop(stream);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(server.request_count(), 1, "no retry after the stream was dropped");
}

#[tokio::test]
async fn the_server_never_sees_more_requests_at_once_than_the_providers_limit() {
    let replies = (0..5).map(|_| success()).collect();
    let server = ScriptedServer::holding(replies, Duration::from_millis(300)).await;
    let resolved = registry(&server, 2).resolve("local/m").expect("the model resolves");
    let answers = join_all((0..5).map(|_| collect(resolved.client.as_ref()))).await;
    for items in &answers {
        assert_one_clean_answer(items);
    }
    assert_eq!(server.request_count(), 5);
    assert_eq!(server.max_in_flight(), 2);
}

#[tokio::test]
async fn without_a_tight_limit_the_same_streams_overlap() {
    // The control for the test above: the server does see concurrent requests when allowed.
    let replies = (0..5).map(|_| success()).collect();
    let server = ScriptedServer::holding(replies, Duration::from_millis(300)).await;
    let resolved = registry(&server, 5).resolve("local/m").expect("the model resolves");
    let answers = join_all((0..5).map(|_| collect(resolved.client.as_ref()))).await;
    assert!(answers.iter().all(|items| items.iter().all(Result::is_ok)));
    assert!(server.max_in_flight() > 2, "only {} at once", server.max_in_flight());
}

#[tokio::test]
async fn a_call_waiting_to_retry_holds_no_permit() {
    let server = ScriptedServer::start(vec![rate_limited(1), success(), success()]).await;
    let resolved = registry(&server, 1).resolve("local/m").expect("the model resolves");
    let client = resolved.client;
    let waiting = tokio::spawn({
        let client = client.clone();
        async move {
            let items = collect(client.as_ref()).await;
            (items, Instant::now())
        }
    });
    while server.request_count() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The first call now waits a second to retry; with the only permit free, this call runs at
    // once. Had the wait kept the permit, this call would take about that second and the first
    // would end right after it.
    let second_started = Instant::now();
    let items = collect(client.as_ref()).await;
    let second_done = Instant::now();
    assert_one_clean_answer(&items);
    let (first_items, first_done) = waiting.await.expect("the first call");
    assert_one_clean_answer(&first_items);
    let second_took = second_done - second_started;
    let first_ended_later_by = first_done.saturating_duration_since(second_done);
    assert!(
        second_took < first_ended_later_by,
        "the second call took {second_took:?}, and the first ended {first_ended_later_by:?} later"
    );
    assert_eq!(server.request_count(), 3);
}
