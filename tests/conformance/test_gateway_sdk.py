"""The gateway dialect driven by the real, unmodified `truefoundry-gateway-sdk` 0.4.2.

Scenarios 1–11, 13–15, 17–21 and 23–25 of `shared/spec/gateway-wire-protocol.md` §10, in that
order, with the spec's setup (`AgentSessionClient(base_url=f"{srv}/t1", api_key="K")`, an agent
`demo`, the fake model behind it). Where a scenario asserts what the SDK sent or received on the
wire, the SDK runs over a `Recorder` (conftest), an httpx transport that keeps every request and
every response body byte for byte; the SDK itself is never patched.

Not here: 12 (a stream older than the retention window) and 16 (approvals) need server
features that are not in this suite's contract yet.
"""

from __future__ import annotations

import base64
import datetime
import http.server
import json
import logging
import platform
import re
import shlex
import sqlite3
import threading
import time
import typing
import urllib.parse

import httpx
import pytest

import conftest
import wire
from truefoundry_gateway_sdk import (
    AgentSpec,
    ApprovalAllow,
    BadRequestError,
    ConflictError,
    FileContent,
    GoneError,
    Model,
    ModelParams,
    NotFoundError,
    SessionType,
    TextContent,
    UserMessage,
)
from truefoundry_gateway_sdk.agents import (
    AgentDraftSession,
    AgentSession,
    AgentSessionClient,
    ModelMessageEvent,
    SandboxCreatedEvent,
    ToolResponseEvent,
    TurnCreatedEvent,
    TurnDoneEvent,
    TurnStateCancelled,
    TurnStateDone,
    UserToolApprovalEvent,
    is_event_delta,
    merge_event_delta,
)

DEMO = "demo"
SYSTEM_TOOL = {"type": "truefoundry-system", "name": "get_current_datetime"}


def user(text: str) -> list:
    return [UserMessage(content=text)]


def run(session, text: str, **kwargs):
    """Runs one streaming turn to EOF; returns (prepared turn, yielded items)."""
    prepared = session.prepare_turn(input=user(text), **kwargs)
    items = list(prepared.execute())
    return prepared, items


def query(exchange: wire.Exchange) -> dict[str, list[str]]:
    return urllib.parse.parse_qs(exchange.query, keep_blank_values=True)


def as_stream(exchange: wire.Exchange) -> wire.StreamResult:
    assert exchange.response_headers is not None
    return wire.StreamResult(exchange.status or 0, exchange.response_headers, exchange.response_body,
                             wire.parse_sse(exchange.response_body))


def dump(model: typing.Any) -> typing.Any:
    return None if model is None else model.dict()


def fold_with_sdk(items) -> list[ModelMessageEvent]:
    """Scenario 6's fold: keep each placeholder by id, merge every delta into it."""
    messages: dict[str, ModelMessageEvent] = {}
    for item in items:
        event = item.event
        if is_event_delta(event):
            merge_event_delta(messages[event.id], event)
        elif event.type == "model.message":
            messages[event.id] = event.model_copy(deep=True)
    return list(messages.values())


def tokens(count: int) -> str:
    """What the fake model streams for `[tokens:N]`."""
    return "".join(f"tok{i} " for i in range(1, count + 1))


# --------------------------------------------------------------------------------------------
# 1–3: headers, errors, get
# --------------------------------------------------------------------------------------------


def test_01_headers_prefix_and_body(srv):
    sent: list[httpx.Request] = []
    answered: list[httpx.Response] = []

    def on_request(request: httpx.Request) -> None:
        sent.append(request)

    def on_response(response: httpx.Response) -> None:
        response.read()
        answered.append(response)

    with httpx.Client(event_hooks={"request": [on_request], "response": [on_response]},
                      timeout=httpx.Timeout(30.0, connect=5.0)) as http:
        client = AgentSessionClient(base_url=f"{srv}/t1", api_key="K", httpx_client=http)
        session = client.create_session(agent_name=DEMO)

    assert len(sent) == 1
    request = sent[0]
    assert request.method == "POST"
    assert request.url.path == "/t1/v1/agents/sessions"
    expected_headers = {
        "authorization": "Bearer K",
        "user-agent": "truefoundry-gateway-sdk/0.4.2",
        "x-fern-language": "Python",
        "x-fern-runtime": f"python/{platform.python_version()}",
        "x-fern-platform": f"{platform.system().lower()}/{platform.release()}",
        "x-fern-sdk-name": "truefoundry-gateway-sdk",
        "x-fern-sdk-version": "0.4.2",
        "content-type": "application/json",
    }
    assert {name: request.headers.get(name) for name in expected_headers} == expected_headers
    assert json.loads(request.content) == {"agent_name": DEMO}

    response = answered[0]
    assert response.status_code == 200
    data = response.json()["data"]
    assert data["type"] == "session"
    assert isinstance(session, AgentSession)
    assert (session.id, session.agent_name) == (data["id"], DEMO)
    subject = data["created_by_subject"]
    assert (session.created_by_subject.subject_id, session.created_by_subject.subject_type,
            session.created_by_subject.subject_slug) == (
        subject["subject_id"], subject["subject_type"], subject["subject_slug"])
    assert session.created_at == data["created_at"] and session.updated_at == data["updated_at"]


