"""Plain-HTTP tools for the conformance suite.

Everything here talks bytes and JSON, never the SDK: a small client for the native `/api/v1` API
and for raw gateway calls, an SSE parser that keeps each event's raw lines (for byte-identity
checks), the delta fold of wire spec §4.5 over JSON dicts, a recording httpx transport that tees
every request and response body the SDK exchanges, and a bounded wait-for-condition.

Every network call has a timeout: a broken server fails a test, it never hangs it.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import time
import typing
import uuid

import httpx

# Read timeout stays below the server's default 15 s heartbeat, so a stream that is not closed
# after `turn.done` fails with ReadTimeout instead of passing by luck.
TIMEOUT = httpx.Timeout(10.0, connect=5.0)

# The gateway dialect is mounted under a tenant prefix in every test, as the SDK's README asks.
GATEWAY_PREFIX = "/t1"

# The fake provider's API key: GET must never show it (the settings API redacts it).
API_KEY_SECRET = "sk-conformance-0123456789abcdef"

TERMINAL = ("done", "cancelled", "error")


def unique(prefix: str) -> str:
    """A fresh lowercase name (agent names are slugs) or message marker."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


# --------------------------------------------------------------------------------------------
# Bounded waiting
# --------------------------------------------------------------------------------------------


def wait_until(predicate: typing.Callable[[], typing.Any], *, timeout: float = 20.0,
               interval: float = 0.05, what: str = "condition") -> typing.Any:
    """Polls `predicate` until it returns something truthy and returns that; fails after `timeout`."""
    deadline = time.monotonic() + timeout
    last: typing.Any = None
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last value: {last!r})")
        time.sleep(interval)


# --------------------------------------------------------------------------------------------
# SSE
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class SseEvent:
    """One dispatched SSE event. `raw` is its field lines exactly as sent (comments excluded)."""

    id: typing.Optional[str]
    data: str
    raw: bytes

    @property
    def seq(self) -> int:
        assert self.id is not None and self.id.isdigit(), f"SSE id must be a decimal integer, got {self.id!r}"
        return int(self.id)

    @property
    def json(self) -> dict:
        return json.loads(self.data)

    @property
    def type(self) -> str:
        return self.json["type"]


class SseParser:
    """Incremental SSE parser (WHATWG rules the SDK uses): feed bytes, get events as they complete.

    Keeps every line in arrival order in `lines` (so tests can check where comments fall) and
    each event's own field lines in `SseEvent.raw`. An `id:` line is required on every event by
    wire spec §3.3, so unlike a browser the parser does not carry the last id over: `id` is None
    on an event that had no `id:` line of its own.
    """

    def __init__(self) -> None:
        self.buffer = b""
        self.lines: list[bytes] = []
        self.comments: list[bytes] = []
        self.events: list[SseEvent] = []
        self._field_lines: list[bytes] = []

    def feed(self, chunk: bytes) -> list[SseEvent]:
        self.buffer += chunk
        out: list[SseEvent] = []
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            if line.endswith(b"\r"):
                line = line[:-1]
            self.lines.append(line)
            event = self._line(line)
            if event is not None:
                out.append(event)
        self.events.extend(out)
        return out

    def _line(self, line: bytes) -> typing.Optional[SseEvent]:
        if line == b"":
            if not self._field_lines:
                return None
            fields = self._field_lines
            self._field_lines = []
            event_id: typing.Optional[str] = None
            data: list[str] = []
            for field_line in fields:
                name, _, value = field_line.partition(b":")
                if value.startswith(b" "):
                    value = value[1:]
                if name == b"id":
                    event_id = value.decode()
                elif name == b"data":
                    data.append(value.decode())
            if not data:
                return None
            return SseEvent(id=event_id, data="\n".join(data), raw=b"\n".join(fields))
        if line.startswith(b":"):
            self.comments.append(line)
            return None
        self._field_lines.append(line)
        return None

    @property
    def pending(self) -> bytes:
        """Bytes received after the last complete event (should be empty once a stream closed)."""
        return self.buffer + b"\n".join(self._field_lines)


