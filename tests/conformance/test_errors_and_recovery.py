"""Bad requests get the right status and error body, and the server keeps working; a SIGKILL in
the middle of a streaming turn loses nothing a client was sent and executes nothing twice.

Every test here is followed by a check that the shared server is still healthy and still runs a
normal turn (`still_serving`). Error bodies are checked byte-level with `wire.assert_error`: the
one shape `{"error":{"message","type","code","param"}}`, `code` a string.
"""

from __future__ import annotations

import json
import select
import socket
import time
import typing
import urllib.parse

import httpx
import pytest

import wire
from truefoundry_gateway_sdk import PreconditionFailedError
from truefoundry_gateway_sdk.agents import AgentSessionClient, TurnStateCancelled

gw = wire.Api.gw
INVALID = {"invalid_request", "invalid_input"}


def user_input(text: str = "hi") -> list[dict]:
    return [{"type": "user.message", "content": text}]


@pytest.fixture(autouse=True)
def still_serving(api):
    yield
    assert api.get("/healthz").status_code == 200
    session = api.create_session("demo")
    assert api.run_turn(session["id"], "still working").output_text == "You said: still working"


@pytest.fixture(scope="module")
def finished(server) -> dict:
    """A session with one finished turn: `{"session": id, "turn": id}`."""
    api = server.require_api()
    session = api.create_session("demo")
    run = api.run_turn(session["id"], "[tokens:3] finished")
    return {"session": session["id"], "turn": run.turn_id}


def fill(path: str, ids: dict) -> str:
    return path.format(sid=ids["session"], tid=ids["turn"])


# --------------------------------------------------------------------------------------------
# Malformed JSON
# --------------------------------------------------------------------------------------------

MALFORMED_TARGETS = [
    ("native-agents", "POST", "/api/v1/agents"),
    ("native-sessions", "POST", "/api/v1/sessions"),
    ("native-session-patch", "PATCH", "/api/v1/sessions/{sid}"),
    ("native-turns", "POST", "/api/v1/sessions/{sid}/turns"),
    ("native-settings", "PUT", "/api/v1/settings/model-providers"),
    ("gateway-sessions", "POST", gw("sessions")),
    ("gateway-turns", "POST", gw("sessions/{sid}/turns")),
    ("gateway-subscribe", "POST", gw("sessions/{sid}/turns/{tid}/subscribe")),
    ("gateway-drafts", "POST", "/t1/v1/agents/draft-sessions"),
]


@pytest.mark.parametrize("name, method, path", MALFORMED_TARGETS, ids=[t[0] for t in MALFORMED_TARGETS])
def test_malformed_json(api, finished, name, method, path):
    response = api.http.request(method, fill(path, finished), content=b'{"input": [',
                                headers={"Content-Type": "application/json"})
    wire.assert_error(response, 400, {"invalid_json"})


# --------------------------------------------------------------------------------------------
# Unknown resources
# --------------------------------------------------------------------------------------------

NOT_FOUND = [
    ("native-agent", "GET", "/api/v1/agents/agent-missing", None, None),
    ("native-session", "GET", "/api/v1/sessions/sess-missing", None, None),
    ("native-session-of-unknown-agent", "POST", "/api/v1/sessions", {"agent": {"name": "no-such-agent"}}, None),
    ("native-turn", "GET", "/api/v1/sessions/{sid}/turns/turn-missing", None, None),
    ("native-turn-in-unknown-session", "POST", "/api/v1/sessions/sess-missing/turns",
     {"input": user_input()}, None),
    ("native-subscribe", "GET", "/api/v1/sessions/{sid}/turns/turn-missing/subscribe", None, None),
    ("native-cancel", "POST", "/api/v1/sessions/sess-missing/cancel", {}, None),
    ("gateway-session-of-unknown-agent", "POST", gw("sessions"), {"agent_name": "no-such-agent"}, None),
    ("gateway-sessions-of-unknown-agent", "GET", gw("sessions"), None,
     {"agent_name": "no-such-agent", "limit": 10}),
    ("gateway-session", "GET", gw("sessions/sess-missing"), None, None),
    ("gateway-turn", "GET", gw("sessions/{sid}/turns/turn-missing"), None, None),
    ("gateway-turn-in-unknown-session", "POST", gw("sessions/sess-missing/turns"),
     {"input": user_input(), "stream": True}, None),
    ("gateway-subscribe", "POST", gw("sessions/{sid}/turns/turn-missing/subscribe"), {}, None),
    ("gateway-draft", "GET", "/t1/v1/agents/draft-sessions/draft-missing", None, None),
]


