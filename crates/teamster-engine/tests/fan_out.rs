//! Attack tests of a turn's fan-out: a model that asks for fifty `run_sub_agent` calls in every
//! message (and sub-agents that ask for fifty more), fifty calls of a slow tool in one message,
//! and sub-agents racing for a nearly spent budget. The turn must stay within its thread cap,
//! its parallel-call cap, the subject's places for model calls, and its budget (give or take
//! one call).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use teamster_engine::{
    ContextPolicy, FanOut, SpendLimit, SubAgentPolicy, ToolBox, TurnOutcome, TurnPlan,
    run_turn,
};
use teamster_llm::{Message, ModelClient, ModelEvent, ModelRequest, ModelStream, TokenUsage};
use teamster_protocol::event::{FinishReason, ToolInfo};
use teamster_protocol::{Event, TurnMetrics};
use teamster_tools::{Tool, ToolOutput, ToolSource};
use tokio_util::sync::CancellationToken;

mod common;

use common::Recorder;

/// Counts what runs at once: the current number and the peak.
#[derive(Default)]
struct Gauge {
    now: AtomicUsize,
    peak: AtomicUsize,
}

impl Gauge {
    fn enter(self: &Arc<Self>) -> Entered {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        Entered(self.clone())
    }

    fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }
}

struct Entered(Arc<Gauge>);

impl Drop for Entered {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A hostile model: whenever it is offered `run_sub_agent` and the conversation does not end
/// with tool results, it asks for `spawns` sub-agents in one message; otherwise it answers.
/// Every call reports `usage` tokens and streams slowly, so calls overlap.
struct Spawner {
    spawns: usize,
    usage: (u64, u64),
    streams: Arc<Gauge>,
    calls: AtomicUsize,
    ids: AtomicU64,
}

impl ModelClient for Spawner {
    fn stream(&self, request: ModelRequest) -> ModelStream {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let ends_with_results = matches!(request.messages.last(), Some(Message::Tool { .. }));
        let may_spawn = request
            .tools
            .iter()
            .any(|tool| tool.name == "run_sub_agent");
        let mut reply = Vec::new();
        if may_spawn && !ends_with_results {
            for index in 0..self.spawns {
                let id = format!("call_{}", self.ids.fetch_add(1, Ordering::SeqCst));
                let arguments = serde_json::json!({"name": format!("worker {index}"), "task": "Split this further."});
                reply.push(ModelEvent::ToolCall {
                    index: index as u32,
                    id: Some(id),
                    name: Some("run_sub_agent".into()),
                    arguments: arguments.to_string(),
                });
            }
            reply.push(ModelEvent::Finish(FinishReason::ToolCalls));
        } else {
            reply.push(ModelEvent::Text("done".into()));
            reply.push(ModelEvent::Finish(FinishReason::Stop));
        }
        reply.push(ModelEvent::Usage(TokenUsage {
            input_tokens: self.usage.0,
            output_tokens: self.usage.1,
            ..TokenUsage::default()
        }));
        let entered = self.streams.enter();
        futures_util::stream::iter(reply)
            .then(move |event| {
                let _open = &entered;
                async move {
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    Ok(event)
                }
            })
            .boxed()
    }
}

/// A tool, `probe`, that takes a while and counts how many of its calls run at once.
struct Probe {
    running: Arc<Gauge>,
}

#[async_trait::async_trait]
impl ToolSource for Probe {
    async fn list(&self) -> Result<Vec<Tool>, teamster_tools::Error> {
        Ok(vec![Tool {
            name: "probe".into(),
            description: "Waits a little.".into(),
            input_schema: serde_json::json!({"type": "object"}),
            info: ToolInfo::System {
                name: "probe".into(),
            },
            annotations: Default::default(),
            gate: Default::default(),
        }])
    }