def test_02_unknown_agent_is_404_and_not_retried(recorder):
    with pytest.raises(NotFoundError) as raised:
        recorder.client.create_session(agent_name="nope")
    assert raised.value.status_code == 404
    assert raised.value.body.error.message
    assert raised.value.body.error.code == "not_found"
    assert len(recorder.exchanges) == 1, "a 404 must not be retried"
    assert recorder.exchanges[0].response_json["error"]["message"]


def test_03_get_session(recorder):
    created = recorder.client.create_session(agent_name=DEMO)
    fetched = recorder.client.get_session(created.id)
    exchange = recorder.last("GET", f"/sessions/{created.id}")
    assert exchange.path == f"/t1/v1/agents/sessions/{created.id}"
    assert (fetched.id, fetched.agent_name, fetched.created_at, fetched.title) == (
        created.id, DEMO, created.created_at, created.title)
    assert dump(fetched.created_by_subject) == dump(created.created_by_subject)

    recorder.clear()
    with pytest.raises(NotFoundError) as raised:
        recorder.client.get_session("sess-does-not-exist")
    assert raised.value.body.error.message
    assert len(recorder.exchanges) == 1


# --------------------------------------------------------------------------------------------
# 4: list sessions, keyset pagination and the 30-minute default window
# --------------------------------------------------------------------------------------------


def backdate_session(db_path, session_id: str, delta: datetime.timedelta) -> str:
    """Moves one session's `created_at` back in the SQLite file (server stopped). Written for
    RFC 3339 text (`2025-01-01T00:00:00.000Z`); integer epoch columns are handled too."""
    connection = sqlite3.connect(str(db_path), timeout=10)
    try:
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert "sessions" in tables, f"no `sessions` table in {db_path} (tables: {sorted(tables)})"
        row = connection.execute("SELECT created_at FROM sessions WHERE id = ?", (session_id,)).fetchone()
        assert row is not None, f"session {session_id} is not a row of `sessions`"
        value = row[0]
        if isinstance(value, (int, float)):
            scale = 1000 if value > 10**11 else 1
            moved: typing.Any = type(value)(value - delta.total_seconds() * scale)
        else:
            parsed = datetime.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
            shifted = (parsed - delta).astimezone(datetime.timezone.utc)
            fraction = re.search(r"\.(\d+)", str(value))
            digits = len(fraction.group(1)) if fraction else 0
            moved = shifted.strftime("%Y-%m-%dT%H:%M:%S")
            if digits:
                moved += "." + f"{shifted.microsecond:06d}"[:digits].ljust(digits, "0")
            moved += "Z"
        changed = connection.execute("UPDATE sessions SET created_at = ? WHERE id = ?", (moved, session_id)).rowcount
        connection.commit()
        assert changed == 1
        return str(moved)
    finally:
        connection.close()


@conftest.sqlite_only
def test_04_list_sessions_pagination(server_factory, recorder_factory):
    own = server_factory()
    creator = recorder_factory(own.gateway_url)
    created = [creator.client.create_session(agent_name=DEMO).id for _ in range(26)]
    old = created[0]

    own.stop()
    backdate_session(own.db_path, old, datetime.timedelta(hours=2))
    own.start()

    recorder = recorder_factory(own.gateway_url)
    pager = recorder.client.list_sessions(agent_name=DEMO)
    pages = list(pager.iter_pages())
    listed = [session for page in pages for session in (page.items or [])]

    requests = recorder.matching("GET", "/v1/agents/sessions")
    assert [len(page.items or []) for page in pages] == [10, 10, 5]
    assert len(requests) == 3, "the last page must carry no next_page_token"
    assert query(requests[0]) == {"agent_name": [DEMO], "limit": ["10"]}
    for request in requests[1:]:
        params = query(request)
        assert params["agent_name"] == [DEMO] and params["limit"] == ["10"]
        assert params["page_token"][0], "follow-up pages are asked for with the previous page_token"
    assert not requests[-1].response_json["pagination"].get("next_page_token")
    assert all(isinstance(r.response_json["pagination"]["limit"], int) for r in requests)

    ids = [session.id for session in listed]
    assert len(set(ids)) == 25 and set(ids) == set(created[1:]), "the 2-hour-old session is outside the default window"
    stamps = [session.created_at for session in listed]
    assert stamps == sorted(stamps, reverse=True), "newest first"
    assert all(isinstance(session, AgentSession) for session in listed)

    since = (datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=3)).strftime(
        "%Y-%m-%dT%H:%M:%S.000Z")
    recorder.clear()
    everything = list(recorder.client.list_sessions(agent_name=DEMO, start_timestamp=since))
    assert {session.id for session in everything} == set(created)
    assert len(everything) == 26
    assert all(query(r)["start_timestamp"] == [since] for r in recorder.matching("GET", "/v1/agents/sessions"))
    # The moved timestamp reads back through the API as about two hours ago.
    old_created = datetime.datetime.fromisoformat(recorder.client.get_session(old).created_at.replace("Z", "+00:00"))
    assert datetime.datetime.now(datetime.timezone.utc) - old_created > datetime.timedelta(minutes=90)


# --------------------------------------------------------------------------------------------
# 5, 6: streaming happy path and delta folding
# --------------------------------------------------------------------------------------------


class Streamed(typing.NamedTuple):
    recorder: typing.Any
    session: AgentSession
    prepared: typing.Any
    items: list
    exchange: wire.Exchange


def stream_once(recorder, text: str) -> Streamed:
    session = recorder.client.create_session(agent_name=DEMO)
    prepared, items = run(session, text)
    exchange = recorder.last("POST", f"/sessions/{session.id}/turns")
    return Streamed(recorder, session, prepared, items, exchange)