@pytest.mark.parametrize("name, method, path, body, params", NOT_FOUND, ids=[t[0] for t in NOT_FOUND])
def test_unknown_resources(api, finished, name, method, path, body, params):
    response = api.http.request(method, fill(path, finished), json=body, params=params)
    wire.assert_error(response, 404, {"not_found"})


# --------------------------------------------------------------------------------------------
# Keep-alive after an early error
# --------------------------------------------------------------------------------------------

EARLY_ERRORS = [
    ("native-cancel-unknown-session", "/api/v1/sessions/sess-missing/cancel", {}, 404),
    ("native-turn-unknown-session", "/api/v1/sessions/sess-missing/turns", {"input": user_input()}, 404),
    ("gateway-session-unknown-agent", gw("sessions"), {"agent_name": "no-such-agent"}, 404),
    ("gateway-subscribe-unknown-turn", gw("sessions/sess-missing/turns/turn-missing/subscribe"), {}, 404),
]


@pytest.mark.parametrize("name, path, body, status", EARLY_ERRORS, ids=[t[0] for t in EARLY_ERRORS])
def test_error_responses_keep_the_connection_usable(srv, name, path, body, status):
    """An error answered before the request body is read must not leave a keep-alive connection
    that the server then drops: the client's next request on it would fail with "Server
    disconnected without sending a response" (and the SDK never retries a streaming request).
    Drain the body, or answer `Connection: close`."""
    dropped = 0
    with httpx.Client(base_url=srv, timeout=wire.TIMEOUT, limits=httpx.Limits(max_connections=1)) as http:
        for _ in range(200):
            response = http.post(path, json=body)
            assert response.status_code == status, response.text
            try:
                assert http.get("/healthz").status_code == 200
            except httpx.RemoteProtocolError:
                dropped += 1
    assert dropped == 0, f"{dropped} of 200 requests following a {status} failed on the reused connection"


# --------------------------------------------------------------------------------------------
# Invalid turn input
# --------------------------------------------------------------------------------------------

INVALID_BODIES = [
    ("mixed-kinds", {"input": user_input() + [{"type": "user.tool_approval", "thread_id": "main",
                                               "tool_call_id": "call_1", "approval": {"status": "allow"}}]}),
    ("empty-string-content", {"input": user_input("")}),
    ("empty-parts-content", {"input": [{"type": "user.message", "content": []}]}),
    ("bad-previous-turn-id-format", {"input": user_input(), "previous_turn_id": ""}),
    ("unknown-input-type", {"input": [{"type": "user.bogus", "content": "x"}]}),
    ("input-not-a-list", {"input": "hi"}),
]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
@pytest.mark.parametrize("dialect", ["native", "gateway"])
@pytest.mark.parametrize("name, body", INVALID_BODIES, ids=[t[0] for t in INVALID_BODIES])
def test_invalid_turn_input(api, dialect, stream, name, body):
    session = api.create_session("demo")
    path = (f"/api/v1/sessions/{session['id']}/turns" if dialect == "native"
            else gw(f"sessions/{session['id']}/turns"))
    response = api.post(path, json={**body, "stream": stream})
    wire.assert_error(response, 400, INVALID)
    assert api.ok(api.get(f"/api/v1/sessions/{session['id']}/turns"))["data"] == [], "no turn was started"


# --------------------------------------------------------------------------------------------
# Bodies over the limit
# --------------------------------------------------------------------------------------------


def post_oversized(root: str, path: str, declared: int, timeout: float = 20.0) -> tuple[int, dict, bytes]:
    """POSTs a JSON body of `declared` bytes over a raw socket, sending it in chunks and stopping
    as soon as the server answers (it may answer 413 on the Content-Length alone), then reads the
    response. Returns (status, lower-cased headers, body)."""
    url = urllib.parse.urlsplit(root)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    deadline = time.monotonic() + timeout
    with socket.create_connection((host, port), timeout=5) as sock:
        head = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {declared}\r\nConnection: close\r\n\r\n").encode()
        prefix = b'{"input":[{"type":"user.message","content":"'
        sent = 0
        try:
            sock.sendall(head + prefix)
            sent = len(prefix)
            while sent < declared and time.monotonic() < deadline:
                if select.select([sock], [], [], 0)[0]:
                    break  # the answer is here; stop writing
                size = min(256 * 1024, declared - sent)
                sock.sendall(b"x" * size)
                sent += size
        except (BrokenPipeError, ConnectionResetError, socket.timeout):
            pass
        response = b""
        sock.settimeout(1.0)
        while time.monotonic() < deadline:
            try:
                data = sock.recv(65536)
            except socket.timeout:
                if complete(response):
                    break
                continue
            except ConnectionResetError:
                break
            if not data:
                break
            response += data
            if complete(response):
                break
    assert b"\r\n\r\n" in response, f"no HTTP response to an oversized body (got {response[:200]!r})"
    return split_response(response)


