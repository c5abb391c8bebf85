"""`teamster chat`, the terminal client, driven through tmux against a live server with the
fake model: a chat, a gated tool approved, a question answered, a long turn cancelled with
Ctrl-C (a second Ctrl-C exits), and the session resumed in a new `teamster chat` with its history
rebuilt. Every wait polls `capture-pane` with a deadline; nothing sleeps a fixed time.

Needs `tmux` on PATH (Debian's `tmux` package)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import threading
import time
import typing

import pytest

import conftest
import wire
from test_mcp import McpHttpServer, call, registry, remote
from test_mcp_oauth import browser, oauth, register, whoami  # noqa: F401 (fixtures)
from test_mcp_oauth import registry as oauth_registry
from test_context_and_usage import priced_provider
from test_identity import key_for, keyed, share_with_team  # noqa: F401 (a fixture)

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None and not os.environ.get("CI"),
                                reason="tmux is not installed (CI installs it and fails without it)")

# The longest any one step may take on a busy machine.
STEP_TIMEOUT = 30.0
WIDTH, HEIGHT = 160, 50


class Tmux:
    """A tmux server of the test's own (its own socket), running one command in one pane that
    stays open after the command exits, so what it printed last can still be read."""

    def __init__(self, name: str) -> None:
        self.socket = wire.unique(name)
        self.sessions: list[str] = []

    def tmux(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, timeout=10)
        assert done.returncode == 0, f"tmux {args}: {done.stderr.decode(errors='replace')}"
        return done.stdout.decode(errors="replace")

    def start(self, session: str, argv: list[str], env: typing.Optional[dict[str, str]] = None) -> None:
        environment = {"TERM": "xterm-256color", "TEAMSTER_LOG": "warn", **(env or {})}
        command = " ".join(shlex.quote(word) for word in argv)
        self.tmux("new-session", "-d", "-s", session, "-x", str(WIDTH), "-y", str(HEIGHT),
                  *[option for key, value in environment.items() for option in ("-e", f"{key}={value}")],
                  f"{command}; echo; echo \"[chat exited $?]\"; sleep 600")
        self.sessions.append(session)

    def screen(self, session: str) -> str:
        # -J joins wrapped lines, so a long line is found whole.
        return self.tmux("capture-pane", "-p", "-J", "-t", session)

    def wait_for(self, session: str, text: str, timeout: float = STEP_TIMEOUT) -> str:
        """Polls the pane until it shows `text`; returns the screen."""
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen(session)
            if text in screen:
                return screen
            time.sleep(0.1)
        raise AssertionError(f"the chat never showed {text!r}; its screen:\n{screen}")

    def type(self, session: str, text: str) -> None:
        """Types a line and presses Enter."""
        self.tmux("send-keys", "-t", session, "-l", text)
        self.tmux("send-keys", "-t", session, "Enter")

    def keys(self, session: str, *keys: str) -> None:
        self.tmux("send-keys", "-t", session, *keys)

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=10)


@pytest.fixture
def tmux() -> typing.Iterator[Tmux]:
    instance = Tmux("chat")
    try:
        yield instance
    finally:
        instance.close()


@pytest.fixture(scope="module")
def gated_agent(server: conftest.TeamsterServer, workdir) -> typing.Iterator[str]:
    """An agent on the fake model whose MCP tools each wait for approval."""
    mcp = McpHttpServer(workdir)
    try:
        api = server.require_api()
        tools = wire.unique("chat-tools")
        api.ok(api.post("/api/v1/settings/mcp-servers", json={"manifest": remote(tools, mcp.url)}), 201)
        agent = wire.unique("chat-agent")
        manifest = {"model": {"name": "fake/fake-model"},
                    "mcp_servers": [registry(tools, preload=True, enable_tools=["echo"],
                                             require_approval_for_tools=["@all"])]}
        api.ok(api.post("/api/v1/agents", json={"name": agent, "manifest": manifest}), 201)
        yield agent
    finally:
        mcp.close()


def chat_argv(server: conftest.TeamsterServer, *args: str) -> list[str]:
    return [str(conftest.binary("TEAMSTER_BIN", "target/debug/teamster")), "chat", "--server", server.url, *args]


def test_chat_approve_answer_cancel_and_resume(tmux, server, gated_agent):
    tmux.start("first", chat_argv(server, gated_agent))
    tmux.wait_for("first", f"chatting with {gated_agent}")

    # A plain message: the answer streams in.
    marker = wire.unique("hello")
    tmux.type("first", f"say {marker}")
    tmux.wait_for("first", f"You said: say {marker}")
    screen = tmux.wait_for("first", "out tokens")
    assert re.search(r"sess_\w+", screen), screen
    # The session's page in the web UI is named; the session is titled after the message.
    web = re.search(rf"in a browser: {re.escape(server.url)}/#/chat/(sess_\w+)", screen)
    assert web, screen
    assert server.require_api().ok(server.require_api().get(f"/api/v1/sessions/{web.group(1)}"))["data"]["title"] == f"say {marker}"

    # A gated tool: the chat asks, `y` allows it, the call and its result show inline.
    tmux.type("first", call("echo", {"text": "ping-from-chat"}))
    screen = tmux.wait_for("first", "Run echo?")
    assert "ping-from-chat" in screen
    tmux.keys("first", "y")
    screen = tmux.wait_for("first", "Tool result: ping-from-chat")
    assert "✓ you allowed echo" in screen and "→ echo(" in screen

    # A question: ↓ picks the second option, Enter answers it.
    question = {"question": "Which colour suits?", "options": [{"label": "Blue"}, {"label": "Red"}]}
    tmux.type("first", call("ask_user_question", question))
    tmux.wait_for("first", "Which colour suits?")
    tmux.wait_for("first", "▶ Blue")
    tmux.keys("first", "Down")
    tmux.wait_for("first", "▶ Red")
    tmux.keys("first", "Enter")
    tmux.wait_for("first", "Tool result: Red")

    # A long turn with a follow-up and steering queued: Ctrl-C cancels it while it streams and
    # drops both (nothing starts after it), a second Ctrl-C leaves.
    tmux.type("first", "[tokens:400][delay:50] long one")
    tmux.wait_for("first", "tok5 ")
    tmux.wait_for("first", "working (Ctrl-C cancels)")
    tmux.type("first", "queued after the long one")
    tmux.wait_for("first", "› (queued) queued after the long one")
    tmux.type("first", "/steer shorter please")
    tmux.wait_for("first", "steering sent")
    tmux.keys("first", "C-c")
    screen = tmux.wait_for("first", "the cancel dropped 2 queued messages; nothing runs now")
    assert "turn cancelled (client-cancelled)" in screen and "tok400" not in screen
    tmux.keys("first", "C-c")
    screen = tmux.wait_for("first", "[chat exited 0]")
    session = re.search(r"teamster chat --session (sess_\w+) --server (\S+)`", screen)
    assert session and session.group(2) == server.url, screen
    session_id = session.group(1)
    assert f"in a browser: {server.url}/#/chat/{session_id}" in screen

    # The server agrees: the last turn is the cancelled one, and nothing is queued.
    api = server.require_api()
    turns = api.ok(api.get(f"/api/v1/sessions/{session_id}/turns"))["data"]
    assert turns[0]["state"]["status"] == "cancelled", turns
    assert turns[0]["input"][0]["content"] == "[tokens:400][delay:50] long one", turns[0]
    assert api.ok(api.get(f"/api/v1/sessions/{session_id}/follow-ups"))["data"] == []

    # A new chat on the session shows its history, rebuilt from the events, and goes on.
    tmux.start("second", chat_argv(server, "--session", session_id))
    screen = tmux.wait_for("second", f"resumed session {session_id} with {gated_agent}")
    for shown in (f"You said: say {marker}", "→ echo(", "Tool result: ping-from-chat",
                  "→ ask_user_question(", "← Red", "Tool result: Red", "turn cancelled (client-cancelled)"):
        assert shown in screen, f"{shown!r} missing from the resumed history:\n{screen}"
    tmux.type("second", "[history] once more")
    tmux.wait_for("second", "History: ")
    tmux.wait_for("second", "once more")
    tmux.keys("second", "C-c")
    tmux.keys("second", "C-c")
    tmux.wait_for("second", "[chat exited 0]")


def test_chat_help_and_a_missing_agent(tmux, server):
    done = subprocess.run([*chat_argv(server)[:2], "--help"], capture_output=True, timeout=30)
    assert done.returncode == 0
    help_text = done.stdout.decode()
    for words in ("--session <ID>", "--server <URL>", "--api-key <KEY>", "in-process", "/help"):
        assert words in help_text, help_text

    missing = subprocess.run(chat_argv(server, wire.unique("nobody")), capture_output=True, timeout=30,
                             stdin=subprocess.DEVNULL)
    assert missing.returncode != 0
    assert b"no agent named" in missing.stderr

    tmux.start("help", chat_argv(server, conftest.DEMO_AGENT))
    tmux.wait_for("help", "chatting with demo")
    tmux.type("help", "/help")
    tmux.wait_for("help", "/steer TEXT")
    tmux.type("help", "/bogus")
    tmux.wait_for("help", "unknown command /bogus")
    # ↑ brings the last line back; the cursor moves and edits in place.
    tmux.keys("help", "Up")
    tmux.wait_for("help", "/bogus▏")
    tmux.keys("help", "Left", "Left", "BSpace")
    tmux.wait_for("help", "/bo▏us")
    tmux.keys("help", "C-u")
    # /sessions lists this user's sessions, newest first; /resume N opens one of them.
    tmux.type("help", "hello sessions")
    screen = tmux.wait_for("help", "You said: hello sessions")
    session_id = re.search(r"(sess_\w+)", screen).group(1)
    tmux.type("help", "/new")
    tmux.wait_for("help", "demo · new session")
    tmux.type("help", "/sessions")
    screen = tmux.wait_for("help", f"  1. {session_id}  demo")
    tmux.type("help", "/resume 1")
    tmux.wait_for("help", f"resumed session {session_id} with demo")
    tmux.wait_for("help", "You said: hello sessions")
    tmux.type("help", "/quit")
    tmux.wait_for("help", "[chat exited 0]")


def test_chat_reasoning_follow_ups_denials_and_grants(tmux, server, gated_agent):
    tmux.start("more", chat_argv(server, gated_agent))
    tmux.wait_for("more", f"chatting with {gated_agent}")

    # Reasoning comes collapsed; Ctrl-O shows it.
    tmux.type("more", "[reasoning] think first")
    tmux.wait_for("more", "▸ thought for 3 words")
    tmux.keys("more", "C-o")
    tmux.wait_for("more", "thinking: Let me think.")

    # Enter while a turn runs queues a follow-up, which runs once the turn ends.
    tmux.type("more", "[tokens:120][delay:50] slow")
    tmux.wait_for("more", "tok3 ")
    tmux.type("more", "and after that")
    tmux.wait_for("more", "› (queued) and after that")
    tmux.wait_for("more", "tok120")
    tmux.wait_for("more", "You said: and after that")

    # A sub-agent's gated call is asked about naming the sub-agent, and its thread goes on.
    tmux.type("more", call("run_sub_agent", {"name": "helper", "task": call("echo", {"text": "deep"})}))
    screen = tmux.wait_for("more", "from the sub-agent helper:")
    assert "Run echo?" in screen
    tmux.keys("more", "y")
    screen = tmux.wait_for("more", "└ helper done")
    assert "│ [helper] Tool result: deep" in screen, screen

    # Denied with a reason: the model is told.
    tmux.type("more", call("echo", {"text": "first"}))
    tmux.wait_for("more", "Run echo?")
    tmux.keys("more", "n")
    tmux.wait_for("more", "why deny?")
    tmux.type("more", "not today")
    tmux.wait_for("more", "✗ you denied echo: not today")

    # Always allowed: the next call of the tool runs without asking.
    tmux.type("more", call("echo", {"text": "second"}))
    tmux.wait_for("more", "Run echo?")
    tmux.keys("more", "a")
    tmux.wait_for("more", "Tool result: second")
    tmux.type("more", call("echo", {"text": "third"}))
    screen = tmux.wait_for("more", "Tool result: third")
    assert screen.count("✓ you always allow echo") == 1, screen
    assert screen.count("Run echo?") == 0, screen

    # A question without options is answered in free text.
    tmux.type("more", call("ask_user_question", {"question": "Your name?"}))
    tmux.wait_for("more", "type your answer, then Enter")
    tmux.type("more", "Ada Lovelace")
    tmux.wait_for("more", "Tool result: Ada Lovelace")

    tmux.type("more", "/usage")
    tmux.wait_for("more", "this chat: ")
    tmux.keys("more", "C-d")
    tmux.wait_for("more", "[chat exited 0]")


def test_chat_shows_tasks_plans_modes_and_sub_agents(tmux, server):
    api = server.require_api()
    agent = wire.unique("chat-modes")
    manifest = {
        "model": {"name": "fake/fake-model"},
        "config": {"tasks": {"enabled": True}},
        "modes": [
            {"id": "plan", "name": "Plan", "instructions": "Plan first.", "transitions_to": "build", "default": True},
            {"id": "build", "name": "Build", "instructions": "Carry the plan out."},
        ],
    }
    api.ok(api.post("/api/v1/agents", json={"name": agent, "manifest": manifest}), 201)
    tmux.start("modes", chat_argv(server, agent))
    tmux.wait_for("modes", f"chatting with {agent}")

    # The task list the agent writes shows in its panel after the turn.
    tmux.type("modes", call("task_write", {"tasks": [{"title": "Read the code"}, {"title": "Fix the bug"}]}))
    screen = tmux.wait_for("modes", " tasks 0/2 ")
    assert "[ ] Read the code" in screen and "[ ] Fix the bug" in screen

    # A submitted plan asks for approval; approving it switches the mode.
    tmux.type("modes", call("submit_plan", {"title": "Fix it", "plan": "1. read\n2. fix"}))
    screen = tmux.wait_for("modes", " plan for approval ")
    assert "The agent submits Fix it:" in screen and "2. fix" in screen
    tmux.keys("modes", "y")
    tmux.wait_for("modes", "mode build")
    tmux.type("modes", "/plans")
    tmux.wait_for("modes", "plan \"Fix it\" (executed): plan → build")
    tmux.type("modes", "/mode plan")
    tmux.wait_for("modes", "mode: plan")
    tmux.type("modes", "/tasks")
    tmux.wait_for("modes", "tasks: 0 of 2 done")
    tmux.type("modes", "/quit")
    tmux.wait_for("modes", "[chat exited 0]")

    # Sub-agents' threads are shown apart, each message labelled with its thread.
    spawn = lambda name, task: call("run_sub_agent", {"name": name, "task": task})  # noqa: E731
    tmux.start("threads", chat_argv(server, conftest.DEMO_AGENT))
    tmux.wait_for("threads", "chatting with demo")
    tmux.type("threads", spawn("left", "go west") + spawn("right", "go east"))
    screen = tmux.wait_for("threads", "└ right done")
    screen = tmux.wait_for("threads", "└ left done")
    assert "┌ sub-agent" in screen and "[left] You said: go west" in screen and "[right] You said: go east" in screen, screen


def test_chat_without_a_server_embeds_one(tmux, tmp_path):
    """No --server: the chat runs the server in-process on the data directory, with the
    example agent and its offline model."""
    data_dir = tmp_path / "data"
    binary = str(conftest.binary("TEAMSTER_BIN", "target/debug/teamster"))
    tmux.start("embedded", [binary, "chat", "--data-dir", str(data_dir), "--database", f"sqlite://{data_dir}/t.db"])
    tmux.wait_for("embedded", "chatting with demo")
    tmux.type("embedded", "hello from inside")
    tmux.wait_for("embedded", 'You said: "hello from inside"')
    tmux.keys("embedded", "C-c")
    tmux.keys("embedded", "C-c")
    screen = tmux.wait_for("embedded", "[chat exited 0]")
    session = re.search(r"--session (sess_\w+)", screen)
    assert session, screen
    assert (data_dir / "chat.log").exists()

    # The session is in the data directory: a new chat there resumes it.
    tmux.start("again", [binary, "chat", "--data-dir", str(data_dir), "--database", f"sqlite://{data_dir}/t.db",
                         "--session", session.group(1)])
    tmux.wait_for("again", 'You said: "hello from inside"')
    tmux.type("again", "/quit")
    tmux.wait_for("again", "[chat exited 0]")


def test_chat_attaches_files_and_downloads_sandbox_files(tmux, server, tmp_path):
    api = server.require_api()
    agent = wire.unique("chat-sandbox")
    manifest = {"model": {"name": "fake/fake-model"}, "config": {"sandbox": {"enabled": True}}}
    api.ok(api.post("/api/v1/agents", json={"name": agent, "manifest": manifest}), 201)
    sales = tmp_path / "sales.csv"
    sales.write_bytes(b"name,amount\nA1,10\nB2,32\n")
    tmux.start("files", chat_argv(server, agent))
    tmux.wait_for("files", f"chatting with {agent}")

    tmux.type("files", f"/attach {sales}")
    tmux.wait_for("files", "(+1 attached)")
    command = "awk -F, 'NR>1 {s+=$2} END {print s}' attachments/sales.csv > total.txt; cat total.txt"
    tmux.type("files", call("exec", {"command": command}))
    tmux.wait_for("files", "Tool result: {")
    screen = tmux.wait_for("files", '"stdout":"42\\n"}')
    assert "[attached file: sales.csv]" in screen
    assert "(+1 attached)" not in screen, "attachments go with one message"

    # What a command prints shows under its call while it runs; steering sent meanwhile joins
    # the turn's next model call.
    tmux.type("files", call("exec", {"command": "echo warming up; sleep 6; echo slept"}))
    tmux.wait_for("files", "→ exec({\"command\": \"echo warming up")
    tmux.wait_for("files", "working (Ctrl-C cancels)")
    running = tmux.wait_for("files", "┆ warming up")
    assert "slept" not in running.replace("echo slept", ""), "the output shows before the command ends"
    tmux.type("files", "/steer mind the logs")
    tmux.wait_for("files", "steering sent")
    tmux.wait_for("files", "› (steer) mind the logs")
    # The model's next call saw it as the last user message (the fake model echoes that).
    screen = tmux.wait_for("files", "You said: mind the logs")
    assert '"stdout":"warming up\\nslept\\n"' in screen
    session_id = re.search(r"(sess_\w+)", screen).group(1)
    assert len(api.ok(api.get(f"/api/v1/sessions/{session_id}/turns"))["data"]) == 2, "the steering started no turn"
    assert "starting the turn" not in tmux.wait_for("files", "out tokens")

    saved = tmp_path / "total-copy.txt"
    tmux.type("files", f"/download /workspace/total.txt {saved}")
    tmux.wait_for("files", f"saved /workspace/total.txt to {saved} (3 bytes)")
    assert saved.read_bytes() == b"42\n"
    tmux.type("files", "/download /workspace/missing.txt")
    tmux.wait_for("files", "the server answered 404")
    tmux.type("files", "/quit")
    tmux.wait_for("files", "[chat exited 0]")


def test_a_resumed_chat_follows_a_running_turn_and_asks_what_a_paused_one_waits_for(tmux, server):
    # Left with /quit while a turn runs: the turn goes on, and a new chat follows it live.
    tmux.start("leave", chat_argv(server, conftest.DEMO_AGENT))
    tmux.wait_for("leave", "chatting with demo")
    tmux.type("leave", "[tokens:60][delay:60] keep going")
    tmux.wait_for("leave", "tok2 ")
    tmux.type("leave", "/quit")
    screen = tmux.wait_for("leave", "[chat exited 0]")
    session_id = re.search(r"--session (sess_\w+)", screen).group(1)
    tmux.start("follow", chat_argv(server, "--session", session_id))
    screen = tmux.wait_for("follow", "tok60")
    assert "› [tokens:60][delay:60] keep going" in screen
    tmux.wait_for("follow", "out tokens")

    # A question left unanswered is asked again by the resumed chat.
    question = {"question": "Pick a size", "options": [{"label": "S"}, {"label": "M"}, {"label": "L"}],
                "multi_select": True}
    tmux.type("follow", call("ask_user_question", question))
    tmux.wait_for("follow", "[ ] M")
    tmux.type("follow", "/quit")
    tmux.wait_for("follow", "[chat exited 0]")
    tmux.start("answer", chat_argv(server, "--session", session_id))
    tmux.wait_for("answer", "Pick a size")
    tmux.keys("answer", "Space")
    tmux.keys("answer", "Down")
    tmux.keys("answer", "Down")
    tmux.keys("answer", "Space")
    tmux.wait_for("answer", "[x] L")
    tmux.keys("answer", "Enter")
    tmux.wait_for("answer", "Tool result: S, L")
    tmux.type("answer", "/quit")
    tmux.wait_for("answer", "[chat exited 0]")


def test_chat_shows_an_mcp_authorization_link_and_resumes_after_it(tmux, server, oauth, browser):  # noqa: F811
    api = server.require_api()
    name = register(api, oauth)
    agent = wire.unique("chat-oauth")
    manifest = {"model": {"name": "fake/fake-model"}, "mcp_servers": [oauth_registry(name)]}
    api.ok(api.post("/api/v1/agents", json={"name": agent, "manifest": manifest}), 201)
    tmux.start("oauth", chat_argv(server, agent))
    tmux.wait_for("oauth", f"chatting with {agent}")
    tmux.type("oauth", whoami())
    screen = tmux.wait_for("oauth", " authorization ")
    session_id = re.search(r"(sess_\w+)", screen).group(1)
    (turn,) = api.ok(api.get(f"/api/v1/sessions/{session_id}/turns"))["data"]
    (action,) = turn["state"]["required_actions"]
    auth_url = action["mcp_servers"][0]["auth_url"]
    # The link is shown (a long one wraps; its start is on one line).
    assert f"authorize {name} at" in screen and auth_url[:100] in screen, screen
    assert f"{name} needs your authorization" in screen

    callback = browser.authorize(auth_url)
    assert callback.status_code == 200, callback.text
    tmux.keys("oauth", "Enter")
    tmux.wait_for("oauth", "Tool result: alice")
    tmux.type("oauth", "/quit")
    tmux.wait_for("oauth", "[chat exited 0]")


def test_chat_shows_usage_and_cost(tmux, server, fake_model):
    api = server.require_api()
    provider = wire.unique("priced").replace("_", "-")
    api.ok(api.put("/api/v1/settings/model-providers", json={"manifest": priced_provider(fake_model.url, provider)}))
    agent = wire.unique("chat-priced")
    api.ok(api.post("/api/v1/agents", json={"name": agent, "manifest": {"model": {"name": f"{provider}/priced"}}}), 201)
    tmux.start("cost", chat_argv(server, agent))
    tmux.wait_for("cost", f"chatting with {agent}")
    tmux.type("cost", "[tokens:50] count for me")
    screen = tmux.wait_for("cost", "tok50")
    screen = tmux.wait_for("cost", "out tokens · $")
    session_id = re.search(r"(sess_\w+)", screen).group(1)
    (turn,) = api.ok(api.get(f"/api/v1/sessions/{session_id}/turns"))["data"]
    metrics = turn["state"]["metrics"]
    cost = f"${metrics['total_cost_in_usd']:.4f}"
    assert f"{metrics['total_input_tokens']} in · {metrics['total_output_tokens']} out tokens · {cost}" in screen, screen
    # The status line keeps the chat's totals.
    assert f"{metrics['total_input_tokens']}↑ {metrics['total_output_tokens']}↓ tokens · {cost}" in screen, screen
    tmux.type("cost", "/usage")
    tmux.wait_for("cost", f"this chat: {metrics['total_input_tokens']} in · {metrics['total_output_tokens']} out tokens · {cost}")
    tmux.type("cost", "/quit")
    tmux.wait_for("cost", "[chat exited 0]")


def test_chat_with_an_api_key(tmux, keyed):  # noqa: F811
    server, admin = keyed
    admin_api = wire.Api(server.url, key=admin)
    # The agent belongs to the admin's tenant; its team may run it.
    share_with_team(admin_api, conftest.DEMO_AGENT, "ops")
    member = key_for(admin_api, wire.unique("member"), "ops")
    refused = subprocess.run(chat_argv(server, conftest.DEMO_AGENT), capture_output=True, timeout=30,
                             stdin=subprocess.DEVNULL, env={**os.environ, "TEAMSTER_API_KEY": ""})
    assert refused.returncode != 0 and b"401" in refused.stderr, refused.stderr

    tmux.start("keyed", chat_argv(server, conftest.DEMO_AGENT), env={"TEAMSTER_API_KEY": member})
    tmux.wait_for("keyed", "chatting with demo")
    tmux.type("keyed", "hello with a key")
    tmux.wait_for("keyed", "You said: hello with a key")
    tmux.type("keyed", "/quit")
    tmux.wait_for("keyed", "[chat exited 0]")


class CuttableProxy:
    """A TCP proxy in front of a server whose open connections can be cut at once."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.removeprefix("http://").rsplit(":", 1)
        self.upstream = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.open: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            with self.lock:
                self.open += [client, server]
            for source, target in ((client, server), (server, client)):
                threading.Thread(target=self.pipe, args=(source, target), daemon=True).start()

    @staticmethod
    def pipe(source: socket.socket, target: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                target.sendall(data)
        except OSError:
            pass
        for end in (source, target):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        with self.lock:
            cut, self.open = self.open, []
        for end in cut:
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        self.listener.close()
        self.cut()


def test_a_broken_stream_is_taken_up_where_it_broke(tmux, server):
    proxy = CuttableProxy(server.url)
    try:
        tmux.start("cut", [str(conftest.binary("TEAMSTER_BIN", "target/debug/teamster")), "chat", "--server", proxy.url,
                           conftest.DEMO_AGENT])
        tmux.wait_for("cut", "chatting with demo")
        tmux.type("cut", "[tokens:150][delay:40] stream on")
        tmux.wait_for("cut", "tok5 ")
        proxy.cut()
        tmux.wait_for("cut", "reconnecting…")
        screen = tmux.wait_for("cut", "out tokens")
        tokens = [int(number) for number in re.findall(r"\btok(\d+)\b", screen)]
        assert tokens == list(range(1, 151)), f"each token once, in order:\n{screen}"
        assert screen.count("› [tokens:150][delay:40] stream on") == 1, screen
        tmux.type("cut", "/quit")
        tmux.wait_for("cut", "[chat exited 0]")
    finally:
        proxy.close()
