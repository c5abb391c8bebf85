"""A session's workspace through the API (`GET`, `POST` and `DELETE
/api/v1/sessions/{id}/workspace`): made ahead of the first tool call, reported with its files,
destroyed while the session goes on (a command running in it killed first), and made fresh by
the next tool call; each change shown on the live channel, a turn that makes it saying so with
`sandbox.created` in the native stream (the gateway's client knows no other event for it) and
with a `workspace-status` custom part in the data stream."""

from __future__ import annotations

import json
import time

import wire
from test_data_stream import parts, subscribe
from test_live import LiveReader
from test_sandbox import exec_call, sandbox_spec, tool_results


def workspace(api: wire.Api, session_id: str, **params: str) -> dict:
    return api.ok(api.get(f"/api/v1/sessions/{session_id}/workspace", params=params))["data"]


def statuses(live: LiveReader, start: int = 0) -> list[str]:
    return [body["status"] for name, body in live.events[start:] if name == "workspace_status_changed"]


def test_a_workspace_is_made_ahead_listed_destroyed_and_made_fresh(server, api: wire.Api):
    sid = api.create_session(spec=sandbox_spec())["id"]
    live = LiveReader(server.url, sid)
    try:
        assert live.last_display()["workspace"] == "none"
        before = workspace(api, sid)
        assert (before["status"], before["provider"], before["files"], before["sandbox_id"]) == ("none", "bubblewrap", [], None)

        # Made ahead of the first tool call: ready, empty, with its quota; the channel says so.
        made = api.ok(api.post(f"/api/v1/sessions/{sid}/workspace"))["data"]
        assert made["status"] == "ready" and made["sandbox_id"].startswith("sbx_"), made
        assert made["files"] == [] and made["quota_bytes"] > 0 and made["error"] is None
        ready = live.wait_for("workspace_ready")
        assert ready["sandbox_id"] == made["sandbox_id"]
        assert "ready" in statuses(live)
        # Made again: left as it is.
        assert api.ok(api.post(f"/api/v1/sessions/{sid}/workspace"))["data"]["sandbox_id"] == made["sandbox_id"]

        run = api.run_turn(sid, exec_call("mkdir -p src/deep && printf hello > src/a.txt && printf x > top.txt") + " " + wire.unique("ws"))
        assert tool_results(run)[0]["exit_code"] == 0
        # The sandbox was made before the turn: the turn announces nothing of it.
        assert not [event for event in run.stream.payloads if event["type"] in ("sandbox.created", "workspace.status")]
        top = workspace(api, sid)
        assert top["status"] == "ready" and not top["files_truncated"]
        assert {"path": "/workspace/src", "kind": "directory", "bytes": top["files"][0]["bytes"]} in top["files"]
        assert {"path": "/workspace/top.txt", "kind": "file", "bytes": 1} in top["files"]
        assert not any(entry["path"].startswith("/workspace/src/") for entry in top["files"]), "one level unless asked"
        listed = workspace(api, sid, path="src")
        assert [(entry["path"], entry["kind"]) for entry in listed["files"]] == [("/workspace/src/a.txt", "file"), ("/workspace/src/deep", "directory")]
        deep = workspace(api, sid, depth="3")
        assert {"path": "/workspace/src/a.txt", "kind": "file", "bytes": 5} in deep["files"]
        downloaded = api.get(f"/api/v1/sessions/{sid}/turns/{run.turn_id}/download-sandbox-file", params={"path": "/workspace/src/a.txt"})
        assert downloaded.status_code == 200 and downloaded.content == b"hello"

        # Destroyed: the files are gone, the session goes on; the channel says so.
        mark = len(live.events)
        destroyed = api.ok(api.delete(f"/api/v1/sessions/{sid}/workspace"))["data"]
        assert (destroyed["status"], destroyed["files"], destroyed["sandbox_id"]) == ("destroyed", [], None)
        assert workspace(api, sid)["status"] == "destroyed"
        wire.wait_until(lambda: "destroyed" in statuses(live, mark), what="workspace_status_changed destroyed")
        gone = api.get(f"/api/v1/sessions/{sid}/turns/{run.turn_id}/download-sandbox-file", params={"path": "/workspace/src/a.txt"})
        assert gone.status_code == 410, gone.text

        # The next tool call makes a fresh one, and the turn says so in every dialect.
        mark = len(live.events)
        fresh = api.run_turn(sid, exec_call("ls -A") + " " + wire.unique("ws"))
        assert tool_results(fresh)[0]["stdout"] == ""
        assert [event["sandbox_id"] for event in fresh.stream.payloads if event["type"] == "sandbox.created"] == [made["sandbox_id"]]
        types = {event["type"] for event in fresh.stream.payloads}
        assert types <= {"turn.created", "sandbox.created", "model.message", "model.message.delta", "tool.response", "turn.done"}, types
        assert workspace(api, sid)["status"] == "ready"
        wire.wait_until(lambda: "ready" in statuses(live, mark), what="workspace_status_changed ready")
        assert live.wait_for("display_state_changed", mark) and wire.wait_until(lambda: live.last_display()["workspace"] == "ready")
        custom = [part for part in parts(subscribe(api, sid, fresh.turn_id)) if part.get("type") == "custom"]
        ready = [part["data"] for part in custom if part.get("event_type") == "workspace-status"]
        assert [(data["status"], data["sandbox_id"]) for data in ready] == [("ready", made["sandbox_id"])], custom
    finally:
        live.close()