def split_response(response: bytes) -> tuple[int, dict, bytes]:
    head, _, body = response.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        decoded = b""
        while body:
            size_line, _, rest = body.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                break
            decoded += rest[:size]
            body = rest[size + 2:]
        body = decoded
    elif "content-length" in headers:
        body = body[:int(headers["content-length"])]
    return status, headers, body


def complete(response: bytes) -> bool:
    if b"\r\n\r\n" not in response:
        return False
    head, _, body = response.partition(b"\r\n\r\n")
    lowered = head.lower()
    if b"content-length:" in lowered:
        length = int(lowered.split(b"content-length:")[1].split(b"\r\n")[0].strip())
        return len(body) >= length
    if b"transfer-encoding: chunked" in lowered:
        return body.endswith(b"0\r\n\r\n")
    return False


@pytest.mark.parametrize("dialect", ["native", "gateway"])
def test_body_over_the_default_limit_is_413(api, srv, dialect):
    session = api.create_session("demo")
    path = (f"/api/v1/sessions/{session['id']}/turns" if dialect == "native"
            else gw(f"sessions/{session['id']}/turns"))
    status, headers, body = post_oversized(srv, path, 10 * 1024 * 1024 + 64 * 1024)
    assert status == 413, body[:300]
    assert headers.get("content-type", "").startswith("application/json")
    error = json.loads(body)["error"]
    assert error["code"] == "payload_too_large" and isinstance(error["message"], str) and error["message"]
    assert api.ok(api.get(f"/api/v1/sessions/{session['id']}/turns"))["data"] == []


def test_max_body_bytes_flag(server_factory):
    own = server_factory(["--max-body-bytes", "4096"])
    api = own.require_api()
    session = api.create_session("demo")
    path = f"/api/v1/sessions/{session['id']}/turns"
    too_big = api.post(path, json={"input": user_input("x" * 8192), "stream": False})
    wire.assert_error(too_big, 413, {"payload_too_large"})
    small = api.run_turn(session["id"], "y" * 1000)
    assert small.output_text == "You said: " + "y" * 1000


# --------------------------------------------------------------------------------------------
# One running turn per session
# --------------------------------------------------------------------------------------------


def test_second_turn_while_one_runs(api):
    session = api.create_session("demo")
    sid = session["id"]
    earlier = api.run_turn(sid, "earlier")
    running = api.start_turn(sid, "[tokens:100][delay:100] busy")

    for previous in ("none", earlier.turn_id):
        for path in (f"/api/v1/sessions/{sid}/turns", gw(f"sessions/{sid}/turns")):
            response = api.post(path, json={"input": user_input("intruder"), "previous_turn_id": previous,
                                            "stream": False})
            wire.assert_error(response, 409, {"turn_running"})
    assert api.get_turn(sid, running["id"])["state"] == {"status": "running"}, "a refused turn changes nothing"

    # Turn events of a running turn (E9) are refused too.
    wire.assert_error(api.get(gw(f"sessions/{sid}/turns/{running['id']}/events"), params={"limit": 25}), 409)

    # Chaining onto the running turn by its id replaces it, as `auto` does.
    replacing = api.run_turn(sid, "replacement", previous_turn_id=running["id"])
    assert replacing.done["state"]["status"] == "done"
    assert replacing.stream.payloads[0]["previous_turn_id"] == running["id"]
    state = api.wait_terminal(sid, running["id"])["state"]
    assert state["status"] == "cancelled" and state["reason"] == "cancelled-for-next-turn"


# --------------------------------------------------------------------------------------------
# Bad cursors and page tokens
# --------------------------------------------------------------------------------------------

