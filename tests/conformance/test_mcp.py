"""MCP servers in agents, against the real test server `tests/mcp_servers/tools_server.py`
(the official Python `mcp` package) over streamable HTTP, and over stdio registered through
the settings API.

Covered: the settings registry (`/api/v1/settings/mcp-servers`, secrets redacted and kept),
listing (`/api/v1/mcp-servers`, `/api/v1/mcp-servers/{name}/tools`, 502 for a server that is
down), stdio servers only through settings (422 inline), tool calls with `tool_info` of type
`mcp`, tool errors as data, `mcp.initialize` once per session connection, the selectors (what
the model is offered, what waits for approval), collision-free names, deferred loading
(`search_tools`/`load_tools`, restored in later turns), cancelling a running MCP call, unknown
and unreachable servers that do not fail the turn, and the gateway SDK's view of an MCP call.
"""

from __future__ import annotations

import contextlib
import json
import pathlib
import time
import typing

import pytest

import conftest
import wire
from python_servers import PYTHON, SERVERS, PythonServer
from truefoundry_gateway_sdk import AgentSpec, ApprovalAllow, ApprovalDeny, InlineMcpServer, Model, UserMessage
from truefoundry_gateway_sdk.agents import (
    McpInitializeEvent,
    ModelMessageEvent,
    ToolApprovalRequiredEvent,
    TurnDoneEvent,
    UserToolApprovalEvent,
    is_event_delta,
    merge_event_delta,
)

TOOLS_SERVER = SERVERS / "tools_server.py"
# Read-only tools of tools_server.py, per their annotations.
READ_ONLY = {"echo", "add", "cancelled_calls", "big", "whoami", "picture", "getenv", "phases", "request_meta"}
ALL_TOOLS = READ_ONLY | {"write_note", "delete_everything", "fail", "slow", "counter", "crash", "lookup"}
SECRET = "Bearer s3cret-mcp-header"


# --------------------------------------------------------------------------------------------
# Fixtures and helpers
# --------------------------------------------------------------------------------------------


class McpHttpServer(PythonServer):
    """tools_server.py over streamable HTTP on a free loopback port."""

    def __init__(self, workdir: pathlib.Path) -> None:
        super().__init__(workdir, "tools_server.py", "--transport", "streamable-http")
        self.url = f"{self.base}/mcp"


@pytest.fixture(scope="module")
def mcp_http(workdir: pathlib.Path) -> typing.Iterator[McpHttpServer]:
    instance = McpHttpServer(workdir)
    try:
        yield instance
    finally:
        instance.close()


@pytest.fixture(scope="module")
def registered(server: conftest.TeamsterServer, mcp_http: McpHttpServer) -> str:
    """The HTTP test server registered in the settings, with a header secret."""
    name = wire.unique("tools")
    api = server.require_api()
    api.ok(api.post("/api/v1/settings/mcp-servers", json={"manifest": remote(name, mcp_http.url, SECRET)}), 201)
    return name


@pytest.fixture(scope="module")
def registered_stdio(server: conftest.TeamsterServer) -> str:
    """The test server as a stdio server (a Teamster extension), with an environment secret."""
    name = wire.unique("stdio")
    api = server.require_api()
    manifest = {"type": "stdio", "name": name, "description": "Test tools over stdio.", "command": PYTHON,
                "args": [str(TOOLS_SERVER), "--transport", "stdio"], "env": {"TEAMSTER_MCP_SECRET": "env-s3cret"}}
    api.ok(api.put("/api/v1/settings/mcp-servers", json={"manifest": manifest}))
    return name


@contextlib.contextmanager
def registered_tools_server(server: conftest.TeamsterServer, workdir: pathlib.Path, prefix: str) -> typing.Iterator[str]:
    """tools_server.py over HTTP, registered in the settings under a fresh name (yielded), and
    stopped afterwards."""
    instance = McpHttpServer(workdir)
    try:
        name = wire.unique(prefix)
        api = server.require_api()
        api.ok(api.post("/api/v1/settings/mcp-servers", json={"manifest": remote(name, instance.url)}), 201)
        yield name
    finally:
        instance.close()


def remote(name: str, url: str, authorization: typing.Optional[str] = None) -> dict:
    manifest = {"type": "remote", "name": name, "description": "Test tools.", "url": url}
    if authorization is not None:
        manifest["auth"] = {"type": "header", "headers": {"Authorization": authorization}}
    return manifest


def registry(name: str, **selectors: typing.Any) -> dict:
    return {"type": "truefoundry-mcp-registry", "name": name, **selectors}


def session_with(api: wire.Api, *servers: dict) -> str:
    spec = {"model": {"name": "fake/fake-model"}, "mcp_servers": list(servers)}
    return api.create_session(spec=spec)["id"]


def call(tool: str, arguments: typing.Optional[dict] = None) -> str:
    return f"[tool:{tool} {json.dumps(arguments or {})}]"


