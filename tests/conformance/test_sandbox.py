"""The sandbox through the native API: an agent with `config.sandbox.enabled` gets the `exec` tool;
its session's sandbox is announced once (`sandbox.created`), shared by its sub-agents, keeps its
files across turns, and runs commands shut off from the host: not its environment, not its data
directory, not its loopback network unless the spec opts in. Fork bombs, memory bombs and
gigabytes of output are contained and the server keeps serving. (More escape attempts are tested
against the provider in `crates/teamster-sandbox/tests/bubblewrap.rs`.)"""

from __future__ import annotations

import base64
import json
import os
import pathlib
import random
import re
import shlex
import shutil
import socket
import threading
import time
import typing

import httpx
import pytest

import conftest
import wire
from test_sub_agents import spawn


def exec_call(command: str, **arguments: typing.Any) -> str:
    return f"[tool:exec {json.dumps({'command': command, **arguments})}]"


def sandbox_spec() -> dict:
    return {"model": {"name": "fake/fake-model"}, "config": {"sandbox": {"enabled": True}}}


def tool_results(run: wire.TurnRun, thread: typing.Callable[[str], bool] = lambda thread_id: True) -> list[dict]:
    """The `exec` results of a turn in the threads `thread` accepts; a failed call's content is
    prefixed `Error: `."""
    contents = [event["content"] for event in run.stream.payloads
                if event["type"] == "tool.response" and thread(event["thread_id"])]
    return [json.loads(content.removeprefix("Error: ")) for content in contents]


def sandboxes_created(run: wire.TurnRun) -> list[str]:
    """The sandbox ids a turn's `sandbox.created` events announced."""
    return [event["sandbox_id"] for event in run.stream.payloads if event["type"] == "sandbox.created"]


def server_log(server: conftest.TeamsterServer) -> str:
    """What a server has logged so far, without terminal colours."""
    assert server.process is not None
    return re.sub(r"\x1b\[[0-9;]*m", "", server.process.log_path.read_text(errors="replace"))


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


def test_sub_agents_share_the_session_sandbox(api):
    session = api.create_session(spec=sandbox_spec())
    marker = wire.unique("shared")
    task = exec_call(f"echo {marker} > shared.txt; echo written") + " " + wire.unique("sub")
    first = api.run_turn(session["id"], spawn("writer", task) + " " + wire.unique("sbx"))
    assert first.done["state"]["status"] == "done", first.done
    created = sandboxes_created(first)
    assert len(created) == 1, first.stream.payloads
    # The sub-agent's own thread ran the command.
    assert tool_results(first, thread=lambda thread_id: thread_id != "main") == \
        [{"exit_code": 0, "stdout": "written\n", "stderr": "",
          "files": [{"path": "/workspace/shared.txt", "size": len(marker) + 1}]}]

    # The parent's exec, in the next turn, reads what the sub-agent wrote; nothing new is made.
    second = api.run_turn(session["id"], exec_call("cat shared.txt") + " " + wire.unique("sbx"))
    assert sandboxes_created(second) == []
    assert tool_results(second) == [{"exit_code": 0, "stdout": f"{marker}\n", "stderr": ""}]


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
    own = server_factory(["--no-sandbox"])
    api = own.require_api()
    assert api.ok(api.get("/api/v1/capabilities"))["data"]["sandbox"] == {"enabled": False}
    for create in (
        lambda: api.post("/api/v1/agents", json={"name": wire.unique("sbx-agent"), "manifest": sandbox_spec()}),
        lambda: api.post("/api/v1/sessions", json={"agent": {"spec": sandbox_spec()}}),
    ):
        response = create()
        wire.assert_error(response, 422)
        assert "runs no sandboxes" in response.json()["error"]["message"]
        assert "--no-sandbox" in response.json()["error"]["message"]
    # The server said so at start-up.
    assert re.search(r"WARN .*sandboxes are off.*reason=sandboxes are turned off \(--no-sandbox\)", server_log(own)), \
        server_log(own)[-2000:]


