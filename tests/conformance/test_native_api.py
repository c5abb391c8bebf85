"""The native API (`/api/v1`, `shared/spec/trueforge-openapi.json`) over plain HTTP.

The same flows as the gateway suite, byte-level where the wire matters: agents (update makes a
new version, a session pins the version it started with), sessions, turns, events, subscribe,
model-provider settings, capabilities, health, sessions shared between the two dialects, a turn
with a tool call whose folded stream is exactly what the events list returns, SSE framing and
byte-identical replays, and a disconnect that does not cancel the turn.
"""

from __future__ import annotations

import json
import typing

import httpx
import pytest

import wire
from truefoundry_gateway_sdk import UserMessage
from truefoundry_gateway_sdk.agents import AgentDraftSession, AgentSession

SPEC = {"model": {"name": "fake/fake-model"}, "instructions": "You are an inline agent."}
SYSTEM_TOOL = {"type": "truefoundry-system", "name": "get_current_datetime"}


def tokens(count: int) -> str:
    return "".join(f"tok{i} " for i in range(1, count + 1))


# --------------------------------------------------------------------------------------------
# Health, capabilities, settings
# --------------------------------------------------------------------------------------------


def test_healthz(api):
    assert api.get("/healthz").status_code == 200


def test_capabilities(api):
    data = api.ok(api.get("/api/v1/capabilities"))["data"]
    for name in ("sandbox", "skill", "settings"):
        assert isinstance(data[name]["enabled"], bool), data


def test_model_provider_settings_redact_and_keep_the_key(api, fake_model):
    def fake_provider() -> dict:
        providers = api.ok(api.get("/api/v1/settings/model-providers"))["data"]
        found = [provider for provider in providers if provider["name"] == "fake"]
        assert len(found) == 1, providers
        return found[0]

    provider = fake_provider()
    manifest = provider["manifest"]
    redacted = manifest["auth"]["api_key"]
    assert isinstance(redacted, str) and redacted
    assert wire.API_KEY_SECRET not in json.dumps(provider), "GET must never show the stored key"
    assert manifest["base_url"] == f"{fake_model.url}/v1"
    assert [model["name"] for model in manifest["models"]] == ["fake-model"]

    # PUT the redacted value back: the stored key is kept and the provider still works.
    saved = api.ok(api.put("/api/v1/settings/model-providers", json={"manifest": manifest}))["data"]
    assert saved["name"] == "fake" and wire.API_KEY_SECRET not in json.dumps(saved)
    assert fake_provider()["manifest"]["auth"]["api_key"] == redacted
    session = api.create_session("demo")
    assert api.run_turn(session["id"], "after settings").output_text == "You said: after settings"

    # A redacted value with no stored secret to keep is refused.
    other = dict(manifest, name=wire.unique("nokey"))
    response = api.put("/api/v1/settings/model-providers", json={"manifest": other})
    wire.assert_error(response, 400)


# --------------------------------------------------------------------------------------------
# Agents
# --------------------------------------------------------------------------------------------


def test_agents_crud(api):
    name = wire.unique("crud")
    created = api.create_agent(name, "first version")
    assert set(created) >= {"id", "name", "manifest"}
    assert created["name"] == name and created["manifest"]["instructions"] == "first version"
    assert created["manifest"]["model"]["name"] == "fake/fake-model"

    duplicate = api.post("/api/v1/agents", json={"name": name, "manifest": SPEC})
    wire.assert_error(duplicate, 409)

    assert api.ok(api.get(f"/api/v1/agents/{created['id']}"))["data"] == created
    listed = api.ok(api.get("/api/v1/agents"))["data"]
    assert [agent["id"] for agent in listed].count(created["id"]) == 1

    second = {"model": {"name": "fake/fake-model"}, "instructions": "second version"}
    updated = api.ok(api.put(f"/api/v1/agents/{created['id']}", json={"manifest": second}))["data"]
    assert (updated["id"], updated["name"]) == (created["id"], name)
    assert updated["manifest"]["instructions"] == "second version"
    assert api.ok(api.get(f"/api/v1/agents/{created['id']}"))["data"]["manifest"]["instructions"] == "second version"

    wire.assert_error(api.get("/api/v1/agents/agent-does-not-exist"), 404, {"not_found"})
    wire.assert_error(api.put("/api/v1/agents/agent-does-not-exist", json={"manifest": second}), 404, {"not_found"})

    deleted = api.delete(f"/api/v1/agents/{created['id']}")
    assert deleted.status_code == 200 and isinstance(deleted.json(), dict)
    wire.assert_error(api.get(f"/api/v1/agents/{created['id']}"), 404, {"not_found"})
    assert api.delete(f"/api/v1/agents/{created['id']}").status_code == 200, "delete is idempotent"


