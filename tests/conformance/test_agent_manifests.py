"""Agents that are hard to get wrong, from the terminal: `teamster agents apply --dry-run` prints
the server's check of a manifest ("why this toolset": the models resolved, each MCP server
connected, the tools a new session is offered with whether each asks for approval and why, the
tools it does not get and why) and saves nothing; `apply` refuses a misspelt key with the key
that was meant, and a model or MCP server the server lacks, naming them. The worked examples
of `examples/agents/` are each checked and applied, against the real test MCP server
(`tests/mcp_servers/tools_server.py`) standing in for the support agent's helpdesk."""

from __future__ import annotations

import pathlib
import typing

import pytest

import conftest
import wire
from python_servers import PythonServer
from test_cli import cli

EXAMPLES = conftest.REPO_ROOT / "examples"


@pytest.fixture(scope="module")
def helpdesk(server: conftest.TeamsterServer, workdir: pathlib.Path) -> typing.Iterator[str]:
    """The example's `helpdesk` MCP server, configured from its settings file with the CLI, but
    pointing at the test MCP server."""
    tools = PythonServer(workdir, "tools_server.py", "--transport", "streamable-http")
    try:
        example = (EXAMPLES / "mcp-servers" / "helpdesk.yaml").read_text()
        settings = workdir / "helpdesk.yaml"
        settings.write_text(example.replace("http://127.0.0.1:3001/mcp", f"{tools.base}/mcp"))
        applied = cli(server.url, "settings", "mcp-servers", "apply", "-f", str(settings))
        assert applied.returncode == 0 and "MCP server helpdesk is configured" in applied.stdout, applied
        yield "helpdesk"
    finally:
        tools.close()


def tool_lines(output: str) -> dict[str, str]:
    """The tool lines of a dry run, by tool name."""
    section = output.split("tools a new session is offered", 1)[1].split("tools it does not get", 1)[0]
    return {line.split()[0]: line for line in section.splitlines()[1:] if line.startswith("  ")}


def absent_lines(output: str) -> dict[str, str]:
    section = output.split("tools it does not get", 1)[1]
    return {line.split()[0]: line for line in section.splitlines()[1:] if line.startswith("  ")}


def test_the_support_example_is_checked_and_applied(server, helpdesk, api):
    example = str(EXAMPLES / "agents" / "support.yaml")
    checked = cli(server.url, "agents", "apply", "-f", example, "--dry-run")
    assert checked.returncode == 0, checked
    out = checked.stdout
    assert "agent support: the manifest can be saved (nothing was saved: --dry-run)" in out, out
    assert "model.name  offline/echo: resolves to" in out, out
    assert "mcp_servers[0]  helpdesk: connected, " in out, out
    tools = tool_lines(out)
    # Read-only tools run at once and are offered from the first call; the others ask first.
    assert "runs at once" in tools["echo"] and "found with search_tools" not in tools["echo"], out
    write = tools["write_note"]
    assert "asks for approval" in write and "require_approval_for_tools" in write and "found with search_tools" in write, out
    assert "asks for approval" in tools["delete_everything"], out
    assert "ask_user_question" in tools, out
    absent = absent_lines(out)
    assert "config.sandbox.enabled" in absent["exec"], out
    # Nothing was saved by the check; applying saves it.
    assert all(agent["name"] != "support" for agent in api.ok(api.get("/api/v1/agents"))["data"])
    applied = cli(server.url, "agents", "apply", "-f", example)
    assert applied.returncode == 0 and "agent support is at version 1" in applied.stdout, applied
    stored = api.ok(api.get("/api/v1/agents/support"))["data"]["manifest"]
    assert stored["mcp_servers"][0]["require_approval_for_tools"] == ["@write"]
    assert stored["variables"] == {"company": "Acme"}


def test_the_coding_example_has_a_sandbox_and_its_skill(server, api):
    example = str(EXAMPLES / "agents" / "coding.yaml")
    checked = cli(server.url, "agents", "apply", "-f", example, "--dry-run")
    assert checked.returncode == 0, checked
    tools = tool_lines(checked.stdout)
    assert "sandbox" in tools["exec"] and "runs at once" in tools["exec"], checked.stdout
    applied = cli(server.url, "agents", "apply", "-f", example)
    assert applied.returncode == 0 and "agent coding is at version 1" in applied.stdout, applied
    stored = api.ok(api.get("/api/v1/agents/coding"))["data"]["manifest"]
    assert stored["config"]["sandbox"]["enabled"] is True
    assert stored["skills"][0]["name"] == "webapp-testing"


def test_the_plan_build_example_starts_in_plan_mode_with_tasks(server, api):
    example = str(EXAMPLES / "agents" / "plan-build.yaml")
    checked = cli(server.url, "agents", "apply", "-f", example, "--dry-run")
    assert checked.returncode == 0, checked
    out = checked.stdout
    assert 'in the starting mode "plan"' in out, out
    tools = tool_lines(out)
    assert "submit_plan" in tools and "build" in tools["submit_plan"], out
    assert "task_check" in tools, out
    # The plan mode offers only the tools it names.
    assert "task_write" not in tools, out
    applied = cli(server.url, "agents", "apply", "-f", example)
    assert applied.returncode == 0 and "agent plan-build is at version 1" in applied.stdout, applied
    stored = api.ok(api.get("/api/v1/agents/plan-build"))["data"]["manifest"]
    assert [mode["id"] for mode in stored["modes"]] == ["plan", "build"]


def test_mistakes_are_named_before_anything_runs(server, tmp_path):
    name = wire.unique("typo")
    manifest = tmp_path / "typo.yaml"
    manifest.write_text(
        "type: truefoundry-agent\n"
        f"name: {name}\n"
        "model:\n  name: offline/echo\n"
        "instrucions: Be brief.\n"
        "config:\n  sandbox:\n    enabld: true\n")
    # The dry run lists every problem and exits 1; so does applying, which saves nothing.
    checked = cli(server.url, "agents", "apply", "-f", str(manifest), "--dry-run")
    assert checked.returncode == 1, checked
    assert "saving would be refused" in checked.stdout and "instructions" in checked.stdout, checked.stdout
    assert "enabled" in checked.stdout, checked.stdout
    applied = cli(server.url, "agents", "apply", "-f", str(manifest))
    assert applied.returncode == 1 and "400" in applied.stderr, applied
    assert "instrucions" in applied.stderr and "instructions" in applied.stderr, applied.stderr

    # A model no provider has, and an MCP server that is not configured.
    manifest.write_text(
        "type: truefoundry-agent\n"
        f"name: {name}\n"
        "model:\n  name: nowhere/nothing\n"
        "mcp_servers:\n  - type: truefoundry-mcp-registry\n    name: not-configured\n")
    checked = cli(server.url, "agents", "apply", "-f", str(manifest), "--dry-run")
    assert checked.returncode == 1, checked
    assert "nowhere/nothing: unavailable" in checked.stdout, checked.stdout
    assert "not-configured: not connected" in checked.stdout, checked.stdout
    applied = cli(server.url, "agents", "apply", "-f", str(manifest))
    assert applied.returncode == 1 and 'no model provider named "nowhere"' in applied.stderr, applied.stderr
    manifest.write_text(manifest.read_text().replace("nowhere/nothing", "offline/echo"))
    applied = cli(server.url, "agents", "apply", "-f", str(manifest))
    assert applied.returncode == 1 and "not-configured" in applied.stderr and "settings" in applied.stderr, applied.stderr