def test_sandboxes_work_as_root_on_the_default_data_directory(fake_model, tmp_path):
    """`teamster serve` with neither --data-dir nor --sandbox-root, as root whose home others
    cannot enter (as /root is): sandboxes still run, their root outside the data directory,
    which keeps its default mode and its database."""
    if os.geteuid() != 0:
        pytest.skip("sandboxes run as users of their own only as root")
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(0o700)
    argv = [str(conftest.binary("TEAMSTER_BIN", "target/debug/teamster")), "serve",
            "--listen", f"127.0.0.1:{conftest.free_port()}", "--no-example", "--model-retry-base-ms", "20"]
    process = conftest.Process("teamster", argv, tmp_path / "default-data-dir.log", {"HOME": str(home), "XDG_DATA_HOME": ""})
    url = process.start()
    api = wire.Api(url)
    root = None
    try:
        conftest.wait_healthy(url, process)
        api.ok(api.put("/api/v1/settings/model-providers", json={"manifest": fake_model.provider_manifest()}))
        assert api.ok(api.get("/api/v1/capabilities"))["data"]["sandbox"] == {"enabled": True}, process.log_tail()
        session = api.create_session(spec=sandbox_spec())
        run = api.run_turn(session["id"], exec_call("echo made > here.txt; cat here.txt; id -u") + " " + wire.unique("sbx"))
        (result,) = tool_results(run)
        assert result["exit_code"] == 0 and result["stdout"].startswith("made\n"), result
        assert result["stdout"].split()[1] != "0", "commands do not run as root"

        data_dir = home / ".local" / "share" / "teamster"
        assert (data_dir / "teamster.db").is_file()
        assert (data_dir / "teamster.db").stat().st_mode & 0o777 == 0o600
        found = re.search(r"sandboxes run with bubblewrap root=(\S+)", process.log_path.read_text(errors="replace"))
        assert found, process.log_tail()
        root = pathlib.Path(found.group(1))
        assert not root.is_relative_to(home), root
        (sandbox_id,) = sandboxes_created(run)
        assert (root / sandbox_id).is_dir(), list(root.iterdir())
        assert api.delete(f"/api/v1/sessions/{session['id']}").status_code == 204
    finally:
        api.close()
        process.kill()
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)


def test_a_server_whose_sandboxes_cannot_start_says_why(server_factory, tmp_path):
    # The sandbox root cannot be created: its parent is a file.
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    root = blocker / "sandboxes"
    own = server_factory(["--sandbox-root", str(root)])
    api = own.require_api()
    assert api.ok(api.get("/api/v1/capabilities"))["data"]["sandbox"] == {"enabled": False}
    cause = f"creating {root}: Not a directory"
    assert re.search(r"WARN .*sandboxes are off.*reason=" + re.escape(cause), server_log(own)), \
        server_log(own)[-2000:]
    error = wire.assert_error(api.post("/api/v1/sessions", json={"agent": {"spec": sandbox_spec()}}), 422)
    assert error["message"].startswith(f"this server runs no sandboxes: {cause}"), error


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


def gateway_download(api, sandbox_id: str, path: str) -> httpx.Response:
    return api.get(f"{wire.GATEWAY_PREFIX}/v1/agents/sandbox/{sandbox_id}/file", params={"path": path})


# `Limits::max_transfer_bytes` (crates/teamster-sandbox/src/limits.rs): the most a download may hold.
MAX_TRANSFER_BYTES = 64 * 1024 * 1024


