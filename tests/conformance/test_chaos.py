"""Crash recovery with two replicas on one PostgreSQL database (DESIGN.md, "Durability and
scale-out"; issue 6): a replica that dies costs no data and no duplicated side effect.

- The chaos test: while turns with tool calls stream through both replicas, one replica is
  SIGKILLed again and again and restarted each time. At the end every turn is terminal, every
  subscriber (re-subscribing after each disconnect, on either replica, with the last sequence
  number it saw) got one gap-free, duplicate-free sequence ending in `turn.done`, and the
  `counter` tool of a real MCP server (tests/mcp_servers/tools_server.py, over streamable HTTP)
  shows that no call ran twice.
- A turn paused for approval survives the death of the replica that ran it: the other replica
  resumes it from the log, and the approved call runs exactly once.
- A replica paused past its lease (SIGSTOP, as a replica cut off from the database would be)
  lets go of its turn when it wakes: the other replica took it over, and the paused one writes
  nothing more of it and runs none of its calls.
- A replica paused with a write in flight (held up in the database by a lock the test takes,
  as a slow database would, then SIGSTOPped) cannot commit it after the other replica took the
  turn over: the store fences writes by lease, so the stored stream after the takeover is the
  new owner's alone.

The replicas run with short leases (hidden flags), so takeovers happen within a couple of
seconds. The module gets a database of its own from TEAMSTER_TEST_POSTGRES_URL and fails with a
clear message without it. Nothing asserts how fast anything was.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import threading
import time
import typing

import httpx
import pytest

import wire
from conftest import FakeModelServer, TeamsterServer, postgres_database
from test_mcp import McpHttpServer, registry, remote

# Leases of 1.5 s renewed every 0.3 s; each replica looks for turns to take over every 0.3 s.
LEASES = ("--lease-ttl-ms", "1500", "--lease-renew-ms", "300", "--takeover-interval-ms", "300",
          "--max-takeovers", "10")
SESSIONS = 6
TURNS_PER_SESSION = 4
KILLS = 4
# Each turn: a model call that asks for two counter calls, then one that reads their results,
# every frame 150 ms apart, so that kills land in the middle of model calls and tool calls.
TURN_TEXT = "[tool:counter {{}}][tool:counter {{}}][delay:150] chaos turn {index}"
# What a call that may have started before its server stopped gets instead of running again.
INTERRUPTED = "Error: The server running this tool call stopped before its result was recorded"


class Replicas:
    """Two replicas on one database; `pick` returns a live one's URL (they move on restart)."""

    def __init__(self, a: TeamsterServer, b: TeamsterServer) -> None:
        self.servers = [a, b]
        self.lock = threading.Lock()
        self.down: set[int] = set()

    def pick(self) -> str:
        with self.lock:
            live = [server.url for index, server in enumerate(self.servers) if index not in self.down]
        return random.choice(live)

    def kill(self, index: int) -> None:
        with self.lock:
            self.down.add(index)
        self.servers[index].kill()

    def restart(self, index: int) -> None:
        self.servers[index].start()
        with self.lock:
            self.down.discard(index)


@pytest.fixture(scope="module")
def replicas(postgres_database: str, workdir, fake_model: FakeModelServer) -> typing.Iterator[Replicas]:
    a = TeamsterServer(workdir, fake_model, extra_args=LEASES, database=postgres_database)
    b = TeamsterServer(workdir, fake_model, extra_args=LEASES, database=postgres_database)
    try:
        a.start().configure()
        b.start()
        yield Replicas(a, b)
    finally:
        b.close()
        a.close()


@pytest.fixture
def counter_server(workdir) -> typing.Iterator[McpHttpServer]:
    """A tools server of the test's own, so its counter counts this test's calls only."""
    server = McpHttpServer(workdir)
    try:
        yield server
    finally:
        server.close()


def register(replicas: Replicas, server: McpHttpServer) -> str:
    name = wire.unique("chaos")
    with httpx.Client(base_url=replicas.pick(), timeout=wire.TIMEOUT, headers={"Authorization": "Bearer K"}) as http:
        response = http.post("/api/v1/settings/mcp-servers", json={"manifest": remote(name, server.url)})
        assert response.status_code == 201, response.text
    return name


