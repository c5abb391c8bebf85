//! The control layer through the library's [`Harness`]: a plan rejected, revised and approved
//! switches the session to its build mode; tasks, state and follow-ups reach the subscribers
//! as changes and the display state. Real parts: the fake model in-process, SQLite in memory.

mod support;

use serde_json::json;
use teamster::runtime::{Harness, HarnessEvent, Runtime};
use teamster_fake_model::FakeModelServer;
use teamster_protocol::control::PlanStatus;
use teamster_protocol::input::{Approval, TurnInput};
use teamster_protocol::{Event, TurnState};
use tokio::sync::broadcast;

async fn runtime(model: &FakeModelServer) -> Runtime {
    let runtime = Runtime::open("sqlite::memory:").await.unwrap();
    support::add_fake_provider(&runtime, model).await;
    let spec = json!({
        "model": {"name": "fake/fake-model"},
        "config": {"tasks": {"enabled": true}},
        "state_schema": {"type": "object", "properties": {"step": {"type": "integer", "default": 0}}},
        "modes": [
            {"id": "plan", "instructions": "Plan first.", "transitions_to": "build", "default": true},
            {"id": "build", "instructions": "Build it."},
        ],
    });
    runtime.save_agent("coder", serde_json::from_value(spec).unwrap()).await.unwrap();
    runtime
}

fn submit(title: &str) -> String {
    format!("[tool:submit_plan {}]", json!({"title": title, "plan": "1. do it"}))
}

/// The decision on the one call the last turn waits for.
fn decide(harness: &Harness, approval: Approval) -> Vec<TurnInput> {
    let waiting = harness.display().waiting_for;
    let [Event::ToolApprovalRequired(pending)] = waiting.as_slice() else { panic!("not one approval: {waiting:?}") };
    vec![TurnInput::ToolApproval {
        thread_id: pending.thread_id.clone(),
        tool_call_id: pending.tool_calls[0].id.clone(),
        approval,
    }]
}

/// The changes (not the turn events) received so far.
fn changes(events: &mut broadcast::Receiver<HarnessEvent>) -> Vec<HarnessEvent> {
    std::iter::from_fn(|| events.try_recv().ok()).filter(|event| !matches!(event, HarnessEvent::Turn(_))).collect()
}

#[tokio::test]
async fn a_harness_drives_plans_modes_tasks_state_and_follow_ups() {
    let model = FakeModelServer::start().await.unwrap();
    let runtime = runtime(&model).await;
    let session = runtime.create_session("coder").await.unwrap();
    let harness = Harness::open(&runtime, &session.id).await.unwrap();
    let mut events = harness.subscribe();

    harness.send(submit("First try")).await.unwrap();
    assert!(matches!(changes(&mut events).as_slice(), [HarnessEvent::PlansChanged(plans)] if plans[0].status == PlanStatus::PendingApproval));
    let denied = decide(&harness, Approval::Deny { reason: Some("smaller steps".into()) });
    let rejected = harness.answer(denied).await.unwrap();
    assert!(rejected.answer().contains("smaller steps"), "{}", rejected.answer());
    assert_eq!(harness.plans()[0].status, PlanStatus::Draft);
    assert_eq!(harness.display().mode, None, "still the default mode");

    harness.send(submit("Second try")).await.unwrap();
    changes(&mut events);
    let approved = harness.answer(decide(&harness, Approval::allow())).await.unwrap();
    assert!(approved.answer().contains("approved"), "{}", approved.answer());
    let seen = changes(&mut events);
    assert!(seen.contains(&HarnessEvent::ModeChanged(Some("build".into()))), "{seen:?}");
    let display = harness.display();
    assert_eq!(display.mode.as_deref(), Some("build"));
    assert_eq!(display.plans.iter().map(|plan| plan.status).collect::<Vec<_>>(), [PlanStatus::Draft, PlanStatus::Executed]);
    assert!(display.waiting_for.is_empty() && display.running_turn.is_none());
    assert_eq!(display.last_answer.as_deref(), Some(approved.answer().as_str()));

    // Tasks and state changes reach subscribers.
    harness.send(format!("[tool:task_write {}]", json!({"tasks": [{"title": "Write the test"}]}))).await.unwrap();
    assert!(matches!(changes(&mut events).as_slice(), [HarnessEvent::TasksChanged(list)] if list.tasks[0].title == "Write the test"));
    harness.patch_state(json!({"step": 2})).await.unwrap();
    assert_eq!(changes(&mut events), [HarnessEvent::StateChanged(json!({"step": 2}))]);
    assert!(harness.patch_state(json!({"step": "two"})).await.is_err());

    // A follow-up queued during a turn runs after it.
    let running = tokio::spawn({
        let harness = harness.clone();
        async move { harness.send("[tokens:3][delay:200] slow").await }
    });
    let started = async {
        while harness.display().running_turn.is_none() {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(30), started).await.expect("the slow turn started");
    let queued = harness.follow_up("and then this").await.unwrap();
    assert_eq!(harness.display().follow_ups.iter().map(|item| &item.id).collect::<Vec<_>>(), [&queued.id]);
    running.await.unwrap().unwrap();
    let followed = harness.run_follow_ups().await.unwrap();
    assert_eq!(followed.len(), 1);
    assert_eq!(followed[0].answer(), "You said: and then this");
    assert!(harness.display().follow_ups.is_empty());
    assert!(matches!(followed[0].events.last().map(|event| &event.event), Some(Event::TurnDone(done)) if matches!(done.state, TurnState::Done { .. })));

    // A clone keeps the mode and the state.
    let clone = harness.clone_session(None).await.unwrap();
    assert_ne!(clone.session_id(), harness.session_id());
    assert_eq!(clone.display().mode.as_deref(), Some("build"));
    assert_eq!(clone.display().state, Some(json!({"step": 2})));
    runtime.shutdown().await;
}