def test_a_file_over_the_transfer_limit_is_413_in_both_dialects(api):
    session = api.create_session(spec=sandbox_spec())
    # Sparse files: as long as the limit, and one byte longer, with no block allocated.
    write = f"truncate -s {MAX_TRANSFER_BYTES} at-limit.bin; truncate -s {MAX_TRANSFER_BYTES + 1} over.bin; du -k *.bin"
    run = api.run_turn(session["id"], exec_call(write) + " " + wire.unique("big"))
    (result,) = tool_results(run)
    assert result["exit_code"] == 0 and result["stdout"].split()[::2] == ["0", "0"], result
    (sandbox_id,) = sandboxes_created(run)

    for response in (download(api, session["id"], run.turn_id, "/workspace/over.bin"),
                     gateway_download(api, sandbox_id, "/workspace/over.bin")):
        error = wire.assert_error(response, 413)
        assert f"over the limit of {MAX_TRANSFER_BYTES} bytes" in error["message"], error
    # A file as long as the limit downloads whole.
    url = f"/api/v1/sessions/{session['id']}/turns/{run.turn_id}/download-sandbox-file"
    with api.http.stream("GET", url, params={"path": "/workspace/at-limit.bin"}) as response:
        assert response.status_code == 200
        assert response.headers["content-length"] == str(MAX_TRANSFER_BYTES)
        received = 0
        for chunk in response.iter_bytes():
            assert not chunk.strip(b"\0"), "a sparse file reads as zeros"
            received += len(chunk)
    assert received == MAX_TRANSFER_BYTES


def test_a_removed_sandbox_is_410_while_its_session_lives(api):
    session = api.create_session(spec=sandbox_spec())
    run = api.run_turn(session["id"], exec_call("echo kept > kept.txt") + " " + wire.unique("gone"))
    (sandbox_id,) = sandboxes_created(run)
    assert download(api, session["id"], run.turn_id, "/workspace/kept.txt").content == b"kept\n"
    # What the idle sweep does (`Bubblewrap::sweep_idle`, after hours): the sandbox's directory goes.
    shutil.rmtree(pathlib.Path(conftest.SANDBOX_ROOT) / sandbox_id)
    for response in (download(api, session["id"], run.turn_id, "/workspace/kept.txt"),
                     gateway_download(api, sandbox_id, "/workspace/kept.txt")):
        error = wire.assert_error(response, 410)
        assert sandbox_id in error["message"], error


def test_an_agent_that_forbids_downloads_is_403_in_both_dialects(api):
    spec = {**sandbox_spec(), "config": {"sandbox": {"enabled": True, "file_downloads": False}}}
    session = api.create_session(spec=spec)
    run = api.run_turn(session["id"], exec_call("echo x > x") + " " + wire.unique("closed"))
    assert tool_results(run)[0]["exit_code"] == 0
    (sandbox_id,) = sandboxes_created(run)
    for response in (download(api, session["id"], run.turn_id, "/workspace/x"),
                     gateway_download(api, sandbox_id, "/workspace/x")):
        error = wire.assert_error(response, 403)
        assert "file_downloads" in error["message"], error


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


# --------------------------------------------------------------------------------------------
# What a command cannot see or do
# --------------------------------------------------------------------------------------------


def test_commands_see_nothing_of_the_harness_environment_or_data_directory(server_factory):
    secret = f"sk-test-secret-{random.randrange(10**12)}"
    own = server_factory(env={"OPENAI_API_KEY": secret})
    assert own.process is not None and own.process.popen is not None
    server_environ = pathlib.Path(f"/proc/{own.process.popen.pid}/environ").read_bytes()
    assert f"OPENAI_API_KEY={secret}".encode() in server_environ.split(b"\0"), "the server has the key"
    data_dir = str(own.workdir)
    api = own.require_api()
    session = api.create_session(spec=sandbox_spec())

    def run(command: str) -> dict:
        (result,) = tool_results(api.run_turn(session["id"], exec_call(command) + " " + wire.unique("env")))
        shown = json.dumps(result)
        assert secret not in shown and "OPENAI" not in shown, (command, result)
        return result

    environment = run("env")
    assert re.search(r"^PATH=", environment["stdout"], re.MULTILINE), "env ran"
    # The sandbox's init (bwrap) keeps the environment it was started with.
    init = run("tr '\\0' '\\n' < /proc/1/environ")
    assert init["exit_code"] == 0, init
    assert data_dir not in environment["stdout"] + init["stdout"], (environment, init)
    # The data directory and the database in it are not there (ls names them only to say so).
    listed = run(f"ls -la {shlex.quote(data_dir)} {shlex.quote(str(own.db_path))}")
    assert listed["exit_code"] != 0 and listed["stdout"] == "", listed
    assert listed["stderr"].count("No such file or directory") == 2, listed


