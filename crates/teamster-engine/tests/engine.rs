//! Data-driven tests of the turn loop: a scripted model, real built-in tools, and a transcript
//! of the events the engine emitted. `check` is the one helper that drives the engine.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use teamster_engine::{
    ContextPolicy, Decision, EventSink, INTERRUPTED_CALL, Resolution, Resumed, ToolBox, TurnOutcome, TurnPlan, resume_turn,
    run_turn,
};
use teamster_llm::{Message, ModelClient, ModelEvent, ModelRequest, ModelStream, TokenUsage};
use teamster_protocol::Event;
use teamster_protocol::agent::{ResponseFormat, StopWhen};
use teamster_protocol::event::FinishReason;
use teamster_tools::ToolSource;
use teamster_tools::builtin::Builtins;
use tokio_util::sync::CancellationToken;

mod common;

use common::Recorder;

/// A model that answers each call with the next scripted list of events, pausing `delay`
/// between events, and remembers the requests it got.
struct ScriptedModel {
    replies: Mutex<VecDeque<Vec<ModelEvent>>>,
    /// The replies to tool-less requests (context compaction's summaries), when given.
    summaries: Mutex<VecDeque<Vec<ModelEvent>>>,
    requests: Mutex<Vec<ModelRequest>>,
    delay: Duration,
}

impl ModelClient for ScriptedModel {
    fn stream(&self, request: ModelRequest) -> ModelStream {
        let mut summaries = self.summaries.lock().unwrap();
        let queue = if request.tools.is_empty() && !summaries.is_empty() {
            &mut *summaries
        } else {
            &mut *self.replies.lock().unwrap()
        };
        let reply = queue.pop_front().unwrap_or_default();
        self.requests.lock().unwrap().push(request);
        let delay = self.delay;
        futures_util::stream::iter(reply)
            .then(move |event| async move {
                tokio::time::sleep(delay).await;
                Ok(event)
            })
            .boxed()
    }
}

/// Collects events and renders them one line each.
#[derive(Default)]
struct Transcript {
    lines: Mutex<Vec<String>>,
    recorded: Mutex<Vec<(u64, Event)>>,
}

impl EventSink for Transcript {
    fn emit(&self, event: &Event) -> u64 {
        let mut lines = self.lines.lock().unwrap();
        lines.push(render(event));
        lines.len() as u64
    }

    fn record(&self, sequence: u64, event: &Event) {
        self.recorded.lock().unwrap().push((sequence, event.clone()));
    }
}

fn render(event: &Event) -> String {
    match event {
        Event::ModelMessage(m) => format!("model.message {}", m.thread_id),
        Event::ModelMessageDelta(d) => {
            let mut parts = Vec::new();
            if let Some(c) = &d.content {
                parts.push(format!("content={c:?}"));
            }
            if let Some(r) = &d.reasoning_content {
                parts.push(format!("reasoning={r:?}"));
            }
            for call in d.tool_calls.iter().flatten() {
                let f = call.function.clone().unwrap_or_default();
                parts.push(format!(
                    "call[{}] id={:?} name={:?} args={:?} info={}",
                    call.index,
                    call.id.clone().unwrap_or_default(),
                    f.name.unwrap_or_default(),
                    f.arguments.unwrap_or_default(),
                    call.tool_info.is_some()
                ));
            }
            if let Some(reason) = d.finish_reason {
                parts.push(format!("finish={reason:?}"));
            }
            if let Some(u) = &d.usage {
                parts.push(format!("usage={}/{}", u.input_tokens, u.output_tokens));
            }
            format!("delta {}", parts.join(" "))
        }
        Event::ToolResponse(r) => {
            let content = if r.content.starts_with("20") { "<datetime>".to_owned() } else { r.content.clone() };
            format!("tool.response {} {content}", r.tool_call_id)
        }
        other => other.kind().to_owned(),
    }
}

fn text(t: &str) -> ModelEvent {
    ModelEvent::Text(t.to_owned())
}

fn call(index: u32, id: Option<&str>, name: Option<&str>, arguments: &str) -> ModelEvent {
    ModelEvent::ToolCall {
        index,
        id: id.map(str::to_owned),
        name: name.map(str::to_owned),
        arguments: arguments.to_owned(),
    }
}

fn usage(input: u64, output: u64) -> ModelEvent {
    ModelEvent::Usage(TokenUsage { input_tokens: input, output_tokens: output, ..TokenUsage::default() })
}

struct Case {
    replies: Vec<Vec<ModelEvent>>,
    summaries: Vec<Vec<ModelEvent>>,
    iteration_limit: u64,
    cancel_after: Option<Duration>,
    /// The conversation before the turn; `hi` when empty.
    messages: Vec<Message>,
    context: ContextPolicy,
    response_format: Option<ResponseFormat>,
    pricing: Option<teamster_protocol::settings::ModelPricing>,
    ask_user_questions: bool,
    resolutions: Vec<Resolution>,
    sub_agents: Option<teamster_engine::SubAgentPolicy>,
    events: Vec<Event>,
    /// For a turn taken over from a stopped server: what it recorded before (its plan is then
    /// adjusted by `resume_turn` first).
    recorded: Option<Vec<Event>>,
    skills: Vec<teamster_engine::SkillNote>,
    steering: Option<Arc<dyn teamster_engine::Steering>>,
    spend_limit: Option<Arc<dyn teamster_engine::SpendLimit>>,
    /// Where large results are kept as files; nowhere when `None`.
    result_files: Option<Arc<dyn teamster_engine::ResultFiles>>,
}

impl Default for Case {
    fn default() -> Self {
        Case {
            replies: Vec::new(),
            summaries: Vec::new(),
            iteration_limit: 5,
            cancel_after: None,
            messages: Vec::new(),
            context: ContextPolicy::default(),
            response_format: None,
            pricing: None,
            ask_user_questions: false,
            resolutions: Vec::new(),
            sub_agents: None,
            events: Vec::new(),
            recorded: None,
            skills: Vec::new(),
            steering: None,
            spend_limit: None,
            result_files: None,
        }
    }
}

/// A tool source with one tool, `deploy`, that needs approval and counts its runs.
struct Deploy {
    runs: std::sync::atomic::AtomicU64,
}

static DEPLOY: std::sync::LazyLock<Arc<Deploy>> =
    std::sync::LazyLock::new(|| Arc::new(Deploy { runs: Default::default() }));

#[async_trait::async_trait]
impl ToolSource for Deploy {
    async fn list(&self) -> Result<Vec<teamster_tools::Tool>, teamster_tools::Error> {
        Ok(vec![teamster_tools::Tool {
            name: "deploy".into(),
            description: "Deploys.".into(),
            input_schema: serde_json::json!({"type": "object"}),
            info: teamster_protocol::event::ToolInfo::System { name: "deploy".into() },
            annotations: Default::default(),
            gate: teamster_tools::ToolGate::Approval,
        }])
    }

    async fn call(&self, _name: &str, arguments: &str) -> teamster_tools::ToolOutput {
        self.runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        teamster_tools::ToolOutput::ok(format!("deployed {arguments}"))
    }
}

/// A tool source with one tool, `context_probe`, that answers with the request context its
/// call carried.
struct ContextProbe;

#[async_trait::async_trait]
impl ToolSource for ContextProbe {
    async fn list(&self) -> Result<Vec<teamster_tools::Tool>, teamster_tools::Error> {
        Ok(vec![teamster_tools::Tool {
            name: "context_probe".into(),
            description: "Tells the request context.".into(),
            input_schema: serde_json::json!({"type": "object"}),
            info: teamster_protocol::event::ToolInfo::System { name: "context_probe".into() },
            annotations: Default::default(),
            gate: Default::default(),
        }])
    }

    async fn call(&self, _name: &str, _arguments: &str) -> teamster_tools::ToolOutput {
        teamster_tools::ToolOutput::ok("no context".to_owned())
    }

    async fn call_in(&self, _name: &str, _arguments: &str, context: teamster_tools::CallContext<'_>) -> teamster_tools::ToolOutput {
        teamster_tools::ToolOutput::ok(serde_json::to_string(&context.request_context).unwrap())
    }
}

/// A tool source with one tool, `big`, that returns a megabyte of numbered lines.
struct BigTool;

fn big_text() -> String {
    (0..100_000).map(|line| format!("line {line:06}\n")).collect::<String>()[..1 << 20].to_owned()
}

#[async_trait::async_trait]
impl ToolSource for BigTool {
    async fn list(&self) -> Result<Vec<teamster_tools::Tool>, teamster_tools::Error> {
        Ok(vec![teamster_tools::Tool {
            name: "big".into(),
            description: "Returns a megabyte of text.".into(),
            input_schema: serde_json::json!({"type": "object"}),
            info: teamster_protocol::event::ToolInfo::System { name: "big".into() },
            annotations: Default::default(),
            gate: Default::default(),
        }])
    }

