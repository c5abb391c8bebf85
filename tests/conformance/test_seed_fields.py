"""Seed 000's request options and wire fields, added beside the real gateway client's without
changing what that client sends or reads ("add, never break"): each is read here over the raw
wire, while the real client's own suite (test_gateway_sdk.py) runs unchanged.

So far: a gateway session created with a `title` (E1); `turn.done`'s top-level `status`,
`cancellation_reason` and `message`, copies of its `state`'s, in both dialects' streams, and
`thread.done`'s `status` and `message`."""

from __future__ import annotations

import json

import pytest

import wire


@pytest.mark.parametrize("title", ["Quarterly report", "Ünïcödé title ✓", "x" * 512])
def test_a_gateway_session_may_be_created_with_a_title(api, title):
    created = api.ok(api.post(wire.Api.gw("sessions"), json={"agent_name": "demo", "title": title}))["data"]
    assert created["title"] == title
    assert api.ok(api.get(wire.Api.gw(f"sessions/{created['id']}")))["data"]["title"] == title
    # The native API sees the same session, titled.
    assert api.ok(api.get(f"/api/v1/sessions/{created['id']}"))["data"]["title"] == title


def test_without_a_title_a_gateway_session_is_untitled_as_before(api):
    created = api.ok(api.post(wire.Api.gw("sessions"), json={"agent_name": "demo"}))["data"]
    assert created.get("title") is None


@pytest.mark.parametrize("title, status, param", [
    ("x" * 513, 400, "title"),
    (7, 400, "title"),
])
def test_a_bad_title_is_refused_and_no_session_is_made(api, title, status, param):
    before = api.ok(api.get(wire.Api.gw("sessions"), params={"agent_name": "demo", "limit": 100,
                                                              "start_timestamp": "2000-01-01T00:00:00Z"}))["data"]
    error = wire.assert_error(api.post(wire.Api.gw("sessions"), json={"agent_name": "demo", "title": title}), status)
    assert error["param"] == param, error
    after = api.ok(api.get(wire.Api.gw("sessions"), params={"agent_name": "demo", "limit": 100,
                                                             "start_timestamp": "2000-01-01T00:00:00Z"}))["data"]
    assert len(after) == len(before)


QUICK = {"model": {"name": "fake/fake-model"}, "config": {"timeout_seconds": 1}}


@pytest.mark.parametrize("text, spec, mirrored", [
    ("hello", None, {"status": "done"}),
    ("[error:400] refused", None, {"status": "error"}),
    ("[tokens:40][delay:100] slow", QUICK, {"status": "cancelled", "cancellation_reason": "server-execution-timeout"}),
])
def test_turn_done_carries_its_states_status_reason_and_message_at_the_top(api, text, spec, mirrored):
    session = api.create_session("demo") if spec is None else api.create_session(spec=spec)
    for done in (api.run_turn(session["id"], text).done,
                 api.subscribe(session["id"], api.run_turn(session["id"], text).turn_id).payloads[-1]):
        state = done["state"]
        assert done["status"] == state["status"] == mirrored["status"], done
        assert done.get("cancellation_reason") == mirrored.get("cancellation_reason") == state.get("reason"), done
        assert done.get("message") == state.get("message"), done
        if mirrored["status"] == "error":
            assert done["message"], done
    # The gateway dialect's stream carries the same copies.
    if spec is None:
        gateway = api.ok(api.post(wire.Api.gw("sessions"), json={"agent_name": "demo"}))["data"]
        streamed = api.stream("POST", wire.Api.gw(f"sessions/{gateway['id']}/turns"),
                              json={"input": [{"type": "user.message", "content": text}], "stream": True}).payloads
        assert streamed[-1]["type"] == "turn.done"
        assert streamed[-1]["status"] == streamed[-1]["state"]["status"] == mirrored["status"]


def test_thread_done_carries_its_states_status_and_message_at_the_top(api):
    spawn = lambda name, task: f"[tool:run_sub_agent {json.dumps({'name': name, 'task': task})}]"
    session = api.create_session("demo")
    run = api.run_turn(session["id"], spawn("ok", "[tokens:3] fine") + spawn("broken", "[error:401] fail"))
    for payloads in (run.stream.payloads, api.subscribe(session["id"], run.turn_id).payloads):
        done = {event["title"]: event for event in payloads if event["type"] == "thread.done"}
        assert (done["ok"]["status"], done["ok"]["state"]["status"]) == ("done", "done")
        assert "message" not in done["ok"]
        assert (done["broken"]["status"], done["broken"]["state"]["status"]) == ("error", "error")
        assert done["broken"]["message"] == done["broken"]["state"]["error"] and "401" in done["broken"]["message"]