def of_type(run: wire.TurnRun, kind: str) -> list[dict]:
    return [event for event in wire.fold_stream(run.stream.payloads) if event["type"] == kind]


def responses(run: wire.TurnRun) -> list[str]:
    """The turn's tool results in the order of the calls (calls run concurrently, so their
    `tool.response` events arrive in any order)."""
    by_call = {event["tool_call_id"]: event["content"] for event in of_type(run, "tool.response")}
    order = [call["id"] for message in of_type(run, "model.message") for call in message.get("tool_calls") or []]
    # Calls of an earlier turn (resumed after an approval) come first.
    order = [call_id for call_id in by_call if call_id not in order] + order
    return [by_call[call_id] for call_id in order if call_id in by_call]


def offered(request: dict) -> list[str]:
    return [tool["function"]["name"] for tool in request.get("tools") or []]


def run_done(api: wire.Api, session_id: str, text: str) -> wire.TurnRun:
    run = api.run_turn(session_id, text)
    wire.assert_sse_framing(run.stream)
    assert run.done["state"]["status"] == "done", run.done
    return run


# --------------------------------------------------------------------------------------------
# Settings and listing
# --------------------------------------------------------------------------------------------


def test_settings_redact_header_secrets_and_keep_them(api, registered, mcp_http):
    listed = api.get("/api/v1/settings/mcp-servers")
    assert SECRET not in listed.text
    (entry,) = [item for item in api.ok(listed)["data"] if item["name"] == registered]
    assert entry["manifest"] == {**remote(registered, mcp_http.url, "********")}
    assert entry["auth_status"] == {"status": "authenticated"}
    one = api.get(f"/api/v1/settings/mcp-servers/{registered}")
    assert SECRET not in one.text and api.ok(one)["data"] == entry
    wire.assert_error(api.get("/api/v1/settings/mcp-servers/no-such-server"), 404)

    # Sent back redacted, the stored secret is kept: the server still receives it.
    kept = api.put("/api/v1/settings/mcp-servers", json={"manifest": entry["manifest"]})
    assert SECRET not in kept.text and api.ok(kept)["data"] == entry
    session = session_with(api, registry(registered, preload=True))
    assert responses(run_done(api, session, call("whoami"))) == [SECRET]

    # A name is created once; a redacted secret with nothing stored cannot be kept.
    wire.assert_error(api.post("/api/v1/settings/mcp-servers", json={"manifest": entry["manifest"]}), 409)
    fresh = remote(wire.unique("new"), mcp_http.url, "********")
    wire.assert_error(api.post("/api/v1/settings/mcp-servers", json={"manifest": fresh}), 400)
    wire.assert_error(api.put("/api/v1/settings/mcp-servers",
                              json={"manifest": {**fresh, "auth": None, "url": "ftp://example.com/"}}), 400)

    available = api.ok(api.get("/api/v1/mcp-servers"))["data"]
    assert {"name": registered, "url": mcp_http.url, "auth": {"type": "header"},
            "auth_status": {"status": "authenticated"}} in available


def test_listing_a_servers_tools_with_annotations(api, registered):
    tools = {tool["name"]: tool for tool in api.ok(api.get(f"/api/v1/mcp-servers/{registered}/tools"))["data"]}
    assert set(tools) == ALL_TOOLS
    assert tools["echo"]["description"] == "Returns the text it is given."
    # Annotations as the server gave them: no defaults for the hints it did not set.
    assert tools["echo"]["annotations"] == {"readOnlyHint": True, "idempotentHint": True}
    assert tools["write_note"]["annotations"] == {"readOnlyHint": False, "destructiveHint": False}
    assert tools["delete_everything"]["annotations"] == {"readOnlyHint": False, "destructiveHint": True}
    assert "annotations" not in tools["fail"] and "title" not in tools["fail"]
    # A title and no hints: listed as such; the selectors read the missing hints as MCP's
    # defaults (a destructive write, see test_selectors_decide_what_the_model_is_offered).
    assert tools["lookup"]["title"] == "Look up a word" and "annotations" not in tools["lookup"]
    assert tools["lookup"]["description"] == "Looks a word up; listed with a title and no hints at all."
    assert set(tools["add"]["inputSchema"]["properties"]) == {"a", "b"}
    wire.assert_error(api.get("/api/v1/mcp-servers/no-such-server/tools"), 404)


def test_a_server_that_is_down_is_a_502_within_the_connect_timeout(api):
    name = wire.unique("down")
    api.ok(api.post("/api/v1/settings/mcp-servers",
                    json={"manifest": remote(name, f"http://127.0.0.1:{conftest.free_port()}/mcp")}), 201)
    started = time.monotonic()
    error = wire.assert_error(api.get(f"/api/v1/mcp-servers/{name}/tools"), 502, {"upstream_unavailable"})
    assert time.monotonic() - started < 10
    assert name in error["message"]