@pytest.fixture(scope="module")
def hi_turn(module_recorder) -> Streamed:
    return stream_once(module_recorder, "hi")


def test_05_streaming_happy_path(hi_turn):
    prepared, items, exchange = hi_turn.prepared, hi_turn.items, hi_turn.exchange
    assert exchange.path == f"/t1/v1/agents/sessions/{hi_turn.session.id}/turns"
    assert exchange.json == {"input": [{"type": "user.message", "content": "hi"}], "stream": True}
    wire.assert_sse_framing(as_stream(exchange))

    numbers = [item.sequence_number for item in items]
    assert numbers == list(range(1, len(items) + 1))
    assert len(items) == len(as_stream(exchange).events), "the SDK yields every event"

    created, done = items[0].event, items[-1].event
    assert isinstance(created, TurnCreatedEvent) and isinstance(done, TurnDoneEvent)
    assert created.state.status == "running"
    assert created.previous_turn_id is None
    assert [dump(item) for item in created.input or []] == [dump(UserMessage(content="hi"))]
    assert created.created_by.subject_id and created.created_at

    assert prepared.id == created.turn_id
    state = prepared.state
    assert isinstance(state, TurnStateDone)
    assert state.required_actions == []
    assert state.completed_at
    assert state.metrics is not None
    assert state.metrics.total_tokens == state.metrics.total_input_tokens + state.metrics.total_output_tokens
    assert state.output is not None and state.output.content == "You said: hi"


def test_06_delta_folding(hi_turn):
    folded = fold_with_sdk(hi_turn.items)
    assert len(folded) == 1
    message = folded[0]
    deltas = [item.event for item in hi_turn.items if is_event_delta(item.event)]
    assert deltas and all(delta.id == message.id for delta in deltas)

    output = hi_turn.prepared.state.output
    listed = [event for event in hi_turn.prepared.list_events() if event.type == "model.message"]
    assert len(listed) == 1
    for complete in (output, listed[0]):
        assert complete.id == message.id
        assert complete.content == message.content == "You said: hi"
        assert complete.finish_reason == message.finish_reason == "stop"
        assert message.usage is not None and dump(complete.usage) == dump(message.usage)


# --------------------------------------------------------------------------------------------
# 7: previous_turn_id
# --------------------------------------------------------------------------------------------

PREVIOUS_TURN_CASES = [
    # (variant, value sent, which earlier turn the new one chains to, user texts the model sees)
    ("omitted", None, "second", ["one", "two"]),
    ("auto", "auto", "second", ["one", "two"]),
    ("none", "none", None, []),
    ("explicit", "first", "first", ["one"]),
]


@pytest.mark.parametrize("variant, value, parent, history", PREVIOUS_TURN_CASES,
                         ids=[case[0] for case in PREVIOUS_TURN_CASES])
def test_07_previous_turn_id(recorder, variant, value, parent, history):
    session = recorder.client.create_session(agent_name=DEMO)
    first, _ = run(session, "one")
    second, _ = run(session, "two")
    turns = {"first": first.id, "second": second.id, None: None}

    kwargs = {} if value is None else {"previous_turn_id": turns.get(value, value)}
    prepared, items = run(session, "three [history]", **kwargs)

    body = recorder.last("POST", f"/sessions/{session.id}/turns").json
    if value is None:
        assert "previous_turn_id" not in body
    else:
        assert body["previous_turn_id"] == kwargs["previous_turn_id"]
    assert prepared.previous_turn_id == turns[parent]
    assert session.get_turn(prepared.id).previous_turn_id == turns[parent]
    assert prepared.state.status == "done"
    # The chain decides what the model sees: the fake model answers with every user text.
    assert prepared.state.output.content == "History: " + " | ".join(history + ["three [history]"])


def test_07_unknown_previous_turn_fails_before_streaming(recorder):
    session = recorder.client.create_session(agent_name=DEMO)
    run(session, "one")
    prepared = session.prepare_turn(input=user("two"), previous_turn_id="turn-does-not-exist")
    with pytest.raises((NotFoundError, BadRequestError)) as raised:
        list(prepared.execute())
    assert raised.value.body.error.message
    exchange = recorder.last("POST", f"/sessions/{session.id}/turns")
    assert exchange.status in (400, 404)
    assert "text/event-stream" not in exchange.response_headers.get("content-type", "")


# --------------------------------------------------------------------------------------------
# 8: non-streaming execute and polling
# --------------------------------------------------------------------------------------------


def test_08_non_streaming_execute_polls_until_done(recorder):
    session = recorder.client.create_session(agent_name=DEMO)
    prepared = session.prepare_turn(input=user("[tokens:3][delay:200] poll me"))
    state = prepared.execute(stream=False)

    post = recorder.last("POST", f"/sessions/{session.id}/turns")
    assert post.json == {"input": [{"type": "user.message", "content": "[tokens:3][delay:200] poll me"}],
                         "stream": False}
    assert post.status in (200, 201)
    assert post.response_headers["content-type"].startswith("application/json")
    running = post.response_json["data"]
    assert running["state"] == {"status": "running"} and running["id"] == prepared.id
    polls = recorder.matching("GET", f"/sessions/{session.id}/turns/{prepared.id}")
    assert polls, "the SDK polls get_turn until the turn is terminal"
    assert polls[-1].response_json["data"]["state"]["status"] == "done"
    assert isinstance(state, TurnStateDone)
    assert state.output.content.split() == tokens(3).split()