BAD_CURSORS = [
    ("native-negative", "GET", "/api/v1/sessions/{sid}/turns/{tid}/subscribe",
     {"params": {"after_sequence_number": -1}}),
    ("native-text", "GET", "/api/v1/sessions/{sid}/turns/{tid}/subscribe",
     {"params": {"after_sequence_number": "abc"}}),
    ("native-last-event-id", "GET", "/api/v1/sessions/{sid}/turns/{tid}/subscribe",
     {"headers": {"Last-Event-ID": "abc"}}),
    ("gateway-negative", "POST", gw("sessions/{sid}/turns/{tid}/subscribe"),
     {"json": {"after_sequence_number": -1}}),
    ("gateway-text", "POST", gw("sessions/{sid}/turns/{tid}/subscribe"),
     {"json": {"after_sequence_number": "abc"}}),
    ("gateway-last-event-id", "POST", gw("sessions/{sid}/turns/{tid}/subscribe"),
     {"json": {}, "headers": {"Last-Event-ID": "abc"}}),
]


@pytest.mark.parametrize("name, method, path, kwargs", BAD_CURSORS, ids=[t[0] for t in BAD_CURSORS])
def test_bad_cursor(api, finished, name, method, path, kwargs):
    response = api.http.request(method, fill(path, finished), **kwargs)
    wire.assert_error(response, 400, INVALID)


BAD_PAGE_TOKENS = [
    ("native-sessions", "/api/v1/sessions", {}),
    ("native-turns", "/api/v1/sessions/{sid}/turns", {}),
    ("native-turn-events", "/api/v1/sessions/{sid}/turns/{tid}/events", {}),
    ("native-session-events", "/api/v1/sessions/{sid}/events", {}),
    ("gateway-sessions", gw("sessions"), {"agent_name": "demo", "limit": 10}),
    ("gateway-turns", gw("sessions/{sid}/turns"), {"limit": 10}),
    ("gateway-turn-events", gw("sessions/{sid}/turns/{tid}/events"), {"limit": 25}),
    ("gateway-session-events", gw("sessions/{sid}/events"), {"limit": 100}),
    ("gateway-owned", "/t1/v1/x/agents/owned-sessions", {"limit": 10}),
]


@pytest.mark.parametrize("name, path, params", BAD_PAGE_TOKENS, ids=[t[0] for t in BAD_PAGE_TOKENS])
def test_bad_page_token(api, finished, name, path, params):
    response = api.get(fill(path, finished), params={**params, "page_token": "not-a-page-token!"})
    wire.assert_error(response, 400, INVALID)


# --------------------------------------------------------------------------------------------
# SIGKILL in the middle of a streaming turn
# --------------------------------------------------------------------------------------------


# Short leases, so a restarted server takes its predecessor's turns over within a second.
FAST_LEASES = ("--lease-ttl-ms", "1000", "--lease-renew-ms", "200", "--takeover-interval-ms", "200")


def test_sigkill_mid_stream_then_restart_resumes_the_turn(server_factory, fake):
    own = server_factory(extra_args=FAST_LEASES)
    api = own.require_api()
    session = api.create_session("demo")
    sid = session["id"]
    marker = wire.unique("crash")

    parser = wire.SseParser()
    body = {"input": user_input(f"[tokens:40][delay:50] {marker}")}
    try:
        with api.http.stream("POST", f"/api/v1/sessions/{sid}/turns", json=body) as response:
            assert response.status_code == 200
            killed = False
            for chunk in response.iter_bytes():
                parser.feed(chunk)
                if not killed and sum(event.type == "model.message.delta" for event in parser.events) >= 3:
                    own.kill()  # SIGKILL while the stream is open; keep reading what was in flight
                    killed = True
    except httpx.HTTPError:
        pass  # the connection dies with the server
    received = parser.events
    assert sum(event.type == "model.message.delta" for event in received) >= 3
    turn_id = received[0].json["turn_id"]
    assert len(fake.requests_for(marker)) == 1

    own.start()  # same database file, new process: it finds the turn's lease expired and resumes it
    api = own.require_api()
    turn = api.wait_terminal(sid, turn_id, timeout=20)
    assert turn["state"]["status"] == "done", turn["state"]
    assert turn["state"]["output"]["content"] == "".join(f"tok{n} " for n in range(1, 41))

    replay = api.subscribe(sid, turn_id)
    wire.assert_sse_framing(replay)  # one gap-free sequence across the restart, ending in turn.done
    assert [event.raw for event in replay.events[:len(received)]] == [event.raw for event in received], \
        "every event a client received is replayed with identical bytes"
    messages = [event for event in replay.payloads if event["type"] == "model.message"]
    assert len(messages) == 2, "the cut-off message stays in the stream, and the resumed step streams its own"
    folded = [event for event in wire.fold_stream(replay.payloads) if event["type"] == "model.message"]
    assert folded[0].get("finish_reason") is None and folded[1]["finish_reason"] == "stop"
    # For the model the cut-off step never happened: it was asked once more, with the same input.
    requests = fake.requests_for(marker)
    assert len(requests) == 2 and requests[0]["messages"] == requests[1]["messages"]
    listed = api.ok(api.get(f"/api/v1/sessions/{sid}/turns/{turn_id}/events"))["data"]
    assert [event["type"] for event in listed] == ["model.message"], "only the finished message is content"

    gateway_turn = AgentSessionClient(base_url=own.gateway_url, api_key="K", timeout=30) \
        .get_session(sid).get_turn(turn_id)
    assert gateway_turn.state.status == "done"

    providers = api.ok(api.get("/api/v1/settings/model-providers"))["data"]
    assert "fake" in [provider["name"] for provider in providers], "model-provider settings survive a restart"
    after = api.run_turn(sid, "after the crash")
    assert after.output_text == "You said: after the crash", after.done["state"]
    assert after.stream.payloads[0]["previous_turn_id"] == turn_id
    assert len(fake.requests_for(marker)) == 2, "the resumed turn was not run again"