def test_session_pins_the_agent_version_it_started_with(api, fake):
    marker = wire.unique("pin")
    agent = api.create_agent(wire.unique("pinned"), f"instructions v1 {marker}")
    first = api.create_session(agent["name"])
    assert first["agent"] == {"type": "reference", "id": agent["id"], "name": agent["name"], "version": 1}

    api.ok(api.put(f"/api/v1/agents/{agent['id']}",
                   json={"manifest": {"model": {"name": "fake/fake-model"}, "instructions": f"instructions v2 {marker}"}}))
    second = api.create_session(agent["name"])
    assert second["agent"]["version"] == 2

    api.run_turn(first["id"], f"on v1 {marker}")
    api.run_turn(second["id"], f"on v2 {marker}")
    sent_v1 = json.dumps(fake.requests_for(f"on v1 {marker}"))
    sent_v2 = json.dumps(fake.requests_for(f"on v2 {marker}"))
    assert f"instructions v1 {marker}" in sent_v1 and f"instructions v2 {marker}" not in sent_v1
    assert f"instructions v2 {marker}" in sent_v2
    assert api.ok(api.get(f"/api/v1/sessions/{first['id']}"))["data"]["agent"]["version"] == 1


# --------------------------------------------------------------------------------------------
# Sessions
# --------------------------------------------------------------------------------------------


def assert_session_shape(session: dict) -> None:
    assert session["type"] in ("session", "session/draft")
    for key in ("id", "created_by", "created_at", "updated_at"):
        assert isinstance(session[key], str) and session[key], key
    assert session["title"] is None or isinstance(session["title"], str)
    subject = session["created_by_subject"]
    assert all(isinstance(subject[key], str) for key in ("subject_id", "subject_type", "subject_slug"))


def test_sessions_create_get_patch_delete(api, fresh_agent):
    saved = api.create_session(fresh_agent["name"])
    assert_session_shape(saved)
    assert saved["type"] == "session" and saved["agent_name"] == fresh_agent["name"]
    assert saved["agent"]["type"] == "reference" and saved["agent"]["id"] == fresh_agent["id"]
    assert saved["title"] is None

    inline = api.create_session(spec=SPEC)
    assert_session_shape(inline)
    assert inline["type"] == "session/draft"
    assert inline["agent"]["type"] == "inline"
    assert wire.without_nulls(inline["agent"]["spec"]) == SPEC
    assert wire.without_nulls(inline["agent_spec"]) == SPEC

    for session in (saved, inline):
        assert api.ok(api.get(f"/api/v1/sessions/{session['id']}"))["data"] == session

    titled = api.ok(api.patch(f"/api/v1/sessions/{saved['id']}", json={"title": "Renamed"}))["data"]
    assert titled["title"] == "Renamed" and titled["updated_at"] >= saved["updated_at"]
    assert api.ok(api.get(f"/api/v1/sessions/{saved['id']}"))["data"]["title"] == "Renamed"

    new_spec = {"model": {"name": "fake/fake-model"}, "instructions": "Replaced inline spec."}
    patched = api.ok(api.patch(f"/api/v1/sessions/{inline['id']}", json={"agent": {"spec": new_spec}}))["data"]
    assert wire.without_nulls(patched["agent"]["spec"]) == new_spec
    assert wire.without_nulls(patched["agent_spec"]) == new_spec

    # A session bound to a saved agent takes its spec from the agent (OpenAPI: 422).
    wire.assert_error(api.patch(f"/api/v1/sessions/{saved['id']}", json={"agent": {"spec": new_spec}}), 422)

    for session in (saved, inline):
        assert api.delete(f"/api/v1/sessions/{session['id']}").status_code == 204
        wire.assert_error(api.get(f"/api/v1/sessions/{session['id']}"), 404, {"not_found"})
        assert api.delete(f"/api/v1/sessions/{session['id']}").status_code == 204, "delete is idempotent"


