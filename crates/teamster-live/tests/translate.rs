//! A turn's native events, as the server stores them, translated and folded: the live events'
//! names in order, and the display state they leave.

use serde_json::{Value, json};
use teamster_live::{AgentEndStatus, DisplayState, LiveEvent, TurnTranslator, UsageTotals};
use teamster_protocol::Event;

const AT: &str = "2026-01-01T00:00:00.000Z";

fn call(id: &str, name: &str, arguments: &str) -> Value {
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments},
           "tool_info": {"type": "truefoundry-system", "name": name}})
}

fn usage() -> Value {
    json!({"input_tokens": 10, "output_tokens": 5, "cache_read_tokens": 2,
           "input_tokens_breakdown": {"harness": 0, "skills": 0, "instructions": 0, "tool_definitions": 0, "messages": 10}})
}

/// The placeholder a streamed message's deltas fold into.
fn placeholder(id: &str, thread: &str) -> Value {
    json!({"type": "model.message", "id": id, "thread_id": thread, "created_at": AT})
}

/// A whole message, with its usage (no deltas follow).
fn message(id: &str, thread: &str, text: &str, calls: Vec<Value>) -> Value {
    let mut message = json!({"type": "model.message", "id": id, "thread_id": thread, "created_at": AT, "content": text, "usage": usage()});
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    message
}

fn delta(id: &str, thread: &str, body: Value) -> Value {
    let mut delta = json!({"type": "model.message.delta", "id": id, "thread_id": thread});
    delta.as_object_mut().unwrap().extend(body.as_object().unwrap().clone());
    delta
}

fn response(thread: &str, call: &str, content: &str) -> Value {
    json!({"type": "tool.response", "id": format!("r-{call}"), "thread_id": thread, "created_at": AT, "tool_call_id": call, "content": content})
}

fn pending(kind: &str, calls: &[&str]) -> Value {
    let refs: Vec<Value> = calls.iter().map(|id| json!({"id": id, "source_event_id": "m3"})).collect();
    json!({"type": kind, "id": format!("p-{kind}"), "created_at": AT, "thread_id": "main", "tool_calls": refs})
}