class Client:
    """One session's client: runs turns one after another through whichever replica is up, and
    follows each to its end, re-subscribing after every disconnect with the last sequence
    number it saw."""

    def __init__(self, replicas: Replicas, session_id: str, deadline: float) -> None:
        self.replicas = replicas
        self.session_id = session_id
        self.deadline = deadline
        self.http = httpx.Client(timeout=httpx.Timeout(10.0, connect=2.0), headers={"Authorization": "Bearer K"})
        # Per turn followed: the events received, in order.
        self.followed: dict[str, list[wire.SseEvent]] = {}
        self.error: typing.Optional[BaseException] = None

    def run(self) -> None:
        try:
            for index in range(TURNS_PER_SESSION):
                turn_id = self.create(TURN_TEXT.format(index=index))
                self.followed[turn_id] = self.follow(turn_id)
        except BaseException as error:  # reported by the test
            self.error = error
        finally:
            self.http.close()

    def create(self, text: str) -> str:
        body = {"input": [{"type": "user.message", "content": text}], "stream": False}
        while True:
            assert time.monotonic() < self.deadline, "could not create a turn in time"
            try:
                response = self.http.post(f"{self.replicas.pick()}/api/v1/sessions/{self.session_id}/turns", json=body)
            except httpx.HTTPError:
                time.sleep(0.1)  # the replica died: try again, maybe on the other one
                continue
            if response.status_code == 200:
                return response.json()["data"]["id"]
            # A turn whose creation answer was lost may still be ending: 409 until it has.
            assert response.status_code in (409, 412, 500, 503), response.text
            time.sleep(0.2)

    def follow(self, turn_id: str) -> list[wire.SseEvent]:
        seen: list[wire.SseEvent] = []
        while True:
            assert time.monotonic() < self.deadline, f"turn {turn_id} did not end in time"
            headers = {"Last-Event-ID": str(seen[-1].seq)} if seen else {}
            url = f"{self.replicas.pick()}/api/v1/sessions/{self.session_id}/turns/{turn_id}/subscribe"
            parser = wire.SseParser()
            try:
                with self.http.stream("GET", url, headers=headers) as response:
                    if response.status_code != 200:
                        time.sleep(0.2)
                        continue
                    for chunk in response.iter_bytes():
                        for event in parser.feed(chunk):
                            seen.append(event)
                            if event.type == "turn.done":
                                return seen
            except httpx.HTTPError:
                pass  # the replica died, or the turn moved to the other one
            time.sleep(0.05)


def listed(replicas: Replicas, path: str) -> list[dict]:
    """Every item of a native listing, through a live replica."""
    api = wire.Api(replicas.pick())
    try:
        return api.list_all(path, 100)[0]
    finally:
        api.close()


def test_chaos_replicas_killed_again_and_again(replicas: Replicas, counter_server: McpHttpServer):
    name = register(replicas, counter_server)
    spec = {"model": {"name": "fake/fake-model"},
            "mcp_servers": [registry(name, preload=True, enable_tools=["counter"], require_approval_for_tools=[])]}
    sessions = [replicas.servers[0].require_api().create_session(spec=spec)["id"] for _ in range(SESSIONS)]
    deadline = time.monotonic() + 50
    clients = [Client(replicas, session_id, deadline) for session_id in sessions]
    threads = [threading.Thread(target=client.run, daemon=True) for client in clients]
    for thread in threads:
        thread.start()

    for kill in range(KILLS):
        time.sleep(1.5)
        victim = kill % 2
        replicas.kill(victim)
        time.sleep(0.7)
        replicas.restart(victim)
    for thread in threads:
        thread.join(max(1.0, deadline - time.monotonic()))
    for client in clients:
        assert client.error is None, f"session {client.session_id}: {client.error!r}"
        assert len(client.followed) == TURNS_PER_SESSION

    # Every subscriber got one gap-free, duplicate-free sequence ending in turn.done.
    for client in clients:
        for turn_id, seen in client.followed.items():
            sequence = [event.seq for event in seen]
            assert sequence == list(range(1, len(seen) + 1)), f"turn {turn_id}: {sequence}"
            assert seen[-1].type == "turn.done" and [event.type for event in seen].count("turn.done") == 1
    # The kills hit running turns: a turn resumed on another server opened its MCP connection
    # again, so its stream holds a second `mcp.initialize`.
    resumed = [turn_id for client in clients for turn_id, seen in client.followed.items()
               if [event.type for event in seen].count("mcp.initialize") > 1]
    assert resumed, "no turn was taken over: the kills missed every running turn"

    # Every turn of every session is terminal (turns whose creation answer was lost included).
    states = {}
    for session_id in sessions:
        for turn in listed(replicas, f"/api/v1/sessions/{session_id}/turns"):
            states[turn["id"]] = turn["state"]
    assert all(state["status"] != "running" for state in states.values()), states
    # Turns a client followed finished on their own (none was abandoned on the way).
    followed = {turn_id for client in clients for turn_id in client.followed}
    assert all(states[turn_id]["status"] == "done" for turn_id in followed), \
        {turn_id: states[turn_id] for turn_id in followed}

    # No counter call ran twice: each call has at most one result; each execution's value is
    # reported once; and every execution is a result that says it ran, or a call whose server
    # died with it in flight (which gets the interrupted result instead of running again).
    results: dict[str, str] = {}
    for session_id in sessions:
        for item in listed(replicas, f"/api/v1/sessions/{session_id}/events"):
            event = item["event"]
            if event["type"] == "tool.response":
                assert event["tool_call_id"] not in results, f"two results for {event['tool_call_id']}"
                results[event["tool_call_id"]] = event["content"]
    ran = [int(content) for content in results.values() if content.strip().isdigit()]
    interrupted = [content for content in results.values() if content.startswith(INTERRUPTED)]
    assert len(ran) + len(interrupted) == len(results), results
    assert len(set(ran)) == len(ran), f"a counter value was reported twice: {sorted(ran)}"
    api = replicas.servers[1].require_api()
    probe = api.run_turn(api.create_session(spec=spec)["id"], "[tool:counter {}] how many?")
    (last,) = [event["content"] for event in probe.stream.payloads if event["type"] == "tool.response"]
    executions = int(last) - 1
    assert len(ran) <= executions <= len(ran) + len(interrupted), (executions, len(ran), len(interrupted))
    print(f"chaos: {len(states)} turns, {len(resumed)} of those followed resumed after a kill, "
          f"{executions} counter executions, {len(ran)} results that ran, {len(interrupted)} interrupted calls")
    assert sorted(ran) == sorted(set(ran)) and (not ran or max(ran) <= executions)