def test_sessions_keyset_pagination(api, fresh_agent):
    created = [api.create_session(fresh_agent["name"])["id"] for _ in range(5)]
    items, pages = api.list_all("/api/v1/sessions", limit=2, agent_id=fresh_agent["id"])
    assert [page["limit"] for page in pages] == [2, 2, 2]
    assert len(items) == 5
    assert sorted(item["id"] for item in items) == sorted(created)
    assert not pages[-1].get("next_page_token")
    stamps = [item["updated_at"] for item in items]
    assert stamps == sorted(stamps, reverse=True), "newest first by default"

    ascending, _ = api.list_all("/api/v1/sessions", limit=2, agent_id=fresh_agent["id"], order="asc")
    assert sorted(item["id"] for item in ascending) == sorted(created)
    stamps = [item["updated_at"] for item in ascending]
    assert stamps == sorted(stamps)


def test_cancel(api):
    session = api.create_session("demo")
    idle = api.post(f"/api/v1/sessions/{session['id']}/cancel", json={})
    assert idle.status_code == 200 and idle.json() == {}

    running = api.start_turn(session["id"], "[tokens:60][delay:100] cancel me")
    api.read_until_delta(session["id"], running["id"])
    cancelled = api.post(f"/api/v1/sessions/{session['id']}/cancel", json={})
    assert cancelled.status_code == 200 and isinstance(cancelled.json(), dict)
    turn = api.wait_terminal(session["id"], running["id"])
    assert turn["state"]["status"] == "cancelled" and turn["state"]["reason"] == "client-cancelled"
    replay = api.subscribe(session["id"], running["id"])
    wire.assert_sse_framing(replay)
    assert replay.payloads[-1]["state"] == turn["state"]


# --------------------------------------------------------------------------------------------
# Turns
# --------------------------------------------------------------------------------------------


def test_turns_stream_by_default_and_json_on_request(api):
    session = api.create_session("demo")
    # No `stream` key: the native API streams by default.
    streamed = api.stream("POST", f"/api/v1/sessions/{session['id']}/turns",
                          json={"input": [{"type": "user.message", "content": "first"}]})
    wire.assert_sse_framing(streamed)
    first = wire.TurnRun(streamed)
    assert first.done["state"]["status"] == "done" and first.output_text == "You said: first"

    response = api.post(f"/api/v1/sessions/{session['id']}/turns",
                        json={"input": [{"type": "user.message", "content": "[tokens:3][delay:100] second"}],
                              "stream": False})
    assert response.status_code == 200 and response.headers["content-type"].startswith("application/json")
    second = response.json()["data"]
    assert second["state"] == {"status": "running"}
    assert second["session_id"] == session["id"] and second["previous_turn_id"] == first.turn_id
    assert second["input"] == [{"type": "user.message", "content": "[tokens:3][delay:100] second"}]
    assert isinstance(second["created_at"], str)

    done = api.wait_terminal(session["id"], second["id"])
    assert done["state"]["status"] == "done"
    assert done["state"]["output"]["content"].split() == tokens(3).split()
    assert {key: done[key] for key in ("id", "session_id", "previous_turn_id", "input", "created_at")} == \
        {key: second[key] for key in ("id", "session_id", "previous_turn_id", "input", "created_at")}

    turns = api.ok(api.get(f"/api/v1/sessions/{session['id']}/turns"))
    assert [turn["id"] for turn in turns["data"]] == [second["id"], first.turn_id]
    paged, pages = api.list_all(f"/api/v1/sessions/{session['id']}/turns", limit=1)
    assert [turn["id"] for turn in paged] == [second["id"], first.turn_id]
    assert all(page["limit"] == 1 for page in pages)
    assert api.get_turn(session["id"], first.turn_id)["state"]["status"] == "done"


