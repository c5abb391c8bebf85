"""The sandbox through the native API: an agent with `config.sandbox.enabled` gets the `exec` tool;
its session's sandbox is announced once (`sandbox.created`), keeps its files across turns, and
runs commands shut off from the host. (The escape attempts themselves are tested against the
provider in `crates/teamster-sandbox/tests/bubblewrap.rs`.)"""

from __future__ import annotations

import base64
import json
import pathlib
import random
import time

import conftest
import wire


def exec_call(command: str) -> str:
    return f"[tool:exec {json.dumps({'command': command})}]"


def sandbox_spec() -> dict:
    return {"model": {"name": "fake/fake-model"}, "config": {"sandbox": {"enabled": True}}}


def tool_results(run: wire.TurnRun) -> list[dict]:
    """The `exec` results of a turn; a failed call's content is prefixed `Error: `."""
    contents = [event["content"] for event in run.stream.payloads if event["type"] == "tool.response"]
    return [json.loads(content.removeprefix("Error: ")) for content in contents]


def test_capabilities_say_sandboxes_run(api):
    assert api.ok(api.get("/api/v1/capabilities"))["data"]["sandbox"] == {"enabled": True}


def test_a_session_keeps_its_sandbox_across_turns(api):
    session = api.create_session(spec=sandbox_spec())
    first = api.run_turn(session["id"], exec_call("echo kept > /tmp/out.txt; echo 1 > note; hostname; id -u") + " " + wire.unique("sbx"))
    created = [event for event in first.stream.payloads if event["type"] == "sandbox.created"]
    assert len(created) == 1 and created[0]["sandbox_id"].startswith("sbx_"), first.stream.payloads
    (result,) = tool_results(first)
    assert result["exit_code"] == 0 and result["stdout"].startswith("sandbox\n"), result
    assert result["stdout"].split()[1] != "0", "commands do not run as root"

    second = api.run_turn(session["id"], exec_call("cat /tmp/out.txt note; pwd") + " " + wire.unique("sbx"))
    assert not [event for event in second.stream.payloads if event["type"] == "sandbox.created"]
    (result,) = tool_results(second)
    assert result == {"exit_code": 0, "stdout": "kept\n1\n/workspace\n", "stderr": ""}

    # Another session has a sandbox of its own.
    other = api.create_session(spec=sandbox_spec())
    run = api.run_turn(other["id"], exec_call("cat note") + " " + wire.unique("sbx"))
    assert [event["sandbox_id"] for event in run.stream.payloads if event["type"] == "sandbox.created"] != \
        [created[0]["sandbox_id"]]
    (result,) = tool_results(run)
    assert result["exit_code"] != 0, result

    # Deleting the session removes its sandbox.
    sandbox_dir = pathlib.Path(conftest.SANDBOX_ROOT) / created[0]["sandbox_id"]
    assert sandbox_dir.is_dir()
    assert api.delete(f"/api/v1/sessions/{session['id']}").status_code == 204
    assert not sandbox_dir.exists()


def test_failing_commands_are_failed_calls_and_the_turn_goes_on(api):
    session = api.create_session(spec=sandbox_spec())
    run = api.run_turn(session["id"], exec_call("echo no >&2; exit 3") + " " + wire.unique("sbx"))
    (result,) = tool_results(run)
    assert result == {"exit_code": 3, "stdout": "", "stderr": "no\n"}
    assert run.done["state"]["status"] == "done"


def test_agents_without_a_sandbox_have_no_exec_tool(api, fake):
    marker = wire.unique("nosbx")
    session = api.create_session(spec={"model": {"name": "fake/fake-model"}})
    api.run_turn(session["id"], f"hello {marker}")
    (request,) = fake.requests_for(marker)
    assert "exec" not in [tool["function"]["name"] for tool in request.get("tools", [])]


def test_a_server_without_sandboxes_refuses_agents_that_need_one(server_factory):
    api = server_factory(["--no-sandbox"]).require_api()
    assert api.ok(api.get("/api/v1/capabilities"))["data"]["sandbox"] == {"enabled": False}
    for create in (
        lambda: api.post("/api/v1/agents", json={"name": wire.unique("sbx-agent"), "manifest": sandbox_spec()}),
        lambda: api.post("/api/v1/sessions", json={"agent": {"spec": sandbox_spec()}}),
    ):
        response = create()
        wire.assert_error(response, 422)
        assert "runs no sandboxes" in response.json()["error"]["message"]
        assert "--no-sandbox" in response.json()["error"]["message"]


# --------------------------------------------------------------------------------------------
# Attachments and downloads
# --------------------------------------------------------------------------------------------

# A 1x1 transparent PNG.
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==")