def test_a_turn_taken_over_too_often_is_abandoned(server_factory, fake):
    # With no takeovers allowed, the restarted server ends the turn instead of resuming it.
    own = server_factory(extra_args=(*FAST_LEASES, "--max-takeovers", "0"))
    api = own.require_api()
    sid = api.create_session("demo")["id"]
    marker = wire.unique("crash")
    turn_id = api.start_turn(sid, f"[tokens:40][delay:50] {marker}")["id"]
    received = api.read_until_delta(sid, turn_id)
    own.kill()
    own.start()
    api = own.require_api()
    turn = api.wait_terminal(sid, turn_id, timeout=20)
    assert turn["state"]["status"] == "cancelled" and turn["state"]["reason"] == "abandoned", turn["state"]
    replay = api.subscribe(sid, turn_id)
    wire.assert_sse_framing(replay)
    assert [event.raw for event in replay.events[:len(received)]] == [event.raw for event in received]
    assert replay.payloads[-1]["state"]["reason"] == "abandoned"
    gateway_turn = AgentSessionClient(base_url=own.gateway_url, api_key="K", timeout=30) \
        .get_session(sid).get_turn(turn_id)
    assert isinstance(gateway_turn.state, TurnStateCancelled) and gateway_turn.state.reason == "abandoned"
    assert len(fake.requests_for(marker)) == 1, "the abandoned turn was not executed again"


# --------------------------------------------------------------------------------------------
# Stream retention
# --------------------------------------------------------------------------------------------


def test_an_expired_stream_answers_412_while_its_events_stay_listable(server_factory):
    # A one-second retention (hidden flag); the sweeper runs every tenth of it.
    own = server_factory(extra_args=("--stream-retention-secs", "1"))
    api = own.require_api()
    sid = api.create_session("demo")["id"]
    run = api.run_turn(sid, "[tokens:5] keep my events")
    wire.assert_sse_framing(run.stream)
    turn_id = run.turn_id

    def expired() -> typing.Optional[wire.StreamResult]:
        result = api.subscribe(sid, turn_id)
        return result if result.status == 412 else None

    gone = wire.wait_until(expired, timeout=20, what="the turn's stream to pass its retention")
    error = wire.assert_error(gone, 412)
    assert "no longer exists" in error["message"], error
    for cursor in (3, 0):
        wire.assert_error(api.subscribe(sid, turn_id, after=cursor), 412)

    # The folded events stay: the turn's and the session's listings are unchanged.
    listed = api.ok(api.get(f"/api/v1/sessions/{sid}/turns/{turn_id}/events"))["data"]
    assert [event["type"] for event in listed] == ["model.message"]
    assert listed[0]["content"] == "tok1 tok2 tok3 tok4 tok5 "
    session_events = api.ok(api.get(f"/api/v1/sessions/{sid}/events"))["data"]
    assert [item["event"]["type"] for item in session_events] == ["turn.done", "model.message", "turn.created"]
    assert api.get_turn(sid, turn_id)["state"]["status"] == "done"

    # The gateway SDK sees the spec's PreconditionFailedError.
    turn = AgentSessionClient(base_url=own.gateway_url, api_key="K", timeout=30).get_session(sid).get_turn(turn_id)
    with pytest.raises(PreconditionFailedError):
        list(turn.stream())