def test_bombs_and_floods_are_contained_and_the_server_keeps_serving(api, srv):
    session = api.create_session(spec=sandbox_spec())

    def run(command: str, **arguments: typing.Any) -> dict:
        """Runs `command` with MARKER replaced by a fresh marker, which it puts in the command line
        of every process it starts; none is left afterwards. The stream is read with a minute's
        patience: the server sends nothing while a command runs (a heartbeat only after 15 s), and
        the flood below takes longer than the usual 10 s on a busy machine."""
        marker = wire.unique("bomb")
        text = exec_call(command.replace("MARKER", marker), **arguments) + " " + marker
        result = api.stream("POST", f"/api/v1/sessions/{session['id']}/turns", timeout=httpx.Timeout(60.0, connect=5.0),
                            json={"input": [{"type": "user.message", "content": text}]})
        assert result.status == 200, result.body[:500]
        turn = wire.TurnRun(result)
        assert turn.done["state"]["status"] == "done", turn.done
        (result,) = tool_results(turn)
        wire.wait_until(lambda: not processes_matching(marker), timeout=5, what=f"no process of {command!r} left")
        return result

    # A fork bomb whose every copy forks again whenever the process limit frees a slot (each copy
    # has MARKER in its command line): held at the limit, then killed at its timeout.
    bomb = "import os, time\nwhile True:\n    try: os.fork()\n    except OSError: time.sleep(0.01)"
    forked = run(f"python3 -c {shlex.quote(bomb)} MARKER", timeout_seconds=5)
    assert forked.get("timed_out") is True and "timeout" in forked["error"], forked
    # A memory bomb: stopped by the address-space limit.
    grow = "import itertools\nheap = []\nfor _ in itertools.count(): heap.append(bytearray(b'x' * (64 << 20)))"
    memory = run(f"python3 -c {shlex.quote(grow)} MARKER")
    assert memory["exit_code"] != 0 and "MemoryError" in memory["stderr"], memory
    # Three gigabytes of output: read to the end, 64 KiB kept, the rest counted and dropped.
    flood = run("yes MARKER | head -c 3G; echo done >&2")
    kept, cut = flood["stdout"].split("\n[output cut: ")
    dropped = int(cut.removesuffix(" more bytes were dropped]"))
    assert flood["exit_code"] == 0 and flood["stderr"] == "done\n", flood["stderr"]
    assert len(kept) == 64 * 1024 and len(kept) + dropped == 3 << 30, (len(kept), dropped)

    # The server still serves, and the session's next turn runs commands.
    assert httpx.get(f"{srv}/healthz", timeout=5).status_code == 200
    assert run("echo alive MARKER")["stdout"].startswith("alive bomb-")


class LoopbackListener:
    """A TCP listener on 127.0.0.1 that greets every connection with `greeting`."""

    def __init__(self, greeting: bytes) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.greeting = greeting
        self.accepted = 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        while not self.stopped.is_set():
            try:
                connection, _ = self.sock.accept()
            except socket.timeout:
                continue
            self.accepted += 1
            with connection:
                connection.sendall(self.greeting)

    def close(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)
        self.sock.close()


def test_the_network_is_reachable_only_when_the_spec_opts_in(api):
    greeting = wire.unique("hello").encode()
    listener = LoopbackListener(greeting)
    connect = ("python3 -c \"import socket, sys; s = socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=5); "
               f"print(s.recv(100).decode())\" {listener.port}")
    try:
        closed = api.create_session(spec=sandbox_spec())
        (refused,) = tool_results(api.run_turn(closed["id"], exec_call(connect) + " " + wire.unique("net")))
        assert refused["exit_code"] != 0 and greeting.decode() not in refused["stdout"], refused
        assert listener.accepted == 0

        # Opting in needs the operator's --allow-sandbox-network, and even then reaches no
        # loopback of the host (test_sandbox_network.py).
        open_spec = {**sandbox_spec(), "config": {"sandbox": {"enabled": True, "network": True}}}
        wire.assert_error(api.post("/api/v1/sessions", json={"agent": {"spec": open_spec}}), 422)
        assert listener.accepted == 0
    finally:
        listener.close()
