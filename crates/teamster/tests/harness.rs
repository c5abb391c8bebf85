//! The control layer through the library's [`Harness`]: a plan rejected, revised and approved
//! switches the session to its build mode; tasks, state and follow-ups reach the subscribers
//! as events and the display state; sessions are created, switched, listed, renamed and
//! deleted; questions are answered (multi-select too), files sent, tools read, turns aborted.
//! Real parts: the fake model in-process, SQLite in memory.

mod support;

use serde_json::json;
use teamster::AgentItem;
use teamster::runtime::{Answer, Attachment, Harness, HarnessEvent, Runtime, ToolCategory};
use teamster_fake_model::FakeModelServer;
use teamster_protocol::control::PlanStatus;
use teamster_protocol::input::Approval;
use teamster_protocol::{Event, TurnState};
use tokio::sync::broadcast;

async fn runtime(model: &FakeModelServer) -> Runtime {
    let runtime = Runtime::open("sqlite::memory:").await.unwrap();
    support::add_fake_provider(&runtime, model).await;
    let spec = json!({
        "model": {"name": "fake/fake-model"},
        "config": {"tasks": {"enabled": true}},
        "state_schema": {"type": "object", "properties": {"step": {"type": "integer", "default": 0}}},
        "sub_agents": [{"name": "researcher", "description": "Looks things up."}],
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

/// The events (not the raw turn events) received so far.
fn changes(events: &mut broadcast::Receiver<HarnessEvent>) -> Vec<HarnessEvent> {
    std::iter::from_fn(|| events.try_recv().ok()).filter(|event| !matches!(event, HarnessEvent::TurnEvent { .. })).collect()
}

/// The names of the events received so far, raw turn events left out.
fn names(events: &mut broadcast::Receiver<HarnessEvent>) -> Vec<&'static str> {
    changes(events).iter().map(HarnessEvent::name).collect()
}

#[tokio::test]
async fn a_harness_drives_plans_modes_tasks_state_and_follow_ups() {
    let model = FakeModelServer::start().await.unwrap();
    let runtime = runtime(&model).await;
    let session = runtime.create_session("coder").await.unwrap();
    let harness = Harness::open(&runtime, &session.id).await.unwrap();
    let mut events = harness.subscribe();

    harness.send(submit("First try")).await.unwrap();
    let seen = changes(&mut events);
    let suspended = seen.iter().position(|event| matches!(event, HarnessEvent::ToolApprovalRequired { tool_name, .. } if tool_name == "submit_plan"));
    let plans = seen.iter().position(|event| matches!(event, HarnessEvent::PlansChanged { plans } if plans[0].status == PlanStatus::PendingApproval));
    assert!(suspended.is_some() && plans.is_some(), "{seen:?}");
    assert!(harness.display().is_waiting());
    // The one waiting call needs no id.
    let rejected = harness.approve(None, Approval::Deny { reason: Some("smaller steps".into()) }).await.unwrap();
    assert!(rejected.answer().contains("smaller steps"), "{}", rejected.answer());
    assert_eq!(harness.plans()[0].status, PlanStatus::Draft);
    assert_eq!(harness.display().mode, None, "still the default mode");
    assert_eq!(harness.current_mode().await.unwrap().map(|mode| mode.id).as_deref(), Some("plan"));

    harness.send(submit("Second try")).await.unwrap();
    changes(&mut events);
    let approved = harness.approve(None, Approval::allow()).await.unwrap();
    assert!(approved.answer().contains("approved"), "{}", approved.answer());
    let seen = changes(&mut events);
    assert!(seen.contains(&HarnessEvent::ModeChanged { mode: Some("build".into()) }), "{seen:?}");
    let display = harness.display();
    assert_eq!(display.mode.as_deref(), Some("build"));
    assert_eq!(display.plans.iter().map(|plan| plan.status).collect::<Vec<_>>(), [PlanStatus::Draft, PlanStatus::Executed]);
    assert!(!display.is_waiting() && display.running_turn_id.is_none());
    assert_eq!(display.last_answer.as_deref(), Some(approved.answer().as_str()));
    // The mode resolved, and the agent as the next turn runs it.
    assert_eq!(harness.list_modes().await.unwrap().iter().map(|mode| mode.id.as_str()).collect::<Vec<_>>(), ["plan", "build"]);
    assert_eq!(harness.current_mode().await.unwrap().map(|mode| mode.id).as_deref(), Some("build"));
    let agent = harness.current_agent().await.unwrap();
    assert!(agent.instructions.as_deref().is_some_and(|text| text.contains("Build it.")), "{:?}", agent.instructions);

    // Tasks and state changes reach subscribers.
    harness.send(format!("[tool:task_write {}]", json!({"tasks": [{"title": "Write the test"}]}))).await.unwrap();
    let seen = changes(&mut events);
    assert!(seen.iter().any(|event| matches!(event, HarnessEvent::TaskUpdated { tasks } if tasks.tasks[0].title == "Write the test")), "{seen:?}");
    assert_eq!(harness.tasks().tasks[0].title, "Write the test");
    harness.patch_state(json!({"step": 2})).await.unwrap();
    assert!(changes(&mut events).contains(&HarnessEvent::StateChanged { state: json!({"step": 2}) }));
    assert!(harness.patch_state(json!({"step": "two"})).await.is_err());

    // The session's model, and a declared sub-agent's.
    harness.set_model("offline/echo").await.unwrap();
    assert!(changes(&mut events).contains(&HarnessEvent::ModelChanged { model: Some("offline/echo".into()) }));
    harness.set_subagent_model("researcher", "offline/echo").await.unwrap();
    let chosen = HarnessEvent::SubagentModelChanged { agent_name: "researcher".into(), model: Some("offline/echo".into()) };
    assert!(changes(&mut events).contains(&chosen));
    assert_eq!(harness.display().subagent_models.get("researcher").map(String::as_str), Some("offline/echo"));
    assert!(harness.set_subagent_model("nobody", "offline/echo").await.is_err());
    harness.set_model("").await.unwrap();
    assert!(changes(&mut events).contains(&HarnessEvent::ModelChanged { model: None }));

    // A follow-up queued during a turn runs after it.
    let running = tokio::spawn({
        let harness = harness.clone();
        async move { harness.send("[tokens:3][delay:200] slow").await }
    });
    let mut display = harness.subscribe();
    while !matches!(display.recv().await.unwrap(), HarnessEvent::AgentStart { .. }) {}
    let queued = harness.follow_up("and then this").await.unwrap();
    assert!(names(&mut events).contains(&"follow_up_queued"));
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

#[tokio::test]
async fn a_harness_creates_switches_lists_renames_and_deletes_sessions() {
    let model = FakeModelServer::start().await.unwrap();
    let runtime = runtime(&model).await;
    // No session yet: one is made; then the newest is selected.
    let harness = Harness::select_or_create(&runtime, "coder").await.unwrap();
    let first = harness.session_id();
    assert_eq!(Harness::select_or_create(&runtime, "coder").await.unwrap().session_id(), first);
    assert_eq!(harness.agent_name(), "coder");
    let mut events = harness.subscribe();

    harness.rename("Refactoring").await.unwrap();
    assert!(changes(&mut events).contains(&HarnessEvent::ThreadChanged { session_id: first.clone(), title: Some("Refactoring".into()) }));
    assert_eq!(harness.display().title.as_deref(), Some("Refactoring"));

    harness.send("Tidy up   the\nparser, please").await.unwrap();
    // The conversation as messages.
    let messages = harness.messages().await.unwrap();
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert_eq!(messages[0], AgentItem::user("Tidy up   the\nparser, please"));
    assert!(matches!(&messages[1], AgentItem::Assistant { .. }) && messages[1].text().contains("Tidy up"), "{messages:?}");

    let second = harness.create_session(Some("Docs")).await.unwrap();
    assert_eq!(harness.session_id(), second.id);
    assert_eq!(harness.display().title.as_deref(), Some("Docs"));
    let listed = harness.list_sessions().await.unwrap();
    assert_eq!(listed.len(), 2);
    let preview = |id: &str| listed.iter().find(|session| session.id == id).map(|session| session.preview.clone());
    assert_eq!(preview(&first), Some(Some("Tidy up the parser, please".to_owned())), "one line");
    assert_eq!(preview(&second.id), Some(None), "no message yet");
    let firsts = harness.first_user_messages(&[&second.id, &first]).await.unwrap();
    assert_eq!(firsts, [None, Some("Tidy up   the\nparser, please".to_owned())]);
    assert!(harness.first_user_messages(&["ses_nope"]).await.is_err());

    // Switching aborts the work running in the session left.
    let running = tokio::spawn({
        let harness = harness.clone();
        async move { harness.send("[tokens:200][delay:50] long").await }
    });
    let mut seen = harness.subscribe();
    while !matches!(seen.recv().await.unwrap(), HarnessEvent::AgentStart { .. }) {}
    harness.switch_session(&first).await.unwrap();
    assert_eq!(harness.session_id(), first);
    assert_eq!(harness.display().title.as_deref(), Some("Refactoring"));
    let left = running.await.unwrap().unwrap();
    assert!(matches!(left.events.last().map(|event| &event.event), Some(Event::TurnDone(done)) if matches!(done.state, TurnState::Cancelled { .. })), "{:?}", left.events.last());
    assert!(harness.switch_session("ses_nope").await.is_err());

    // Deleting the bound session moves the harness to the newest other one.
    harness.delete_session(&first).await.unwrap();
    assert_eq!(harness.session_id(), second.id);
    assert_eq!(harness.list_sessions().await.unwrap().len(), 1);
    harness.delete_session(&second.id).await.unwrap();
    let fresh = harness.session_id();
    assert!(fresh != first && fresh != second.id, "a new session");
    runtime.shutdown().await;
}

#[tokio::test]
async fn a_harness_answers_questions_sends_files_reads_tools_and_aborts() {
    let model = FakeModelServer::start().await.unwrap();
    let runtime = runtime(&model).await;
    let harness = Harness::select_or_create(&runtime, "coder").await.unwrap();
    let mut events = harness.subscribe();

    // A multi-select question: the answer is the chosen labels.
    let question = json!({"question": "Which?", "options": [{"label": "Tests"}, {"label": "Docs"}], "multi_select": true});
    let asked = harness.send(format!("[tool:ask_user_question {question}]")).await.unwrap();
    let seen = changes(&mut events);
    let suspended = seen.iter().find_map(|event| match event {
        HarnessEvent::ToolSuspended { tool_call_id, suspend_payload, .. } => Some((tool_call_id.clone(), suspend_payload.clone())),
        _ => None,
    });
    let (call_id, payload) = suspended.expect("tool_suspended");
    assert_eq!(payload, question);
    assert!(asked.required_actions().len() == 1 && harness.display().is_waiting());
    let mut all = harness.subscribe();
    let answered = harness.respond(Some(&call_id), Answer::Labels(vec!["Tests".into(), "Docs".into()])).await.unwrap();
    assert_eq!(answered.answer(), r#"Tool result: ["Tests","Docs"]"#);
    // The raw turn events come too, each before what it translates into.
    let all: Vec<HarnessEvent> = std::iter::from_fn(|| all.try_recv().ok()).collect();
    let raw_done = all.iter().position(|event| matches!(event, HarnessEvent::TurnEvent { event, .. } if matches!(**event, Event::TurnDone(_))));
    let agent_end = all.iter().position(|event| matches!(event, HarnessEvent::AgentEnd { .. }));
    assert!(raw_done.is_some() && raw_done < agent_end, "{raw_done:?} {agent_end:?}");
    let raw_count = all.iter().filter(|event| matches!(event, HarnessEvent::TurnEvent { .. })).count();
    assert_eq!(raw_count, answered.events.len(), "every stored event of the turn");

    // Tools with their categories and permissions.
    let tools = harness.tools().await.unwrap();
    assert!(tools.iter().any(|tool| tool.name == "task_write"), "{tools:?}");
    assert_eq!(harness.tool_category("ask_user_question").await.unwrap(), Some(ToolCategory::Other));
    assert_eq!(harness.tool_category("task_check").await.unwrap(), Some(ToolCategory::Read));
    assert_eq!(harness.tool_category("no_such_tool").await.unwrap(), None);

    // Files: an image goes to the model; another file needs a sandbox this agent lacks.
    let pixel = Attachment { name: "pixel.png".into(), media_type: "image/png".into(), bytes: vec![0x89, b'P', b'N', b'G'] };
    let sent = harness.send_with_files("Look at this", vec![pixel]).await.unwrap();
    let input = sent.events.iter().find_map(|event| match &event.event {
        Event::TurnCreated(created) => Some(created.input.clone()),
        _ => None,
    });
    let input = input.expect("turn.created");
    let teamster_protocol::input::TurnInput::Message { content: teamster_protocol::UserContent::Parts(parts) } = &input[0] else {
        panic!("{input:?}")
    };
    assert!(parts.iter().any(|part| matches!(part, teamster_protocol::input::UserContentPart::File { name, .. } if name == "pixel.png")));
    let csv = Attachment { name: "data.csv".into(), media_type: "text/csv".into(), bytes: b"a,b".to_vec() };
    assert!(harness.send_with_files("and this", vec![csv]).await.is_err());

    // Abort ends the running turn.
    let running = tokio::spawn({
        let harness = harness.clone();
        async move { harness.send("[tokens:200][delay:50] long").await }
    });
    let mut seen = harness.subscribe();
    while !matches!(seen.recv().await.unwrap(), HarnessEvent::AgentStart { .. }) {}
    harness.abort().await.unwrap();
    let aborted = running.await.unwrap().unwrap();
    assert!(matches!(aborted.events.last().map(|event| &event.event), Some(Event::TurnDone(done)) if matches!(done.state, TurnState::Cancelled { .. })));
    assert!(harness.display().running_turn_id.is_none());
    runtime.shutdown().await;
}
