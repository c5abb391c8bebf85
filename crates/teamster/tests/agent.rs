//! The stateless level through the public API only, as a program would use it, against the fake
//! model over its real OpenAI streaming format.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use teamster::{
    Agent, AgentItem, AgentRequest, AgentStreamEvent, Error, Model, Part, Tool, ToolError, Toolkit, ToolkitSession, tool,
};
use teamster_fake_model::FakeModelServer;

/// The caller a run is for.
#[derive(Clone, Debug)]
struct Caller {
    name: String,
}

fn caller(name: &str) -> Caller {
    Caller { name: name.to_owned() }
}

/// Arguments of `add`.
#[derive(Deserialize, JsonSchema)]
struct Add {
    /// The first number.
    a: i64,
    /// The second number.
    b: i64,
}

fn add() -> Arc<dyn Tool<Caller>> {
    tool("add", "Adds two numbers.", |args: Add, _: &Caller| async move { Ok(format!("{}", args.a + args.b)) })
}

/// Arguments of `whoami`.
#[derive(Deserialize, JsonSchema)]
struct NoArguments {}

/// A tool that answers the caller's name: what a leak between contexts would show.
fn whoami() -> Arc<dyn Tool<Caller>> {
    tool("whoami", "Says who is asking.", |_: NoArguments, caller: &Caller| {
        let name = caller.name.clone();
        async move { Ok::<_, ToolError>(name) }
    })
}

/// Counts its sessions, and their closes, and offers a tool that names the session's caller.
#[derive(Clone, Default)]
struct CountingToolkit {
    opened: Arc<AtomicUsize>,
    closed: Arc<AtomicUsize>,
}

struct CountingSession {
    closed: Arc<AtomicUsize>,
    greeting: String,
}

#[async_trait]
impl Toolkit<Caller> for CountingToolkit {
    fn name(&self) -> &str {
        "counting"
    }

    async fn create_session(&self, caller: &Caller) -> Result<Box<dyn ToolkitSession<Caller>>, String> {
        if caller.name == "nobody" {
            return Err("nobody may use this toolkit".to_owned());
        }
        self.opened.fetch_add(1, Ordering::SeqCst);
        Ok(Box::new(CountingSession { closed: self.closed.clone(), greeting: format!("hello {}", caller.name) }))
    }
}

#[async_trait]
impl ToolkitSession<Caller> for CountingSession {
    fn tools(&self) -> Vec<Arc<dyn Tool<Caller>>> {
        let greeting = self.greeting.clone();
        vec![tool("greet", "Greets the caller.", move |_: NoArguments, _: &Caller| {
            let greeting = greeting.clone();
            async move { Ok::<_, ToolError>(greeting) }
        })]
    }

    async fn close(&self) {
        self.closed.fetch_add(1, Ordering::SeqCst);
    }
}

/// The fake model and an agent builder on it.
async fn fake() -> (FakeModelServer, Model) {
    let server = FakeModelServer::start().await.expect("the fake model starts");
    let model = Model::openai_compatible(&server.base_url(), "test-key", "fake-model").expect("a valid model");
    (server, model)
}

fn request(text: &str, name: &str) -> AgentRequest<Caller> {
    AgentRequest { input: vec![AgentItem::user(text)], context: caller(name) }
}

fn text(text: &str) -> Part {
    Part::Text { text: text.to_owned() }
}

#[tokio::test]
async fn a_one_shot_run_answers_with_its_output_and_usage() {
    let (_server, model) = fake().await;
    let agent = Agent::builder("echo", model).instructions("Be brief.").build().unwrap();
    let response = agent.run(request("hello there", "ada")).await.unwrap();
    assert_eq!(response.content, vec![text("You said: hello there")]);
    assert_eq!(response.output, vec![AgentItem::Assistant { content: vec![text("You said: hello there")] }]);
    assert!(response.usage.input_tokens > 0 && response.usage.output_tokens > 0, "{:?}", response.usage);
}