def test_destroying_the_workspace_kills_the_command_running_in_it(api: wire.Api):
    sid = api.create_session(spec=sandbox_spec())["id"]
    started = api.start_turn(sid, exec_call("touch started && sleep 120", timeout_seconds=300) + " " + wire.unique("ws"))
    wire.wait_until(lambda: any(entry["path"] == "/workspace/started" for entry in workspace(api, sid)["files"]),
                    what="the command to start")
    assert api.ok(api.delete(f"/api/v1/sessions/{sid}/workspace"))["data"]["status"] == "destroyed"
    # The turn sees its tool call fail at once (long before the command's two minutes).
    done = api.wait_terminal(sid, started["id"], timeout=30)
    assert done["state"]["status"] == "done", done
    events = api.ok(api.get(f"/api/v1/sessions/{sid}/turns/{started['id']}/events"))["data"]
    (content,) = [event["content"] for event in events if event["type"] == "tool.response"]
    assert content.startswith("Error: ") and "destroyed" in content, content


def test_an_agent_without_a_sandbox_has_no_workspace_and_bad_listings_are_refused(api: wire.Api):
    plain = api.create_session(spec={"model": {"name": "fake/fake-model"}})["id"]
    none = workspace(api, plain)
    assert (none["status"], none["provider"], none["files"]) == ("none", None, [])
    for method in ("POST", "DELETE"):
        refused = wire.assert_error(api.http.request(method, f"/api/v1/sessions/{plain}/workspace"), 409)
        assert refused["code"] == "no_sandbox" and "sandbox" in refused["message"], refused

    sid = api.create_session(spec=sandbox_spec())["id"]
    api.ok(api.post(f"/api/v1/sessions/{sid}/workspace"))
    for params, status, param in [({"path": "../etc"}, 400, "path"), ({"path": "/etc"}, 400, "path"),
                                  ({"depth": "0"}, 400, "depth"), ({"depth": "9"}, 400, "depth"),
                                  ({"depth": "two"}, 400, "depth"), ({"sort": "name"}, 400, "sort")]:
        error = wire.assert_error(api.get(f"/api/v1/sessions/{sid}/workspace", params=params), status)
        assert error["param"] == param, (params, error)
    missing = wire.assert_error(api.get(f"/api/v1/sessions/{sid}/workspace", params={"path": "nowhere"}), 404)
    assert "nowhere" in missing["message"], missing
    wire.assert_error(api.get("/api/v1/sessions/sess_unknown/workspace"), 404)
    # A listing's link is shown, never followed.
    run = api.run_turn(sid, exec_call("ln -s /etc etc-link") + " " + wire.unique("ws"))
    assert tool_results(run)[0]["exit_code"] == 0, json.dumps(tool_results(run))
    assert {"path": "/workspace/etc-link", "kind": "link", "bytes": 4} in workspace(api, sid)["files"]
    wire.assert_error(api.get(f"/api/v1/sessions/{sid}/workspace", params={"path": "etc-link"}), 400)