/// A turn with streamed text and a streamed tool call with progress, a sub-agent with a tool,
/// then a question and an approval it ends waiting for.
fn turn() -> Vec<Value> {
    vec![
        json!({"type": "turn.created", "id": "e1", "turn_id": "trn_1", "input": [], "state": {"status": "running"},
               "created_by": {"subject_id": "u", "subject_type": "user", "subject_slug": "u"}, "created_at": AT}),
        placeholder("m1", "main"),
        delta("m1", "main", json!({"content": "Hel"})),
        delta("m1", "main", json!({"content": "lo", "reasoning_content": "thinking"})),
        delta("m1", "main", json!({"tool_calls": [{"index": 0, "id": "call_1", "function": {"name": "search", "arguments": "{\"q\""}}]})),
        delta("m1", "main", json!({"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]})),
        delta("m1", "main", json!({"finish_reason": "tool_calls", "usage": usage()})),
        json!({"type": "tool.progress", "id": "p1", "thread_id": "main", "created_at": AT, "tool_call_id": "call_1",
               "tool_name": "search", "progress": 1.0, "total": 2.0}),
        response("main", "call_1", "found"),
        message("m2", "main", "", vec![call("call_2", "run_sub_agent", "{}")]),
        json!({"type": "thread.created", "id": "t1", "created_at": AT, "thread_id": "thr_1", "title": "helper",
               "agent_info": {"name": "helper", "input": "look it up", "model": "fake/fake-model"},
               "parent": {"thread_id": "main", "tool_call_id": "call_2"}}),
        placeholder("s1", "thr_1"),
        delta("s1", "thr_1", json!({"content": "sub"})),
        delta("s1", "thr_1", json!({"tool_calls": [{"index": 0, "id": "call_3", "function": {"name": "exec", "arguments": "{\"command\":\"true\"}"}}]})),
        delta("s1", "thr_1", json!({"usage": usage()})),
        response("thr_1", "call_3", "ok"),
        json!({"type": "thread.done", "id": "t2", "created_at": AT, "thread_id": "thr_1", "title": "helper",
               "parent": {"thread_id": "main", "tool_call_id": "call_2"},
               "state": {"status": "done", "output": message("s2", "thr_1", "sub answer", vec![])}}),
        response("main", "call_2", "sub answer"),
        message("m3", "main", "Two things first.", vec![
            call("call_4", "ask_user_question", "{\"question\":\"Which one?\"}"),
            call("call_5", "delete_file", "{\"path\":\"a\"}"),
        ]),
        pending("tool.approval_required", &["call_5"]),
        pending("tool.response_required", &["call_4"]),
        json!({"type": "turn.done", "id": "e9", "created_at": AT,
               "state": {"status": "done", "completed_at": AT,
                         "required_actions": [pending("tool.approval_required", &["call_5"]), pending("tool.response_required", &["call_4"])],
                         "metrics": {"total_input_tokens": 40, "total_output_tokens": 20, "total_tokens": 60, "total_cost_in_usd": 0.25}}}),
    ]
}

fn translate(events: &[Value]) -> Vec<LiveEvent> {
    let mut translator = TurnTranslator::new(UsageTotals::default());
    events
        .iter()
        .flat_map(|event| {
            let event: Event = serde_json::from_value(event.clone()).unwrap_or_else(|error| panic!("{error}: {event}"));
            translator.translate(&event)
        })
        .collect()
}

#[test]
fn a_turns_events_become_the_control_layers_in_order() {
    let live = translate(&turn());
    let names: Vec<&str> = live.iter().map(LiveEvent::name).collect();
    // The deltas folded: the first message whole at its end, its tool call's input whole at its start.
    let body = |name: &str| serde_json::to_value(live.iter().find(|event| event.name() == name).unwrap()).unwrap();
    assert_eq!(body("message_end"), json!({"type": "message_end", "message_id": "m1", "text": "Hello", "reasoning": "thinking"}));
    assert_eq!(body("tool_start"), json!({"type": "tool_start", "tool_call_id": "call_1", "tool_name": "search", "arguments": "{\"q\":1}"}));
    let expected = [
        "agent_start",
        "message_start",
        "message_update",
        "message_update",
        "tool_input_start",
        "tool_input_delta",
        "tool_input_delta",
        "tool_input_end",
        "message_end",
        "tool_start",
        "usage_update",
        "tool_update",
        "tool_end",
        "message_start",
        "tool_input_start",
        "tool_input_end",
        "message_end",
        "tool_start",
        "usage_update",
        "subagent_start",
        "subagent_text_delta",
        "subagent_tool_start",
        "usage_update",
        "subagent_tool_end",
        "subagent_end",
        "tool_end",
        "message_start",
        "message_update",
        "tool_input_start",
        "tool_input_start",
        "tool_input_end",
        "tool_input_end",
        "message_end",
        "tool_start",
        "tool_start",
        "usage_update",
        "tool_approval_required",
        "tool_suspended",
        "usage_update",
        "agent_end",
    ];
    assert_eq!(names, expected);
}

#[test]
fn the_display_state_folds_what_the_turn_left() {
    let mut display = DisplayState::default();
    for event in translate(&turn()) {
        event.fold_into(&mut display);
        // Every event serialises with its name as its type, as the channel sends it.
        assert_eq!(serde_json::to_value(&event).unwrap()["type"], event.name());
    }
    assert_eq!(display.running_turn_id, None);
    assert_eq!(display.last_turn_id.as_deref(), Some("trn_1"));
    assert_eq!(display.last_turn_status, Some(AgentEndStatus::Waiting));
    assert!(display.is_waiting());
    assert_eq!(display.last_answer.as_deref(), Some("Two things first."));
    let calls: Vec<(&str, &str)> = display.tool_calls.iter().map(|call| (call.tool_call_id.as_str(), call.status.as_str())).collect();
    assert_eq!(
        calls,
        [("call_1", "done"), ("call_2", "done"), ("call_4", "awaiting_answer"), ("call_5", "awaiting_approval")]
    );
    assert_eq!(display.tool_calls[0].arguments, "{\"q\":1}");
    assert_eq!(display.tool_calls[0].progress, Some((1.0, Some(2.0))));
    let helper = &display.subagents["thr_1"];
    assert_eq!((helper.status.as_str(), helper.text.as_str(), helper.tools.as_slice()), ("done", "sub answer", &["exec".to_owned()][..]));
    // Four model calls of 10 in and 5 out (2 cached), and the turn's cost.
    assert_eq!(
        display.usage,
        UsageTotals { input_tokens: 40, output_tokens: 20, cache_read_tokens: 8, cache_write_tokens: 0, cost_usd: Some(0.25) }
    );
}

#[test]
fn a_failed_turn_says_why_and_a_question_carries_its_input() {
    let events = vec![
        turn()[0].clone(),
        message("m3", "main", "", vec![call("call_4", "ask_user_question", "{\"question\":\"Which one?\"}")]),
        pending("tool.response_required", &["call_4"]),
        json!({"type": "turn.done", "id": "e9", "created_at": AT, "state": {"status": "error", "message": "the model failed", "completed_at": AT}}),
    ];
    let live = translate(&events);
    let suspended = live.iter().find(|event| event.name() == "tool_suspended").unwrap();
    assert_eq!(serde_json::to_value(suspended).unwrap()["suspend_payload"], json!({"question": "Which one?"}));
    let tail: Vec<Value> = live.iter().rev().take(2).rev().map(|event| serde_json::to_value(event).unwrap()).collect();
    assert_eq!(
        tail,
        [
            json!({"type": "error", "message": "the model failed"}),
            json!({"type": "agent_end", "turn_id": "trn_1", "status": "error", "reason": "the model failed"}),
        ]
    );
}
