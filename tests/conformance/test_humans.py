"""People in the loop: the agent asks the user a question (`ask_user_question`, a client-side
tool), the turn ends `done` with the question in `required_actions`, and the next turn's
`user.tool_response` resumes it. Wrong decisions get a 400 that says what is wrong and leave
the waiting calls as they were; a restart in between changes nothing."""

from __future__ import annotations

import json

import pytest

import wire
from truefoundry_gateway_sdk import UserMessage
from truefoundry_gateway_sdk.agents import (
    ToolResponseRequiredEvent,
    TurnDoneEvent,
    TurnStateDone,
    UserToolResponseEvent,
)

QUESTION = {"question": "Which colour?", "options": [{"label": "Blue"}, {"label": "Red"}], "multi_select": False}


def ask(question: dict = QUESTION) -> str:
    return f"[tool:ask_user_question {json.dumps(question)}]"


def test_question_round_trip_with_the_gateway_client(client, fake):
    session = client.create_session(agent_name="demo")
    marker = wire.unique("ask")
    first = session.prepare_turn(input=[UserMessage(content=f"{ask()} {marker}")])
    items = list(first.execute())
    required = [item.event for item in items if isinstance(item.event, ToolResponseRequiredEvent)]
    assert len(required) == 1
    (ref,) = required[0].tool_calls
    messages = [item.event for item in items if item.event.type == "model.message"]
    assert ref.source_event_id == messages[0].id
    done = items[-1].event
    assert isinstance(done, TurnDoneEvent) and isinstance(done.state, TurnStateDone)
    assert [action.id for action in done.state.required_actions] == [required[0].id]
    # The model was offered the tool, and nothing ran it on the server.
    (request,) = fake.requests_for(marker)
    assert any(tool["function"]["name"] == "ask_user_question" for tool in request["tools"])
    assert not [item for item in items if item.event.type == "tool.response"]

    answer = UserToolResponseEvent(thread_id=required[0].thread_id, tool_call_id=ref.id, content="Blue")
    second = session.prepare_turn(input=[answer])
    items = list(second.execute())
    assert second.previous_turn_id == first.id
    responses = [item.event for item in items if item.event.type == "tool.response"]
    assert [(response.tool_call_id, response.content) for response in responses] == [(ref.id, "Blue")]
    assert items[-1].event.state.output.content == "Tool result: Blue"
    assert items[-1].event.state.required_actions == []


def pause_with_two_questions(api: wire.Api) -> tuple[dict, wire.TurnRun, list[str]]:
    session = api.create_session("demo")
    run = api.run_turn(session["id"], f"{ask()}{ask({'question': 'And size?'})} {wire.unique('two')}")
    state = run.done["state"]
    assert state["status"] == "done"
    (action,) = state["required_actions"]
    assert action["type"] == "tool.response_required"
    return session, run, [ref["id"] for ref in action["tool_calls"]]


def response(call_id: str, content: str = "ok", thread: str = "main") -> dict:
    return {"type": "user.tool_response", "thread_id": thread, "tool_call_id": call_id, "content": content}


WRONG_DECISIONS = [
    # (name, input built from the two waiting call ids, what the 400 must say)
    ("unknown call id", lambda a, b: [response(a), response("call_nope")], '"call_nope" in thread "main" is not waiting'),
    ("one of two missing", lambda a, b: [response(a)], f"missing:"),
    ("wrong thread", lambda a, b: [response(a, thread="thread_x"), response(b)], "not \"thread_x\""),
    ("approval for a question", lambda a, b: [
        {"type": "user.tool_approval", "thread_id": "main", "tool_call_id": a, "approval": {"status": "allow"}},
        response(b)], "needs a user.tool_response"),
    ("decided twice", lambda a, b: [response(a), response(a), response(b)], "decided twice"),
    ("mixed with a message", lambda a, b: [response(a), response(b), {"type": "user.message", "content": "hi"}], "mixes"),
    ("empty input", lambda a, b: [], "waiting for a decision"),
]


@pytest.mark.parametrize("name, make_input, says", WRONG_DECISIONS, ids=[case[0] for case in WRONG_DECISIONS])
def test_wrong_decisions_are_400_and_leave_the_calls_waiting(api, name, make_input, says):
    session, paused, (first, second) = pause_with_two_questions(api)
    if name == "one of two missing":
        says = f'missing: "{second}"'
    bad = api.post(f"/api/v1/sessions/{session['id']}/turns", json={"input": make_input(first, second), "stream": False})
    wire.assert_error(bad, 400)
    assert says in bad.json()["error"]["message"], bad.json()
    # Nothing changed: the paused turn is still the last, and the right decisions still work.
    turns = api.ok(api.get(f"/api/v1/sessions/{session['id']}/turns"))["data"]
    assert turns[0]["id"] == paused.turn_id
    resumed = api.run_turn(session["id"], None, input=[response(first, "Blue"), response(second, "Large")])
    assert resumed.done["state"]["status"] == "done"
    contents = [event["content"] for event in resumed.stream.payloads if event["type"] == "tool.response"]
    assert sorted(contents) == ["Blue", "Large"]