#[tokio::test]
async fn a_streamed_run_streams_what_the_response_holds() {
    let (_server, model) = fake().await;
    let agent = Agent::builder("math", model).tool(add()).build().unwrap();
    let events: Vec<AgentStreamEvent> =
        agent.run_stream(request(r#"[tool:add {"a": 2, "b": 3}]"#, "ada")).map(|event| event.unwrap()).collect().await;
    let Some(AgentStreamEvent::Response(response)) = events.last() else { panic!("no response last: {events:?}") };
    let deltas: String = events
        .iter()
        .filter_map(|event| match event {
            AgentStreamEvent::TextDelta(delta) => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    let items: Vec<AgentItem> = events
        .iter()
        .filter_map(|event| match event {
            AgentStreamEvent::Item(item) => Some(item.clone()),
            _ => None,
        })
        .collect();
    let usages = events.iter().filter(|event| matches!(event, AgentStreamEvent::Usage(_))).count();
    assert_eq!(deltas, response.text());
    assert_eq!(items, response.output);
    assert_eq!(usages, 2, "one usage per model call");
    assert_eq!(response.text(), "Tool result: 5");
}

#[tokio::test]
async fn typed_tools_get_parsed_arguments_and_bad_arguments_go_back_to_the_model() {
    let (_server, model) = fake().await;
    let agent = Agent::builder("math", model).tool(add()).build().unwrap();

    let response = agent.run(request(r#"[tool:add {"a": 40, "b": 2}]"#, "ada")).await.unwrap();
    let [AgentItem::Assistant { content: call }, result, AgentItem::Assistant { content: answer }] = &response.output[..]
    else {
        panic!("a call, its result and an answer: {:?}", response.output)
    };
    let [Part::ToolCall { call_id, tool_name, arguments }] = &call[..] else { panic!("one tool call: {call:?}") };
    assert_eq!((tool_name.as_str(), arguments.as_str()), ("add", r#"{"a": 40, "b": 2}"#));
    assert_eq!(result, &AgentItem::ToolResult { call_id: call_id.clone(), tool_name: "add".to_owned(), output: "42".to_owned() });
    assert_eq!(answer, &vec![text("Tool result: 42")]);

    let response = agent.run(request(r#"[tool:add {"a": "forty", "b": 2}]"#, "ada")).await.unwrap();
    let AgentItem::ToolResult { output, .. } = &response.output[1] else { panic!("a result: {:?}", response.output) };
    assert!(output.contains("invalid arguments for add") && output.contains("invalid type"), "{output}");
    assert!(response.text().starts_with("Tool result: "), "{}", response.text());
}

#[tokio::test]
async fn a_session_prepares_its_toolkits_once_and_closes_them_once() {
    let (_server, model) = fake().await;
    let toolkit = CountingToolkit::default();
    let agent = Agent::builder("greeter", model).toolkit(toolkit.clone()).build().unwrap();
    let session = agent.create_session(caller("grace")).await.unwrap();
    for _ in 0..3 {
        let response = session.run(vec![AgentItem::user("[tool:greet]")]).await.unwrap();
        assert_eq!(response.text(), "Tool result: hello grace");
    }
    assert_eq!(toolkit.opened.load(Ordering::SeqCst), 1);
    session.close().await;
    session.close().await;
    assert_eq!(toolkit.closed.load(Ordering::SeqCst), 1);
    assert_eq!(session.run(vec![AgentItem::user("hi")]).await, Err(Error::SessionClosed));

    // A one-shot run opens and closes a session of its own.
    agent.run(request("hi", "grace")).await.unwrap();
    assert_eq!((toolkit.opened.load(Ordering::SeqCst), toolkit.closed.load(Ordering::SeqCst)), (2, 2));
}

#[tokio::test]
async fn concurrent_sessions_never_see_each_others_context() {
    let (_server, model) = fake().await;
    let agent = Agent::builder("who", model)
        .dynamic_instructions(|caller: &Caller| Ok(format!("You serve {}.", caller.name)))
        .tool(whoami())
        .toolkit(CountingToolkit::default())
        .build()
        .unwrap();
    let alice = agent.create_session(caller("alice")).await.unwrap();
    let bob = agent.create_session(caller("bob")).await.unwrap();
    // Each model call waits, so the two sessions' runs interleave.
    let input = |text: &str| vec![AgentItem::user(format!("[delay:5] {text}"))];
    for _ in 0..3 {
        let (a, b, c, d) = tokio::join!(
            alice.run(input("[tool:whoami]")),
            bob.run(input("[tool:whoami]")),
            alice.run(input("[tool:greet]")),
            bob.run(input("[tool:greet]")),
        );
        assert_eq!(a.unwrap().text(), "Tool result: alice");
        assert_eq!(b.unwrap().text(), "Tool result: bob");
        assert_eq!(c.unwrap().text(), "Tool result: hello alice");
        assert_eq!(d.unwrap().text(), "Tool result: hello bob");
    }
}

#[tokio::test]
async fn a_dropped_stream_closes_its_run_session() {
    let (_server, model) = fake().await;
    let toolkit = CountingToolkit::default();
    let agent = Agent::builder("slow", model).toolkit(toolkit.clone()).build().unwrap();
    let mut stream = agent.run_stream(request("[delay:20] [tokens:50]", "ada"));
    let first = stream.next().await.expect("an event").unwrap();
    assert!(matches!(first, AgentStreamEvent::TextDelta(_)), "{first:?}");
    assert_eq!(toolkit.opened.load(Ordering::SeqCst), 1);
    drop(stream);
    let closed = async {
        while toolkit.closed.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), closed).await.expect("the session closes after the drop");
}

#[tokio::test]
async fn bad_definitions_and_inputs_are_typed_errors() {
    let (_server, model) = fake().await;
    assert!(matches!(Model::openai_compatible("not a url", "k", "m"), Err(Error::Model { .. })));
    assert!(matches!(Agent::<Caller>::builder(" ", model.clone()).build(), Err(Error::InvalidAgent { .. })));
    let twice = Agent::builder("twice", model.clone()).tool(add()).tool(add()).build();
    assert!(matches!(twice, Err(Error::InvalidAgent { reason, .. }) if reason.contains("add")));

    let picky = Agent::builder("picky", model.clone())
        .dynamic_instructions(|caller: &Caller| match caller.name.as_str() {
            "mallory" => Err("no instructions for mallory".to_owned()),
            name => Ok(format!("Serve {name}.")),
        })
        .toolkit(CountingToolkit::default())
        .build()
        .unwrap();
    let failed = picky.run(request("hi", "mallory")).await;
    assert!(matches!(failed, Err(Error::Instructions { reason, .. }) if reason == "no instructions for mallory"));
    let failed = picky.run(request("hi", "nobody")).await;
    assert!(matches!(failed, Err(Error::Toolkit { toolkit, .. }) if toolkit == "counting"));
    let empty = picky.run(AgentRequest { input: Vec::new(), context: caller("ada") }).await;
    assert!(matches!(empty, Err(Error::InvalidInput(_))), "{empty:?}");

    let refused = picky.run(request("[error:400]", "ada")).await;
    assert!(matches!(&refused, Err(Error::Run(message)) if message.contains("400")), "{refused:?}");

    // A toolkit's tool may not take an agent tool's name; the prepared toolkit is closed again.
    let toolkit = CountingToolkit::default();
    let clash = Agent::builder("clash", model.clone())
        .tool(tool("greet", "Greets.", |_: NoArguments, _: &Caller| async { Ok::<_, ToolError>("hi".to_owned()) }))
        .toolkit(toolkit.clone())
        .build()
        .unwrap();
    let failed = clash.create_session(caller("ada")).await;
    assert!(matches!(failed, Err(Error::InvalidAgent { reason, .. }) if reason.contains("greet")));
    assert_eq!((toolkit.opened.load(Ordering::SeqCst), toolkit.closed.load(Ordering::SeqCst)), (1, 1));

    let limited = Agent::builder("limited", model).tool(add()).iteration_limit(1).build().unwrap();
    let stopped = limited.run(request(r#"[tool:add {"a": 1, "b": 1}]"#, "ada")).await;
    assert!(matches!(&stopped, Err(Error::Run(message)) if message.contains("limit")), "{stopped:?}");
}

#[tokio::test]
async fn the_offline_model_runs_a_whole_loop_without_a_provider() {
    let agent = Agent::builder("demo", Model::offline())
        .tool(tool("get_current_datetime", "The current date and time.", |_: NoArguments, _: &Caller| async {
            Ok::<_, ToolError>("2030-01-01T09:00:00Z".to_owned())
        }))
        .build()
        .unwrap();
    let response = agent.run(request("What time is it?", "ada")).await.unwrap();
    assert_eq!(response.output.len(), 3, "{:?}", response.output);
    assert!(response.text().contains("2030-01-01T09:00:00Z"), "{}", response.text());
}

#[tokio::test]
async fn an_anthropic_model_runs_a_tool_loop_over_the_messages_api() {
    let server = FakeModelServer::start().await.expect("the fake model starts");
    let model = Model::anthropic_at(&server.base_url(), "test-key", "fake-model").expect("a valid model");
    assert_eq!(model.name(), "anthropic/fake-model");
    let agent = Agent::builder("math", model).instructions("Add well.").tool(add()).build().unwrap();
    let response = agent.run(request(r#"[tool:add {"a": 40, "b": 2}]"#, "ada")).await.unwrap();
    assert_eq!(response.text(), "Tool result: 42");
    // Both model calls spoke Anthropic's dialect: the system prompt at the top level, and the
    // tool's result sent back as a `tool_result` block.
    let requests: serde_json::Value =
        reqwest::get(format!("http://{}/requests", server.address())).await.unwrap().json().await.unwrap();
    let [first, second] = &requests.as_array().unwrap()[..] else { panic!("two model calls: {requests}") };
    assert!(first["system"].to_string().contains("Add well."), "{first}");
    let last = second["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(last["content"][0]["type"], "tool_result", "{second}");
    assert!(last["content"][0]["content"].to_string().contains("42"), "{second}");
}

/// An environment of `pairs`, read as `std::env::var` would be.
fn vars<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |name| pairs.iter().find(|(key, _)| *key == name).map(|(_, value)| (*value).to_owned())
}

#[test]
fn a_missing_key_is_an_error_not_the_demo_model() {
    let Err(error) = Model::from_env_vars(|_| None, "gpt-4o-mini") else { panic!("a model without a key") };
    assert_eq!(error, teamster::Error::MissingApiKey { variables: vec!["OPENAI_API_KEY".to_owned(), "ANTHROPIC_API_KEY".to_owned()] });
    assert!(error.to_string().contains("Model::offline()"), "{error}");
    // Blank keys count as missing.
    assert!(Model::from_env_vars(|_| Some("  ".to_owned()), "gpt-4o-mini").is_err());

    let openai = Model::from_env_vars(vars(&[("OPENAI_API_KEY", "sk")]), "gpt-4o-mini").unwrap();
    assert_eq!(openai.name(), "openai/gpt-4o-mini");
    let anthropic = Model::from_env_vars(vars(&[("ANTHROPIC_API_KEY", "sk-ant")]), "claude-haiku-4-5").unwrap();
    assert_eq!(anthropic.name(), "anthropic/claude-haiku-4-5");
    let both = [("OPENAI_API_KEY", "sk"), ("ANTHROPIC_API_KEY", "sk-ant")];
    assert_eq!(Model::from_env_vars(vars(&both), "claude-haiku-4-5").unwrap().name(), "anthropic/claude-haiku-4-5");
    assert_eq!(Model::from_env_vars(vars(&both), "gpt-4o-mini").unwrap().name(), "openai/gpt-4o-mini");
}
