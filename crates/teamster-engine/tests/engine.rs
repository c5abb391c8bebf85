//! Data-driven tests of the turn loop: a scripted model, real built-in tools, and a transcript
//! of the events the engine emitted. `check` is the one helper that drives the engine.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use teamster_engine::{EventSink, ToolBox, TurnOutcome, TurnPlan, run_turn};
use teamster_llm::{Message, ModelClient, ModelEvent, ModelRequest, ModelStream, TokenUsage};
use teamster_protocol::Event;
use teamster_protocol::event::FinishReason;
use teamster_tools::ToolSource;
use teamster_tools::builtin::Builtins;
use tokio_util::sync::CancellationToken;

/// A model that answers each call with the next scripted list of events, pausing `delay`
/// between events, and remembers the requests it got.
struct ScriptedModel {
    replies: Mutex<VecDeque<Vec<ModelEvent>>>,
    requests: Mutex<Vec<ModelRequest>>,
    delay: Duration,
}

impl ModelClient for ScriptedModel {
    fn stream(&self, request: ModelRequest) -> ModelStream {
        self.requests.lock().unwrap().push(request);
        let reply = self.replies.lock().unwrap().pop_front().unwrap_or_default();
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
    iteration_limit: u64,
    cancel_after: Option<Duration>,
}

/// Runs one turn of a scripted model with the built-in tools and returns the transcript, the
/// outcome, the total tokens, and the requests the model received.
async fn check(case: Case) -> (Vec<String>, TurnOutcome, u64, Vec<ModelRequest>, Arc<Transcript>) {
    let model = Arc::new(ScriptedModel {
        replies: Mutex::new(case.replies.into()),
        requests: Mutex::default(),
        delay: if case.cancel_after.is_some() { Duration::from_millis(20) } else { Duration::ZERO },
    });
    let sources: Vec<Arc<dyn ToolSource>> = vec![Arc::new(Builtins)];
    let plan = TurnPlan {
        thread_id: "main".to_owned(),
        model: model.clone(),
        model_id: "scripted".to_owned(),
        params: Default::default(),
        response_format: None,
        instructions: Some("Be brief.".to_owned()),
        messages: vec![Message::User { content: "hi".to_owned() }],
        toolbox: ToolBox::collect(sources).await,
        iteration_limit: case.iteration_limit,
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
    let (outcome, metrics) = run_turn(plan, sink.as_ref(), &cancel).await;
    let lines = sink.lines.lock().unwrap().clone();
    let requests = model.requests.lock().unwrap().clone();
    (lines, outcome, metrics.total_tokens, requests, sink)
}

#[tokio::test]
async fn plain_answer_streams_placeholder_deltas_and_final_usage() {
    let (lines, outcome, tokens, requests, sink) = check(Case {
        replies: vec![vec![text("Hel"), text("lo"), ModelEvent::Finish(FinishReason::Stop), usage(10, 2)]],
        iteration_limit: 5,
        cancel_after: None,
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
    assert_eq!(requests[0].tools.len(), 1, "the built-in tool is offered");
    // The folded message is recorded at the placeholder's sequence number.
    let recorded = sink.recorded.lock().unwrap();
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].0, 1);
    assert!(matches!(&recorded[0].1, Event::ModelMessage(m) if m.text() == "Hello"));
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
        iteration_limit: 5,
        cancel_after: None,
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

#[tokio::test]
async fn iteration_limit_ends_the_turn_with_a_clear_error() {
    let looping = || vec![call(0, Some("c"), Some("get_current_datetime"), "{}"), usage(1, 1)];
    let (_, outcome, _, requests, _) = check(Case {
        replies: vec![looping(), looping(), looping()],
        iteration_limit: 2,
        cancel_after: None,
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
        iteration_limit: 5,
        cancel_after: Some(Duration::from_millis(110)),
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