def test_stdio_servers_only_through_settings(api, registered_stdio):
    command = {"type": "inline", "name": "local", "url": "http://127.0.0.1:1/mcp",
               "command": "sh", "args": ["-c", "echo pwned"]}
    spec = {"model": {"name": "fake/fake-model"}, "mcp_servers": [command]}
    error = wire.assert_error(api.post("/api/v1/sessions", json={"agent": {"spec": spec}}), 422)
    assert "settings/mcp-servers" in error["message"], error
    # A saved agent's manifest is held to its schema first: an inline entry has no command.
    error = wire.assert_error(api.post("/api/v1/agents", json={"name": wire.unique("agent"), "manifest": spec}), 400)
    assert "`mcp_servers[0].command`" in error["message"] and "no such key" in error["message"], error

    listed = api.get("/api/v1/settings/mcp-servers")
    assert "env-s3cret" not in listed.text
    (entry,) = [item for item in api.ok(listed)["data"] if item["name"] == registered_stdio]
    assert entry["manifest"]["env"] == {"TEAMSTER_MCP_SECRET": "********"}
    assert {"name": registered_stdio, "url": f"stdio:{registered_stdio}", "auth_status": {"status": "not_required"}} \
        in api.ok(api.get("/api/v1/mcp-servers"))["data"]
    tools = api.ok(api.get(f"/api/v1/mcp-servers/{registered_stdio}/tools"))["data"]
    assert {tool["name"] for tool in tools} == ALL_TOOLS

    # Sent back redacted, the variable keeps its value; the process sees it, and nothing else
    # of this server's environment.
    api.ok(api.put("/api/v1/settings/mcp-servers", json={"manifest": entry["manifest"]}))
    session = session_with(api, registry(registered_stdio, preload=True))
    run = run_done(api, session, call("getenv", {"name": "TEAMSTER_MCP_SECRET"}) + call("getenv", {"name": "OPENAI_API_KEY"}))
    assert responses(run) == ["env-s3cret", "<unset>"]


# --------------------------------------------------------------------------------------------
# Tool calls in turns
# --------------------------------------------------------------------------------------------


def test_text_and_structured_results_with_mcp_tool_info(api, registered):
    session = session_with(api, registry(registered, preload=True))
    run = run_done(api, session, call("echo", {"text": "hi"}) + call("add", {"a": 2, "b": 3}))
    types = [event["type"] for event in wire.fold_stream(run.stream.payloads)]
    assert types[:3] == ["turn.created", "mcp.initialize", "model.message"], types
    (init,) = of_type(run, "mcp.initialize")
    (entry,) = init["mcp_servers"]
    assert entry["id"] == f"mcp:{registered}" and entry["name"] == registered
    assert entry["transport_type"] == "streamable-http" and entry["session_id"]
    assert init["thread_id"] == "main" and "error" not in entry

    message = of_type(run, "model.message")[0]
    infos = [call["tool_info"] for call in message["tool_calls"]]
    assert infos == [{"type": "mcp", "server_id": f"mcp:{registered}", "server_name": registered, "name": name}
                     for name in ("echo", "add")]
    assert responses(run) == ["hi", '{"sum":5}']
    assert run.output_text == 'Tool result: hi | {"sum":5}'


def test_a_tool_error_reaches_the_model_and_the_turn_is_done(api, registered):
    session = session_with(api, registry(registered, preload=True, require_approval_for_tools=[]))
    run = run_done(api, session, call("fail", {"message": "the disk is on fire"}))
    (content,) = responses(run)
    assert content.startswith("Error: ") and "the disk is on fire" in content
    assert run.output_text == f"Tool result: {content}"


def test_one_connection_per_session_reused_across_turns(api, registered, registered_stdio):
    # Over HTTP: the second turn reuses the first turn's MCP session.
    session = session_with(api, registry(registered, preload=True, require_approval_for_tools=[]))
    first = run_done(api, session, call("echo", {"text": "one"}))
    second = run_done(api, session, call("echo", {"text": "two"}))
    assert len(of_type(first, "mcp.initialize")) == 1 and of_type(second, "mcp.initialize") == []
    assert responses(second) == ["two"]

    # Over stdio the counter lives in the server process: it keeps counting within a session,
    # and another session has a process of its own.
    stdio = registry(registered_stdio, preload=True, require_approval_for_tools=[])
    session = session_with(api, stdio)
    counts = [responses(run_done(api, session, call("counter")))[0] for _ in range(3)]
    assert counts == ["1", "2", "3"]
    other = session_with(api, stdio)
    assert responses(run_done(api, other, call("counter"))) == ["1"]

    # Deleting the session closes its connection: a new session starts from scratch again.
    assert api.delete(f"/api/v1/sessions/{session}").status_code in (200, 204)
    assert responses(run_done(api, session_with(api, stdio), call("counter"))) == ["1"]