def test_a_turn_paused_for_approval_survives_the_death_of_its_replica(replicas: Replicas,
                                                                     counter_server: McpHttpServer):
    name = register(replicas, counter_server)
    spec = {"model": {"name": "fake/fake-model"}, "mcp_servers": [registry(name, preload=True, enable_tools=["counter"])]}
    a, b = replicas.servers
    api_a = a.require_api()
    session_id = api_a.create_session(spec=spec)["id"]
    paused = api_a.run_turn(session_id, "[tool:counter {}] count once, after approval")
    state = paused.done["state"]
    assert state["status"] == "done" and state["required_actions"][0]["type"] == "tool.approval_required", state
    call_id = state["required_actions"][0]["tool_calls"][0]["id"]

    replicas.kill(0)
    try:
        api_b = b.require_api()
        assert api_b.get_turn(session_id, paused.turn_id)["state"] == state, "the pause is in the store"
        approval = {"type": "user.tool_approval", "thread_id": "main", "tool_call_id": call_id,
                    "approval": {"status": "allow"}}
        resumed = api_b.stream("POST", f"/api/v1/sessions/{session_id}/turns", json={"input": [approval]})
        wire.assert_sse_framing(resumed)
        run = wire.TurnRun(resumed)
        assert run.done["state"]["status"] == "done", run.done
        (result,) = [event for event in run.stream.payloads if event["type"] == "tool.response"]
        assert result["tool_call_id"] == call_id and result["content"] == "1", "the call ran exactly once"
    finally:
        replicas.restart(0)
    results = [item["event"] for item in listed(replicas, f"/api/v1/sessions/{session_id}/events")
               if item["event"]["type"] == "tool.response"]
    assert [event["content"] for event in results] == ["1"]


def paused_until_taken_over(replica: TeamsterServer, other: wire.Api, session_id: str, turn_id: str) -> dict:
    """Pauses `replica` (SIGSTOP) until the other replica, once the lease has expired, has taken
    the turn over and ended it; answers the ended turn, read through the other replica."""
    assert replica.process is not None and replica.process.popen is not None
    pid = replica.process.popen.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        return other.wait_terminal(session_id, turn_id, timeout=60)
    finally:
        os.kill(pid, signal.SIGCONT)