def test_a_running_commands_output_streams_before_it_ends(api: wire.Api):
    sid = api.create_session(spec=sandbox_spec())["id"]
    command = "for i in 1 2 3 4 5 6; do echo line $i; sleep 0.5; done; echo done >&2"
    body = {"input": [{"type": "user.message", "content": exec_call(command) + " " + wire.unique("ws")}], "stream": True}
    arrivals: list[tuple[float, dict]] = []
    started = time.monotonic()
    with api.http.stream("POST", f"/api/v1/sessions/{sid}/turns", params={"include": "shell.output"}, json=body) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: "):
                arrivals.append((time.monotonic() - started, json.loads(line[len("data: "):])))
    pieces = [(at, event) for at, event in arrivals if event["type"] == "shell.output"]
    (ended_at,) = [at for at, event in arrivals if event["type"] == "tool.response"]
    stdout = "".join(event["text"] for _, event in pieces if event["stream"] == "stdout")
    assert stdout == "".join(f"line {i}\n" for i in range(1, 7))
    assert [event["text"] for _, event in pieces if event["stream"] == "stderr"] == ["done\n"]
    # The first line came while the command still had seconds to run.
    assert ended_at - pieces[0][0] > 1.5, [(round(at, 2), event["text"]) for at, event in pieces]
    assert len(pieces) >= 3, "the lines came in several pieces"
    offsets = [event["offset"] for _, event in pieces if event["stream"] == "stdout"]
    assert offsets == sorted(offsets) and offsets[0] == 0
    assert all(event["tool_name"] == "exec" and event["thread_id"] == "main" for _, event in pieces)
    turn_id = arrivals[0][1]["turn_id"]

    # Not in a native stream that does not ask for them, nor in the turn's listed events.
    plain = api.stream("GET", f"/api/v1/sessions/{sid}/turns/{turn_id}/subscribe")
    assert not [event for event in plain.payloads if event["type"] == "shell.output"]
    asked = api.stream("GET", f"/api/v1/sessions/{sid}/turns/{turn_id}/subscribe", params={"include": "shell.output,tool.progress"})
    assert len([event for event in asked.payloads if event["type"] == "shell.output"]) == len(pieces)
    listed = api.ok(api.get(f"/api/v1/sessions/{sid}/turns/{turn_id}/events"))["data"]
    assert not [event for event in listed if event["type"] == "shell.output"]
    wire.assert_error(api.get(f"/api/v1/sessions/{sid}/turns/{turn_id}/subscribe", params={"include": "shell"}), 400)
    # The data stream shows each piece as a tool-progress part of the call.
    progress = [part for part in parts(subscribe(api, sid, turn_id)) if part.get("type") == "tool-progress"]
    assert "".join(part["milestone"]["text"] for part in progress if part["milestone"]["stream"] == "stdout") == stdout


def test_a_commands_streamed_output_is_bounded(api: wire.Api):
    sid = api.create_session(spec=sandbox_spec())["id"]
    run = api.stream("POST", f"/api/v1/sessions/{sid}/turns", params={"include": "shell.output"},
                     json={"input": [{"type": "user.message", "content": exec_call("head -c 300000 /dev/zero | tr '\\0' x") + " " + wire.unique("ws")}]})
    pieces = [event for event in run.payloads if event["type"] == "shell.output"]
    streamed = sum(len(event["text"]) for event in pieces)
    assert 60 * 1024 < streamed <= 64 * 1024 and pieces[-1].get("truncated"), (streamed, len(pieces))
    assert not any(event.get("truncated") for event in pieces[:-1])
    (result,) = tool_results(wire.TurnRun(run))
    assert "more bytes were dropped" in result["stdout"]