def test_write_and_destructive_tools_wait_for_approval_by_default(api, registered):
    session = session_with(api, registry(registered, preload=True))
    run = run_done(api, session, call("delete_everything"))
    (pending,) = of_type(run, "tool.approval_required")
    assert responses(run) == []
    (ref,) = pending["tool_calls"]
    approval = {"type": "user.tool_approval", "thread_id": "main", "tool_call_id": ref["id"],
                "approval": {"status": "allow"}}
    resumed = api.stream("POST", f"/api/v1/sessions/{session}/turns", json={"input": [approval]})
    assert resumed.status == 200, resumed.body[:300]
    assert responses(wire.TurnRun(resumed)) == ["deleted"]


# --------------------------------------------------------------------------------------------
# Selectors and names
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("selectors, expected", [
    ({}, ALL_TOOLS),
    ({"enable_tools": ["@read-only"]}, READ_ONLY),
    ({"enable_tools": ["@read-only"], "disable_tools": ["big", "picture"]}, READ_ONLY - {"big", "picture"}),
    ({"enable_tools": ["echo", "write_note", "gone"]}, {"echo", "write_note"}),
    ({"disable_tools": ["@write"]}, READ_ONLY),
    ({"enable_tools": ["@destructive"]}, {"delete_everything", "fail", "slow", "counter", "crash", "lookup"}),
], ids=["all", "read-only", "disable", "names", "no-writes", "destructive"])
def test_selectors_decide_what_the_model_is_offered(api, fake, registered, selectors, expected):
    session = session_with(api, registry(registered, preload=True, **selectors))
    marker = wire.unique("offer")
    run_done(api, session, f"which tools? {marker}")
    (request,) = fake.requests_for(marker)
    names = offered(request)
    assert {name for name in names if name in ALL_TOOLS} == expected
    assert "get_current_datetime" in names and "search_tools" not in names


def test_two_servers_with_the_same_tools_both_stay_callable(api, fake, registered, mcp_http):
    inline = {"type": "inline", "name": "mirror", "url": mcp_http.url, "preload": True,
              "enable_tools": ["echo", "add"], "require_approval_for_tools": []}
    session = session_with(api, registry(registered, preload=True, enable_tools=["echo", "write_note"]), inline)
    marker = wire.unique("twins")
    run = run_done(api, session, call("mirror__echo", {"text": "from the mirror"}) + call("write_note", {"text": "n"})
                   + f" {marker}")
    request = fake.requests_for(marker)[0]
    mcp_names = [name for name in offered(request) if name not in ("get_current_datetime", "read_tool_result",
                                                                   "ask_user_question", "run_sub_agent")]
    assert mcp_names == [f"{registered}__echo", "write_note", "mirror__echo", "add"]
    message = of_type(run, "model.message")[0]
    assert [call["tool_info"] for call in message["tool_calls"]][0] == {
        "type": "mcp", "server_id": "inline:mirror", "server_name": "mirror", "name": "echo"}
    assert responses(run)[0] == "from the mirror"
    # write_note needs approval by default on the registry server; it waits.
    assert len(of_type(run, "tool.approval_required")) == 1


# --------------------------------------------------------------------------------------------
# Deferred loading
# --------------------------------------------------------------------------------------------


def test_deferred_tools_are_searched_loaded_and_stay_loaded(api, fake, registered):
    server = registry(registered, preload_tools=["add"], require_approval_for_tools=[])
    session = session_with(api, server)
    marker = wire.unique("defer")
    run = run_done(api, session, call("search_tools", {"query": "echo text"}) + f" {marker}")
    (found,) = responses(run)
    assert "- echo: Returns the text it is given." in found
    first = offered(fake.requests_for(marker)[0])
    assert "add" in first and "search_tools" in first and "load_tools" in first
    assert "echo" not in first and "counter" not in first

    marker = wire.unique("load")
    run = run_done(api, session, call("load_tools", {"names": ["echo", "counter"]}) + f" {marker}")
    assert responses(run)[0].startswith("Loaded echo, counter")
    before, after = (fake.requests_for(marker)[i]["tools"] for i in (0, 1))
    assert after[:len(before)] == before, "the definitions sent before the load stay a prefix"
    assert [tool["function"]["name"] for tool in after[len(before):]] == ["echo", "counter"]

    # A later turn finds the loads in the session's history.
    marker = wire.unique("later")
    run = run_done(api, session, call("echo", {"text": "still here"}) + f" {marker}")
    assert responses(run) == ["still here"]
    assert offered(fake.requests_for(marker)[0])[-2:] == ["echo", "counter"]


def test_a_deferred_tool_called_before_loading_is_an_error_for_the_model(api, registered):
    session = session_with(api, registry(registered, require_approval_for_tools=[]))
    (content,) = responses(run_done(api, session, call("echo", {"text": "too early"})))
    assert content.startswith("Error: ") and "load_tools" in content


