"""A turn's `request_context` (a Teamster extension of turn creation): a JSON object of the
application's that the turn's tools get (an MCP server in its `tools/call` request's `_meta`,
under `teamster/request_context`), its sub-agents' tools too, and that the turn records. Over
16 KiB it is a 413; anything but an object is a 400."""

from __future__ import annotations

import json
import typing

import pytest

import conftest
import wire
from test_mcp import call, registered_tools_server, registry

META_KEY = "teamster/request_context"
CONTEXT = {"tenant": "acme", "user": {"id": "u-7", "roles": ["admin"]}, "locale": "fr-FR"}


@pytest.fixture(scope="module")
def tools(server: conftest.TeamsterServer, workdir) -> typing.Iterator[str]:
    """The HTTP test server, registered in the settings; its name."""
    with registered_tools_server(server, workdir, "ctx") as name:
        yield name


def metas(api: wire.Api, session_id: str, turn_id: str) -> dict[str, dict]:
    """The `_meta` each `request_meta` call of the turn saw, by thread."""
    events = api.ok(api.get(f"/api/v1/sessions/{session_id}/turns/{turn_id}/events?limit=1000"))["data"]
    threads = {call["id"]: event.get("thread_id", "main") for event in events if event["type"] == "model.message"
               for call in event.get("tool_calls") or [] if call["function"]["name"].endswith("request_meta")}
    return {threads[event["tool_call_id"]]: json.loads(event["content"])
            for event in events if event["type"] == "tool.response" and event["tool_call_id"] in threads}


def test_the_context_reaches_mcp_tools_of_the_turn_and_its_sub_agents_and_is_recorded(api, tools):
    spec = {"model": {"name": "fake/fake-model"}, "mcp_servers": [registry(tools, preload=True)],
            "config": {"dynamic_sub_agents": {"enabled": True}}}
    session = api.create_session(spec=spec)["id"]
    spawn = call("run_sub_agent", {"name": "helper", "task": call("request_meta")})
    run = api.run_turn(session, call("request_meta") + spawn, request_context=CONTEXT)
    assert run.done["state"]["status"] == "done", run.done
    seen = metas(api, session, run.turn_id)
    assert set(seen) == {"main", next(thread for thread in seen if thread != "main")}, seen
    assert all(meta == {META_KEY: CONTEXT} for meta in seen.values()), seen
    assert api.get_turn(session, run.turn_id)["request_context"] == CONTEXT

    # The next turn has its own context, or none.
    plain = api.run_turn(session, call("request_meta"))
    assert metas(api, session, plain.turn_id) == {"main": {}}
    assert "request_context" not in api.get_turn(session, plain.turn_id)


@pytest.mark.parametrize("context, status, code", [
    ({"blob": "x" * (16 * 1024)}, 413, "payload_too_large"),
    ("a string", 400, "invalid_request_error"),
    ([1, 2], 400, "invalid_request_error"),
])
def test_a_context_over_its_bound_or_not_an_object_is_refused_and_starts_nothing(api, context, status, code):
    session = api.create_session(spec={"model": {"name": "fake/fake-model"}})["id"]
    body = {"input": [{"type": "user.message", "content": "hello"}], "request_context": context}
    response = api.post(f"/api/v1/sessions/{session}/turns", json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert code in (error.get("type"), error.get("code")), error
    if status == 413:
        assert "request_context is 16" in error["message"] and "at most 16384" in error["message"], error
    turns = api.ok(api.get(f"/api/v1/sessions/{session}/turns"))["data"]
    assert turns == [], "nothing was started"
