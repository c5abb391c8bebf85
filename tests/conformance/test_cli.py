"""The `teamster` command-line client against a running server: `agents apply` (create, then a
new version), `agents list`, `agents get`, and `run`, which streams one turn to the terminal."""

from __future__ import annotations

import subprocess

import wire
from conftest import binary


def cli(srv: str, *args: str) -> subprocess.CompletedProcess:
    """Runs the client with a bounded wait and no terminal input."""
    teamster = binary("TEAMSTER_BIN", "target/debug/teamster")
    return subprocess.run([str(teamster), "--server", srv, *args], capture_output=True, text=True,
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
        "variables:\n  who:\n    default_value: the tester\n")
    created = cli(srv, "agents", "apply", "-f", str(manifest))
    assert created.returncode == 0, created.stderr
    assert f"agent {name} is at version 1" in created.stdout
    updated = cli(srv, "agents", "apply", "-f", str(manifest))
    assert updated.returncode == 0, updated.stderr
    assert f"agent {name} is at version 2" in updated.stdout

    listed = cli(srv, "agents", "list")
    assert listed.returncode == 0, listed.stderr
    assert f"{name}\tv2\tfake/fake-model" in listed.stdout.splitlines()

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