# --------------------------------------------------------------------------------------------
# Cancellation and failures
# --------------------------------------------------------------------------------------------


def test_progress_is_in_the_native_stream_only_for_clients_that_ask(api, registered):
    session = session_with(api, registry(registered, preload=True, enable_tools=["phases"]))
    asked = api.stream("POST", f"/api/v1/sessions/{session}/turns?include=tool.progress",
                       json={"input": [{"type": "user.message", "content": call("phases", {"steps": 4})}]})
    wire.assert_sse_framing(asked)
    events = asked.events
    turn_id = events[0].json["turn_id"]
    kinds = [event.type for event in events]
    progress = [event for event in events if event.type == "tool.progress"]
    assert [(event.json["progress"], event.json["total"], event.json["message"]) for event in progress] == [
        (step, 4, f"phase {step} of 4") for step in (1, 2, 3, 4)]
    (call_id,) = {event.json["tool_call_id"] for event in progress}
    assert {(event.json["tool_name"], event.json["thread_id"]) for event in progress} == {("phases", "main")}
    # After the message that made the call has ended, before its result.
    (message,) = [event for event in wire.fold_stream(asked.payloads) if event["type"] == "model.message"
                  and any(tool_call["id"] == call_id for tool_call in event.get("tool_calls") or [])]
    ended = max(index for index, event in enumerate(events) if event.json.get("id") == message["id"])
    assert ended < kinds.index("tool.progress") and kinds.index("tool.progress") + 3 < kinds.index("tool.response")
    assert api.stream("GET", f"/api/v1/sessions/{session}/turns/{turn_id}/subscribe",
                      params={"include": "tool.progress"}).body == asked.body, "a replay is the same bytes"

    # A native client that did not ask sees every other event, with its own sequence numbers.
    plain = api.subscribe(session, turn_id).events
    assert [(event.seq, event.json) for event in plain] == [(event.seq, event.json) for event in events
                                                            if event.type != "tool.progress"]
    # Never listed; the gateway dialect streams them (its client skips an unknown type, and its
    # ids stay contiguous) but never lists them.
    listed = api.ok(api.get(f"/api/v1/sessions/{session}/turns/{turn_id}/events"))["data"]
    assert "tool.progress" not in [event["type"] for event in listed]
    gateway = api.stream("POST", api.gw(f"sessions/{session}/turns/{turn_id}/subscribe"), json={})
    assert gateway.body == asked.body
    gateway_listed = api.ok(api.get(api.gw(f"sessions/{session}/turns/{turn_id}/events")))["data"]
    assert "tool.progress" not in [event["type"] for event in gateway_listed]

    refused = api.get(f"/api/v1/sessions/{session}/turns/{turn_id}/subscribe",
                      params={"include": "tool.progress,tool.everything"})
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["param"] == "include" and "tool.progress" in refused.json()["error"]["message"]


def test_cancel_stops_a_running_mcp_call(api, registered):
    session = session_with(api, registry(registered, preload=True, require_approval_for_tools=[]))
    baseline = int(responses(run_done(api, session, call("cancelled_calls")))[0])
    turn = api.start_turn(session, call("slow", {"seconds": 30}))
    parser = wire.SseParser()
    with api.http.stream("GET", f"/api/v1/sessions/{session}/turns/{turn['id']}/subscribe") as response:
        for chunk in response.iter_bytes():
            parser.feed(chunk)
            if any(event.type == "model.message.delta" and event.json.get("finish_reason") for event in parser.events):
                break
    time.sleep(0.5)  # The call reaches the server.
    started = time.monotonic()
    assert api.post(f"/api/v1/sessions/{session}/cancel", json={}).status_code == 200
    state = api.wait_terminal(session, turn["id"], timeout=10)["state"]
    assert state["status"] == "cancelled" and state["reason"] == "client-cancelled"
    assert time.monotonic() - started < 5

    def cancelled_on_server() -> bool:
        return int(responses(run_done(api, session, call("cancelled_calls")))[0]) == baseline + 1
    wire.wait_until(cancelled_on_server, timeout=10, interval=0.2, what="the server to cancel the call")


def test_unknown_and_unreachable_servers_do_not_fail_the_turn(api, fake, registered):
    dead = {"type": "inline", "name": "dead", "url": f"http://127.0.0.1:{conftest.free_port()}/mcp"}
    session = session_with(api, registry("no-such-server"), dead, registry(registered, preload=True))
    marker = wire.unique("partial")
    run = run_done(api, session, call("echo", {"text": "still works"}) + f" {marker}")
    (init,) = of_type(run, "mcp.initialize")
    entries = {entry["name"]: entry for entry in init["mcp_servers"]}
    assert set(entries) == {"no-such-server", "dead", registered}
    assert "no MCP server named" in entries["no-such-server"]["error"]
    assert entries["dead"]["id"] == "inline:dead" and entries["dead"]["error"]
    assert "error" not in entries[registered]
    assert responses(run) == ["still works"]


