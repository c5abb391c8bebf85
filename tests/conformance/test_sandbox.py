"""The sandbox through the native API: an agent with `config.sandbox.enabled` gets the `exec` tool;
its session's sandbox is announced once (`sandbox.created`), keeps its files across turns, and
runs commands shut off from the host. (The escape attempts themselves are tested against the
provider in `crates/teamster-sandbox/tests/bubblewrap.rs`.)"""

from __future__ import annotations

import json
import pathlib

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