def data_url(data: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def parts_turn(api, session_id: str, parts: list) -> wire.TurnRun:
    body = {"input": [{"type": "user.message", "content": parts}], "stream": True}
    result = api.stream("POST", f"/api/v1/sessions/{session_id}/turns", json=body)
    assert result.status == 200, result.body[:500]
    return wire.TurnRun(result)


def test_attached_files_are_in_the_workspace_and_images_go_to_the_model(api, fake):
    marker = wire.unique("attach")
    session = api.create_session(spec=sandbox_spec())
    csv = b"name,amount\nA1,10\nB2,32\n"
    run = parts_turn(api, session["id"], [
        {"type": "text", "text": exec_call(
            "awk -F, 'NR>1 {s+=$2} END {print s}' attachments/sales.csv; cmp attachments/sales.csv /workspace/attachments/sales.csv && echo same")
         + " " + marker},
        {"type": "file", "name": "../sales.csv", "data": data_url(csv, "text/csv")},
        {"type": "file", "name": "pixel.png", "data": data_url(PNG, "image/png")},
    ])
    (result,) = tool_results(run)
    assert result == {"exit_code": 0, "stdout": "42\nsame\n", "stderr": ""}, result

    # The model got the image natively and was told where the other file is.
    first = fake.requests_for(marker)[0]
    content = [m for m in first["messages"] if m["role"] == "user"][-1]["content"]
    texts = [part["text"] for part in content if part["type"] == "text"]
    images = [part["image_url"]["url"] for part in content if part["type"] == "image_url"]
    assert images == [data_url(PNG, "image/png")], content
    assert "[attached file: ../sales.csv, saved in the sandbox at /workspace/attachments/sales.csv]" in texts[0]
    assert "[attached image: pixel.png]" in texts[0]
    # The image is not a file of the workspace.
    check = api.run_turn(session["id"], exec_call("ls attachments") + " " + wire.unique("ls"))
    assert tool_results(check)[0]["stdout"] == "sales.csv\n"


def test_files_other_than_images_need_a_sandbox(api):
    session = api.create_session(spec={"model": {"name": "fake/fake-model"}})
    url = f"/api/v1/sessions/{session['id']}/turns"
    csv = {"type": "file", "name": "a.csv", "data": data_url(b"a,b\n", "text/csv")}
    error = wire.assert_error(api.post(url, json={"input": [{"type": "user.message", "content": [csv]}]}), 400)
    assert "sandbox" in error["message"] and error["param"] == "input", error
    # An image needs none.
    image = {"type": "file", "name": "p.png", "data": data_url(PNG, "image/png")}
    assert api.post(url, json={"input": [{"type": "user.message", "content": [image]}], "stream": False}).status_code == 200
    assert len(api.ok(api.get(url))["data"]) == 1, "the refused turn left nothing behind"


def test_a_file_over_the_limit_is_413(api):
    session = api.create_session(spec=sandbox_spec())
    big = {"type": "file", "name": "big.bin", "data": data_url(b"\0" * (7 * 1024 * 1024 + 1), "application/octet-stream")}
    response = api.post(f"/api/v1/sessions/{session['id']}/turns",
                        json={"input": [{"type": "user.message", "content": [big]}]})
    error = wire.assert_error(response, 413)
    assert "big.bin" in error["message"], error
    assert api.ok(api.get(f"/api/v1/sessions/{session['id']}/turns"))["data"] == []


def download(api, session_id: str, turn_id: str, path: str):
    return api.get(f"/api/v1/sessions/{session_id}/turns/{turn_id}/download-sandbox-file", params={"path": path})


def test_files_download_byte_identical_and_nothing_outside_the_workspace(api, tmp_path):
    session = api.create_session(spec=sandbox_spec())
    secret = tmp_path / "host-secret.txt"
    secret.write_text("host secret")
    write = ("python3 -c \"import sys; sys.stdout.buffer.write(bytes(range(256)) * 4000)\" > out.bin; "
             "mkdir -p sub; echo hi > 'sub/r\u00e9sum\u00e9 1.txt'; ln -s /etc/passwd passwd-link; "
             f"ln -s {secret} host-link; echo t > /tmp/t.txt")
    run = api.run_turn(session["id"], exec_call(write) + " " + wire.unique("dl"))
    assert tool_results(run)[0]["exit_code"] == 0, tool_results(run)
    turn_id = run.turn_id

    got = download(api, session["id"], turn_id, "/workspace/out.bin")
    assert got.status_code == 200, got.text[:300]
    assert got.content == bytes(range(256)) * 4000
    assert got.headers["content-type"] == "application/octet-stream"
    assert got.headers["content-disposition"] == "attachment; filename=\"out.bin\"; filename*=UTF-8''out.bin"
    assert got.headers["x-content-type-options"] == "nosniff"
    named = download(api, session["id"], turn_id, "/workspace/sub/r\u00e9sum\u00e9 1.txt")
    assert named.status_code == 200 and named.content == b"hi\n"
    assert named.headers["content-type"].startswith("text/plain")
    assert "filename*=UTF-8''r%C3%A9sum%C3%A9%201.txt" in named.headers["content-disposition"]
    assert download(api, session["id"], turn_id, "/tmp/t.txt").content == b"t\n"

    for path, status in [
        ("out.bin", 400),                       # not absolute
        ("/workspace/../etc/passwd", 400),      # escapes
        ("/etc/passwd", 400),                   # outside the workspace and /tmp
        (str(secret), 404),                     # the sandbox's own /tmp has no such file
        ("/workspace/passwd-link", 400),        # a link pointing out
        ("/workspace/host-link", 400),
        ("/workspace/missing.txt", 404),
        ("/workspace/sub/", 400),
    ]:
        response = download(api, session["id"], turn_id, path)
        wire.assert_error(response, status)
        assert b"host secret" not in response.content and b"root:" not in response.content, path
    wire.assert_error(api.get(f"/api/v1/sessions/{session['id']}/turns/{turn_id}/download-sandbox-file"), 400)

    # Another session's turn, a session without a sandbox, an agent that forbids downloads.
    other = api.create_session(spec=sandbox_spec())
    wire.assert_error(download(api, other["id"], turn_id, "/workspace/out.bin"), 404)
    plain = api.create_session(spec={"model": {"name": "fake/fake-model"}})
    plain_run = api.run_turn(plain["id"], "hello " + wire.unique("plain"))
    wire.assert_error(download(api, plain["id"], plain_run.turn_id, "/workspace/out.bin"), 412)
    closed_spec = {**sandbox_spec(), "config": {"sandbox": {"enabled": True, "file_downloads": False}}}
    closed = api.create_session(spec=closed_spec)
    closed_run = api.run_turn(closed["id"], exec_call("echo x > x") + " " + wire.unique("closed"))
    wire.assert_error(download(api, closed["id"], closed_run.turn_id, "/workspace/x"), 403)

    # A deleted session's files are gone.
    assert api.delete(f"/api/v1/sessions/{session['id']}").status_code == 204
    wire.assert_error(download(api, session["id"], turn_id, "/workspace/out.bin"), 404)


def processes_matching(text: str) -> list[str]:
    """Command lines of the machine's processes that contain `text`."""
    found = []
    for proc in pathlib.Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(cmdline)
    return found


def test_a_cancel_during_a_long_command_ends_the_turn_at_once_and_leaves_no_process(api):
    duration = f"600.{random.randrange(10**8):08d}"
    session = api.create_session(spec=sandbox_spec())
    turn = api.start_turn(session["id"], exec_call(f"sleep {duration}") + " " + wire.unique("cancel"))
    wire.wait_until(lambda: any(line.startswith(f"sleep {duration}") for line in processes_matching(duration)),
                    timeout=20, what="the command to start")

    cancelled_at = time.monotonic()
    api.ok(api.post(f"/api/v1/sessions/{session['id']}/cancel", json={}))
    ended = wire.wait_until(
        lambda: (t := api.get_turn(session["id"], turn["id"]))["state"]["status"] != "running" and t,
        timeout=10, interval=0.02, what="the turn to end")
    took = time.monotonic() - cancelled_at
    assert ended["state"]["status"] == "cancelled", ended
    assert took < 1.0, f"the turn ended {took:.2f} s after the cancel"
    # Nothing of the command is left: neither the sleep, nor its shell, nor bwrap.
    wire.wait_until(lambda: not processes_matching(duration), timeout=1, what="the command's processes to go")


def test_large_results_are_kept_whole_as_workspace_files(api, fake):
    marker = wire.unique("large")
    session = api.create_session(spec=sandbox_spec())
    first = api.run_turn(session["id"], exec_call("seq 1 10000") + " " + marker)
    (response,) = [event for event in first.stream.payloads if event["type"] == "tool.response"]
    assert json.loads(response["content"])["stdout"].count("\n") == 10000, "the event keeps the whole result"
    path = f"/workspace/.tool-results/{response['tool_call_id']}.txt"
    # The model saw a preview that names the file.
    follow_up = [body for body in fake.requests_mentioning(marker) if body["messages"][-1]["role"] == "tool"]
    shown = follow_up[0]["messages"][-1]["content"]
    assert len(shown) < 5_000 and f"The whole result is also in the file {path}" in shown, shown[-400:]

    count = "import json, sys; print(json.load(open(sys.argv[1]))['stdout'].count(chr(10)))"
    second = api.run_turn(session["id"], exec_call(f"python3 -c \"{count}\" {path}") + " " + wire.unique("large"))
    assert tool_results(second)[0] == {"exit_code": 0, "stdout": "10000\n", "stderr": ""}