def test_tool_call_turn_folds_to_the_events_list(api):
    session = api.create_session("demo")
    run = api.run_turn(session["id"], "[tool:get_current_datetime {}] what time is it")
    wire.assert_sse_framing(run.stream)

    folded = wire.fold_stream(run.stream.payloads)
    assert [event["type"] for event in folded] == [
        "turn.created", "model.message", "tool.response", "model.message", "turn.done"]
    call_message, response, answer = folded[1], folded[2], folded[3]
    assert call_message["finish_reason"] == "tool_calls"
    [call] = call_message["tool_calls"]
    assert call["type"] == "function" and call["function"]["name"] == "get_current_datetime"
    assert json.loads(call["function"]["arguments"] or "{}") == {}
    assert call["tool_info"] == SYSTEM_TOOL
    assert response["tool_call_id"] == call["id"] and response["content"]
    assert answer["content"] == f"Tool result: {response['content']}"
    assert answer["finish_reason"] == "stop"
    assert wire.without_nulls(folded[-1]["state"]["output"]) == wire.without_nulls(answer)
    assert len({event["thread_id"] for event in folded[1:4]}) == 1

    path = f"/api/v1/sessions/{session['id']}/turns/{run.turn_id}/events"
    listed, _ = api.list_all(path, limit=100)
    # Content events must be exactly the fold; should the native list also carry turn.created /
    # turn.done, they must be the streamed ones.
    content = [event for event in listed if event["type"] in wire.CONTENT_EVENT_TYPES]
    assert wire.without_nulls(content) == wire.without_nulls(folded[1:4])
    lifecycle = [event for event in listed if event["type"] not in wire.CONTENT_EVENT_TYPES]
    assert all(wire.without_nulls(event) in wire.without_nulls([folded[0], folded[-1]])
               for event in lifecycle), lifecycle

    one_by_one, pages = api.list_all(path, limit=1)
    assert one_by_one == listed and len(pages) >= len(listed)
    descending, _ = api.list_all(path, limit=100, order="desc")
    assert descending == listed[::-1]


def test_session_events(api):
    session = api.create_session("demo")
    first = api.run_turn(session["id"], "first")
    second = api.run_turn(session["id"], "second")
    path = f"/api/v1/sessions/{session['id']}/events"

    body = api.ok(api.get(path))
    expected = [{"turn_id": run.turn_id, "event": event}
                for run in (second, first) for event in wire.fold_stream(run.stream.payloads)[::-1]]
    assert wire.without_nulls(body["data"]) == wire.without_nulls(expected)
    assert isinstance(body["pagination"]["limit"], int)

    only_first = api.ok(api.get(path, params={"last_turn_id": first.turn_id}))["data"]
    assert wire.without_nulls(only_first) == wire.without_nulls(expected[3:])

    paged, _ = api.list_all(path, limit=2)
    assert wire.without_nulls(paged) == wire.without_nulls(expected)


# --------------------------------------------------------------------------------------------
# Subscribe and SSE framing
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def finished_turn(server) -> tuple[str, wire.TurnRun]:
    api = server.require_api()
    session = api.create_session("demo")
    return session["id"], api.run_turn(session["id"], "[tokens:8] replay me")


SUBSCRIBE_CASES = [
    # (name, query cursor, Last-Event-ID header, first sequence number)
    ("from-start", None, None, 1),
    ("after-0", 0, None, 1),
    ("after-3", 3, None, 4),
    ("last-event-id-5", None, "5", 6),
    ("after-last", "LAST", None, None),
]


@pytest.mark.parametrize("name, after, last_event_id, first", SUBSCRIBE_CASES,
                         ids=[case[0] for case in SUBSCRIBE_CASES])
def test_subscribe_replays_the_original_bytes(api, finished_turn, name, after, last_event_id, first):
    session_id, original = finished_turn
    wire.assert_sse_framing(original.stream)
    last = len(original.stream.events)
    assert last >= 11
    after = last if after == "LAST" else after
    first = last + 1 if first is None else first

    replay = api.subscribe(session_id, original.turn_id, after=after, last_event_id=last_event_id)
    assert replay.status == 200
    assert replay.headers["content-type"].split(";")[0] == "text/event-stream"
    assert [event.seq for event in replay.events] == list(range(first, last + 1))
    assert [event.raw for event in replay.events] == [event.raw for event in original.stream.events[first - 1:]]
    assert replay.sse is not None and replay.sse.pending.strip() == b""


def test_sse_framing(api):
    session = api.create_session("demo")
    run = api.run_turn(session["id"], "[tokens:5] frame me")
    wire.assert_sse_framing(run.stream)
    for event in run.stream.events:
        fields = event.raw.split(b"\n")
        assert sum(1 for field in fields if field.startswith(b"id:")) == 1, event.raw
        payload = event.json
        assert "sequence_number" not in payload and isinstance(payload["type"], str)
    types = [payload["type"] for payload in run.stream.payloads]
    assert types[0] == "turn.created" and types[1] == "model.message"
    assert types.count("model.message.delta") >= 5
    placeholder = run.stream.payloads[1]
    assert not placeholder.get("content"), "the placeholder carries no content"
    assert {p["id"] for p in run.stream.payloads if p["type"].startswith("model.message")} == {placeholder["id"]}


