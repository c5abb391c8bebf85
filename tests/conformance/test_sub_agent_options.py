"""Declared sub-agents' own bounds over the native API: `stop_when` (a named tool called, or a
number of tool calls) ends a run early with the results of the calls that ended it,
`max_iterations` bounds a run below the parent's limit, `fork: true` makes calls fork by default
(a call's own `fork` wins), fork threads carry `forked: true`, and the session's thread listing
(`GET /sessions/{id}/threads`) leaves them out unless `include=forked`. Bad bounds are 400s."""

from __future__ import annotations

import json

import pytest

import wire

FAKE = {"model": {"name": "fake/fake-model"}}


def spec(**sub_agent) -> dict:
    return {**FAKE, "config": {"dynamic_sub_agents": {"enabled": False}},
            "sub_agents": [{"name": "clock", "description": "Knows the time.", **sub_agent}]}


def start(arguments: dict) -> str:
    return f"[tool:run_sub_agent {json.dumps(arguments)}]"


def content(api, session_id: str, run: wire.TurnRun) -> list[dict]:
    """The turn's content events, as stored (messages whole)."""
    return api.ok(api.get(f"/api/v1/sessions/{session_id}/turns/{run.turn_id}/events?limit=1000"))["data"]


def spawning_result(events: list[dict]) -> str:
    """The content of the main thread's `run_sub_agent` call's result."""
    calls = [call["id"] for event in events if event["type"] == "model.message"
             and event.get("thread_id") == "main" for call in event.get("tool_calls") or []
             if call["function"]["name"] == "run_sub_agent"]
    assert len(calls) == 1, calls
    return next(event["content"] for event in events
                if event["type"] == "tool.response" and event["tool_call_id"] == calls[0])


def sub_messages(events: list[dict]) -> list[dict]:
    return [event for event in events
            if event["type"] == "model.message" and event.get("thread_id") not in (None, "main")]


TWICE = "[tool:get_current_datetime] [tool:get_current_datetime]"


def test_a_stop_tool_ends_the_sub_agents_run_with_its_result(api):
    session = api.create_session(spec=spec(stop_when={"tool_called": "get_current_datetime"}))
    run = api.run_turn(session["id"], start({"name": "c", "task": TWICE, "agent": "clock"}))
    assert run.done["state"]["status"] == "done", run.done
    events = content(api, session["id"], run)
    # The sub-agent made one model call, whose two calls ran; it was not called again.
    messages = sub_messages(events)
    assert len(messages) == 1 and len(messages[0]["tool_calls"]) == 2, messages
    result = spawning_result(events)
    assert result.startswith("The sub-agent stopped after calling get_current_datetime."), result
    assert result.count("get_current_datetime returned:\n20") == 2, result


def test_a_number_of_tool_calls_ends_the_run_and_without_a_bound_it_answers(api):
    bounded = api.create_session(spec=spec(stop_when={"tool_calls": 2}))
    events = content(api, bounded["id"], api.run_turn(bounded["id"], start({"name": "c", "task": TWICE, "agent": "clock"})))
    assert len(sub_messages(events)) == 1
    result = spawning_result(events)
    assert result.startswith("The sub-agent stopped after its limit of 2 tool calls."), result

    free = api.create_session(spec=spec())
    events = content(api, free["id"], api.run_turn(free["id"], start({"name": "c", "task": TWICE, "agent": "clock"})))
    assert len(sub_messages(events)) == 2, "the model was called again with the results"
    assert spawning_result(events).startswith("Tool result: "), spawning_result(events)


def test_max_iterations_bounds_a_run_below_the_parents_limit(api):
    session = api.create_session(spec=spec(max_iterations=1))
    run = api.run_turn(session["id"], start({"name": "c", "task": TWICE, "agent": "clock"}))
    assert run.done["state"]["status"] == "done", "the parent goes on"
    events = content(api, session["id"], run)
    assert len(sub_messages(events)) == 1
    result = spawning_result(events)
    assert "iteration limit of 1 model calls" in result, result
    done = next(event for event in events if event["type"] == "thread.done")
    assert done["state"]["status"] == "error"


def threads(api, session_id: str, query: str = "") -> list[dict]:
    return api.ok(api.get(f"/api/v1/sessions/{session_id}/threads{query}"))["data"]


def test_a_sub_agent_that_forks_by_default_is_tagged_and_listed_only_when_asked(api):
    session = api.create_session(spec=spec(fork=True, instructions="Tell the time."))
    forked = api.run_turn(session["id"], start({"name": "twin", "task": "hello twin", "agent": "clock"}))
    own = api.run_turn(session["id"], start({"name": "solo", "task": "hello solo", "agent": "clock", "fork": False}))
    created = [event for run in (forked, own) for event in run.stream.payloads if event["type"] == "thread.created"]
    assert [(event["title"], event.get("forked", False)) for event in created] == [("twin", True), ("solo", False)]
    assert all(event["parent"]["thread_id"] == "main" for event in created)

    listed = threads(api, session["id"])
    assert [thread["title"] for thread in listed] == ["solo"], "forked threads are left out"
    solo = listed[0]
    assert solo["thread_id"] == created[1]["thread_id"] and solo["turn_id"] == own.turn_id
    assert solo["parent_thread_id"] == "main" and solo["parent_tool_call_id"] == created[1]["parent"]["tool_call_id"]
    assert solo["status"] == "done" and solo["forked"] is False and solo["ended_at"] >= solo["created_at"]
    assert solo["agent_info"]["input"] == "hello solo"

    everything = threads(api, session["id"], "?include=forked")
    assert [(thread["title"], thread["forked"], thread["turn_id"]) for thread in everything] == [
        ("twin", True, forked.turn_id), ("solo", False, own.turn_id)]


def test_a_thread_listing_of_a_session_without_sub_agents_is_empty_and_bad_queries_are_400(api):
    session = api.create_session(spec=FAKE)
    api.run_turn(session["id"], "hello")
    assert threads(api, session["id"]) == []
    for query in ("?include=everything", "?limit=3"):
        response = api.get(f"/api/v1/sessions/{session['id']}/threads{query}")
        assert response.status_code == 400, (query, response.text)
        assert response.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("sub_agent, message", [
    ({"max_iterations": 0}, "sub_agents[0].max_iterations must be between 1 and 1024"),
    ({"max_iterations": 5000}, "sub_agents[0].max_iterations must be between 1 and 1024"),
    ({"stop_when": {}}, "sub_agents[0].stop_when needs tool_called, tool_calls or both"),
    ({"stop_when": {"tool_calls": 0}}, "sub_agents[0].stop_when.tool_calls must be between 1 and 1024"),
    ({"stop_when": {"tool_called": ""}}, "sub_agents[0].stop_when.tool_called must be a tool name"),
    ({"tools": ["get_current_datetime"], "stop_when": {"tool_called": "submit"}},
     "\"submit\" is not one of the sub-agent's tools (get_current_datetime)"),
    ({"stop_when": {"after": 3}}, "unknown field `after`"),
])
def test_bad_sub_agent_bounds_are_400s_naming_the_field(api, sub_agent, message):
    response = api.post("/api/v1/sessions", json={"agent": {"spec": spec(**sub_agent)}})
    assert response.status_code == 400, response.text
    assert message in response.json()["error"]["message"], response.text