def test_a_replica_paused_past_its_lease_lets_go_of_its_turn(replicas: Replicas, counter_server: McpHttpServer):
    # A paused process (SIGSTOP) is what a replica cut off from the database looks like: when it
    # wakes, its lease has run out and another replica has taken the turn over, so it must write
    # nothing more of it and run none of its calls.
    name = register(replicas, counter_server)
    spec = {"model": {"name": "fake/fake-model"},
            "mcp_servers": [registry(name, preload=True, enable_tools=["counter"], require_approval_for_tools=[])]}
    a, b = replicas.servers
    api_a, api_b = a.require_api(), b.require_api()
    session_id = api_a.create_session(spec=spec)["id"]
    turn_id = api_a.start_turn(session_id, "[tool:counter {}][delay:300] paused replica")["id"]
    api_b.read_until_delta(session_id, turn_id)
    turn = paused_until_taken_over(a, api_b, session_id, turn_id)
    assert turn["state"]["status"] == "done", turn["state"]
    time.sleep(1.0)  # A wakes up, finds its hold run out, and stops the turn without a write

    replay_b = api_b.subscribe(session_id, turn_id)
    wire.assert_sse_framing(replay_b)
    replay_a = api_a.subscribe(session_id, turn_id)
    assert [event.raw for event in replay_a.events] == [event.raw for event in replay_b.events]
    assert api_a.get_turn(session_id, turn_id)["state"] == turn["state"]
    results = [event["content"] for event in replay_b.payloads if event["type"] == "tool.response"]
    assert results == ["1"], "the call ran once, on B"
    probe = api_b.run_turn(api_b.create_session(spec=spec)["id"], "[tool:counter {}] how many?")
    assert [event["content"] for event in probe.stream.payloads if event["type"] == "tool.response"] == ["2"], \
        "A ran nothing after waking up"