def test_08_poll_interval_below_minimum(recorder):
    session = recorder.client.create_session(agent_name=DEMO)
    finished, _ = run(session, "done already")
    turn = session.get_turn(finished.id)
    recorder.clear()
    with pytest.raises(ValueError):
        turn.wait_for_completion(poll_interval_ms=1000)
    assert recorder.exchanges == [], "the minimum is checked before any HTTP"

    # `execute(stream=False, poll_interval_ms=1000)` starts the turn first and raises when it
    # starts to wait (SDK 0.4.2 behaviour; the spec's "no HTTP" holds for wait_for_completion).
    prepared = session.prepare_turn(input=user("too eager"))
    with pytest.raises(ValueError):
        prepared.execute(stream=False, poll_interval_ms=1000)
    assert [ex.method for ex in recorder.exchanges] == ["POST"] and recorder.exchanges[0].status in (200, 201)
    assert prepared.id is not None
    wire.wait_until(lambda: session.get_turn(prepared.id).state.status == "done", what="the turn to finish")


# --------------------------------------------------------------------------------------------
# 9, 10: subscribe / resume
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def long_turn(module_recorder) -> Streamed:
    return stream_once(module_recorder, "[tokens:8] count for me")


SUBSCRIBE_CASES = [
    # (name, stream() keyword arguments, body the SDK must send, first sequence number expected)
    ("after-3", {"after_sequence_number": 3}, {"after_sequence_number": 3}, 4),
    ("after-0", {"after_sequence_number": 0}, {"after_sequence_number": 0}, 1),
    ("no-cursor", {}, {}, 1),
    ("last-event-id-5", {"request_options": {"additional_headers": {"Last-Event-ID": "5"}}}, {}, 6),
    ("after-last", {"after_sequence_number": "LAST"}, {"after_sequence_number": "LAST"}, None),
]


@pytest.mark.parametrize("name, kwargs, body, first", SUBSCRIBE_CASES, ids=[case[0] for case in SUBSCRIBE_CASES])
def test_09_10_subscribe(long_turn, name, kwargs, body, first):
    original = as_stream(long_turn.exchange)
    wire.assert_sse_framing(original)
    last = len(original.events)
    assert last >= 11, "turn.created, the placeholder, eight token deltas, turn.done"
    kwargs = {key: (last if value == "LAST" else value) for key, value in kwargs.items()}
    body = {key: (last if value == "LAST" else value) for key, value in body.items()}
    first = last + 1 if first is None else first

    prepared = long_turn.prepared
    items = list(prepared.stream(**kwargs))

    exchange = long_turn.recorder.last("POST", f"/turns/{prepared.id}/subscribe")
    assert exchange.path == f"/t1/v1/agents/sessions/{long_turn.session.id}/turns/{prepared.id}/subscribe"
    assert exchange.json == body
    if "request_options" in kwargs:
        assert exchange.headers["last-event-id"] == "5"
    assert exchange.status == 200
    assert exchange.response_headers["content-type"].split(";")[0] == "text/event-stream"

    assert [item.sequence_number for item in items] == list(range(first, last + 1))
    replay = wire.parse_sse(exchange.response_body)
    assert [event.raw for event in replay.events] == [event.raw for event in original.events[first - 1:]], \
        "a replay carries exactly the bytes of the original stream"
    assert replay.pending.strip() == b""
    if items:
        assert isinstance(items[-1].event, TurnDoneEvent)
    assert prepared.state.status == "done"


# --------------------------------------------------------------------------------------------
# 11: a second client follows a running turn live
# --------------------------------------------------------------------------------------------


def test_11_live_subscribe_from_second_client(client, srv):
    session = client.create_session(agent_name=DEMO)
    prepared = session.prepare_turn(input=user("[tokens:8][delay:250] live"))
    outcome: dict[str, typing.Any] = {}

    def execute() -> None:
        try:
            outcome["state"] = prepared.execute(stream=False)
        except Exception as error:  # reported by the main thread
            outcome["error"] = error

    worker = threading.Thread(target=execute, daemon=True)
    worker.start()
    turn_id = wire.wait_until(lambda: prepared.id or outcome.get("error"), timeout=10, what="the turn to start")
    assert isinstance(turn_id, str), outcome.get("error")

    second = AgentSessionClient(base_url=f"{srv}/t1", api_key="K", timeout=30)
    turn = second.get_session(session.id).get_turn(turn_id)
    assert turn.state.status == "running", "subscribed while the turn runs"
    items = list(turn.stream())

    assert [item.sequence_number for item in items] == list(range(1, len(items) + 1))
    assert isinstance(items[0].event, TurnCreatedEvent) and isinstance(items[-1].event, TurnDoneEvent)
    assert sum(1 for item in items if is_event_delta(item.event)) >= 8
    assert turn.state.status == "done", "the stream's turn.done updates the turn"

    worker.join(timeout=20)
    assert not worker.is_alive(), "execute(stream=False) did not return"
    assert "error" not in outcome, outcome.get("error")
    assert isinstance(outcome["state"], TurnStateDone)
    assert outcome["state"].output.content.split() == tokens(8).split()


# --------------------------------------------------------------------------------------------
# 13–15: cancellation
# --------------------------------------------------------------------------------------------