def test_a_restart_between_the_pause_and_the_answer_changes_nothing(server_factory):
    own = server_factory()
    api = own.require_api()
    session, paused, (first, second) = pause_with_two_questions(api)
    own.restart()
    api = own.require_api()
    assert api.get_turn(session["id"], paused.turn_id)["state"]["required_actions"][0]["tool_calls"][0]["id"] == first
    resumed = api.run_turn(session["id"], None, input=[response(first, "Blue"), response(second, "Large")])
    assert resumed.done["state"]["status"] == "done"
    assert resumed.output_text.startswith("Tool result: ")


def test_a_new_message_instead_of_an_answer_leaves_the_calls_unrun(api, fake):
    session, paused, (first, second) = pause_with_two_questions(api)
    marker = wire.unique("moved-on")
    run = api.run_turn(session["id"], f"never mind {marker}")
    assert run.done["state"]["status"] == "done"
    # The model was told each waiting call has no result, and the calls can no longer be decided.
    (request,) = fake.requests_for(marker)
    tool_messages = [m for m in request["messages"] if m["role"] == "tool"]
    assert {m["tool_call_id"] for m in tool_messages} == {first, second}
    assert all("no result" in m["content"] for m in tool_messages)
    late = api.post(f"/api/v1/sessions/{session['id']}/turns",
                    json={"input": [response(first), response(second)], "stream": False})
    wire.assert_error(late, 400)


def test_an_answer_may_leave_out_the_call_when_exactly_one_waits(api, fake):
    session = api.create_session("demo")
    paused = api.run_turn(session["id"], f"{ask()} {wire.unique('one')}")
    (action,) = paused.done["state"]["required_actions"]
    (call,) = action["tool_calls"]
    # Neither the thread nor the call is named: the one waiting call is meant.
    resumed = api.run_turn(session["id"], None, input=[{"type": "user.tool_response", "content": "Blue"}])
    assert resumed.done["state"]["status"] == "done"
    responses = [event for event in resumed.stream.payloads if event["type"] == "tool.response"]
    assert [(event["thread_id"], event["tool_call_id"], event["content"]) for event in responses] == [("main", call["id"], "Blue")]
    # The stored input names the call it decided.
    (stored,) = api.get_turn(session["id"], resumed.turn_id)["input"]
    assert (stored["thread_id"], stored["tool_call_id"]) == ("main", call["id"])


def test_leaving_out_the_call_when_two_wait_is_400(api):
    session, paused, (first, second) = pause_with_two_questions(api)
    bad = api.post(f"/api/v1/sessions/{session['id']}/turns",
                   json={"input": [{"type": "user.tool_response", "content": "Blue"}], "stream": False})
    wire.assert_error(bad, 400)
    assert "exactly one tool call waits; 2 tool calls wait" in bad.json()["error"]["message"], bad.json()
    # Naming the calls still works; the thread may be left out.
    resumed = api.run_turn(session["id"], None, input=[
        {"type": "user.tool_response", "tool_call_id": first, "content": "Blue"},
        {"type": "user.tool_response", "tool_call_id": second, "content": "Large"},
    ])
    assert resumed.done["state"]["status"] == "done"


def test_a_multi_select_answer_is_the_array_of_chosen_labels(api, fake):
    session = api.create_session("demo")
    question = {"question": "Which?", "options": [{"label": "Add tests"}, {"label": "Update docs"}, {"label": "Ship"}],
                "multi_select": True}
    paused = api.run_turn(session["id"], f"{ask(question)} {wire.unique('multi')}")
    # Not text and not an array of labels: refused, and the question still waits.
    for bad_content in ([1, 2], {"label": "Ship"}, None):
        bad = api.post(f"/api/v1/sessions/{session['id']}/turns",
                       json={"input": [{"type": "user.tool_response", "content": bad_content}], "stream": False})
        wire.assert_error(bad, 400)
    assert api.ok(api.get(f"/api/v1/sessions/{session['id']}/turns"))["data"][0]["id"] == paused.turn_id
    resumed = api.run_turn(session["id"], None, input=[
        {"type": "user.tool_response", "content": ["Add tests", "Update docs"]},
    ])
    assert resumed.done["state"]["status"] == "done"
    (response_event,) = [event for event in resumed.stream.payloads if event["type"] == "tool.response"]
    assert json.loads(response_event["content"]) == ["Add tests", "Update docs"]