# --------------------------------------------------------------------------------------------
# The gateway SDK
# --------------------------------------------------------------------------------------------


def test_the_gateway_sdk_sees_mcp_tool_info(api, private, client, registered, mcp_http):
    agent = wire.unique("mcp-agent")
    manifest = {"model": {"name": "fake/fake-model"},
                "mcp_servers": [registry(registered, preload=True, enable_tools=["echo"])]}
    api.ok(api.post("/api/v1/agents", json={"name": agent, "manifest": manifest}), 201)
    session = client.create_session(agent_name=agent)
    prepared = session.prepare_turn(input=[UserMessage(content=call("echo", {"text": "via the sdk"}))])
    items = list(prepared.execute())
    assert prepared.state.status == "done"
    assert [type(item.event) for item in items if isinstance(item.event, McpInitializeEvent)] == [McpInitializeEvent]
    messages: dict[str, ModelMessageEvent] = {}
    for item in items:
        if isinstance(item.event, ModelMessageEvent):
            messages[item.event.id] = item.event
        elif is_event_delta(item.event):
            merge_event_delta(messages[item.event.id], item.event)
    calls = [call for message in messages.values() for call in message.tool_calls or []]
    assert [call.tool_info.dict() for call in calls] == [
        {"type": "mcp", "server_id": f"mcp:{registered}", "server_name": registered, "name": "echo"}]
    listed = [event for event in prepared.list_events() if event.type == "tool.response"]
    assert [event.content for event in listed] == ["via the sdk"]

    # A tool that reports progress: the SDK skips the extension events it does not know, and
    # every event it yields keeps the sequence number it has on the wire.
    progress_agent = wire.unique("progress-agent")
    manifest = {"model": {"name": "fake/fake-model"},
                "mcp_servers": [registry(registered, preload=True, enable_tools=["phases"])]}
    api.ok(api.post("/api/v1/agents", json={"name": progress_agent, "manifest": manifest}), 201)
    prepared = client.create_session(agent_name=progress_agent).prepare_turn(
        input=[UserMessage(content=call("phases", {"steps": 3}))])
    items = list(prepared.execute())
    assert prepared.state.status == "done" and prepared.state.output.content == "Tool result: 3 phases done"
    numbers = [item.sequence_number for item in items]
    assert numbers == sorted(numbers) and len(numbers) + 3 == numbers[-1], "three progress events skipped"

    # A draft session built with the SDK's own types (which always send `preload` and `type`).
    spec = AgentSpec(model=Model(name="fake/fake-model"),
                     mcp_servers=[InlineMcpServer(name="inline-tools", url=mcp_http.url, preload=True,
                                                  enable_tools=["add"], require_approval_for_tools=[])])
    draft = private.create_draft_session(agent_spec=spec)
    prepared = draft.prepare_turn(input=[UserMessage(content=call("add", {"a": 40, "b": 2}))])
    list(prepared.execute())
    assert prepared.state.status == "done" and prepared.state.output.content == 'Tool result: {"sum":42}'


# --------------------------------------------------------------------------------------------
# Approvals with the gateway SDK
# --------------------------------------------------------------------------------------------


def gated_agent(api: wire.Api, server_name: str) -> str:
    """An agent whose every tool of the server waits for approval."""
    agent = wire.unique("gated")
    manifest = {"model": {"name": "fake/fake-model"},
                "mcp_servers": [registry(server_name, preload=True, enable_tools=["echo", "counter"],
                                         require_approval_for_tools=["@all"])]}
    api.ok(api.post("/api/v1/agents", json={"name": agent, "manifest": manifest}), 201)
    return agent


def pause(session, text: str):
    """Runs a turn that must end waiting for approval; returns it, its items and the pending event."""
    prepared = session.prepare_turn(input=[UserMessage(content=text)])
    items = list(prepared.execute())
    pending = [item.event for item in items if isinstance(item.event, ToolApprovalRequiredEvent)]
    assert len(pending) == 1, [item.event.type for item in items]
    done = items[-1].event
    assert isinstance(done, TurnDoneEvent) and done.state.status == "done"
    assert [action.id for action in done.state.required_actions] == [pending[0].id]
    assert not [item for item in items if item.event.type == "tool.response"], "nothing ran"
    return prepared, items, pending[0]


def decide(session, pending, *approvals):
    """Resumes with one approval per waiting call, in order; returns the turn and its items."""
    input = [UserToolApprovalEvent(thread_id=pending.thread_id, tool_call_id=ref.id, approval=approval)
             for ref, approval in zip(pending.tool_calls, approvals)]
    prepared = session.prepare_turn(input=input)
    items = list(prepared.execute())
    assert prepared.state.status == "done", prepared.state
    return prepared, items


def tool_responses(items) -> dict[str, str]:
    return {item.event.tool_call_id: item.event.content for item in items if item.event.type == "tool.response"}


