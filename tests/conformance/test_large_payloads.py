"""Large payloads: events fit the gateway client's SSE line limit, large files are stored once,
and memory comes back after large turns.

The gateway client fails on any SSE line longer than 1,048,576 characters (wire spec §3.2). A
long event is split over several `data:` lines between JSON tokens; long model fragments go out
as several deltas; a file part over 64 KiB is stored once as a file of the session and carried
in turns and events as a `teamster-file:` reference. Every case here failed before: a 1.2 MB
attachment broke the real client's stream with an `SSEError`.
"""

from __future__ import annotations

import base64
import hashlib
import os
import pathlib
import time

import pytest

import conftest
import wire
from truefoundry_gateway_sdk import FileContent, TextContent, UserMessage
from truefoundry_gateway_sdk.agents import TurnCreatedEvent, TurnDoneEvent, TurnStateDone

MAX_LINE_CHARS = 1_048_576
MAX_TEXT_CHARS = 512 * 1024
DEMO = "demo"
# Files other than images go into the agent's sandbox: these agents have one.
SANDBOX_SPEC = {"model": {"name": "fake/fake-model"}, "config": {"sandbox": {"enabled": True}}}


@pytest.fixture(scope="module")
def sandbox_agent(server) -> str:
    api = server.require_api()
    name = wire.unique("sandboxed")
    api.ok(api.post("/api/v1/agents", json={"name": name, "manifest": SANDBOX_SPEC}), 201)
    return name


def data_url(data: bytes, mime: str = "application/octet-stream") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def assert_lines_fit(result: wire.StreamResult) -> None:
    """Every line of an SSE body fits the gateway client's limit."""
    longest = max(len(line.decode()) for line in result.body.split(b"\n"))
    assert longest <= MAX_LINE_CHARS, f"a line of {longest} characters"


def file_turn(api: wire.Api, session_id: str, parts: list) -> wire.StreamResult:
    body = {"input": [{"type": "user.message", "content": parts}], "stream": True}
    return api.stream("POST", f"/api/v1/sessions/{session_id}/turns", json=body)


def test_a_large_attachment_streams_to_the_real_gateway_client(client, api, sandbox_agent):
    payload = os.urandom(1_200_000)
    digest = hashlib.sha256(payload).hexdigest()
    session = client.create_session(agent_name=sandbox_agent)
    message = UserMessage(content=[TextContent(text="Here is the file."),
                                   FileContent(name="report.pdf", data=data_url(payload, "application/pdf"))])
    prepared = session.prepare_turn(input=[message])
    items = list(prepared.execute())

    created, done = items[0].event, items[-1].event
    assert isinstance(created, TurnCreatedEvent) and isinstance(done, TurnDoneEvent)
    assert isinstance(prepared.state, TurnStateDone), prepared.state
    assert [item.sequence_number for item in items] == list(range(1, len(items) + 1))
    reference = f"teamster-file:application/pdf;sha256={digest};size={len(payload)}"
    parts = created.input[0].content
    assert parts[0].text == "Here is the file."
    assert (parts[1].name, parts[1].data) == ("report.pdf", reference)

    # The stored turn and a replay carry the same reference, and a replay is byte-identical.
    turn = api.get_turn(session.id, prepared.id)
    assert turn["input"][0]["content"][1] == {"type": "file", "name": "report.pdf", "data": reference}
    first = api.subscribe(session.id, prepared.id)
    again = api.subscribe(session.id, prepared.id)
    assert first.body == again.body
    assert_lines_fit(first)

    # The stored file downloads byte-identical, from its own session only.
    download = api.get(f"/api/v1/sessions/{session.id}/files/{digest}")
    assert download.status_code == 200, download.text[:300]
    assert download.content == payload
    assert download.headers["content-type"] == "application/pdf"
    assert download.headers["content-disposition"] == f'attachment; filename="{digest}"'
    assert download.headers["x-content-type-options"] == "nosniff"
    elsewhere = api.create_session(sandbox_agent)
    assert api.get(f"/api/v1/sessions/{elsewhere['id']}/files/{digest}").status_code == 404
    assert api.get(f"/api/v1/sessions/{session.id}/files/{'0' * 64}").status_code == 404
    bad = api.get(f"/api/v1/sessions/{session.id}/files/..%2F..%2Fetc")
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "digest"

    # The reference may be sent back in the same session, but names nothing in another one.
    back = file_turn(api, session.id, [{"type": "file", "name": "report.pdf", "data": reference}])
    assert back.status == 200 and back.payloads[-1]["state"]["status"] == "done", back.body[:300]
    other = api.create_session(sandbox_agent)
    refused = api.post(f"/api/v1/sessions/{other['id']}/turns",
                       json={"input": [{"type": "user.message",
                                        "content": [{"type": "file", "name": "x", "data": reference}]}]})
    assert refused.status_code == 400 and "no such file" in refused.json()["error"]["message"]