def test_13_cancel_running_turn(recorder):
    session = recorder.client.create_session(agent_name=DEMO)
    prepared = session.prepare_turn(input=user("[tokens:50][delay:100] cancel me"))
    items = []
    for item in prepared.execute():
        items.append(item)
        if is_event_delta(item.event) and not recorder.matching("POST", "/cancel"):
            session.cancel()

    cancel = recorder.last("POST", f"/sessions/{session.id}/cancel")
    assert cancel.path == f"/t1/v1/agents/sessions/{session.id}/cancel"
    assert cancel.json == {}
    assert cancel.status == 200 and isinstance(cancel.response_json, dict)

    assert [item.sequence_number for item in items] == list(range(1, len(items) + 1))
    done = items[-1].event
    assert isinstance(done, TurnDoneEvent)
    assert isinstance(done.state, TurnStateCancelled)
    assert done.state.reason == "client-cancelled" and done.state.completed_at
    assert prepared.state.status == "cancelled"
    assert session.get_turn(prepared.id).state.reason == "client-cancelled"

    # The partial output is kept: the listed message is the fold of what was streamed.
    streamed = "".join(item.event.content or "" for item in items if is_event_delta(item.event))
    assert streamed and len(streamed.split()) < 50
    messages = [event for event in prepared.list_events() if event.type == "model.message"]
    assert [message.content for message in messages] == [streamed]

    # A later turn chains after the cancelled one.
    after, _ = run(session, "after cancel")
    assert after.previous_turn_id == prepared.id and after.state.status == "done"


def test_14_cancel_when_idle(recorder):
    session = recorder.client.create_session(agent_name=DEMO)
    session.cancel()
    finished, _ = run(session, "nothing to cancel")
    session.cancel()
    cancels = recorder.matching("POST", f"/sessions/{session.id}/cancel")
    assert [(c.status, c.json) for c in cancels] == [(200, {}), (200, {})]
    assert all(isinstance(c.response_json, dict) for c in cancels), "never a bodiless 204"
    assert session.get_turn(finished.id).state.status == "done"


def test_15_cancelled_for_next_turn(recorder):
    session = recorder.client.create_session(agent_name=DEMO)
    slow = recorder.gateway.agents.sessions.create_turn(session.id, input=user("[tokens:50][delay:100] slow A"))
    assert slow.data.state.status == "running"

    prepared, items = run(session, "B")
    assert "previous_turn_id" not in recorder.last("POST", f"/sessions/{session.id}/turns").json
    assert prepared.previous_turn_id == slow.data.id
    assert prepared.state.status == "done"
    state = wire.wait_until(lambda: (s := session.get_turn(slow.data.id).state).status != "running" and s,
                            what="turn A to end")
    assert isinstance(state, TurnStateCancelled) and state.reason == "cancelled-for-next-turn"


# --------------------------------------------------------------------------------------------
# 17–19: listing turn events, session events, turns
# --------------------------------------------------------------------------------------------


def test_17_turn_events_listing(recorder):
    session = recorder.client.create_session(agent_name=DEMO)
    prepared, items = run(session, " ".join(["[tool:get_current_datetime {}]"] * 25) + " what time is it")
    assert prepared.state.status == "done"
    streamed = as_stream(recorder.last("POST", f"/sessions/{session.id}/turns"))
    wire.assert_sse_framing(streamed)

    recorder.clear()
    listed = list(prepared.list_events())
    pages = recorder.matching("GET", f"/turns/{prepared.id}/events")
    assert query(pages[0]) == {"limit": ["25"]}
    assert len(pages) == 2
    assert query(pages[1])["limit"] == ["25"] and query(pages[1])["page_token"][0]
    assert [len(page.response_json["data"]) for page in pages] == [25, 2]

    assert [event.type for event in listed] == ["model.message"] + ["tool.response"] * 25 + ["model.message"]
    calls = listed[0].tool_calls
    assert len(calls) == 25
    assert all(call.function.name == "get_current_datetime" and dump(call.tool_info) == SYSTEM_TOOL for call in calls)
    assert [event.tool_call_id for event in listed[1:26]] == [call.id for call in calls]
    assert listed[-1].content.startswith("Tool result: ")

    # Byte-level: the listed JSON is the stream folded, without turn.created / turn.done.
    raw_listed = [event for page in pages for event in page.response_json["data"]]
    folded = [event for event in wire.fold_stream(streamed.payloads) if event["type"] in wire.CONTENT_EVENT_TYPES]
    assert wire.without_nulls(raw_listed) == wire.without_nulls(folded)

    recorder.clear()
    descending = list(prepared.list_events(order="desc"))
    assert [event.id for event in descending] == [event.id for event in listed][::-1]
    assert all(query(page)["order"] == ["desc"] for page in recorder.matching("GET", "/events"))


def test_17_running_turn_events_conflict(recorder):
    session = recorder.client.create_session(agent_name=DEMO)
    running = recorder.gateway.agents.sessions.create_turn(session.id, input=user("[tokens:80][delay:100] busy"))
    turn = session.get_turn(running.data.id)
    recorder.clear()
    with pytest.raises(ConflictError) as raised:
        list(turn.list_events())
    assert raised.value.body.error.message
    attempts = recorder.matching("GET", f"/turns/{turn.id}/events")
    assert [attempt.status for attempt in attempts] == [409, 409, 409], "two automatic retries, then ConflictError"
    session.cancel()
    wire.wait_until(lambda: session.get_turn(turn.id).state.status == "cancelled", what="the cancel")