    async fn call(&self, _name: &str, _arguments: &str) -> teamster_tools::ToolOutput {
        teamster_tools::ToolOutput::ok(big_text())
    }
}

/// Runs one turn of a scripted model with the built-in tools and returns the transcript, the
/// outcome, the total tokens, and the requests the model received.
async fn check(case: Case) -> (Vec<String>, TurnOutcome, u64, Vec<ModelRequest>, Arc<Transcript>) {
    let model = Arc::new(ScriptedModel {
        replies: Mutex::new(case.replies.into()),
        summaries: Mutex::new(case.summaries.into()),
        requests: Mutex::default(),
        delay: if case.cancel_after.is_some() { Duration::from_millis(20) } else { Duration::ZERO },
    });
    let sources: Vec<Arc<dyn ToolSource>> = vec![Arc::new(Builtins), Arc::new(BigTool), DEPLOY.clone()];
    let plan = TurnPlan {
        thread_id: "main".to_owned(),
        model: model.clone(),
        model_id: "scripted".to_owned(),
        params: Default::default(),
        response_format: case.response_format,
        instructions: Some("Be brief.".to_owned()),
        skills: case.skills,
        seed_messages: Vec::new(),
        messages: if case.messages.is_empty() { vec![Message::user("hi".to_owned())] } else { case.messages },
        toolbox: ToolBox::collect(sources).await,
        iteration_limit: case.iteration_limit,
        iterations_done: 0,
        context: case.context,
        pricing: case.pricing,
        ask_user_questions: case.ask_user_questions,
        resolutions: case.resolutions,
        sub_agents: case.sub_agents,
        events: case.events,
        result_files: case.result_files,
        steering: case.steering,
        spend_limit: case.spend_limit,
        fan_out: Default::default(),
        model_calls: None,
        ends_waiting: None,
        request_context: Some(serde_json::from_value(serde_json::json!({"tenant": "acme"})).unwrap()),
    };
    let sink = Arc::new(Transcript::default());
    let cancel = CancellationToken::new();
    if let Some(after) = case.cancel_after {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            cancel.cancel();
        });
    }
    let plan = match &case.recorded {
        None => Some(plan),
        Some(recorded) => match resume_turn(plan, recorded, sink.as_ref()) {
            Resumed::Run(plan) => Some(plan),
            Resumed::Finished(outcome) => {
                let (lines, requests) = (sink.lines.lock().unwrap().clone(), model.requests.lock().unwrap().clone());
                return (lines, outcome, 0, requests, sink);
            }
            Resumed::NotResumable(reason) => {
                let lines = sink.lines.lock().unwrap().clone();
                return (lines, TurnOutcome::Failed { message: format!("not resumable: {reason}") }, 0, Vec::new(), sink);
            }
        },
    };
    let (outcome, metrics) = run_turn(plan.expect("a plan"), sink.as_ref(), &cancel).await;
    let lines = sink.lines.lock().unwrap().clone();
    let requests = model.requests.lock().unwrap().clone();
    (lines, outcome, metrics.total_tokens, requests, sink)
}

#[tokio::test]
async fn plain_answer_streams_placeholder_deltas_and_final_usage() {
    let (lines, outcome, tokens, requests, sink) = check(Case {
        replies: vec![vec![text("Hel"), text("lo"), ModelEvent::Finish(FinishReason::Stop), usage(10, 2)]],
        ..Case::default()
    })
    .await;
    assert_eq!(
        lines,
        [
            "model.message main",
            "delta content=\"Hel\"",
            "delta content=\"lo\"",
            "delta finish=Stop usage=10/2",
        ]
    );
    let TurnOutcome::Done { output: Some(output), required_actions } = outcome else { panic!("{outcome:?}") };
    assert_eq!(output.text(), "Hello");
    assert!(required_actions.is_empty());
    assert_eq!(tokens, 12);
    assert!(matches!(&requests[0].messages[0], Message::System { content } if content == "Be brief."));
    assert_eq!(requests[0].tools.len(), 4, "the built-in tools and the test tools are offered");
    // The folded message is recorded at the placeholder's sequence number.
    let recorded = sink.recorded.lock().unwrap();
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].0, 1);
    assert!(matches!(&recorded[0].1, Event::ModelMessage(m) if m.text() == "Hello"));
}

#[tokio::test]
async fn skills_follow_the_instructions_and_have_their_share_of_the_usage() {
    let skill = teamster_engine::SkillNote {
        name: "csv".to_owned(),
        description: "Sums CSV columns.".to_owned(),
        path: "/workspace/skills/csv/SKILL.md".to_owned(),
        preloaded: Some("Use awk.".repeat(100)),
    };
    let (_, _, _, requests, sink) = check(Case {
        replies: vec![vec![text("ok"), ModelEvent::Finish(FinishReason::Stop), usage(1000, 2)]],
        skills: vec![skill],
        ..Case::default()
    })
    .await;
    let Message::System { content } = &requests[0].messages[0] else { panic!("{:?}", requests[0].messages[0]) };
    assert!(content.starts_with("Be brief.\n\n# Skills"), "{content}");
    assert!(content.contains("- csv: Sums CSV columns. (SKILL.md: /workspace/skills/csv/SKILL.md)"), "{content}");
    assert!(content.contains("Use awk.Use awk."), "the preloaded body is in the prompt");
    let recorded = sink.recorded.lock().unwrap();
    let Event::ModelMessage(message) = &recorded[0].1 else { panic!("{:?}", recorded[0].1) };
    let breakdown = &message.usage.as_ref().expect("usage").input_tokens_breakdown;
    assert!(breakdown.skills > breakdown.instructions && breakdown.skills > 0, "{breakdown:?}");
    let parts = breakdown.harness + breakdown.skills + breakdown.instructions + breakdown.tool_definitions + breakdown.messages;
    assert_eq!(parts, 1000);
}

#[tokio::test]
async fn tool_calls_run_and_their_results_feed_the_next_step() {
    let (lines, outcome, tokens, requests, _) = check(Case {
        replies: vec![
            vec![
                call(0, Some("c1"), Some("get_current_datetime"), "{"),
                call(1, Some("c2"), Some("no_such_tool"), ""),
                call(0, None, None, "}"),
                ModelEvent::Finish(FinishReason::ToolCalls),
                usage(20, 5),
            ],
            vec![text("It is now."), usage(30, 3)],
        ],
        ..Case::default()
    })
    .await;
    assert_eq!(
        lines,
        [
            "model.message main",
            "delta call[0] id=\"c1\" name=\"get_current_datetime\" args=\"{\" info=true",
            "delta call[1] id=\"c2\" name=\"no_such_tool\" args=\"\" info=true",
            "delta call[0] id=\"\" name=\"\" args=\"}\" info=false",
            "delta finish=ToolCalls usage=20/5",
            "tool.response c1 <datetime>",
            "tool.response c2 Error: There is no tool named \"no_such_tool\".",
            "model.message main",
            "delta content=\"It is now.\"",
            "delta finish=Stop usage=30/3",
        ]
    );
    assert!(matches!(outcome, TurnOutcome::Done { .. }));
    assert_eq!(tokens, 58, "metrics sum both model calls");
    let second = &requests[1].messages;
    assert!(matches!(&second[2], Message::Assistant { tool_calls, .. } if tool_calls.len() == 2));
    assert!(matches!(&second[3], Message::Tool { tool_call_id, .. } if tool_call_id == "c1"));
    assert!(matches!(&second[4], Message::Tool { tool_call_id, .. } if tool_call_id == "c2"));
}

/// A budget of tokens per turn that remembers what the turn settled.
struct TokenCap {
    max: u64,
    settled: Mutex<Option<u64>>,
}

impl teamster_engine::SpendLimit for TokenCap {
    fn exhausted(&self, spent: &teamster_protocol::TurnMetrics) -> Option<String> {
        (spent.total_tokens >= self.max).then(|| format!("budget of {} tokens spent", self.max))
    }

    fn settle(&self, spent: &teamster_protocol::TurnMetrics) {
        *self.settled.lock().unwrap() = Some(spent.total_tokens);
    }
}

