"""The `teamster` command-line client against a running server: `agents apply` (create, keep an
unchanged agent's version, then a new version), `agents list`, `agents get`, `run`, which streams
one turn to the terminal (in a new session or continuing one; a turn that waits for a person
says how to answer and exits 3, and `run --session --approve/--deny/--answer` answers it), and
`sessions`; `--api-key` on every client command, sessions titled after their first message, and
`run --json`, the turn's events as NDJSON."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

import conftest
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
    assert wrong.returncode == 2 and "only what to say" in wrong.stderr


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


def ask(question: str, *labels: str) -> str:
    """A model message (fake model syntax) that asks the user `question` with these choices."""
    arguments = {"question": question, "options": [{"label": label} for label in labels]}
    return f"[tool:ask_user_question {json.dumps(arguments)}]"


def session_of(ran: subprocess.CompletedProcess) -> str:
    return ran.stderr.split("session ", 1)[1].split()[0]


def test_run_titles_its_session_like_the_web(srv):
    ran = cli(srv, "run", "demo", "  Plan the   launch \nwith details below")
    assert ran.returncode == 0, ran.stderr
    api = wire.Api(srv)
    assert api.ok(api.get(f"/api/v1/sessions/{session_of(ran)}"))["data"]["title"] == "Plan the   launch"
    long = cli(srv, "run", "demo", "x" * 200)
    assert api.ok(api.get(f"/api/v1/sessions/{session_of(long)}"))["data"]["title"] == "x" * 80


def test_run_says_what_waits_for_a_person_and_exits_3_then_answers_it(srv):
    question = wire.unique("Colour")
    asked = cli(srv, "run", "demo", ask(f"{question}?", "Blue", "Red"))
    assert asked.returncode == 3, (asked.returncode, asked.stderr)
    session = session_of(asked)
    assert "the turn waits for you" in asked.stderr
    assert re.search(rf"answer \S+: {question}\? \(Blue, Red\)", asked.stderr), asked.stderr
    assert f"teamster run --session {session} --answer TEXT" in asked.stderr
    assert f"teamster chat --session {session} --server {srv}" in asked.stderr
    answered = cli(srv, "run", "--session", session, "--answer", "Blue")
    assert answered.returncode == 0, answered.stderr
    assert "Blue" in answered.stdout

    # A gated call: approve or deny it by its id; a call that does not wait is an error.
    api = wire.Api(srv)
    api.ok(api.patch(f"/api/v1/sessions/{session}", json={"permissions": {"tools": {"get_current_datetime": "ask"}}}))
    gated = cli(srv, "run", "--session", session, "[tool:get_current_datetime {}] the time?")
    assert gated.returncode == 3, (gated.returncode, gated.stderr)
    call_id = re.search(r"approve or deny (\S+): get_current_datetime\(\{\}\)", gated.stderr).group(1)
    assert f"teamster run --session {session} --approve {call_id}" in gated.stderr
    wrong = cli(srv, "run", "--session", session, "--approve", "call_nope")
    assert wrong.returncode == 1 and f"waiting for one: {call_id}" in wrong.stderr, wrong.stderr
    approved = cli(srv, "run", "--session", session, "--approve", call_id)
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.strip().startswith("Tool result: 20"), approved.stdout
    nothing = cli(srv, "run", "--session", session, "--deny", call_id)
    assert nothing.returncode == 1 and "nothing in session" in nothing.stderr, nothing.stderr
    # Without --session the decisions are a usage error (status 2), and --help documents the statuses.
    assert cli(srv, "run", "--approve", call_id).returncode == 2
    helped = cli(srv, "run", "--help")
    assert "3 the turn waits for a person" in helped.stdout and "4 the turn was cancelled" in helped.stdout


def test_run_json_prints_the_turns_events_one_per_line_as_the_stream_sent_them(srv):
    ran = cli(srv, "run", "--json", "demo", "[tool:get_current_datetime {}] the time as JSON")
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    events = [json.loads(line) for line in lines]
    types = [event["type"] for event in events]
    assert types[0] == "turn.created" and types[-1] == "turn.done", types
    assert "tool.response" in types and "model.message.delta" in types, types
    assert all(line.startswith("{") and line.endswith("}") for line in lines), ran.stdout[:500]
    # Exactly the turn's stream, event for event, as a subscriber reads it again.
    api = wire.Api(srv)
    session = session_of(ran)
    turn_id = events[0]["turn_id"]
    assert api.subscribe(session, turn_id).payloads == events
    # A turn that waits for a person exits 3 with --json too, its events all printed.
    asked = cli(srv, "run", "--json", "demo", ask("Which?", "A", "B"))
    assert asked.returncode == 3, (asked.returncode, asked.stderr)
    assert json.loads(asked.stdout.splitlines()[-1])["type"] == "turn.done"


def test_every_client_command_takes_the_api_key_and_the_readme_admin_sees_demo(workdir, fake_model):
    """As the README's auth section goes: a key made with `teamster keys create` (tenant
    `default`) before `serve --auth api-keys` sees and runs the example agent `demo`; `agents`,
    `run`, `sessions` and `keys --server` take `--api-key` or `TEAMSTER_API_KEY`."""
    server = conftest.TeamsterServer(workdir, fake_model, ["--auth", "api-keys"])
    server.example = True
    made = conftest.teamster("keys", "create", "--subject", "ann", "--role", "admin",
                             "--database", server.database, "--data-dir", str(workdir))
    assert made.returncode == 0, made.stderr
    admin = made.stdout.strip()
    try:
        server.start()
        refused = cli(server.url, "agents", "list")
        assert refused.returncode == 1 and "401" in refused.stderr, refused.stderr
        listed = cli(server.url, "agents", "list", "--api-key", admin)
        assert listed.returncode == 0, listed.stderr
        assert any(line.startswith("demo\t") for line in listed.stdout.splitlines()), listed.stdout
        ran = cli(server.url, "run", "demo", "hello with a key", "--api-key", admin)
        assert ran.returncode == 0, ran.stderr
        from_env = subprocess.run([str(binary("TEAMSTER_BIN", "target/debug/teamster")), "sessions", "--server", server.url],
                                  capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                                  env={**os.environ, "TEAMSTER_API_KEY": admin})
        assert from_env.returncode == 0, from_env.stderr
        assert session_of(ran) in from_env.stdout

        # Keys through the server, as the tenant's admin: a member of the tenant runs demo too.
        created = cli(server.url, "keys", "create", "--subject", "bob", "--tenant", "default", "--api-key", admin)
        assert created.returncode == 0, created.stderr
        member = created.stdout.strip()
        assert member.startswith("tsk_") and "shown this once" in created.stderr
        keys = cli(server.url, "keys", "list", "--api-key", admin)
        assert keys.returncode == 0 and "\tbob\tmember\t" in keys.stdout, keys.stdout
        assert cli(server.url, "run", "demo", "hi from bob", "--api-key", member).returncode == 0
        assert cli(server.url, "keys", "list", "--api-key", member).returncode == 1, "a member manages no keys"
    finally:
        server.close()