def parse_sse(body: bytes) -> SseParser:
    parser = SseParser()
    parser.feed(body)
    return parser


@dataclasses.dataclass
class StreamResult:
    """A whole SSE response read to EOF (or a non-SSE error response)."""

    status: int
    headers: httpx.Headers
    body: bytes
    sse: typing.Optional[SseParser]

    @property
    def events(self) -> list[SseEvent]:
        assert self.sse is not None, f"not an SSE response: {self.status} {self.body[:300]!r}"
        return self.sse.events

    @property
    def payloads(self) -> list[dict]:
        return [event.json for event in self.events]

    def json(self) -> typing.Any:
        return json.loads(self.body)


def read_stream(response: httpx.Response) -> StreamResult:
    """Reads an (already opened) streaming response to EOF, parsing SSE when it is SSE."""
    if response.status_code != 200 or "text/event-stream" not in response.headers.get("content-type", ""):
        body = response.read()
        return StreamResult(response.status_code, response.headers, body, None)
    parser = SseParser()
    body = b""
    for chunk in response.iter_bytes():
        body += chunk
        parser.feed(chunk)
    return StreamResult(response.status_code, response.headers, body, parser)


def assert_sse_framing(result: StreamResult, *, first: int = 1) -> None:
    """Wire spec §3: SSE content type, `id:` on every event, ids contiguous from `first`,
    the last event is `turn.done`, and nothing but comments or blank lines follows it."""
    assert result.status == 200, result.body[:500]
    assert result.headers["content-type"].split(";")[0].strip() == "text/event-stream"
    events = result.events
    assert events, "the stream carried no event"
    assert all(event.id is not None for event in events), "an event without an `id:` line"
    assert [event.seq for event in events] == list(range(first, first + len(events)))
    assert events[-1].type == "turn.done"
    assert [event.type for event in events].count("turn.done") == 1
    assert result.sse is not None and result.sse.pending.strip() == b"", result.sse.pending


# --------------------------------------------------------------------------------------------
# Delta folding, wire spec §4.5 (a transcription of the SDK's merge_event_delta over dicts)
# --------------------------------------------------------------------------------------------


def merge_delta(base: dict, delta: dict) -> None:
    if base.get("id") != delta.get("id"):
        raise ValueError(f"delta {delta.get('id')!r} merged into a different event {base.get('id')!r}")
    if base.get("type") != "model.message" or delta.get("type") != "model.message.delta":
        return
    content = delta.get("content")
    if content:
        current = base.get("content")
        if current is None or isinstance(current, str):
            base["content"] = (current or "") + content
        elif current and current[-1].get("type") == "text":
            current[-1]["text"] += content
        else:
            current.append({"type": "text", "text": content})
    if delta.get("refusal"):
        base["refusal"] = (base.get("refusal") or "") + delta["refusal"]
    if delta.get("tool_calls"):
        if base.get("tool_calls") is None:
            base["tool_calls"] = []
        calls = base["tool_calls"]
        for part in delta["tool_calls"]:
            index = part["index"]
            while len(calls) <= index:
                calls.append(None)
            function = part.get("function") or {}
            call = calls[index]
            if call is None:
                call = {
                    "id": part.get("id") or "",
                    "type": part.get("type") or "function",
                    "function": {"name": function.get("name") or "", "arguments": ""},
                    "tool_info": part.get("tool_info"),
                }
                calls[index] = call
            if part.get("id"):
                call["id"] = part["id"]
            if part.get("type"):
                call["type"] = part["type"]
            if function.get("name"):
                call["function"]["name"] = function["name"]
            if function.get("arguments"):
                call["function"]["arguments"] = (call["function"].get("arguments") or "") + function["arguments"]
            if part.get("tool_info"):
                call["tool_info"] = part["tool_info"]
            if part.get("provider_specific_fields"):
                call["provider_specific_fields"] = {
                    **(call.get("provider_specific_fields") or {}),
                    **part["provider_specific_fields"],
                }
    if delta.get("finish_reason"):
        base["finish_reason"] = delta["finish_reason"]
    if delta.get("reasoning_content"):
        base["reasoning_content"] = (base.get("reasoning_content") or "") + delta["reasoning_content"]
    if delta.get("usage"):
        base["usage"] = delta["usage"]