class Psql:
    """An open `psql` session on the replicas' database, one command at a time, so the test can
    hold a lock in a transaction for as long as it likes."""

    def __init__(self, url: str) -> None:
        program = shutil.which("psql") or os.path.join(os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin"), "psql")
        self.process = subprocess.Popen([program, url, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.pid = self.value("SELECT pg_backend_pid()")

    def value(self, sql: str) -> str:
        """Runs a query of one row and column and returns its value."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(sql + ";\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        assert line, f"psql ended on {sql!r}"
        return line.strip()

    def run(self, sql: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(sql + ";\n")
        self.process.stdin.flush()

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=10)


def test_a_replica_paused_mid_write_cannot_commit_after_the_takeover(replicas: Replicas, postgres_database: str):
    # A's write of the turn's next events is held up in the database (the test locks the
    # session row the write locks first), then A is paused: its write is in flight when B takes
    # the turn over, and B's own first write queues behind it. Once the lock goes, A's write
    # goes on first. Without fencing it would store A's events where B's resumed ones belong
    # (B's then being dropped as duplicates); fenced, it stores nothing.
    a, b = replicas.servers
    api_a, api_b = a.require_api(), b.require_api()
    session_id = api_a.create_session(spec={"model": {"name": "fake/fake-model"}})["id"]
    turn_id = api_a.start_turn(session_id, "[tokens:60][delay:50] paused mid-write")["id"]
    api_b.read_until_delta(session_id, turn_id)
    lease = f"SELECT claims FROM turn_leases WHERE turn_id = '{turn_id}'"
    holder, watcher = Psql(postgres_database), Psql(postgres_database)
    claims_before = int(wire.wait_until(lambda: watcher.value(lease), what="A's claim"))
    stored_last = f"SELECT coalesce(max(sequence), 0) FROM stream_events WHERE turn_id = '{turn_id}'"
    waiting = "SELECT count(*) FROM pg_stat_activity WHERE {pid} = ANY(pg_blocking_pids(pid))"

    assert a.process is not None and a.process.popen is not None
    pid = a.process.popen.pid
    paused = False
    try:
        holder.run("BEGIN")
        holder.value(f"SELECT 1 FROM sessions WHERE id = '{session_id}' FOR UPDATE")
        wire.wait_until(lambda: int(watcher.value(waiting.format(pid=holder.pid))) >= 1, what="A's write to wait")
        os.kill(pid, signal.SIGSTOP)
        paused = True
        before_takeover = int(watcher.value(stored_last))
        wire.wait_until(lambda: int(watcher.value(lease)) > int(claims_before), timeout=30, what="B's takeover")
        wire.wait_until(lambda: int(watcher.value(waiting.format(pid=holder.pid))) >= 2, timeout=30,
                        what="B's first write to queue behind A's")
        holder.run("COMMIT")
        holder.close()
        time.sleep(1.0)  # A's write goes on (and is refused) while A is still paused
        os.kill(pid, signal.SIGCONT)
        paused = False
        turn = api_b.wait_terminal(session_id, turn_id, timeout=30)
    finally:
        if paused:
            os.kill(pid, signal.SIGCONT)
        watcher.close()
    assert turn["state"]["status"] == "done", turn["state"]
    time.sleep(1.0)  # A wakes up, finds its write refused and its hold run out, and stops the turn

    replay = api_b.subscribe(session_id, turn_id)
    wire.assert_sse_framing(replay)
    payloads = replay.payloads
    assert [event.seq for event in replay.events] == list(range(1, len(payloads) + 1))
    assert [event["type"] for event in payloads].count("turn.done") == 1
    before = [event for event in payloads[:before_takeover] if event["type"].startswith("model.message")]
    assert before, "A had streamed part of its answer before it was paused"
    a_message = before[-1]["id"]
    after = payloads[before_takeover:]
    assert after[0]["type"] == "model.message", \
        f"B's resumed step comes right after what was stored at the takeover, not {after[0]}"
    assert all(event.get("id") != a_message for event in after), "none of A's events is stored after the takeover"
    placeholders = set()
    for event in payloads:
        if event["type"] == "model.message":
            placeholders.add(event["id"])
        elif event["type"] == "model.message.delta":
            assert event["id"] in placeholders, f"a delta of a message never announced: {event}"
    replay_a = api_a.subscribe(session_id, turn_id)
    assert [event.raw for event in replay_a.events] == [event.raw for event in replay.events]


def test_subscribers_of_a_turn_taken_over_go_on_without_re_subscribing(replicas: Replicas):
    # A's own streams of a turn (the request that started it, and a subscriber) outlive A's hold
    # on it: A is paused past its lease, B takes the turn over and ends it, and when A wakes
    # both streams go on from the store, after the last event they sent, to `turn.done`, on the
    # same connection: no gap, no duplicate, the same events as B's replay.
    a, b = replicas.servers
    api_a, api_b = a.require_api(), b.require_api()
    session_id = api_a.create_session(spec={"model": {"name": "fake/fake-model"}})["id"]
    streams: dict[str, list[wire.SseEvent]] = {"started": [], "subscribed": []}
    errors: list[BaseException] = []
    first_delta = {name: threading.Event() for name in streams}
    turn_ids: list[str] = []
    http = httpx.Client(base_url=a.url, timeout=httpx.Timeout(90.0, connect=5.0), headers={"Authorization": "Bearer K"})

    def read(name: str, method: str, path: str, **kw: typing.Any) -> None:
        parser = wire.SseParser()
        try:
            with http.stream(method, path, **kw) as response:
                assert response.status_code == 200, response.read()[:300]
                for chunk in response.iter_bytes():
                    for event in parser.feed(chunk):
                        streams[name].append(event)
                        if event.type == "turn.created" and not turn_ids:
                            turn_ids.append(event.json["turn_id"])
                        if event.type == "model.message.delta":
                            first_delta[name].set()
        except BaseException as error:  # reported below
            errors.append(error)
        finally:
            first_delta[name].set()

    body = {"input": [{"type": "user.message", "content": "[tokens:40][delay:100] taken over"}], "stream": True}
    started = threading.Thread(target=read, args=("started", "POST", f"/api/v1/sessions/{session_id}/turns"),
                               kwargs={"json": body})
    started.start()
    assert first_delta["started"].wait(30), "the starting stream saw no delta"
    assert turn_ids, "the starting stream began with no turn.created"
    turn_id = turn_ids[0]
    subscribed = threading.Thread(target=read, args=("subscribed", "GET",
                                                     f"/api/v1/sessions/{session_id}/turns/{turn_id}/subscribe"))
    subscribed.start()
    assert first_delta["subscribed"].wait(30), "the subscriber saw no delta"

    turn = paused_until_taken_over(a, api_b, session_id, turn_id)
    assert turn["state"]["status"] == "done", turn["state"]
    started.join(60)
    subscribed.join(60)
    http.close()
    assert not started.is_alive() and not subscribed.is_alive(), "a stream on A did not end"
    assert not errors, errors

    replay = api_b.subscribe(session_id, turn_id)
    expected = [(event.seq, event.raw) for event in replay.events]
    assert expected[-1][0] == len(expected) and replay.payloads[-1]["type"] == "turn.done"
    for name, events in streams.items():
        got = [(event.seq, event.raw) for event in events]
        assert got == expected, f"the {name} stream on A differs from B's replay"