def test_18_session_events(recorder):
    session = recorder.client.create_session(agent_name=DEMO)
    first, _ = run(session, "first")
    second, _ = run(session, "second")
    streams = {turn.id: as_stream(ex) for turn, ex in
               zip((first, second), recorder.matching("POST", f"/sessions/{session.id}/turns"))}

    recorder.clear()
    items = list(session.list_events())
    assert query(recorder.last("GET", f"/sessions/{session.id}/events")) == {"limit": ["100"]}
    expected = [(turn.id, kind) for turn in (second, first)
                for kind in ("turn.done", "model.message", "turn.created")]
    assert [(item.turn_id, item.event.type) for item in items] == expected

    raw = [item for ex in recorder.matching("GET", "/events") for item in ex.response_json["data"]]
    for turn_id, stream in streams.items():
        folded = wire.fold_stream(stream.payloads)[::-1]
        mine = [item["event"] for item in raw if item["turn_id"] == turn_id]
        assert wire.without_nulls(mine) == wire.without_nulls(folded), "session events are the folded stream"

    running = recorder.gateway.agents.sessions.create_turn(session.id, input=user("[tokens:80][delay:100] third"))
    assert running.data.state.status == "running"
    while_running = list(session.list_events())
    assert [(item.turn_id, item.event.type) for item in while_running] == expected, "the running turn is excluded"

    recorder.clear()
    only_first = list(session.list_events(last_turn_id=first.id))
    assert [(item.turn_id, item.event.type) for item in only_first] == expected[3:]
    assert query(recorder.last("GET", "/events"))["last_turn_id"] == [first.id]
    session.cancel()


def test_19_list_turns(recorder):
    session = recorder.client.create_session(agent_name=DEMO)
    chain = [run(session, text)[0] for text in ("t1", "t2", "t3")]
    newest_first = [turn.id for turn in reversed(chain)]

    recorder.clear()
    turns = list(session.list_turns())
    assert query(recorder.last("GET", f"/sessions/{session.id}/turns")) == {"limit": ["10"]}
    assert [turn.id for turn in turns] == newest_first
    assert [turn.previous_turn_id for turn in turns] == newest_first[1:] + [None]
    assert all(turn.state.status == "done" and turn.session_id == session.id for turn in turns)

    recorder.clear()
    paged = list(session.list_turns(limit=1))
    assert [turn.id for turn in paged] == newest_first
    requests = recorder.matching("GET", f"/sessions/{session.id}/turns")
    assert 3 <= len(requests) <= 4
    assert all(query(request)["limit"] == ["1"] for request in requests)
    assert all(query(request)["page_token"][0] for request in requests[1:])


# --------------------------------------------------------------------------------------------
# 20, 21: drafts, owned and search
# --------------------------------------------------------------------------------------------


def test_20_draft_session_lifecycle(recorder, fake):
    marker = wire.unique("draft")
    spec = AgentSpec(model=Model(name="fake/fake-model", params=ModelParams(max_tokens=512)),
                     instructions=f"Draft instructions {marker}")
    draft = recorder.private.create_draft_session(agent_spec=spec)

    create = recorder.last("POST", "/v1/agents/draft-sessions")
    assert create.path == "/t1/v1/agents/draft-sessions"
    sent_max_tokens = create.json["agent_spec"]["model"]["params"]["max_tokens"]
    assert sent_max_tokens == 512 and isinstance(sent_max_tokens, float), "the SDK sends 512.0"
    echoed = create.response_json["data"]
    assert echoed["type"] == "session/draft"
    assert echoed["agent_spec"]["model"]["name"] == "fake/fake-model"
    assert echoed["agent_spec"]["instructions"] == f"Draft instructions {marker}"
    assert isinstance(draft, AgentDraftSession) and draft.type == "session/draft"
    assert draft.agent_spec.model.params.max_tokens == 512

    prepared, items = run(draft, f"draft hello {marker}")
    assert recorder.last("POST", "/turns").path == f"/t1/v1/agents/sessions/{draft.id}/turns"
    assert prepared.state.status == "done"
    assert prepared.state.output.content == f"You said: draft hello {marker}"
    model_requests = fake.requests_for(f"draft hello {marker}")
    assert model_requests and f"Draft instructions {marker}" in json.dumps(model_requests[0])

    before = draft.updated_at
    draft.update()
    patch = recorder.last("PATCH", f"/v1/agents/draft-sessions/{draft.id}")
    assert patch.json == {}
    assert draft.updated_at > before, "an empty update refreshes updated_at"

    draft.update(agent_spec=AgentSpec(model=Model(name="fake/fake-model"), instructions=f"Second {marker}"))
    fetched = recorder.private.get_draft_session(draft.id)
    assert fetched.id == draft.id and fetched.agent_spec.instructions == f"Second {marker}"
    assert fetched.updated_at == draft.updated_at and fetched.created_at == draft.created_at

    run(draft, f"again {marker}")
    assert f"Second {marker}" in json.dumps(fake.requests_for(f"again {marker}")[0])