#[tokio::test]
async fn a_spent_budget_ends_the_turn_before_its_next_model_call() {
    let cap = Arc::new(TokenCap { max: 25, settled: Mutex::default() });
    let (lines, outcome, tokens, requests, _) = check(Case {
        replies: vec![
            vec![call(0, Some("c1"), Some("get_current_datetime"), "{}"), ModelEvent::Finish(FinishReason::ToolCalls), usage(20, 5)],
            vec![text("never asked"), usage(30, 3)],
        ],
        spend_limit: Some(cap.clone()),
        ..Case::default()
    })
    .await;
    // The first call and its tool ran whole; the second call was never made.
    assert_eq!(requests.len(), 1);
    assert_eq!(lines.last().map(String::as_str), Some("tool.response c1 <datetime>"));
    assert!(matches!(&outcome, TurnOutcome::Failed { message } if message == "budget of 25 tokens spent"), "{outcome:?}");
    assert_eq!(tokens, 25);
    assert_eq!(*cap.settled.lock().unwrap(), Some(25));
}

#[tokio::test]
async fn iteration_limit_ends_the_turn_with_a_clear_error() {
    let looping = || vec![call(0, Some("c"), Some("get_current_datetime"), "{}"), usage(1, 1)];
    let (_, outcome, _, requests, _) = check(Case {
        replies: vec![looping(), looping(), looping()],
        iteration_limit: 2,
        ..Case::default()
    })
    .await;
    assert_eq!(requests.len(), 2);
    assert!(
        matches!(&outcome, TurnOutcome::Failed { message } if message.contains("iteration limit of 2")),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn cancellation_keeps_the_partial_message_and_its_estimated_usage() {
    let reply: Vec<ModelEvent> = (0..50).map(|i| text(&format!("w{i} "))).collect();
    let (lines, outcome, tokens, _, sink) = check(Case {
        replies: vec![reply],
        cancel_after: Some(Duration::from_millis(110)),
        ..Case::default()
    })
    .await;
    assert_eq!(outcome, TurnOutcome::Interrupted);
    assert!(lines.len() > 2 && lines.len() < 20, "stopped early: {lines:?}");
    assert!(lines.last().unwrap().contains("usage="), "the last delta still carries usage");
    assert!(!lines.last().unwrap().contains("finish="), "an interrupted message has no finish reason");
    assert!(tokens > 0);
    let recorded = sink.recorded.lock().unwrap();
    assert!(matches!(&recorded[0].1, Event::ModelMessage(m) if m.text().starts_with("w0 w1 ")));
}

/// The text of each message of a request, for assertions.
/// Steering that hands out one scripted batch per model call.
struct ScriptedSteering(Mutex<VecDeque<Vec<teamster_protocol::event::Steer>>>);

#[async_trait::async_trait]
impl teamster_engine::Steering for ScriptedSteering {
    async fn take(&self) -> Vec<teamster_protocol::event::Steer> {
        self.0.lock().unwrap().pop_front().unwrap_or_default()
    }
}

#[tokio::test]
async fn steering_joins_before_the_next_model_call_and_is_recorded_on_its_message() {
    let steer = teamster_protocol::event::Steer {
        id: "stz_1".into(),
        content: teamster_protocol::UserContent::Text("Use UTC.".into()),
        created_at: "2026-01-01T00:00:00.000Z".into(),
    };
    let steering = ScriptedSteering(Mutex::new(vec![Vec::new(), vec![steer.clone()]].into()));
    let (_, outcome, _, requests, transcript) = check(Case {
        replies: vec![
            vec![call(0, Some("c1"), Some("get_current_datetime"), "{}"), ModelEvent::Finish(FinishReason::ToolCalls), usage(20, 5)],
            vec![text("It is now, in UTC."), usage(30, 3)],
        ],
        steering: Some(Arc::new(steering)),
        ..Case::default()
    })
    .await;
    assert!(matches!(outcome, TurnOutcome::Done { .. }));
    assert!(!contents(&requests[0]).contains(&"Use UTC.".to_owned()), "nothing was sent before the first call");
    let second = &requests[1].messages;
    assert!(matches!(&second[3], Message::Tool { tool_call_id, .. } if tool_call_id == "c1"));
    assert!(matches!(&second[4], Message::User { content, .. } if content == "Use UTC."), "{second:?}");
    assert_eq!(second.len(), 5, "the instruction is the last message of the second call");

    // The second message records it, and a history rebuilt from the log puts it back where it was.
    let recorded: Vec<Event> = transcript.recorded.lock().unwrap().iter().map(|(_, event)| event.clone()).collect();
    let steered: Vec<_> = recorded
        .iter()
        .filter_map(|event| match event {
            Event::ModelMessage(message) => Some(message.steering.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(steered, [None, Some(vec![steer])]);
    let mut history = vec![Event::TurnCreated(serde_json::from_value(serde_json::json!({
        "id": "evt_1", "turn_id": "turn_1", "previous_turn_id": null, "input": [{"type": "user.message", "content": "hi"}],
        "state": {"status": "running"}, "created_by": {"subject_id": "u", "subject_type": "user", "subject_slug": "u"},
        "created_at": "2026-01-01T00:00:00.000Z", "thread_id": "main"
    })).unwrap())];
    history.extend(recorded);
    let rebuilt = teamster_engine::history_from_events(&history, "main");
    assert_eq!(&rebuilt[..4], &second[1..], "the system prompt aside, the same conversation");
}

fn contents(request: &ModelRequest) -> Vec<String> {
    request
        .messages
        .iter()
        .map(|message| match message {
            Message::System { content } | Message::User { content, .. } | Message::Tool { content, .. } => content.clone(),
            Message::Assistant { content, .. } => content.clone().unwrap_or_default(),
        })
        .collect()
}

/// The size of a request as the compaction check estimates it: four bytes a token.
fn estimated_tokens(request: &ModelRequest) -> u64 {
    let messages: u64 = contents(request).iter().map(|text| (text.len() as u64).div_ceil(4)).sum();
    let tools: u64 = request
        .tools
        .iter()
        .map(|tool| {
            (tool.name.len() as u64).div_ceil(4)
                + (tool.description.len() as u64).div_ceil(4)
                + (tool.parameters.to_string().len() as u64).div_ceil(4)
        })
        .sum();
    messages + tools
}

#[tokio::test]
async fn a_large_tool_result_is_previewed_and_any_part_can_be_read() {
    let (lines, outcome, _, requests, sink) = check(Case {
        replies: vec![
            vec![call(0, Some("c1"), Some("big"), "{}"), usage(10, 1)],
            vec![call(0, Some("c2"), Some("read_tool_result"), r#"{"tool_call_id":"c1","offset":300000,"length":24}"#), usage(10, 1)],
            vec![text("Read it."), usage(10, 1)],
        ],
        ..Case::default()
    })
    .await;
    assert!(matches!(outcome, TurnOutcome::Done { .. }), "{outcome:?}");
    // The event log keeps as much of the megabyte as fits in one SSE line, saying where it was cut.
    let recorded = sink.recorded.lock().unwrap();
    let kept = recorded
        .iter()
        .find_map(|(_, event)| match event {
            Event::ToolResponse(response) if response.tool_call_id == "c1" => Some(response.content.clone()),
            _ => None,
        })
        .unwrap();
    let (head, note) = kept.split_once("\n\n[The tool result was cut: only its first ").unwrap();
    assert!(head.len() > 400_000 && big_text().starts_with(head), "{} bytes kept", head.len());
    assert!(note.ends_with(" of 1048576 characters are kept.]"), "{note}");
    assert!(teamster_protocol::sse::json_string_chars(&kept) <= teamster_protocol::sse::MAX_STRING_CHARS);
    // The next model call gets a preview that names the reading tool.
    let second = contents(&requests[1]);
    let preview = second.last().unwrap();
    assert!(preview.len() < 8_000, "the preview is small: {} bytes", preview.len());
    assert!(preview.starts_with("line 000000\n") && preview.contains("read_tool_result") && preview.contains("\"c1\""));
    assert!(requests.iter().all(|request| contents(request).iter().all(|text| text.len() < 20_000)));
    // And reading a range far into the result returns exactly those characters.
    let third = contents(&requests[2]);
    let total = kept.chars().count();
    assert_eq!(third.last().unwrap(), &format!("[Characters 300000..300024 of {total}]\n{}", &big_text()[300_000..300_024]));
    assert!(lines.iter().any(|line| line.starts_with("tool.response c2 [Characters 300000..")));
}

/// The events of a past conversation: `exchanges` user messages, each answered.
fn past_exchanges(exchanges: usize) -> Vec<Event> {
    let mut events = Vec::new();
    for index in 0..exchanges {
        let fact = if index == 0 { " Remember: the vault code is 4711." } else { "" };
        let user = format!("Question {index}: {}{fact}", "words ".repeat(60));
        events.push(
            serde_json::from_value(serde_json::json!({
                "type": "turn.created", "id": format!("e{index}"), "turn_id": format!("t{index}"),
                "previous_turn_id": null, "input": [{"type": "user.message", "content": user}],
                "state": {"status": "running"}, "created_at": "x", "thread_id": "main",
                "created_by": {"subject_id": "u", "subject_type": "user", "subject_slug": "u"}
            }))
            .unwrap(),
        );
        events.push(
            serde_json::from_value(serde_json::json!({
                "type": "model.message", "id": format!("m{index}"), "thread_id": "main", "created_at": "x",
                "content": format!("Answer {index}: {}", "more ".repeat(60)), "finish_reason": "stop"
            }))
            .unwrap(),
        );
    }
    events
}

#[tokio::test]
async fn compaction_keeps_each_call_under_the_threshold_and_the_summary_in_history() {
    let threshold = 1_000;
    let mut history = past_exchanges(12);
    let mut messages = teamster_engine::history_from_events(&history, "main");
    messages.push(Message::user("What is the vault code?"));
    let (lines, outcome, tokens, requests, sink) = check(Case {
        replies: vec![vec![text("It is 4711."), usage(400, 5)]],
        summaries: (0..10).map(|_| vec![text("The user said the vault code is 4711."), usage(300, 12)]).collect(),
        messages: messages.clone(),
        context: ContextPolicy { compaction_threshold: Some(threshold), large_result_tokens: None },
        ..Case::default()
    })
    .await;
    let TurnOutcome::Done { output: Some(output), .. } = outcome else { panic!("{outcome:?}") };
    assert_eq!(output.text(), "It is 4711.");
    // The older messages were summarised in chunks, each call under the threshold too; the
    // first chunk held the fact, and later chunks carry the summary so far.
    let summary_calls = requests.len() - 1;
    assert!(summary_calls >= 2, "{summary_calls} summarising calls");
    assert_eq!(tokens, summary_calls as u64 * (300 + 12) + 400 + 5, "every call counts in the metrics");
    assert!(requests[..summary_calls].iter().all(|request| request.tools.is_empty()));
    assert!(requests.iter().all(|request| estimated_tokens(request) <= threshold));
    assert!(contents(&requests[0]).join("\n").contains("Remember: the vault code is 4711."));
    assert!(contents(&requests[1]).join("\n").contains("The summary so far:\nThe user said the vault code is 4711."));
    // The agent's call keeps the prefix byte-identical and ends with the recent messages.
    let main = &requests[summary_calls];
    assert!(estimated_tokens(main) <= threshold, "{} tokens", estimated_tokens(main));
    let main_contents = contents(main);
    assert_eq!(main_contents[0], "Be brief.");
    assert!(main_contents[1].contains("The user said the vault code is 4711."));
    assert_eq!(main_contents.last().unwrap(), "What is the vault code?");
    let events: Vec<&String> = lines.iter().filter(|line| !line.starts_with("delta")).collect();
    assert_eq!(events.len(), summary_calls + 3, "{events:?}");
    assert_eq!(events[0], "thread.created");
    assert!(events[1..=summary_calls].iter().all(|line| line.starts_with("model.message thread_")), "{events:?}");
    assert_eq!(events[summary_calls + 1], "thread.done");
    assert_eq!(events[summary_calls + 2], "model.message main");
    // Rebuilding the history from the events gives the context the live turn had.
    history.push(
        serde_json::from_value(serde_json::json!({
            "type": "turn.created", "id": "e-now", "turn_id": "t-now", "previous_turn_id": null,
            "input": [{"type": "user.message", "content": "What is the vault code?"}],
            "state": {"status": "running"}, "created_at": "x", "thread_id": "main",
            "created_by": {"subject_id": "u", "subject_type": "user", "subject_slug": "u"}
        }))
        .unwrap(),
    );
    let mut recorded: Vec<(u64, Event)> = sink.recorded.lock().unwrap().clone();
    recorded.sort_by_key(|(sequence, _)| *sequence);
    history.extend(recorded.into_iter().map(|(_, event)| event));
    let rebuilt = teamster_engine::history_from_events(&history, "main");
    let rebuilt_texts: Vec<String> = rebuilt
        .iter()
        .map(|message| match message {
            Message::User { content, .. } => content.clone(),
            Message::Assistant { content, .. } => content.clone().unwrap_or_default(),
            other => format!("{other:?}"),
        })
        .collect();
    let mut expected = main_contents[1..].to_vec();
    expected.push("It is 4711.".to_owned());
    assert_eq!(rebuilt_texts, expected);
}

#[tokio::test]
async fn structured_output_is_checked_and_corrected_once() {
    let format: ResponseFormat = serde_json::from_value(serde_json::json!({
        "type": "json_schema",
        "json_schema": {"name": "city", "schema": {
            "type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]
        }}
    }))
    .unwrap();
    let (_, outcome, _, requests, _) = check(Case {
        replies: vec![vec![text("Oslo")], vec![text(r#"{"name": "Oslo"}"#)]],
        response_format: Some(format.clone()),
        ..Case::default()
    })
    .await;
    let TurnOutcome::Done { output: Some(output), .. } = outcome else { panic!("{outcome:?}") };
    assert_eq!(output.text(), r#"{"name": "Oslo"}"#);
    let correction = contents(&requests[1]).last().unwrap().clone();
    assert!(correction.contains("not valid JSON"), "{correction}");

    let (_, outcome, _, requests, _) = check(Case {
        replies: vec![vec![text("Oslo")], vec![text(r#"{"city": "Oslo"}"#)], vec![text("never asked")]],
        response_format: Some(format),
        ..Case::default()
    })
    .await;
    assert_eq!(requests.len(), 2, "one correction only");
    let TurnOutcome::Failed { message } = outcome else { panic!("{outcome:?}") };
    assert!(message.contains("not in the required format") && message.contains("\"name\""), "{message}");
}

fn runs() -> u64 {
    DEPLOY.runs.load(std::sync::atomic::Ordering::SeqCst)
}

/// The conversation a paused turn leaves: the user's message, the model message with an
/// ungated call (answered) and a gated one (with the placeholder a rebuilt history gives it).
fn paused_history(gated_name: &str, gated_id: &str) -> Vec<Message> {
    vec![
        Message::user("hi"),
        Message::Assistant {
            content: None,
            reasoning: None,
            thinking: Vec::new(),
            tool_calls: vec![
                teamster_llm::AssistantToolCall { id: "c1".into(), name: "get_current_datetime".into(), arguments: "{}".into() },
                teamster_llm::AssistantToolCall { id: gated_id.into(), name: gated_name.into(), arguments: r#"{"env":"prod"}"#.into() },
            ],
        },
        Message::Tool { tool_call_id: "c1".into(), content: "2026-11-22T00:00:00Z".into() },
        Message::Tool { tool_call_id: gated_id.into(), content: "placeholder".into() },
    ]
}

fn waiting_call(name: &str, id: &str) -> teamster_protocol::event::ToolCall {
    serde_json::from_value(serde_json::json!({
        "id": id, "type": "function", "function": {"name": name, "arguments": "{\"env\":\"prod\"}"},
        "tool_info": {"type": "truefoundry-system", "name": name}
    }))
    .unwrap()
}

#[tokio::test]
async fn a_gated_call_ends_the_turn_waiting_while_ungated_calls_run() {
    let before = runs();
    let (lines, outcome, _, requests, _) = check(Case {
        replies: vec![vec![
            call(0, Some("c1"), Some("get_current_datetime"), "{}"),
            call(1, Some("g1"), Some("deploy"), r#"{"env":"prod"}"#),
            usage(10, 2),
        ]],
        ..Case::default()
    })
    .await;
    assert_eq!(requests.len(), 1, "no model call after the pause");
    let events: Vec<&String> = lines.iter().filter(|line| !line.starts_with("delta")).collect();
    assert_eq!(events, ["model.message main", "tool.approval_required", "tool.response c1 <datetime>"]);
    let TurnOutcome::Done { output: Some(output), required_actions } = outcome else { panic!("{outcome:?}") };
    let [Event::ToolApprovalRequired(pending)] = required_actions.as_slice() else { panic!("{required_actions:?}") };
    assert_eq!(pending.tool_calls.len(), 1);
    assert_eq!(pending.tool_calls[0].id, "g1");
    assert_eq!(pending.tool_calls[0].source_event_id, output.id, "the ref points at the message holding the call");
    assert_eq!(runs(), before, "the gated tool did not run");
}

#[tokio::test]
async fn decisions_resume_the_turn_allow_runs_deny_explains() {
    for (decision, ran, told) in [
        (Decision::Allow, 1, r#"deployed {"env":"prod"}"#),
        (Decision::Deny { reason: Some("not today".into()) }, 0, "The user denied this tool call. Their reason: not today"),
        (Decision::Deny { reason: None }, 0, "The user denied this tool call."),
    ] {
        let id = format!("g-{}", told.len());
        let before = runs();
        let (lines, outcome, _, requests, _) = check(Case {
            replies: vec![vec![text("Done."), usage(10, 1)]],
            messages: paused_history("deploy", &id),
            resolutions: vec![Resolution { thread_id: "main".into(), call: waiting_call("deploy", &id), decision }],
            ..Case::default()
        })
        .await;
        assert!(matches!(outcome, TurnOutcome::Done { .. }), "{outcome:?}");
        assert_eq!(runs() - before, ran);
        assert_eq!(lines[0], format!("tool.response {id} {told}"));
        // The model sees the result in the call's place, right after its message.
        let messages = &requests[0].messages;
        assert!(matches!(&messages[4], Message::Tool { tool_call_id, content } if *tool_call_id == id && content == told), "{messages:?}");
        assert_eq!(messages.len(), 5, "the placeholder was replaced, not kept");
    }
}

#[tokio::test]
async fn ask_user_question_waits_for_the_answer_and_uses_it() {
    let (lines, outcome, _, requests, _) = check(Case {
        replies: vec![vec![call(0, Some("q1"), Some("ask_user_question"), r#"{"question":"Which colour?"}"#), usage(5, 1)]],
        ask_user_questions: true,
        ..Case::default()
    })
    .await;
    assert!(requests[0].tools.iter().any(|tool| tool.name == "ask_user_question"));
    assert!(lines.iter().any(|line| line == "tool.response_required"));
    let TurnOutcome::Done { required_actions, .. } = outcome else { panic!("{outcome:?}") };
    assert!(matches!(required_actions.as_slice(), [Event::ToolResponseRequired(pending)] if pending.tool_calls[0].id == "q1"));

    let (lines, _, _, requests, _) = check(Case {
        replies: vec![vec![text("Blue it is."), usage(5, 1)]],
        messages: paused_history("ask_user_question", "q2"),
        ask_user_questions: true,
        resolutions: vec![Resolution { thread_id: "main".into(), call: waiting_call("ask_user_question", "q2"), decision: Decision::Respond { content: "Blue".into() } }],
        ..Case::default()
    })
    .await;
    assert_eq!(lines[0], "tool.response q2 Blue");
    assert!(matches!(&requests[0].messages[4], Message::Tool { content, .. } if content == "Blue"));
}

// ---------------------------------------------------------------------------------------------
// Sub-agents
// ---------------------------------------------------------------------------------------------

/// A model whose answer depends on the request: `route` picks the reply, and it streams one
/// event every `delay`. It counts how many streams are open at once.
/// Picks a reply for a request.
type Route = Box<dyn Fn(&ModelRequest) -> Vec<ModelEvent> + Send + Sync>;

struct RoutedModel {
    route: Route,
    delay: Duration,
    open: Arc<std::sync::atomic::AtomicUsize>,
    most_open: Arc<std::sync::atomic::AtomicUsize>,
    requests: Mutex<Vec<ModelRequest>>,
}

impl RoutedModel {
    fn new(delay: Duration, route: impl Fn(&ModelRequest) -> Vec<ModelEvent> + Send + Sync + 'static) -> Arc<RoutedModel> {
        Arc::new(RoutedModel {
            route: Box::new(route),
            delay,
            open: Default::default(),
            most_open: Default::default(),
            requests: Mutex::default(),
        })
    }
}

impl ModelClient for RoutedModel {
    fn stream(&self, request: ModelRequest) -> ModelStream {
        use std::sync::atomic::Ordering::SeqCst;
        let reply = (self.route)(&request);
        self.requests.lock().unwrap().push(request);
        let open = self.open.fetch_add(1, SeqCst) + 1;
        self.most_open.fetch_max(open, SeqCst);
        let delay = self.delay;
        let closing = self.open.clone();
        let events = reply.into_iter().map(Ok).collect::<Vec<_>>();
        futures_util::stream::iter(events)
            .then(move |event| async move {
                tokio::time::sleep(delay).await;
                event
            })
            .chain(futures_util::stream::once(async move {
                closing.fetch_sub(1, SeqCst);
                Ok(ModelEvent::Finish(FinishReason::Stop))
            }))
            .boxed()
    }
}

/// The user message a request ends with, or the content of its last tool result.
fn last_text(request: &ModelRequest) -> String {
    match request.messages.last() {
        Some(Message::User { content, .. }) | Some(Message::Tool { content, .. }) => content.clone(),
        _ => String::new(),
    }
}

fn spawn(index: u32, id: &str, name: &str, task: &str) -> ModelEvent {
    call(index, Some(id), Some("run_sub_agent"), &serde_json::json!({"name": name, "task": task}).to_string())
}

struct NoModels;

impl teamster_engine::ModelResolver for NoModels {
    fn resolve(&self, name: &str) -> Result<teamster_llm::registry::ResolvedModel, String> {
        Err(format!("no model {name}"))
    }
}

fn policy(max_depth: u32) -> teamster_engine::SubAgentPolicy {
    teamster_engine::SubAgentPolicy { dynamic: true, named: Vec::new(), max_depth, models: Arc::new(NoModels) }
}

/// Runs one turn of `model` with sub-agents allowed; returns the recorded events in order and
/// the outcome.
async fn run_with_sub_agents(
    model: Arc<RoutedModel>,
    messages: Vec<Message>,
    resolutions: Vec<Resolution>,
    events: Vec<Event>,
    cancel_after: Option<Duration>,
) -> (Vec<Event>, TurnOutcome, teamster_protocol::TurnMetrics) {
    let sources: Vec<Arc<dyn ToolSource>> = vec![Arc::new(Builtins), DEPLOY.clone()];
    let plan = TurnPlan {
        thread_id: "main".into(),
        model: model.clone(),
        model_id: "routed".into(),
        params: Default::default(),
        response_format: None,
        instructions: Some("Coordinate.".into()),
        skills: Vec::new(),
        seed_messages: Vec::new(),
        messages,
        toolbox: ToolBox::collect(sources).await,
        iteration_limit: 5,
        iterations_done: 0,
        context: ContextPolicy::default(),
        pricing: None,
        ask_user_questions: true,
        resolutions,
        sub_agents: Some(policy(1)),
        events,
        result_files: None,
        steering: None,
        spend_limit: None,
        fan_out: Default::default(),
        model_calls: None,
        ends_waiting: None,
        request_context: Some(serde_json::from_value(serde_json::json!({"tenant": "acme"})).unwrap()),
    };
    let sink = Arc::new(Recorder::default());
    let cancel = CancellationToken::new();
    if let Some(after) = cancel_after {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            cancel.cancel();
        });
    }
    let (outcome, metrics) = run_turn(plan, sink.as_ref(), &cancel).await;
    let events = sink.events.lock().unwrap().clone();
    (events, outcome, metrics)
}

fn thread_of(event: &Event) -> Option<&str> {
    match event {
        Event::ModelMessage(message) => Some(&message.thread_id),
        Event::ModelMessageDelta(delta) => Some(&delta.thread_id),
        Event::ToolResponse(response) => Some(&response.thread_id),
        Event::ThreadCreated(created) => Some(&created.thread_id),
        Event::ThreadDone(done) => Some(&done.thread_id),
        Event::ToolApprovalRequired(pending) | Event::ToolResponseRequired(pending) => Some(&pending.thread_id),
        _ => None,
    }
}

/// The main agent starts three sub-agents in one message and answers with their results.
fn three_way_model(fail_b: bool) -> Arc<RoutedModel> {
    RoutedModel::new(Duration::from_millis(15), move |request| {
        let last = last_text(request);
        if request.instructions_is("Coordinate.") {
            if last == "go" {
                return vec![
                    spawn(0, "s1", "A", "task A"),
                    spawn(1, "s2", "B", "task B"),
                    spawn(2, "s3", "C", "task C"),
                    usage(20, 3),
                ];
            }
            let results: Vec<String> = request
                .messages
                .iter()
                .filter_map(|message| match message {
                    Message::Tool { content, .. } => Some(content.clone()),
                    _ => None,
                })
                .collect();
            return vec![text(&format!("Combined: {}", results.join(" | "))), usage(50, 5)];
        }
        let letter = last.trim_start_matches("task ").to_owned();
        if fail_b && letter == "B" {
            return Vec::new();
        }
        let mut reply: Vec<ModelEvent> = (0..4).map(|i| text(&format!("{letter}{i} "))).collect();
        reply.push(usage(10, 4));
        reply
    })
}

trait InstructionsIs {
    fn instructions_is(&self, instructions: &str) -> bool;
}

impl InstructionsIs for ModelRequest {
    fn instructions_is(&self, instructions: &str) -> bool {
        // The skills section, when the agent has skills, follows the instructions.
        matches!(self.messages.first(), Some(Message::System { content })
            if content.split("\n\n# Skills\n").next() == Some(instructions))
    }
}

#[tokio::test]
async fn three_sub_agents_run_at_once_on_their_own_threads_and_feed_the_answer() {
    let model = three_way_model(false);
    let (events, outcome, metrics) =
        run_with_sub_agents(model.clone(), vec![Message::user("go")], Vec::new(), Vec::new(), None).await;
    let TurnOutcome::Done { output: Some(output), required_actions } = outcome else { panic!("{outcome:?}") };
    assert!(required_actions.is_empty());
    assert_eq!(output.text(), "Combined: A0 A1 A2 A3  | B0 B1 B2 B3  | C0 C1 C2 C3 ");
    assert!(model.most_open.load(std::sync::atomic::Ordering::SeqCst) >= 3, "the three ran at the same time");
    // Each sub-agent has its thread: created with its parent call, its own messages, done with its output.
    let created: Vec<&teamster_protocol::event::ThreadCreated> = events
        .iter()
        .filter_map(|event| match event {
            Event::ThreadCreated(created) => Some(created),
            _ => None,
        })
        .collect();
    assert_eq!(created.iter().map(|c| c.parent.tool_call_id.as_str()).collect::<Vec<_>>(), ["s1", "s2", "s3"]);
    for thread in &created {
        let own: Vec<&Event> = events.iter().filter(|event| thread_of(event) == Some(&thread.thread_id)).collect();
        assert!(matches!(own.first(), Some(Event::ThreadCreated(_))));
        let Some(Event::ThreadDone(done)) = own.last() else { panic!("{own:?}") };
        assert!(matches!(&done.state, teamster_protocol::event::ThreadState::Done { output } if output.text().starts_with(&thread.title)));
        assert!(done.metrics.as_ref().is_some_and(|metrics| metrics.total_input_tokens == 10));
        // The thread's deltas fold into its recorded message.
        let Some(Event::ModelMessage(recorded)) = own.iter().find(|event| matches!(event, Event::ModelMessage(_))) else {
            panic!("{own:?}")
        };
        let mut folded = teamster_protocol::event::ModelMessage {
            id: recorded.id.clone(),
            thread_id: recorded.thread_id.clone(),
            ..Default::default()
        };
        for event in &own {
            if let Event::ModelMessageDelta(delta) = event {
                teamster_protocol::event::fold(&mut folded, delta);
            }
        }
        assert_eq!(folded.text(), format!("{0}0 {0}1 {0}2 {0}3 ", thread.title));
        assert_eq!(folded.text(), recorded.text());
    }
    // Their events interleave on the one stream.
    let position = |thread: &str, last: bool| {
        let mut found = events.iter().enumerate().filter(|(_, event)| matches!(event, Event::ModelMessageDelta(_)) && thread_of(event) == Some(thread));
        if last { found.next_back().map(|(index, _)| index) } else { found.next().map(|(index, _)| index) }
    };
    assert!(position(&created[1].thread_id, false) < position(&created[0].thread_id, true), "interleaved");
    // Metrics sum every thread: three sub-agents and two main calls.
    assert_eq!(metrics.total_input_tokens, 3 * 10 + 20 + 50);
    assert_eq!(metrics.total_output_tokens, 3 * 4 + 3 + 5);
}

fn spawn_with(index: u32, id: &str, arguments: serde_json::Value) -> ModelEvent {
    call(index, Some(id), Some("run_sub_agent"), &arguments.to_string())
}

fn tool_names(request: &ModelRequest) -> Vec<&str> {
    request.tools.iter().map(|tool| tool.name.as_str()).collect()
}

/// Runs a main agent that starts one sub-agent with `arguments`, under `policy`; the
/// sub-agent answers `sub_reply`. Returns the requests (main first) and the events.
async fn one_sub_agent(
    policy: teamster_engine::SubAgentPolicy,
    arguments: serde_json::Value,
    sub_reply: Vec<ModelEvent>,
) -> (Vec<ModelRequest>, Vec<Event>) {
    let model = RoutedModel::new(Duration::ZERO, move |request| {
        if request.instructions_is("Coordinate.") && !matches!(request.messages.last(), Some(Message::User { content, .. }) if content == "the task") {
            return if last_text(request) == "go" {
                vec![spawn_with(0, "s1", arguments.clone()), usage(5, 1)]
            } else {
                vec![text("Main done."), usage(5, 1)]
            };
        }
        sub_reply.clone()
    });
    let sources: Vec<Arc<dyn ToolSource>> = vec![Arc::new(Builtins), DEPLOY.clone(), Arc::new(ContextProbe)];
    let plan = TurnPlan {
        thread_id: "main".into(),
        model: model.clone(),
        model_id: "routed".into(),
        params: Default::default(),
        response_format: None,
        instructions: Some("Coordinate.".into()),
        skills: vec![teamster_engine::SkillNote {
            name: "csv".into(),
            description: "Sums CSV columns.".into(),
            path: "/workspace/skills/csv/SKILL.md".into(),
            preloaded: None,
        }],
        seed_messages: Vec::new(),
        messages: vec![Message::user("go")],
        toolbox: ToolBox::collect(sources).await,
        iteration_limit: 5,
        iterations_done: 0,
        context: ContextPolicy::default(),
        pricing: None,
        ask_user_questions: true,
        resolutions: Vec::new(),
        sub_agents: Some(policy),
        events: Vec::new(),
        result_files: None,
        steering: None,
        spend_limit: None,
        fan_out: Default::default(),
        model_calls: None,
        ends_waiting: None,
        request_context: Some(serde_json::from_value(serde_json::json!({"tenant": "acme"})).unwrap()),
    };
    let sink = Arc::new(Recorder::default());
    let (outcome, _) = run_turn(plan, sink.as_ref(), &CancellationToken::new()).await;
    assert!(matches!(outcome, TurnOutcome::Done { .. }), "{outcome:?}");
    let requests = model.requests.lock().unwrap().clone();
    let events = sink.events.lock().unwrap().clone();
    (requests, events)
}

fn parent_result(events: &[Event]) -> String {
    events
        .iter()
        .find_map(|event| match event {
            Event::ToolResponse(response) if response.tool_call_id == "s1" => Some(response.content.clone()),
            _ => None,
        })
        .expect("the spawning call has a result")
}

#[tokio::test]
async fn a_forked_sub_agent_keeps_the_parents_prefix_and_cannot_fork_or_ask() {
    let (requests, events) = one_sub_agent(
        policy(2),
        serde_json::json!({"name": "twin", "task": "the task", "fork": true}),
        vec![
            spawn_with(0, "f1", serde_json::json!({"name": "again", "task": "x", "fork": true})),
            call(1, Some("q1"), Some("ask_user_question"), r#"{"question":"?"}"#),
            usage(5, 1),
        ],
    )
    .await;
    let (main, child) = (&requests[0], &requests[1]);
    assert_eq!(child.messages[..2], main.messages[..2], "same instructions and history");
    assert!(matches!(&child.messages[2], Message::User { content, .. } if content == "the task"));
    assert_eq!(child.tools, main.tools, "the exact tool list");
    let results: Vec<&str> = events
        .iter()
        .filter_map(|event| match event {
            Event::ToolResponse(response) if ["f1", "q1"].contains(&response.tool_call_id.as_str()) => Some(response.content.as_str()),
            _ => None,
        })
        .collect();
    assert!(results.iter().any(|content| content.contains("cannot fork again")), "{results:?}");
    assert!(results.iter().any(|content| content.contains("cannot ask the user")), "{results:?}");
    assert!(!events.iter().any(|event| matches!(event, Event::ToolResponseRequired(_))), "no question reached the user");
}

#[tokio::test]
async fn declared_sub_agents_run_with_their_own_instructions_and_tools() {
    let mut declared = policy(1);
    declared.dynamic = false;
    declared.named = vec![teamster_engine::NamedSubAgent {
        name: "clock".into(),
        description: "Knows the time.".into(),
        instructions: Some("Tell the time.".into()),
        tools: Some(vec!["get_current_datetime".into()]),
        model: None,
        max_iterations: None,
        stop_when: None,
        fork: false,
    }];
    let (requests, events) = one_sub_agent(
        declared.clone(),
        serde_json::json!({"name": "c", "task": "the task", "agent": "clock"}),
        vec![text("It is noon."), usage(5, 1)],
    )
    .await;
    let offered = requests[0].tools.iter().find(|tool| tool.name == "run_sub_agent").expect("offered");
    assert!(offered.description.contains("clock: Knows the time."));
    assert!(requests[1].instructions_is("Tell the time."));
    let Some(Message::System { content }) = requests[1].messages.first() else { panic!("{:?}", requests[1]) };
    assert!(content.contains("- csv: Sums CSV columns."), "a sub-agent has the agent's skills: {content}");
    assert_eq!(tool_names(&requests[1]), ["get_current_datetime", "read_tool_result"]);
    assert_eq!(parent_result(&events), "It is noon.");

    // Without dynamic sub-agents, a call that names no declared one is refused.
    let (_, events) = one_sub_agent(declared, serde_json::json!({"name": "x", "task": "the task"}), Vec::new()).await;
    assert!(parent_result(&events).contains("Only declared sub-agents"));
}

/// A policy with one declared sub-agent, `clock`, shaped by `shape`.
fn clock_policy(shape: impl FnOnce(&mut teamster_engine::NamedSubAgent)) -> teamster_engine::SubAgentPolicy {
    let mut declared = policy(1);
    let mut clock = teamster_engine::NamedSubAgent {
        name: "clock".into(),
        description: "Knows the time.".into(),
        instructions: Some("Tell the time.".into()),
        tools: None,
        model: None,
        max_iterations: None,
        stop_when: None,
        fork: false,
    };
    shape(&mut clock);
    declared.named = vec![clock];
    declared
}

/// The requests the sub-agent made (its instructions, or its task for a fork).
fn sub_requests(requests: &[ModelRequest]) -> usize {
    requests.iter().filter(|request| !request.instructions_is("Coordinate.") || matches!(request.messages.last(), Some(Message::User { content, .. }) if content == "the task")).count()
}

#[tokio::test]
async fn a_declared_sub_agent_stops_when_its_stop_tool_is_called_or_its_calls_run_out() {
    let clock = serde_json::json!({"name": "c", "task": "the task", "agent": "clock"});
    let keeps_calling = vec![call(0, Some("t1"), Some("get_current_datetime"), "{}"), usage(5, 1)];

    let stop_tool = clock_policy(|clock| {
        clock.stop_when = Some(StopWhen { tool_called: Some("get_current_datetime".into()), tool_calls: None })
    });
    let (requests, events) = one_sub_agent(stop_tool, clock.clone(), keeps_calling.clone()).await;
    assert_eq!(sub_requests(&requests), 1, "it stopped after the step that called the tool");
    let result = parent_result(&events);
    assert!(result.starts_with("The sub-agent stopped after calling get_current_datetime."), "{result}");
    assert!(result.contains("get_current_datetime returned:\n20"), "the tool's result is the answer: {result}");

    let two_calls = clock_policy(|clock| clock.stop_when = Some(StopWhen { tool_called: None, tool_calls: Some(2) }));
    let (requests, events) = one_sub_agent(two_calls, clock.clone(), keeps_calling.clone()).await;
    assert_eq!(sub_requests(&requests), 2);
    assert!(parent_result(&events).starts_with("The sub-agent stopped after its limit of 2 tool calls."));

    // Without a stop condition, the same sub-agent runs into its own iteration limit.
    let bounded = clock_policy(|clock| clock.max_iterations = Some(3));
    let (requests, events) = one_sub_agent(bounded, clock, keeps_calling).await;
    assert_eq!(sub_requests(&requests), 3, "its own limit, not the parent's 5");
    assert!(parent_result(&events).contains("iteration limit of 3"), "{}", parent_result(&events));
}

#[tokio::test]
async fn a_declared_sub_agent_that_forks_by_default_runs_as_its_parent_unless_the_call_says_otherwise() {
    let forking = || {
        clock_policy(|clock| {
            clock.fork = true;
            clock.max_iterations = Some(1);
            clock.stop_when = Some(StopWhen { tool_called: Some("get_current_datetime".into()), tool_calls: None });
        })
    };
    let (requests, events) = one_sub_agent(forking(), serde_json::json!({"name": "c", "task": "the task", "agent": "clock"}), vec![text("Forked."), usage(5, 1)]).await;
    let (main, child) = (&requests[0], &requests[1]);
    assert_eq!(child.messages[..2], main.messages[..2], "the parent's instructions and history");
    assert_eq!(child.tools, main.tools, "the parent's exact tool list");
    let created = events.iter().find_map(|event| match event {
        Event::ThreadCreated(created) => Some(created.clone()),
        _ => None,
    });
    let created = created.expect("thread.created");
    assert!(created.forked, "{created:?}");
    assert_eq!(created.parent.thread_id, "main");
    assert_eq!(parent_result(&events), "Forked.");

    let (requests, events) = one_sub_agent(forking(), serde_json::json!({"name": "c", "task": "the task", "agent": "clock", "fork": false}), vec![text("Own."), usage(5, 1)]).await;
    assert!(requests[1].instructions_is("Tell the time."), "the call's fork: false wins");
    assert!(events.iter().any(|event| matches!(event, Event::ThreadCreated(created) if !created.forked)));
    assert_eq!(parent_result(&events), "Own.");
}

#[tokio::test]
async fn the_turns_request_context_reaches_the_tools_its_sub_agents_call() {
    let probe = clock_policy(|clock| clock.stop_when = Some(StopWhen { tool_called: Some("context_probe".into()), tool_calls: None }));
    let (_, events) = one_sub_agent(
        probe,
        serde_json::json!({"name": "c", "task": "the task", "agent": "clock"}),
        vec![call(0, Some("p1"), Some("context_probe"), "{}"), usage(5, 1)],
    )
    .await;
    let probed = events.iter().find_map(|event| match event {
        Event::ToolResponse(response) if response.tool_call_id == "p1" => Some(response.content.clone()),
        _ => None,
    });
    assert_eq!(probed.as_deref(), Some(r#"{"tenant":"acme"}"#));
}

#[tokio::test]
async fn depth_limits_who_may_start_sub_agents() {
    let (requests, _) =
        one_sub_agent(policy(1), serde_json::json!({"name": "a", "task": "the task"}), vec![text("ok"), usage(1, 1)]).await;
    assert!(tool_names(&requests[0]).contains(&"run_sub_agent"));
    let child = tool_names(&requests[1]);
    assert!(!child.contains(&"run_sub_agent") && !child.contains(&"ask_user_question"), "{child:?}");
    assert!(child.contains(&"deploy"), "other tools stay: {child:?}");

    let (requests, _) =
        one_sub_agent(policy(2), serde_json::json!({"name": "a", "task": "the task"}), vec![text("ok"), usage(1, 1)]).await;
    assert!(tool_names(&requests[1]).contains(&"run_sub_agent"), "one level deeper is allowed");
}

// Resuming a turn whose server stopped.

/// A recorded `model.message` of the main thread with `calls` as `(id, tool name)`.
fn recorded_message(id: &str, content: &str, calls: &[(&str, &str)], finish: Option<&str>) -> Event {
    let calls: Vec<serde_json::Value> = calls
        .iter()
        .map(|(id, name)| {
            serde_json::json!({"id": id, "type": "function", "function": {"name": name, "arguments": "{}"},
                               "tool_info": {"type": "truefoundry-system", "name": name}})
        })
        .collect();
    serde_json::from_value(serde_json::json!({
        "type": "model.message", "id": id, "thread_id": "main", "created_at": "2026-11-22T00:00:00.000Z",
        "content": content, "tool_calls": if calls.is_empty() { serde_json::Value::Null } else { calls.into() },
        "finish_reason": finish, "usage": {"input_tokens": 10, "output_tokens": 2,
            "input_tokens_breakdown": {"harness": 0, "skills": 0, "instructions": 0, "tool_definitions": 0, "messages": 10}}
    }))
    .unwrap()
}

fn recorded_response(call_id: &str, content: &str) -> Event {
    serde_json::from_value(serde_json::json!({
        "type": "tool.response", "id": format!("evt_{call_id}"), "thread_id": "main",
        "created_at": "2026-11-22T00:00:00.000Z", "tool_call_id": call_id, "content": content
    }))
    .unwrap()
}

/// The history a rebuilt plan holds for a message with the calls `ids`, answered as `answers`
/// says (a placeholder for the others, as `history_from_events` gives them).
fn history_with_calls(ids: &[(&str, &str)], answers: &[(&str, &str)]) -> Vec<Message> {
    let mut messages = vec![
        Message::user("hi"),
        Message::Assistant {
            content: None,
            reasoning: None,
            thinking: Vec::new(),
            tool_calls: ids
                .iter()
                .map(|(id, name)| teamster_llm::AssistantToolCall { id: (*id).into(), name: (*name).into(), arguments: "{}".into() })
                .collect(),
        },
    ];
    for (id, _) in ids {
        let content = answers.iter().find(|(answered, _)| answered == id).map_or("placeholder", |(_, content)| content);
        messages.push(Message::Tool { tool_call_id: (*id).into(), content: content.into() });
    }
    messages
}

#[tokio::test]
async fn a_resumed_turn_settles_calls_left_without_a_result_and_never_repeats_answered_ones() {
    // c1 is idempotent (it runs again), c2 is not (it may have run: an error result says so),
    // c3 has a recorded result (it does not run again).
    let calls = [("c1", "get_current_datetime"), ("c2", "big"), ("c3", "big")];
    let (lines, outcome, _, requests, _) = check(Case {
        replies: vec![vec![text("Sorted."), usage(10, 1)]],
        messages: history_with_calls(&calls, &[("c3", "recorded result")]),
        recorded: Some(vec![recorded_message("m1", "", &calls, Some("tool_calls")), recorded_response("c3", "recorded result")]),
        iteration_limit: 2,
        ..Case::default()
    })
    .await;
    assert!(matches!(&outcome, TurnOutcome::Done { output: Some(output), .. } if output.text() == "Sorted."), "{outcome:?}");
    let events: Vec<&String> = lines.iter().filter(|line| !line.starts_with("delta")).collect();
    assert_eq!(
        events,
        [&format!("tool.response c2 {INTERRUPTED_CALL}"), "tool.response c1 <datetime>", "model.message main"],
        "c3 was not run again"
    );
    assert_eq!(requests.len(), 1, "one model call left of the limit of 2, and it was enough");
    let sent: Vec<(String, String)> = requests[0]
        .messages
        .iter()
        .filter_map(|message| match message {
            Message::Tool { tool_call_id, content } => Some((tool_call_id.clone(), content.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(sent[1], ("c2".to_owned(), INTERRUPTED_CALL.to_owned()), "the model sees the error in the call's place");
    assert_eq!(sent[2], ("c3".to_owned(), "recorded result".to_owned()));
    assert!(sent[0].1.starts_with("20"), "c1's new result replaced its placeholder: {sent:?}");
}

#[tokio::test]
async fn a_resumed_turn_whose_answer_was_recorded_ends_with_it() {
    let (lines, outcome, _, requests, _) = check(Case {
        recorded: Some(vec![recorded_message("m1", "All done.", &[], Some("stop"))]),
        ..Case::default()
    })
    .await;
    assert!(lines.is_empty() && requests.is_empty(), "no model call: {lines:?}");
    assert!(matches!(&outcome, TurnOutcome::Done { output: Some(output), .. } if output.id == "m1"), "{outcome:?}");
}

/// Keeps large results nowhere but in its list of the calls whose results it was given.
#[derive(Default)]
struct KeptResults(Mutex<Vec<String>>);

#[async_trait::async_trait]
impl teamster_engine::ResultFiles for KeptResults {
    fn path(&self, tool_call_id: &str) -> String {
        format!("/workspace/.tool-results/{tool_call_id}.txt")
    }

    async fn keep(&self, tool_call_id: &str, _content: &str) -> Result<(), String> {
        self.0.lock().unwrap().push(tool_call_id.to_owned());
        Ok(())
    }
}

#[tokio::test]
async fn a_resumed_turn_runs_its_waiting_messages_other_calls_as_a_fresh_turn_does() {
    // The call that runs at once (idempotent, so it runs again) returns what counts as a large
    // result here: it is kept as a file, as in a turn that never stopped, and the turn then
    // ends waiting for the approval.
    let calls = [("c1", "get_current_datetime"), ("g1", "deploy")];
    let announced: Event = serde_json::from_value(serde_json::json!({
        "type": "tool.approval_required", "id": "evt_wait", "created_at": "2026-11-22T00:00:00.000Z",
        "thread_id": "main", "tool_calls": [{"id": "g1", "source_event_id": "m1"}]
    }))
    .unwrap();
    let kept = Arc::new(KeptResults::default());
    let (lines, outcome, _, requests, _) = check(Case {
        messages: history_with_calls(&calls, &[]),
        recorded: Some(vec![recorded_message("m1", "", &calls, Some("tool_calls")), announced.clone()]),
        context: ContextPolicy { compaction_threshold: None, large_result_tokens: Some(1) },
        result_files: Some(kept.clone()),
        ..Case::default()
    })
    .await;
    assert!(requests.is_empty(), "no model call");
    assert_eq!(*kept.0.lock().unwrap(), ["c1"], "the large result was kept as a file");
    assert_eq!(lines, ["tool.response c1 <datetime>"], "only the ungated call's response");
    let TurnOutcome::Done { output: Some(output), required_actions } = outcome else { panic!("{outcome:?}") };
    assert_eq!((output.id.as_str(), required_actions), ("m1", vec![announced]));
}

#[tokio::test]
async fn a_resumed_turn_waiting_for_approval_ends_waiting_again() {
    let before = runs();
    let calls = [("c1", "get_current_datetime"), ("g1", "deploy")];
    let announced: Event = serde_json::from_value(serde_json::json!({
        "type": "tool.approval_required", "id": "evt_wait", "created_at": "2026-11-22T00:00:00.000Z",
        "thread_id": "main", "tool_calls": [{"id": "g1", "source_event_id": "m1"}]
    }))
    .unwrap();
    let (lines, outcome, _, requests, _) = check(Case {
        messages: history_with_calls(&calls, &[]),
        recorded: Some(vec![recorded_message("m1", "", &calls, Some("tool_calls")), announced.clone()]),
        ..Case::default()
    })
    .await;
    assert!(requests.is_empty(), "no model call");
    assert_eq!(lines, ["tool.response c1 <datetime>"], "the ungated call settles; the wait is not announced again");
    let TurnOutcome::Done { output: Some(output), required_actions } = outcome else { panic!("{outcome:?}") };
    assert_eq!((output.id.as_str(), required_actions), ("m1", vec![announced]));
    assert_eq!(runs(), before, "the gated call did not run");
}

#[tokio::test]
async fn a_turn_whose_step_did_not_finish_or_that_used_its_iterations_is_not_run_on() {
    let cut = recorded_message("m1", "Partial", &[], None);
    let (_, outcome, _, requests, _) = check(Case { recorded: Some(vec![cut]), ..Case::default() }).await;
    assert!(matches!(&outcome, TurnOutcome::Failed { message } if message.starts_with("not resumable")), "{outcome:?}");
    assert!(requests.is_empty());

    let calls = [("c1", "get_current_datetime")];
    let recorded = vec![
        recorded_message("m1", "", &calls, Some("tool_calls")),
        recorded_response("c1", "now"),
        recorded_message("m2", "", &[("c2", "get_current_datetime")], Some("tool_calls")),
    ];
    let (_, outcome, _, requests, _) = check(Case { recorded: Some(recorded), iteration_limit: 2, ..Case::default() }).await;
    assert!(matches!(&outcome, TurnOutcome::Failed { message } if message.contains("iteration limit of 2")), "{outcome:?}");
    assert!(requests.is_empty());
}

#[tokio::test]
async fn fragments_too_long_for_an_sse_line_stream_as_several_deltas_that_fold_to_the_same() {
    let long_text = "word \"quoted\"\n".repeat(20_000);
    let long_arguments = format!("{{\"text\":{}}}", serde_json::to_string(&"é".repeat(150_000)).unwrap());
    let (lines, outcome, _, _, sink) = check(Case {
        replies: vec![
            vec![text(&long_text), call(0, Some("c1"), Some("get_current_datetime"), &long_arguments), usage(10, 1)],
            vec![text("done"), usage(10, 1)],
        ],
        ..Case::default()
    })
    .await;
    assert!(matches!(outcome, TurnOutcome::Done { .. }), "{outcome:?}");
    let deltas: Vec<&String> = lines.iter().filter(|line| line.starts_with("delta content=")).collect();
    assert!(deltas.len() >= 5, "{} text deltas", deltas.len());
    let call_deltas: Vec<&String> = lines.iter().filter(|line| line.starts_with("delta call[0]")).collect();
    assert!(call_deltas.len() >= 3, "{} tool call deltas", call_deltas.len());
    // Only the first fragment of the call carries its id, name and tool info.
    assert!(call_deltas[0].contains("id=\"c1\"") && call_deltas[0].contains("info=true"));
    assert!(call_deltas[1..].iter().all(|line| line.contains("id=\"\" name=\"\"") && line.contains("info=false")));
    let recorded = sink.recorded.lock().unwrap();
    let message = recorded
        .iter()
        .find_map(|(_, event)| match event {
            Event::ModelMessage(message) if message.tool_calls.is_some() => Some(message.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(message.text(), long_text);
    assert_eq!(message.tool_calls.unwrap()[0].function.arguments, long_arguments);
}