def test_sdk_approval_allow_runs_the_tool_and_deny_tells_the_model(api, client, registered):
    session = client.create_session(agent_name=gated_agent(api, registered))
    first, items, pending = pause(session, call("echo", {"text": "allowed"}))
    (ref,) = pending.tool_calls
    messages = [item.event for item in items if item.event.type == "model.message"]
    assert ref.source_event_id == messages[0].id
    second, items = decide(session, pending, ApprovalAllow())
    assert second.previous_turn_id == first.id
    assert tool_responses(items) == {ref.id: "allowed"}
    assert second.state.output.content == "Tool result: allowed"
    # The turn's recorded input is the decision, as the SDK sent it.
    assert [item.tool_call_id for item in second.input] == [ref.id]

    _, _, pending = pause(session, call("echo", {"text": "denied"}))
    (ref,) = pending.tool_calls
    _, items = decide(session, pending, ApprovalDeny(reason="not this one"))
    told = tool_responses(items)[ref.id]
    assert "denied" in told and "not this one" in told and "Tool result" not in told


def test_sdk_two_gated_calls_in_one_message_resume_in_one_turn(api, client, registered):
    session = client.create_session(agent_name=gated_agent(api, registered))
    _, _, pending = pause(session, call("echo", {"text": "one"}) + call("echo", {"text": "two"}))
    assert len(pending.tool_calls) == 2
    _, items = decide(session, pending, ApprovalAllow(), ApprovalAllow())
    assert sorted(tool_responses(items).values()) == ["one", "two"]


def test_sdk_a_restart_between_pause_and_approval_changes_nothing(server_factory, mcp_http):
    own = server_factory()
    api = own.require_api()
    name = wire.unique("tools")
    api.ok(api.post("/api/v1/settings/mcp-servers", json={"manifest": remote(name, mcp_http.url, SECRET)}), 201)
    agent = gated_agent(api, name)
    sdk = conftest.AgentSessionClient(base_url=f"{own.url}/t1", api_key="K", timeout=30)
    session = sdk.create_session(agent_name=agent)
    before = responses(run_done(api, session_with(api, registry(name, preload=True, require_approval_for_tools=[])),
                                call("counter")))
    _, _, pending = pause(session, call("counter"))
    own.restart()
    api = own.require_api()
    sdk = conftest.AgentSessionClient(base_url=f"{own.url}/t1", api_key="K", timeout=30)
    session = sdk.get_session(session.id)
    (ref,) = pending.tool_calls
    _, items = decide(session, pending, ApprovalAllow())
    # The gated call ran exactly once, after the approval: the server's counter moved by one.
    assert tool_responses(items) == {ref.id: str(int(before[0]) + 1)}
    # Deciding again is refused: nothing is waiting any more.
    again = api.post(f"/api/v1/sessions/{session.id}/turns", json={"stream": False, "input": [
        {"type": "user.tool_approval", "thread_id": "main", "tool_call_id": ref.id, "approval": {"status": "allow"}}]})
    wire.assert_error(again, 400)


# --------------------------------------------------------------------------------------------
# Permissions and grants (the control layer)
# --------------------------------------------------------------------------------------------


def approve(api: wire.Api, session: str, pending: dict, approval: dict) -> wire.TurnRun:
    (ref,) = pending["tool_calls"]
    decision = {"type": "user.tool_approval", "thread_id": "main", "tool_call_id": ref["id"], "approval": approval}
    resumed = api.stream("POST", f"/api/v1/sessions/{session}/turns", json={"input": [decision]})
    assert resumed.status == 200, resumed.body[:300]
    return wire.TurnRun(resumed)