    async fn call(&self, _name: &str, arguments: &str) -> ToolOutput {
        let _entered = self.running.enter();
        tokio::time::sleep(Duration::from_millis(10)).await;
        ToolOutput::ok(format!("probed {arguments}"))
    }
}

struct NoModels;

impl teamster_engine::ModelResolver for NoModels {
    fn resolve(&self, name: &str) -> Result<teamster_llm::registry::ResolvedModel, String> {
        Err(format!("no model {name}"))
    }
}

struct Setup {
    model: Arc<dyn ModelClient>,
    tools: Vec<Arc<dyn ToolSource>>,
    max_depth: u32,
    fan_out: FanOut,
    model_calls: Option<Arc<tokio::sync::Semaphore>>,
    spend_limit: Option<Arc<dyn SpendLimit>>,
    max_tokens: Option<u64>,
}

/// A turn of `model`'s with no tools, sub-agents one level deep, at most 4 parallel tool calls
/// and 16 threads, and no places, budget or `max_tokens`; tests change what they attack.
fn setup(model: Arc<dyn ModelClient>) -> Setup {
    Setup {
        model,
        tools: Vec::new(),
        max_depth: 1,
        fan_out: FanOut {
            max_parallel_tool_calls: 4,
            max_threads_per_turn: 16,
        },
        model_calls: None,
        spend_limit: None,
        max_tokens: None,
    }
}

async fn run(setup: Setup) -> (Vec<Event>, TurnOutcome, TurnMetrics) {
    let plan = TurnPlan {
        thread_id: "main".into(),
        model: setup.model,
        model_id: "hostile".into(),
        params: teamster_protocol::agent::ModelParams {
            max_tokens: setup.max_tokens,
            ..Default::default()
        },
        response_format: None,
        instructions: Some("Coordinate.".into()),
        skills: Vec::new(),
        seed_messages: Vec::new(),
        messages: vec![Message::user("go".to_owned())],
        toolbox: ToolBox::collect(setup.tools).await,
        iteration_limit: 5,
        iterations_done: 0,
        context: ContextPolicy::default(),
        pricing: None,
        ask_user_questions: false,
        resolutions: Vec::new(),
        sub_agents: Some(SubAgentPolicy {
            dynamic: true,
            named: Vec::new(),
            max_depth: setup.max_depth,
            models: Arc::new(NoModels),
        }),
        events: Vec::new(),
        result_files: None,
        steering: None,
        spend_limit: setup.spend_limit,
        fan_out: setup.fan_out,
        ends_waiting: None,
        model_calls: setup.model_calls,
        request_context: None,
    };
    let sink = Recorder::default();
    let (outcome, metrics) = tokio::time::timeout(
        Duration::from_secs(60),
        run_turn(plan, &sink, &CancellationToken::new()),
    )
    .await
    .expect("the turn ends");
    let events = sink.events.lock().unwrap().clone();
    (events, outcome, metrics)
}

fn spawner(spawns: usize, usage: (u64, u64)) -> Arc<Spawner> {
    Arc::new(Spawner {
        spawns,
        usage,
        streams: Arc::default(),
        calls: AtomicUsize::new(0),
        ids: AtomicU64::new(0),
    })
}

#[tokio::test]
async fn fifty_sub_agents_a_message_at_every_depth_stay_within_the_thread_cap_and_the_subjects_places()
 {
    let model = spawner(50, (10, 1));
    let places = Arc::new(tokio::sync::Semaphore::new(3));
    let (events, outcome, _) = run(Setup {
        max_depth: 4,
        model_calls: Some(places),
        ..setup(model.clone())
    })
    .await;
    assert!(
        matches!(
            outcome,
            TurnOutcome::Done {
                output: Some(_),
                ..
            }
        ),
        "{outcome:?}"
    );
    let created = events
        .iter()
        .filter(|event| matches!(event, Event::ThreadCreated(_)))
        .count();
    let done = events
        .iter()
        .filter(|event| matches!(event, Event::ThreadDone(_)))
        .count();
    assert_eq!(
        (created, done),
        (16, 16),
        "the turn started exactly its cap of threads, and closed each"
    );
    let capped: Vec<&str> = events
        .iter()
        .filter_map(|event| match event {
            Event::ToolResponse(response)
                if response.content.contains("limit of 16 sub-agent threads") =>
            {
                Some(response.content.as_str())
            }
            _ => None,
        })
        .collect();
    assert!(
        !capped.is_empty(),
        "the calls beyond the cap got a tool error saying so"
    );
    assert!(
        capped.iter().all(|content| content.starts_with("Error: ")),
        "{capped:?}"
    );
    // Every run_sub_agent call was answered: none is left without a result.
    let asked: usize = events
        .iter()
        .filter_map(|event| match event {
            Event::ModelMessage(message) => Some(message.tool_calls.iter().flatten().count()),
            _ => None,
        })
        .sum();
    let answered = events
        .iter()
        .filter(|event| matches!(event, Event::ToolResponse(_)))
        .count();
    assert_eq!(asked, answered);
    assert!(
        model.streams.peak() <= 3,
        "{} model calls ran at once with 3 places",
        model.streams.peak()
    );
    assert!(
        model.calls.load(Ordering::SeqCst) <= 1 + 2 * 16 + 1,
        "{} model calls",
        model.calls.load(Ordering::SeqCst)
    );
}

#[tokio::test]
async fn fifty_tool_calls_in_one_message_run_at_most_the_cap_at_once_and_all_are_answered() {
    let running = Arc::new(Gauge::default());
    let calls: Vec<ModelEvent> = (0..50)
        .map(|index| ModelEvent::ToolCall {
            index,
            id: Some(format!("p{index}")),
            name: Some("probe".into()),
            arguments: format!("{{\"n\":{index}}}"),
        })
        .collect();
    let model = Arc::new(Scripted(Mutex::new(vec![
        calls,
        vec![ModelEvent::Text("ok".into())],
    ])));
    let (events, outcome, _) = run(Setup {
        tools: vec![Arc::new(Probe {
            running: running.clone(),
        })],
        ..setup(model)
    })
    .await;
    assert!(matches!(outcome, TurnOutcome::Done { .. }), "{outcome:?}");
    assert_eq!(
        running.peak(),
        4,
        "at most the cap ran at once, and the cap's worth did"
    );
    let responses: Vec<&str> = events
        .iter()
        .filter_map(|event| match event {
            Event::ToolResponse(response) => Some(response.content.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        responses.len(),
        50,
        "every call waited its turn and was answered"
    );
    assert!(
        responses
            .iter()
            .all(|content| content.starts_with("probed ")),
        "{responses:?}"
    );
}

/// A model that answers each call with the next scripted reply.
struct Scripted(Mutex<Vec<Vec<ModelEvent>>>);

impl ModelClient for Scripted {
    fn stream(&self, _request: ModelRequest) -> ModelStream {
        let mut replies = self.0.lock().unwrap();
        let reply = if replies.is_empty() {
            Vec::new()
        } else {
            replies.remove(0)
        };
        futures_util::stream::iter(reply.into_iter().map(Ok)).boxed()
    }
}

/// A token budget over the turn's spend.
struct TokenCap {
    max: u64,
}

impl SpendLimit for TokenCap {
    fn exhausted(&self, spent: &TurnMetrics) -> Option<String> {
        (spent.total_tokens >= self.max)
            .then(|| format!("The budget of {} tokens is spent.", self.max))
    }
}

#[tokio::test]
async fn sub_agents_racing_for_a_nearly_spent_budget_overrun_it_by_at_most_one_call() {
    // Each call spends 200 tokens; the budget is 1,000. Checked against the spend so far alone,
    // four sub-agents at a time would each see room and start.
    let model = spawner(12, (150, 50));
    let (events, outcome, metrics) = run(Setup {
        spend_limit: Some(Arc::new(TokenCap { max: 1_000 })),
        ..setup(model.clone())
    })
    .await;
    assert!(
        metrics.total_tokens <= 1_000 + 200,
        "spent {} tokens of a 1,000-token budget",
        metrics.total_tokens
    );
    assert!(
        metrics.total_tokens >= 1_000,
        "the budget was used up: {}",
        metrics.total_tokens
    );
    let refused = events
        .iter()
        .filter(|event| matches!(event, Event::ThreadDone(done) if format!("{:?}", done.state).contains("budget of 1000 tokens is spent")))
        .count();
    assert!(
        refused > 0,
        "the sub-agents that found the budget spent ended saying so"
    );
    assert!(
        matches!(outcome, TurnOutcome::Failed { ref message } if message.contains("budget")),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn calls_whose_reservations_fit_still_run_at_once() {
    // With `max_tokens` set, a call reserves little, so sub-agents far from the budget run in
    // parallel; the budget still holds.
    let model = spawner(4, (20, 5));
    let (_, outcome, metrics) = run(Setup {
        spend_limit: Some(Arc::new(TokenCap { max: 100_000 })),
        max_tokens: Some(64),
        ..setup(model.clone())
    })
    .await;
    assert!(matches!(outcome, TurnOutcome::Done { .. }), "{outcome:?}");
    assert_eq!(metrics.total_tokens, 6 * 25);
    assert!(
        model.streams.peak() >= 2,
        "the sub-agents ran one at a time: peak {}",
        model.streams.peak()
    );
}