def test_21_owned_and_search_sessions(recorder, fresh_agent):
    name = fresh_agent["name"]
    saved = recorder.client.create_session(agent_name=name)
    draft = recorder.private.create_draft_session(agent_spec=AgentSpec(model=Model(name="fake/fake-model")),
                                                  agent_name=name)
    assert draft.agent_name == name

    owned = list(recorder.private.list_owned_sessions(agent_name=name))
    request = recorder.last("GET", "/owned-sessions")
    assert request.path == "/t1/v1/x/agents/owned-sessions"
    assert query(request) == {"agent_name": [name], "limit": ["10"]}
    assert {item.id: type(item) for item in owned} == {saved.id: AgentSession, draft.id: AgentDraftSession}

    drafts = list(recorder.private.search_sessions(agent_name=name, session_type=SessionType.SESSION_DRAFT))
    request = recorder.last("GET", "/search-sessions")
    assert request.path == "/t1/v1/x/agents/search-sessions"
    assert "session_type=session%2Fdraft" in request.query
    assert [(item.id, type(item)) for item in drafts] == [(draft.id, AgentDraftSession)]

    saved_only = list(recorder.private.search_sessions(agent_name=name, session_type=SessionType.SESSION))
    assert [(item.id, type(item)) for item in saved_only] == [(saved.id, AgentSession)]


# --------------------------------------------------------------------------------------------
# 22: the sandbox: attached files processed by code, a written file downloaded
# --------------------------------------------------------------------------------------------

# A one-page PDF whose page shows "Total: 42".
PDF = b"""%PDF-1.4
1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj
2 0 obj << /Type /Pages /Kids [3 0 R] /Count 1 >> endobj
3 0 obj << /Type /Page /Parent 2 0 R /MediaBox [0 0 200 100] /Contents 4 0 R >> endobj
4 0 obj << /Length 35 >> stream
BT /F1 12 Tf 10 50 Td (Total: 42) Tj ET
endstream endobj
trailer << /Root 1 0 R >>
%%EOF
"""
READ_FILES = r"""
import csv, re
rows = list(csv.DictReader(open('attachments/sales.csv')))
pdf = open('attachments/invoice.pdf', 'rb').read()
pages = len(re.findall(rb'/Type /Page\b', pdf))
total = re.search(rb'\(Total: (\d+)\)', pdf).group(1).decode()
print(len(rows), sum(int(row['amount']) for row in rows), pdf[:8].decode(), pages, total)
open('/tmp/out.txt', 'w').write('report: ' + total + '\n')
"""


def exec_directive(command: str) -> str:
    return f"[tool:exec {json.dumps({'command': command})}]"


def test_22_attachments_run_in_the_sandbox_and_files_download(recorder, api):
    name = wire.unique("sandboxed")
    api.ok(api.post("/api/v1/agents", json={"name": name, "manifest": {
        "model": {"name": "fake/fake-model"}, "config": {"sandbox": {"enabled": True}}}}), 201)
    session = recorder.client.create_session(agent_name=name)
    csv_bytes = b"item,amount\nA1,10\nB2,32\nC3,58\n"
    message = UserMessage(content=[
        TextContent(text=exec_directive(f"python3 -c {shlex.quote(READ_FILES)}") + " " + wire.unique("files")),
        FileContent(name="sales.csv", data=f"data:text/csv;base64,{base64.b64encode(csv_bytes).decode()}"),
        FileContent(name="invoice.pdf", data=f"data:application/pdf;base64,{base64.b64encode(PDF).decode()}"),
    ])
    prepared = session.prepare_turn(input=[message])
    items = list(prepared.execute())
    assert prepared.state.status == "done", prepared.state
    (created,) = [item.event for item in items if isinstance(item.event, SandboxCreatedEvent)]
    (response,) = [item.event for item in items if isinstance(item.event, ToolResponseEvent)]
    assert json.loads(response.content) == {"exit_code": 0, "stdout": "3 100 %PDF-1.4 1 42\n", "stderr": ""}

    sandbox_id = created.sandbox_id
    data = b"".join(recorder.private.download_sandbox_file(sandbox_id, path="/tmp/out.txt"))
    assert data == b"report: 42\n"
    request = recorder.last("GET", "/file")
    assert request.path == f"/t1/v1/agents/sandbox/{sandbox_id}/file"
    assert request.query == "path=%2Ftmp%2Fout.txt"
    assert request.response_headers["content-disposition"] == "attachment; filename=\"out.txt\"; filename*=UTF-8''out.txt"
    attached = b"".join(recorder.private.download_sandbox_file(sandbox_id, path="/workspace/attachments/invoice.pdf"))
    assert attached == PDF

    with pytest.raises(BadRequestError):
        b"".join(recorder.private.download_sandbox_file(sandbox_id, path="tmp/out.txt"))
    with pytest.raises(BadRequestError):
        b"".join(recorder.private.download_sandbox_file(sandbox_id, path="/workspace/../../etc/passwd"))
    with pytest.raises(NotFoundError):
        b"".join(recorder.private.download_sandbox_file(sandbox_id, path="/tmp/missing.txt"))
    with pytest.raises(NotFoundError):
        b"".join(recorder.private.download_sandbox_file("sbx_0000000000000000", path="/tmp/out.txt"))
    assert api.delete(f"/api/v1/sessions/{session.id}").status_code == 204
    with pytest.raises(GoneError):
        b"".join(recorder.private.download_sandbox_file(sandbox_id, path="/tmp/out.txt"))


# --------------------------------------------------------------------------------------------
# 23: heartbeats
# --------------------------------------------------------------------------------------------