def test_always_allow_grants_a_tool_until_revoked_and_a_denied_tool_never_runs(api, registered_stdio):
    session = session_with(api, registry(registered_stdio, preload=True, enable_tools=["echo", "counter"],
                                         require_approval_for_tools=["@all"]))
    grants_url = f"/api/v1/sessions/{session}/grants"
    (pending,) = of_type(run_done(api, session, call("echo", {"text": "one"})), "tool.approval_required")
    assert responses(approve(api, session, pending, {"status": "allow", "always": "tool"})) == ["one"]
    (grant,) = api.ok(api.get(grants_url))["data"]
    assert grant["tool"] == "echo" and "category" not in grant and grant["id"].startswith("grant")

    # The grant holds for the rest of the session; other tools still ask.
    granted = run_done(api, session, call("echo", {"text": "two"}))
    assert not of_type(granted, "tool.approval_required") and responses(granted) == ["two"]
    asking = run_done(api, session, call("counter"))
    (pending,) = of_type(asking, "tool.approval_required")
    assert responses(approve(api, session, pending, {"status": "allow"})) == ["1"]
    assert len(api.ok(api.get(grants_url))["data"]) == 1, "a plain approval grants nothing"

    # Revoked, the tool asks again.
    assert api.delete(f"{grants_url}/{grant['id']}").status_code == 204
    assert api.ok(api.get(grants_url))["data"] == []
    wire.assert_error(api.delete(f"{grants_url}/{grant['id']}"), 404)
    again = run_done(api, session, call("echo", {"text": "three"}))
    assert len(of_type(again, "tool.approval_required")) == 1 and responses(again) == []

    # A denied tool is refused with an error result and never runs: the counter is still 1.
    # (echo declares it only reads: its category is `read`; counter's is `mcp`.)
    url = f"/api/v1/sessions/{session}"
    policy = {"tools": {"counter": "deny"}, "categories": {"read": "allow", "mcp": "allow"}}
    assert api.ok(api.patch(url, json={"permissions": policy}))["data"]["permissions"] == policy
    denied = run_done(api, session, call("counter") + call("echo", {"text": "four"}))
    assert not of_type(denied, "tool.approval_required")
    refused, echoed = responses(denied)
    assert "deny" in refused and echoed == "four", (refused, echoed)
    api.ok(api.patch(url, json={"permissions": {"categories": {"mcp": "allow"}}}))
    assert responses(run_done(api, session, call("counter"))) == ["2"]

    # An "always allow" of the category grants every tool of it.
    api.ok(api.patch(url, json={"permissions": {"categories": {"mcp": "ask"}}}))
    (pending,) = of_type(run_done(api, session, call("counter")), "tool.approval_required")
    assert responses(approve(api, session, pending, {"status": "allow", "always": "category"})) == ["3"]
    (grant,) = api.ok(api.get(grants_url))["data"]
    assert grant["category"] == "mcp" and "tool" not in grant
    assert responses(run_done(api, session, call("counter"))) == ["4"]
    assert len(of_type(run_done(api, session, call("echo", {"text": "five"})), "tool.approval_required")) == 1

    wire.assert_error(api.patch(url, json={"permissions": {"tools": {"echo": "sometimes"}}}), 400)
    wire.assert_error(api.patch(url, json={"permissions": {"categories": {"network": "allow"}}}), 400)
    wire.assert_error(api.get("/api/v1/sessions/ses_nope/grants"), 404)


def test_session_tools_list_each_tool_with_its_category_and_the_sessions_permission(api, registered_stdio):
    session = session_with(api, registry(registered_stdio, preload=True, enable_tools=["echo", "counter"],
                                         require_approval_for_tools=["counter"]))
    url = f"/api/v1/sessions/{session}/tools"

    def tools() -> dict:
        return {tool["name"]: tool for tool in api.ok(api.get(url))["data"]}

    listed = tools()
    # The agent's rules: echo only reads (category read) and runs at once; counter asks.
    assert (listed["echo"]["category"], listed["echo"]["permission"]) == ("read", "allow"), listed["echo"]
    assert (listed["counter"]["category"], listed["counter"]["permission"]) == ("mcp", "ask"), listed["counter"]
    assert listed["counter"]["requires_approval"] is True and listed["counter"]["source"].startswith("mcp:")
    assert listed["ask_user_question"]["category"] == "other"
    # The session's policy and grants override them, and each says why.
    policy = {"tools": {"echo": "deny"}, "categories": {"mcp": "allow"}}
    api.ok(api.patch(f"/api/v1/sessions/{session}", json={"permissions": policy}))
    listed = tools()
    assert listed["echo"]["permission"] == "deny" and "for this tool" in listed["echo"]["approval_reason"]
    assert listed["counter"]["permission"] == "allow" and listed["counter"]["requires_approval"] is False
    assert "mcp category" in listed["counter"]["approval_reason"], listed["counter"]
    wire.assert_error(api.get("/api/v1/sessions/ses_nope/tools"), 404)
    wire.assert_error(api.get(f"{url}?verbose=1"), 400)


def test_steering_during_a_long_tool_call_reaches_the_next_model_request(api, fake, registered_stdio):
    session = session_with(api, registry(registered_stdio, preload=True, enable_tools=["slow"]))
    api.ok(api.patch(f"/api/v1/sessions/{session}", json={"permissions": {"tools": {"slow": "allow"}}}))
    marker, instruction = wire.unique("slow"), wire.unique("instruction")
    turn = api.start_turn(session, call("slow", {"seconds": 2}) + f" {marker}")
    wire.wait_until(lambda: fake.requests_for(marker), timeout=20, what="the tool call")
    api.ok(api.post(f"/api/v1/sessions/{session}/steer", json={"content": f"Be brief. {instruction}"}), 202)
    done = api.wait_terminal(session, turn["id"])
    assert done["state"]["status"] == "done", done
    (request,) = fake.requests_mentioning(instruction)
    *_, tool_result, steer = request["messages"]
    assert tool_result["role"] == "tool" and tool_result["content"].startswith("slept 2"), tool_result
    assert steer == {"role": "user", "content": f"Be brief. {instruction}"}