def fold_stream(payloads: list[dict]) -> list[dict]:
    """The stream's events with every delta folded into its placeholder `model.message`."""
    folded: list[dict] = []
    messages: dict[str, dict] = {}
    for payload in payloads:
        if payload["type"].endswith(".delta"):
            base = messages.get(payload["id"])
            assert base is not None, f"delta {payload['id']!r} arrived before its placeholder model.message"
            merge_delta(base, payload)
            continue
        event = copy.deepcopy(payload)
        if event["type"] == "model.message":
            messages[event["id"]] = event
        folded.append(event)
    return folded


def without_nulls(value: typing.Any) -> typing.Any:
    """Wire spec §0: an optional field may be absent or null; compare with nulls dropped."""
    if isinstance(value, dict):
        return {key: without_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [without_nulls(item) for item in value]
    return value


CONTENT_EVENT_TYPES = {
    "model.message", "tool.response", "thread.created", "thread.done", "mcp.initialize",
    "mcp.auth_required", "sandbox.created", "tool.approval_required", "tool.response_required",
}


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


def assert_error(response: httpx.Response | StreamResult, status: int,
                 codes: typing.Optional[typing.Iterable[str]] = None) -> dict:
    """The one error body of every dialect: {"error":{"message":str,"type","code","param"}}."""
    status_code = response.status_code if isinstance(response, httpx.Response) else response.status
    body_bytes = response.read() if isinstance(response, httpx.Response) else response.body
    assert status_code == status, f"expected {status}, got {status_code}: {body_bytes[:500]!r}"
    assert response.headers.get("content-type", "").startswith("application/json"), response.headers
    body = json.loads(body_bytes)
    assert set(body) == {"error"}, body
    error = body["error"]
    assert isinstance(error.get("message"), str) and error["message"], body
    for key in ("type", "code", "param"):
        assert error.get(key) is None or isinstance(error[key], str), f"error.{key} must be a string or null: {body}"
    if codes is not None:
        assert error.get("code") in set(codes), f"error.code {error.get('code')!r} not in {sorted(codes)}"
    return error


# --------------------------------------------------------------------------------------------
# The native API and raw gateway calls
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class TurnRun:
    """A turn created with `stream: true` and read to EOF."""

    stream: StreamResult

    @property
    def turn_id(self) -> str:
        first = self.stream.payloads[0]
        assert first["type"] == "turn.created", first
        return first["turn_id"]

    @property
    def done(self) -> dict:
        return self.stream.payloads[-1]

    @property
    def output_text(self) -> typing.Optional[str]:
        state = self.done["state"]
        output = state.get("output") or {}
        return output.get("content")


class Api:
    """Plain-HTTP access to one running server: native `/api/v1/...` and raw gateway calls."""

    def __init__(self, root: str, key: str = "K") -> None:
        self.root = root.rstrip("/")
        self.http = httpx.Client(base_url=self.root, timeout=TIMEOUT,
                                 headers={"Authorization": f"Bearer {key}"})

    def close(self) -> None:
        self.http.close()

    # Generic verbs; `path` starts with "/".
    def get(self, path: str, **kw: typing.Any) -> httpx.Response:
        return self.http.get(path, **kw)

    def post(self, path: str, **kw: typing.Any) -> httpx.Response:
        return self.http.post(path, **kw)

    def put(self, path: str, **kw: typing.Any) -> httpx.Response:
        return self.http.put(path, **kw)

    def patch(self, path: str, **kw: typing.Any) -> httpx.Response:
        return self.http.patch(path, **kw)

    def delete(self, path: str, **kw: typing.Any) -> httpx.Response:
        return self.http.delete(path, **kw)

    def stream(self, method: str, path: str, **kw: typing.Any) -> StreamResult:
        with self.http.stream(method, path, **kw) as response:
            return read_stream(response)

    @staticmethod
    def ok(response: httpx.Response, status: int = 200) -> typing.Any:
        assert response.status_code == status, (
            f"{response.request.method} {response.request.url}: expected {status}, "
            f"got {response.status_code}: {response.text[:500]}")
        return response.json()

    # -- agents and sessions -------------------------------------------------------------
    def create_agent(self, name: str, instructions: str = "You are a test agent.",
                     model: str = "fake/fake-model") -> dict:
        body = {"name": name, "manifest": {"model": {"name": model}, "instructions": instructions}}
        return self.ok(self.post("/api/v1/agents", json=body), 201)["data"]

    def create_session(self, agent_name: typing.Optional[str] = None,
                       spec: typing.Optional[dict] = None) -> dict:
        agent = {"name": agent_name} if spec is None else {"spec": spec}
        return self.ok(self.post("/api/v1/sessions", json={"agent": agent}), 201)["data"]

    def get_turn(self, session_id: str, turn_id: str) -> dict:
        return self.ok(self.get(f"/api/v1/sessions/{session_id}/turns/{turn_id}"))["data"]

    # -- turns ---------------------------------------------------------------------------
    def run_turn(self, session_id: str, text: str, **body: typing.Any) -> TurnRun:
        """Creates a streaming turn over the native API and reads it to EOF."""
        payload = {"input": [{"type": "user.message", "content": text}], **body}
        result = self.stream("POST", f"/api/v1/sessions/{session_id}/turns", json=payload)
        assert result.status == 200, f"create turn failed: {result.status} {result.body[:500]!r}"
        return TurnRun(result)

    def start_turn(self, session_id: str, text: str, **body: typing.Any) -> dict:
        """Creates a turn with `stream: false`; returns the running turn."""
        payload = {"input": [{"type": "user.message", "content": text}], "stream": False, **body}
        return self.ok(self.post(f"/api/v1/sessions/{session_id}/turns", json=payload))["data"]

    def wait_terminal(self, session_id: str, turn_id: str, timeout: float = 30.0) -> dict:
        def terminal() -> typing.Optional[dict]:
            turn = self.get_turn(session_id, turn_id)
            return turn if turn["state"]["status"] in TERMINAL else None
        return wait_until(terminal, timeout=timeout, what=f"turn {turn_id} to end")

    def read_until_delta(self, session_id: str, turn_id: str, timeout: float = 20.0) -> list[SseEvent]:
        """Subscribes to a turn, reads until its first model delta, then disconnects."""
        parser = SseParser()
        deadline = time.monotonic() + timeout
        with self.http.stream("GET", f"/api/v1/sessions/{session_id}/turns/{turn_id}/subscribe") as response:
            assert response.status_code == 200, response.read()[:300]
            for chunk in response.iter_bytes():
                parser.feed(chunk)
                if any(event.type == "model.message.delta" for event in parser.events):
                    return parser.events
                assert time.monotonic() < deadline, "no model delta within the time limit"
        raise AssertionError(f"the stream ended without a model delta: {[e.type for e in parser.events]}")

    def subscribe(self, session_id: str, turn_id: str, after: typing.Optional[typing.Any] = None,
                  last_event_id: typing.Optional[str] = None) -> StreamResult:
        params = {} if after is None else {"after_sequence_number": after}
        headers = {} if last_event_id is None else {"Last-Event-ID": last_event_id}
        return self.stream("GET", f"/api/v1/sessions/{session_id}/turns/{turn_id}/subscribe",
                           params=params, headers=headers)

    def list_all(self, path: str, limit: int, **params: typing.Any) -> tuple[list[dict], list[dict]]:
        """Follows `next_page_token` to the end; returns (items, pages' pagination objects)."""
        items: list[dict] = []
        pages: list[dict] = []
        token: typing.Optional[str] = None
        for _ in range(1000):
            query = {"limit": limit, **params}
            if token:
                query["page_token"] = token
            body = self.ok(self.get(path, params=query))
            pages.append(body["pagination"])
            items.extend(body["data"])
            token = body["pagination"].get("next_page_token")
            if not token or not body["data"]:
                return items, pages
        raise AssertionError(f"{path}: pagination did not end after 1000 pages")

    # -- gateway dialect, raw ------------------------------------------------------------
    @staticmethod
    def gw(path: str) -> str:
        """`sessions/...` → `/t1/v1/agents/sessions/...`."""
        return f"{GATEWAY_PREFIX}/v1/agents/{path}"


class FakeModel:
    """The fake OpenAI-compatible model server's inspection endpoints."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.http = httpx.Client(base_url=self.url, timeout=TIMEOUT)

    def requests(self) -> list[dict]:
        response = self.http.get("/requests")
        assert response.status_code == 200, response.text
        return response.json()

    def requests_mentioning(self, marker: str) -> list[dict]:
        """Requests whose body mentions `marker` anywhere (history included)."""
        return [body for body in self.requests() if marker in json.dumps(body)]

    def requests_for(self, marker: str) -> list[dict]:
        """Requests made for the turn whose user message carries `marker`: the last user
        message of the request mentions it (later turns only carry it in their history)."""
        found = []
        for body in self.requests():
            users = [m for m in body.get("messages", []) if m.get("role") == "user"]
            if users and marker in json.dumps(users[-1].get("content")):
                found.append(body)
        return found

    def close(self) -> None:
        self.http.close()


# --------------------------------------------------------------------------------------------
# Recording what the SDK sends and receives
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Exchange:
    method: str
    url: httpx.URL
    headers: httpx.Headers
    body: bytes
    status: typing.Optional[int] = None
    response_headers: typing.Optional[httpx.Headers] = None
    response_body: bytes = b""

    @property
    def path(self) -> str:
        return self.url.path

    @property
    def query(self) -> str:
        return self.url.query.decode()

    @property
    def json(self) -> typing.Any:
        return json.loads(self.body)

    @property
    def response_json(self) -> typing.Any:
        return json.loads(self.response_body)

    @property
    def sse(self) -> SseParser:
        return parse_sse(self.response_body)


class _TeeStream(httpx.SyncByteStream):
    def __init__(self, inner: typing.Any, exchange: Exchange) -> None:
        self.inner = inner
        self.exchange = exchange

    def __iter__(self) -> typing.Iterator[bytes]:
        for chunk in self.inner:
            self.exchange.response_body += chunk
            yield chunk

    def close(self) -> None:
        self.inner.close()


class RecordingTransport(httpx.BaseTransport):
    """An httpx transport that records every exchange, response bodies byte for byte as the
    client reads them (streams included), and forwards to a real HTTP transport."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.exchanges: list[Exchange] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        exchange = Exchange(request.method, request.url, request.headers, request.read())
        self.exchanges.append(exchange)
        response = self.inner.handle_request(request)
        exchange.status = response.status_code
        exchange.response_headers = response.headers
        return httpx.Response(status_code=response.status_code, headers=response.headers,
                              stream=_TeeStream(response.stream, exchange),
                              extensions=response.extensions)

    def close(self) -> None:
        self.inner.close()

    def clear(self) -> None:
        self.exchanges.clear()

    def matching(self, method: str, path_suffix: str) -> list[Exchange]:
        return [ex for ex in self.exchanges if ex.method == method and ex.path.endswith(path_suffix)]