def test_disconnect_does_not_cancel_the_turn(api):
    session = api.create_session("demo")
    parser = wire.SseParser()
    body = {"input": [{"type": "user.message", "content": "[tokens:20][delay:100] keep going"}]}
    with api.http.stream("POST", f"/api/v1/sessions/{session['id']}/turns", json=body) as response:
        assert response.status_code == 200
        for chunk in response.iter_bytes():
            parser.feed(chunk)
            if any(event.type == "model.message.delta" for event in parser.events):
                break  # leaving the block closes the connection mid-stream
    turn_id = parser.events[0].json["turn_id"]
    turn = api.wait_terminal(session["id"], turn_id)
    assert turn["state"]["status"] == "done", turn["state"]
    assert turn["state"]["output"]["content"].split() == tokens(20).split()
    replay = api.subscribe(session["id"], turn_id)
    wire.assert_sse_framing(replay)
    assert [event.raw for event in replay.events[:len(parser.events)]] == [event.raw for event in parser.events]


# --------------------------------------------------------------------------------------------
# One session, two dialects
# --------------------------------------------------------------------------------------------


def test_gateway_session_used_over_native(api, client):
    session = client.create_session(agent_name="demo")
    native = api.ok(api.get(f"/api/v1/sessions/{session.id}"))["data"]
    assert native["type"] == "session" and native["agent_name"] == "demo"
    assert native["agent"]["type"] == "reference" and native["agent"]["name"] == "demo"
    assert native["created_at"] == session.created_at

    run = api.run_turn(session.id, "from native")
    assert run.output_text == "You said: from native"
    turns = list(client.get_session(session.id).list_turns())
    assert [turn.id for turn in turns] == [run.turn_id]
    assert turns[0].state.status == "done"

    prepared = session.prepare_turn(input=[UserMessage(content="from gateway")])
    items = list(prepared.execute())
    assert prepared.previous_turn_id == run.turn_id and items[-1].event.type == "turn.done"
    native_turns = api.ok(api.get(f"/api/v1/sessions/{session.id}/turns"))["data"]
    assert [turn["id"] for turn in native_turns] == [prepared.id, run.turn_id]


def test_native_sessions_used_over_gateway(api, client, private):
    saved = api.create_session("demo")
    gateway_saved = client.get_session(saved["id"])
    assert isinstance(gateway_saved, AgentSession) and gateway_saved.agent_name == "demo"

    inline = api.create_session(spec=SPEC)
    draft = private.get_draft_session(inline["id"])
    assert isinstance(draft, AgentDraftSession)
    assert draft.agent_spec.instructions == SPEC["instructions"]
    assert draft.agent_spec.model.name == SPEC["model"]["name"]

    prepared = draft.prepare_turn(input=[UserMessage(content="inline via gateway")])
    items = list(prepared.execute())
    assert prepared.state.status == "done" and prepared.state.output.content == "You said: inline via gateway"
    assert [item.sequence_number for item in items] == list(range(1, len(items) + 1))
    native_turn = api.get_turn(inline["id"], prepared.id)
    assert native_turn["state"]["status"] == "done"
    assert native_turn["state"]["output"]["content"] == "You said: inline via gateway"


@pytest.mark.parametrize("prefix", ["/t1", "/another/tenant", ""], ids=["t1", "nested", "root"])
def test_gateway_under_any_prefix(api, client, prefix):
    session = client.create_session(agent_name="demo")
    fetched = api.ok(api.get(f"{prefix}/v1/agents/sessions/{session.id}"))["data"]
    assert fetched["id"] == session.id and fetched["type"] == "session"
    wire.assert_error(api.get(f"{prefix}/v1/agents/sessions/sess-does-not-exist"), 404, {"not_found"})
    listed = api.ok(api.get(f"{prefix}/v1/x/agents/owned-sessions", params={"agent_name": "demo", "limit": 100}))
    assert session.id in [item["id"] for item in listed["data"]]


def test_session_listings_preview_each_sessions_first_user_message(api):
    quiet = api.create_session("demo")
    talked = api.create_session("demo")
    words = " ".join(["word"] * 60)
    first = f"Refactor the\n  parser {wire.unique('preview')} {words}"
    assert api.run_turn(talked["id"], first).done["state"]["status"] == "done"
    assert api.run_turn(talked["id"], "a later message").done["state"]["status"] == "done"
    listed = {session["id"]: session for session in api.ok(api.get("/api/v1/sessions"))["data"]}
    preview = listed[talked["id"]]["preview"]
    one_line = " ".join(first.split())
    assert preview == one_line[:200] + "…", preview
    assert "preview" not in listed[quiet["id"]]
