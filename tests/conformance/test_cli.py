"""The `teamster` command-line client against a running server: `agents apply` (create, keep an
unchanged agent's version, then a new version), `agents list`, `agents get`, `run`, which streams
one turn to the terminal (in a new session or continuing one), and `sessions`."""

from __future__ import annotations

import subprocess

import pytest

import wire
from conftest import binary


def cli(srv: str, *args: str) -> subprocess.CompletedProcess:
    """Runs the client with a bounded wait and no terminal input."""
    teamster = binary("TEAMSTER_BIN", "target/debug/teamster")
    return subprocess.run([str(teamster), *args, "--server", srv], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)


def test_apply_list_get_and_run(srv, tmp_path):
    name = wire.unique("cli").lower().replace("_", "-")
    manifest = tmp_path / "agent.yaml"
    manifest.write_text(
        "type: truefoundry-agent\n"
        f"name: {name}\n"
        "description: made by the CLI test\n"
        "model:\n  name: fake/fake-model\n"
        "instructions: Talk to {{who}}.\n"
        "variables:\n  who:\n    default_value: the tester\n    description: whom to talk to\n")
    created = cli(srv, "agents", "apply", "-f", str(manifest))
    assert created.returncode == 0, created.stderr
    assert f"agent {name} is at version 1" in created.stdout
    unchanged = cli(srv, "agents", "apply", "-f", str(manifest))
    assert unchanged.returncode == 0, unchanged.stderr
    assert f"agent {name} is unchanged at version 1" in unchanged.stdout
    # The manifest's description and its variables' descriptions are kept.
    api = wire.Api(srv)
    stored = api.ok(api.get(f"/api/v1/agents/{name}"))["data"]["manifest"]
    assert stored["description"] == "made by the CLI test"
    assert stored["variable_descriptions"] == {"who": "whom to talk to"}
    # --model overrides the manifest's model without editing the file.
    updated = cli(srv, "agents", "apply", "-f", str(manifest), "--model", "offline/echo")
    assert updated.returncode == 0, updated.stderr
    assert f"agent {name} is at version 2" in updated.stdout
    assert api.ok(api.get(f"/api/v1/agents/{name}"))["data"]["manifest"]["model"]["name"] == "offline/echo"
    updated = cli(srv, "agents", "apply", "-f", str(manifest))
    assert f"agent {name} is at version 3" in updated.stdout

    listed = cli(srv, "agents", "list")
    assert listed.returncode == 0, listed.stderr
    assert f"{name}\tv3\tfake/fake-model" in listed.stdout.splitlines()

    shown = cli(srv, "agents", "get", name)
    assert shown.returncode == 0, shown.stderr
    assert '"instructions": "Talk to {{who}}."' in shown.stdout

    ran = cli(srv, "run", name, "hello from the terminal")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "You said: hello from the terminal"

    tool = cli(srv, "run", name, "[tool:get_current_datetime {}] what time is it")
    assert tool.returncode == 0, tool.stderr
    assert "→ get_current_datetime({})" in tool.stderr
    assert tool.stdout.strip().startswith("Tool result: 20")


def test_sessions_are_listed_and_continued(srv):
    first = cli(srv, "run", "demo", "remember the number 7")
    assert first.returncode == 0, first.stderr
    session_id = first.stderr.split("session ", 1)[1].split()[0]
    listed = cli(srv, "sessions")
    assert listed.returncode == 0, listed.stderr
    rows = [line.split("\t") for line in listed.stdout.splitlines()]
    assert rows[0][:2] == [session_id, "demo"], "the newest session comes first, with its agent"
    again = cli(srv, "run", "--session", session_id, "[history] what did I say?")
    assert again.returncode == 0, again.stderr
    assert "remember the number 7" in again.stdout, "the continued turn sees the session's history"
    assert "session " not in again.stderr, "no new session was started"
    api = wire.Api(srv)
    turns = api.ok(api.get(f"/api/v1/sessions/{session_id}/turns"))["data"]
    assert len(turns) == 2 and turns[0]["previous_turn_id"] == turns[1]["id"]
    wrong = cli(srv, "run", "--session", session_id, "demo", "two words")
    assert wrong.returncode != 0 and "only what to say" in wrong.stderr


def test_serve_help_lists_only_server_flags():
    teamster = binary("TEAMSTER_BIN", "target/debug/teamster")
    shown = subprocess.run([str(teamster), "serve", "--help"], capture_output=True, text=True, timeout=30)
    assert shown.returncode == 0 and "--listen" in shown.stdout
    assert "--server" not in shown.stdout


@pytest.mark.parametrize("workers", [1, 3])
def test_serve_runs_on_the_worker_threads_asked_for(server_factory, workers):
    own = server_factory(["--worker-threads", str(workers)])
    metrics = own.require_api().get("/metrics").text
    assert f"teamster_runtime_worker_threads {workers}" in metrics.splitlines(), metrics
    assert cli(own.url, "run", "demo", "[tokens:3] hi").returncode == 0


def test_serve_refuses_zero_worker_threads():
    teamster = binary("TEAMSTER_BIN", "target/debug/teamster")
    refused = subprocess.run([str(teamster), "serve", "--worker-threads", "0"], capture_output=True, text=True,
                             timeout=30, stdin=subprocess.DEVNULL)
    assert refused.returncode == 2 and "--worker-threads" in refused.stderr, refused.stderr


def test_errors_are_reported_with_a_failing_exit_code(srv, tmp_path):
    missing = cli(srv, "run", "no-such-agent", "hi")
    assert missing.returncode != 0
    assert "404" in missing.stderr and "not found" in missing.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    applied = cli(srv, "agents", "apply", "-f", str(bad))
    assert applied.returncode != 0
    assert "not a truefoundry-agent manifest" in applied.stderr
    unreachable = cli("http://127.0.0.1:9", "agents", "list")
    assert unreachable.returncode != 0
    assert "cannot reach the server" in unreachable.stderr
