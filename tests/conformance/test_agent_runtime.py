"""How the agent runtime applies an agent's definition and meets failure, over the native API:
instructions and seed messages with `{{variables}}`, the iteration limit, the turn timeout (the
server's and an agent's own), and provider errors. The fake model's request log shows exactly what the model was sent."""

from __future__ import annotations

import pytest

import wire


def test_variables_fill_instructions_and_seed_messages(api, fake):
    marker = wire.unique("vars")
    spec = {
        "model": {"name": "fake/fake-model"},
        "instructions": "Be nice to {{user}}; unknown {{stays}} as written.",
        "messages": [{"type": "user.message", "content": "Seed for {{ user }}."}],
        "variables": {"user": "bob"},
    }
    session = api.create_session(spec=spec)
    run = api.run_turn(session["id"], f"[history] {marker}")
    assert run.done["state"]["status"] == "done"
    assert run.output_text == f"History: Seed for bob. | [history] {marker}"
    (request,) = fake.requests_for(marker)
    system = request["messages"][0]
    assert system["role"] == "system"
    assert system["content"] == "Be nice to bob; unknown {{stays}} as written."


def test_iteration_limit_ends_the_turn_with_an_error(api, fake):
    marker = wire.unique("loop")
    spec = {"model": {"name": "fake/fake-model"}, "config": {"iteration_limit": 1}}
    session = api.create_session(spec=spec)
    run = api.run_turn(session["id"], f"[tool:get_current_datetime {{}}] {marker}")
    state = run.done["state"]
    assert state["status"] == "error"
    assert "iteration limit of 1" in state["message"]
    # The one allowed model call happened and its tool ran; no second call was made.
    assert len(fake.requests_for(marker)) == 1
    kinds = [event["type"] for event in run.stream.payloads]
    assert "tool.response" in kinds
    assert state["metrics"]["total_tokens"] > 0


def test_turn_timeout_cancels_and_keeps_partial_output(server_factory, fake):
    own = server_factory(["--turn-timeout-secs", "1"])
    api = own.require_api()
    session = api.create_session("demo")
    marker = wire.unique("slow")
    run = api.run_turn(session["id"], f"[tokens:40][delay:100] {marker}")
    state = run.done["state"]
    assert state["status"] == "cancelled"
    assert state["reason"] == "server-execution-timeout"
    assert state["metrics"]["total_output_tokens"] > 0
    # What streamed before the deadline is kept in the listed, folded message.
    turn_id = run.turn_id
    listed = api.ok(api.get(f"/api/v1/sessions/{session['id']}/turns/{turn_id}/events"))["data"]
    (message,) = [event for event in listed if event["type"] == "model.message"]
    assert message["content"].startswith("tok1 tok2 ")
    assert "tok40" not in message["content"]
    assert api.get_turn(session["id"], turn_id)["state"]["reason"] == "server-execution-timeout"



def test_an_agents_own_timeout_cancels_its_turns_as_the_servers_does(api):
    """`config.timeout_seconds` (seed 000: the timeout configured for the agent): a saved agent's
    turns and a draft's end at it, cancelled as the server's own timeout cancels them."""
    name = wire.unique("quick").lower().replace("_", "-")
    manifest = {"model": {"name": "fake/fake-model"}, "config": {"timeout_seconds": 1}}
    api.ok(api.post("/api/v1/agents", json={"name": name, "manifest": manifest}), 201)
    stored = api.ok(api.get(f"/api/v1/agents/{name}"))["data"]["manifest"]
    assert stored["config"]["timeout_seconds"] == 1
    for session in (api.create_session(name), api.create_session(spec=manifest)):
        run = api.run_turn(session["id"], f"[tokens:40][delay:100] {wire.unique('slow')}")
        state = run.done["state"]
        assert state["status"] == "cancelled" and state["reason"] == "server-execution-timeout", state
        assert state["metrics"]["total_output_tokens"] > 0
    # Without it, the same turn runs to its end under the server's timeout (600 s here).
    plain = api.create_session(spec={"model": {"name": "fake/fake-model"}})
    assert api.run_turn(plain["id"], "[tokens:12][delay:100] not timed out").done["state"]["status"] == "done"


@pytest.mark.parametrize("seconds", [0, 601, 10**12, "soon"])
def test_an_agents_timeout_outside_the_servers_bound_is_refused(api, seconds):
    manifest = {"model": {"name": "fake/fake-model"}, "config": {"timeout_seconds": seconds}}
    name = wire.unique("bounded").lower().replace("_", "-")
    error = wire.assert_error(api.post("/api/v1/agents", json={"name": name, "manifest": manifest}), 400)
    assert error["param"] in ("config.timeout_seconds", "manifest.config.timeout_seconds"), error
    wire.assert_error(api.post("/api/v1/sessions", json={"agent": {"spec": manifest}}), 400)
    assert api.get(f"/api/v1/agents/{name}").status_code == 404


@pytest.mark.parametrize("directive, expected", [
    ("[midstream-error]", "fake mid-stream failure"),
    ("[error:401]", "provider answered 401: fake error 401"),
    ("[error:500]", "provider answered 500: fake error 500"),
    ("[error:429]", "rate limited"),
])
def test_provider_failures_end_the_turn_with_what_the_provider_said(api, directive, expected):
    session = api.create_session("demo")
    run = api.run_turn(session["id"], f"{directive} {wire.unique('fail')}")
    state = run.done["state"]
    assert state["status"] == "error", state
    assert expected in state["message"], state["message"]
    assert state["completed_at"]
    # The session stays usable.
    assert api.run_turn(session["id"], "after the failure").output_text == "You said: after the failure"


def test_a_failure_mid_stream_keeps_what_was_streamed(api):
    session = api.create_session("demo")
    run = api.run_turn(session["id"], f"[midstream-error] {wire.unique('partial')}")
    listed = api.ok(api.get(f"/api/v1/sessions/{session['id']}/turns/{run.turn_id}/events"))["data"]
    (message,) = [event for event in listed if event["type"] == "model.message"]
    assert message["content"] == "Partial answer"
    assert "finish_reason" not in message