def test_long_text_is_split_over_data_lines_and_deltas(api):
    # Quotes and line breaks double in JSON: about 440,000 characters once serialised.
    text = 'a "quoted" line\n' * 22_000
    session = api.create_session(DEMO)
    run = api.run_turn(session["id"], text)
    wire.assert_sse_framing(run.stream)
    assert_lines_fit(run.stream)
    created = [event for event in run.stream.events if event.type == "turn.created"][0]
    assert created.raw.count(b"\ndata: ") >= 1, "the long turn.created spans several data: lines"
    assert created.json["input"][0]["content"] == text
    deltas = [event.json for event in run.stream.events if event.type == "model.message.delta"]
    assert all(len(delta.get("content") or "") <= 64 * 1024 for delta in deltas)
    folded = wire.fold_stream(run.stream.payloads)
    message = [event for event in folded if event["type"] == "model.message"][-1]
    assert message["content"] == f"You said: {text}"
    assert run.output_text == f"You said: {text}"


# Half a megabyte echoed back as 10,000 deltas of 50 characters. One word per delta made this
# the suite's longest stream (100,000 events, about 30 s alone on PostgreSQL with the debug
# build, the Python client parsing them the bottleneck) and it outlasted a 300 s ceiling once
# while the other workers and the background release build shared the two cores; the size read
# back whole is what the test is about, not the count of events.
@pytest.mark.timeout(300)
def test_the_real_client_reads_a_long_echo(client):
    text = ("w" * 49 + " ") * 10_000
    session = client.create_session(agent_name=DEMO)
    prepared = session.prepare_turn(input=[UserMessage(content=text)])
    items = list(prepared.execute())
    assert isinstance(items[-1].event, TurnDoneEvent)
    assert prepared.state.output.content == f"You said: {text}"


@pytest.mark.parametrize("name, content, status, says", [
    ("text over the limit", "x" * (MAX_TEXT_CHARS + 1), 413, "attach longer text as a file"),
    ("escapes count", "\u0001" * (MAX_TEXT_CHARS // 6 + 1), 413, "characters as JSON"),
    ("parts add up", [{"type": "text", "text": "y" * (MAX_TEXT_CHARS // 2)}] * 2, 413, "attach longer text"),
    ("not a data URL", [{"type": "file", "name": "a.csv", "data": "https://example.com/a.csv"}], 400, "data URL"),
    ("bad base64", [{"type": "file", "name": "a.csv", "data": "data:text/csv;base64,!!!"}], 400, "base64"),
    ("bad media type", [{"type": "file", "name": "a.csv", "data": "data:csv;base64,YQ=="}], 400, "media type"),
    ("empty name", [{"type": "file", "name": " ", "data": "data:text/csv;base64,YQ=="}], 400, "file name"),
    ("bad reference", [{"type": "file", "name": "a", "data": "teamster-file:text/csv;sha256=zz;size=1"}], 400, "reference"),
    ("unknown reference", [{"type": "file", "name": "a",
                            "data": f"teamster-file:text/csv;sha256={'0' * 64};size=1"}], 400, "no such file"),
])
def test_bad_input_is_refused_and_nothing_is_stored(api, sandbox_agent, name, content, status, says):
    session = api.create_session(sandbox_agent)
    response = api.post(f"/api/v1/sessions/{session['id']}/turns",
                        json={"input": [{"type": "user.message", "content": content}], "stream": False})
    assert response.status_code == status, response.text[:300]
    error = response.json()["error"]
    assert says in error["message"], error
    assert len(error["message"]) < 2_000, "the error does not echo the input"
    turns = api.ok(api.get(f"/api/v1/sessions/{session['id']}/turns"))
    assert turns["data"] == [], name


def rss_kib(pid: int) -> int:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


# The most resident memory twenty large turns may leave behind, over the idle figure. Measured
# (debug build): about 3 MiB on SQLite; about 21 MiB on PostgreSQL, reached by the third turn and
# flat from there (allocator arenas of the connection pool's tasks, not a growing cache).
RSS_GROWTH_BOUND_MIB = 32


def test_memory_comes_back_after_twenty_large_turns(server_factory):
    server = server_factory()
    api = server.require_api()
    pid = server.process.popen.pid
    session = api.create_session(spec=SANDBOX_SPEC)
    api.run_turn(session["id"], "warm up")
    idle = rss_kib(pid)
    for index in range(20):
        payload = os.urandom(7_000_000)  # 9.3 MB of base64: a 10 MB request body
        run = file_turn(api, session["id"], [{"type": "text", "text": f"file {index}"},
                                             {"type": "file", "name": f"f{index}.bin", "data": data_url(payload)}])
        assert run.status == 200, run.body[:300]
        assert run.payloads[-1]["state"]["status"] == "done"
        assert_lines_fit(run)
    # Memory the turns used is returned within a few seconds of idling.
    deadline = time.monotonic() + 10
    while True:
        grown = (rss_kib(pid) - idle) / 1024
        if grown <= RSS_GROWTH_BOUND_MIB or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert grown <= RSS_GROWTH_BOUND_MIB, f"RSS grew by {grown:.0f} MiB after twenty 10 MB turns"
    # The session's history is intact: every file is referenced, once stored.
    turns, _ = api.list_all(f"/api/v1/sessions/{session['id']}/turns", 25)
    references = [turn["input"][0]["content"][1]["data"] for turn in turns
                  if isinstance(turn["input"][0]["content"], list)]
    assert sum(reference.startswith("teamster-file:") for reference in references) == 20