def test_23_heartbeats_keep_the_sdk_reading(server_factory, caplog):
    own = server_factory(["--heartbeat-secs", "1"])
    transport = wire.RecordingTransport()
    # The model pauses 2 s before each chunk; a 1.6 s read timeout would fire without the 1 s
    # heartbeats, so finishing at all proves the comments reach the client between events.
    with httpx.Client(transport=transport, timeout=httpx.Timeout(30.0, read=1.6, connect=5.0)) as http:
        client = AgentSessionClient(base_url=own.gateway_url, api_key="K", httpx_client=http)
        session = client.create_session(agent_name=DEMO)
        with caplog.at_level(logging.WARNING):
            prepared, items = run(session, "[tokens:1][delay:2000] slow")

    exchange = transport.matching("POST", f"/sessions/{session.id}/turns")[-1]
    raw = wire.parse_sse(exchange.response_body)
    assert raw.comments, "no `:` heartbeat comment on a stream with 2 s of model silence"
    event_lines = [index for index, line in enumerate(raw.lines) if line.startswith(b"id:")]
    comment_lines = [index for index, line in enumerate(raw.lines) if line.startswith(b":")]
    assert any(event_lines[0] < index < event_lines[-1] for index in comment_lines), "heartbeats interleave events"

    assert [item.sequence_number for item in items] == [event.seq for event in raw.events], \
        "the SDK yields every event and nothing for the comments"
    assert not [r for r in caplog.records if "Skipping SSE event" in r.getMessage()]
    assert prepared.state.status == "done"
    assert prepared.state.output.content.split() == tokens(1).split()
    # Scenario 23 also has the server send an unknown `some.future.event`; this server only
    # emits the event types of wire spec §4, so there is nothing of the kind to observe here.


# --------------------------------------------------------------------------------------------
# 24: error shapes
# --------------------------------------------------------------------------------------------

INVALID_INPUTS = [
    ("mixed-kinds", lambda: [UserMessage(content="hi"), UserToolApprovalEvent(
        thread_id="main", tool_call_id="call_1", approval=ApprovalAllow())]),
    ("empty-string", lambda: [UserMessage(content="")]),
    ("empty-parts", lambda: [UserMessage(content=[])]),
]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
@pytest.mark.parametrize("name, make_input", INVALID_INPUTS, ids=[case[0] for case in INVALID_INPUTS])
def test_24_invalid_input_is_a_typed_400(recorder, name, make_input, stream):
    session = recorder.client.create_session(agent_name=DEMO)
    prepared = session.prepare_turn(input=make_input())
    with pytest.raises(BadRequestError) as raised:
        if stream:
            list(prepared.execute())
        else:
            prepared.execute(stream=False)
    error = raised.value.body.error
    assert error.message and error.code in ("invalid_request", "invalid_input")
    attempts = recorder.matching("POST", f"/sessions/{session.id}/turns")
    assert len(attempts) == 1 and attempts[0].status == 400
    raw_error = attempts[0].response_json["error"]
    assert all(raw_error.get(key) is None or isinstance(raw_error[key], str) for key in ("type", "code", "param"))
    assert list(session.list_turns()) == [], "a rejected request starts no turn"


# --------------------------------------------------------------------------------------------
# 25: retries
# --------------------------------------------------------------------------------------------


class FlakyProxy(http.server.ThreadingHTTPServer):
    """Answers the first `POST …/v1/agents/sessions` with 503 and forwards everything else."""

    daemon_threads = True

    def __init__(self, upstream: str) -> None:
        super().__init__(("127.0.0.1", 0), ProxyHandler)
        self.upstream = httpx.Client(base_url=upstream, timeout=wire.TIMEOUT)
        self.failed_once = False
        self.log: list[tuple[str, str, int]] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class ProxyHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FlakyProxy

    def log_message(self, format: str, *args: typing.Any) -> None:
        pass

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        path_only = self.path.split("?")[0]
        with self.server.lock:
            fail = (self.command == "POST" and path_only.endswith("/v1/agents/sessions")
                    and not self.server.failed_once)
            if fail:
                self.server.failed_once = True
        if fail:
            status, headers, content = 503, {"Content-Type": "application/json"}, json.dumps(
                {"error": {"message": "try again", "type": None, "code": "unavailable", "param": None}}).encode()
        else:
            skip = {"host", "content-length", "connection", "accept-encoding"}
            forwarded = {key: value for key, value in self.headers.items() if key.lower() not in skip}
            answer = self.server.upstream.request(self.command, self.path, headers=forwarded, content=body)
            status, content = answer.status_code, answer.content
            headers = {"Content-Type": answer.headers.get("content-type", "application/json")}
        with self.server.lock:
            self.server.log.append((self.command, path_only, status))
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)

    do_GET = do_POST = do_PATCH = _handle


def test_25_retry_after_503_creates_one_session(srv, client, fresh_agent):
    name = fresh_agent["name"]
    proxy = FlakyProxy(srv)
    thread = threading.Thread(target=proxy.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        via_proxy = AgentSessionClient(base_url=f"{proxy.url}/t1", api_key="K", timeout=30)
        session = via_proxy.create_session(agent_name=name)
    finally:
        proxy.shutdown()
        proxy.server_close()
        proxy.upstream.close()
        thread.join(timeout=5)

    assert proxy.log == [("POST", "/t1/v1/agents/sessions", 503), ("POST", "/t1/v1/agents/sessions", 200)]
    assert session.agent_name == name
    assert [listed.id for listed in client.list_sessions(agent_name=name)] == [session.id], \
        "exactly one session exists after the retry"
