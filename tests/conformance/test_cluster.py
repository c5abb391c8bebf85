"""Two `teamster serve` replicas, A and B, on one PostgreSQL database (DESIGN.md, "Durability and
scale-out"): any replica serves any request about any turn.

Shown here, each through the real gateway SDK where the SDK has the call, and over plain HTTP for
the native API:
- a subscriber on B follows a turn running on A live (deltas arrive while the turn runs), and
  receives exactly the bytes A's own stream carried; resuming by sequence number works on B;
- a cancel sent to B, in either dialect, stops the turn running on A with `client-cancelled`;
- two turns started at once on one session, one through each replica: one runs at a time, and
  the answers are the specs' (`auto` cancels the running turn with `cancelled-for-next-turn` and
  runs after it; `none` while a turn runs is a 409 `turn_running`);
- settings and agents written through one replica are used by the other;
- an MCP server's OAuth grant replaced through B is what A's open connection uses next;
- a session's sandbox, on the `--sandbox-root` both share, is the same on both: a file written by
  a command on A is read by a command on B and downloaded through B, and it is announced once.

The module gets a database of its own from TEAMSTER_TEST_POSTGRES_URL (scripts/test sets it) and
fails without it. Every wait is bounded; nothing asserts how fast anything was beyond generous
bounds.
"""

from __future__ import annotations

import threading
import time
import typing

import httpx
import pytest

import test_mcp_oauth
import wire
from conftest import DEMO_AGENT, FakeModelServer, Recorder, TeamsterServer
from test_sandbox import download, exec_call, gateway_download, sandbox_spec, sandboxes_created, tool_results
from truefoundry_gateway_sdk import UserMessage
from truefoundry_gateway_sdk.agents import (
    AgentSessionClient,
    TurnCreatedEvent,
    TurnDoneEvent,
    TurnStateCancelled,
    is_event_delta,
)


def user(text: str) -> list:
    return [UserMessage(content=text)]


class Cluster(typing.NamedTuple):
    a: TeamsterServer
    b: TeamsterServer


@pytest.fixture(scope="module")
def cluster(postgres_database: str, workdir, fake_model: FakeModelServer) -> typing.Iterator[Cluster]:
    """A, configured (the fake provider, the `demo` agent), then B on the same database."""
    a = TeamsterServer(workdir, fake_model, database=postgres_database)
    b = TeamsterServer(workdir, fake_model, database=postgres_database)
    try:
        a.start().configure()
        b.start()
        yield Cluster(a, b)
    finally:
        b.close()
        a.close()


@pytest.fixture
def recorders(cluster: Cluster) -> typing.Iterator[tuple[Recorder, Recorder]]:
    """SDK clients on A and on B whose exchanges are recorded byte for byte."""
    on_a, on_b = Recorder(f"{cluster.a.url}/t1"), Recorder(f"{cluster.b.url}/t1")
    try:
        yield on_a, on_b
    finally:
        on_a.close()
        on_b.close()


class Background:
    """Runs `work` on a thread; `result()` joins it (bounded) and re-raises its failure."""

    def __init__(self, work: typing.Callable[[], typing.Any]) -> None:
        self.outcome: dict[str, typing.Any] = {}

        def run() -> None:
            try:
                self.outcome["value"] = work()
            except BaseException as error:  # reported by result()
                self.outcome["error"] = error

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def result(self, timeout: float = 60.0) -> typing.Any:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the background work did not finish"
        if "error" in self.outcome:
            raise self.outcome["error"]
        return self.outcome["value"]


def stream_events(exchange: wire.Exchange) -> list[wire.SseEvent]:
    return wire.parse_sse(exchange.response_body).events


def turn_state(api: wire.Api, session_id: str, turn_id: str) -> dict:
    return api.get_turn(session_id, turn_id)["state"]


def last_turn_id(api: wire.Api, session_id: str) -> typing.Optional[str]:
    """The session's newest turn (the one `auto` chains to), if any."""
    turns = api.ok(api.get(f"/api/v1/sessions/{session_id}/turns", params={"limit": 1}))["data"]
    return turns[0]["id"] if turns else None


# --------------------------------------------------------------------------------------------
# Following a turn that runs on the other replica
# --------------------------------------------------------------------------------------------


def test_a_subscriber_on_b_follows_a_turn_running_on_a_live(cluster, recorders):
    on_a, on_b = recorders
    session = on_a.client.create_session(agent_name=DEMO_AGENT)
    prepared = session.prepare_turn(input=user("[tokens:30][delay:100] followed across replicas"))
    running = Background(lambda: list(prepared.execute()))
    turn_id = wire.wait_until(lambda: prepared.id, timeout=10, what="the turn to start on A")

    turn = on_b.client.get_session(session.id).get_turn(turn_id)
    assert turn.state.status == "running"
    items = []
    delta_while_running = None
    for item in turn.stream():
        items.append(item)
        if delta_while_running is None and is_event_delta(item.event):
            delta_while_running = turn_state(cluster.a.require_api(), session.id, turn_id)["status"]
    assert delta_while_running == "running", "B delivered a delta while the turn was still running on A"

    executed = running.result()
    assert isinstance(items[0].event, TurnCreatedEvent) and isinstance(items[-1].event, TurnDoneEvent)
    assert [item.sequence_number for item in items] == list(range(1, len(items) + 1))
    assert sum(1 for item in items if is_event_delta(item.event)) >= 30
    assert [item.sequence_number for item in executed] == [item.sequence_number for item in items]

    on_a_stream = stream_events(on_a.last("POST", f"/sessions/{session.id}/turns"))
    on_b_stream = stream_events(on_b.last("POST", f"/turns/{turn_id}/subscribe"))
    assert [event.raw for event in on_b_stream] == [event.raw for event in on_a_stream], \
        "B sends exactly the bytes A's own stream carried"
    assert turn.state.status == "done"


def test_resume_by_sequence_number_on_the_other_replica(cluster):
    api_a, api_b = cluster.a.require_api(), cluster.b.require_api()
    session_id = api_a.create_session(DEMO_AGENT)["id"]
    original = Background(lambda: api_a.run_turn(session_id, "[tokens:20][delay:100] resume me on B"))
    turn_id = wire.wait_until(lambda: last_turn_id(api_a, session_id), timeout=10, what="the turn to start on A")

    # While the turn runs on A: resume after 3 on B, by query parameter and by Last-Event-ID.
    wire.wait_until(lambda: len(api_b.read_until_delta(session_id, turn_id)) >= 3, what="three events on B")
    by_cursor = Background(lambda: api_b.subscribe(session_id, turn_id, after=3))
    by_header = Background(lambda: api_b.subscribe(session_id, turn_id, last_event_id="5"))
    run = original.result()
    resumed, resumed_by_header = by_cursor.result(), by_header.result()

    wire.assert_sse_framing(run.stream)
    wire.assert_sse_framing(resumed, first=4)
    wire.assert_sse_framing(resumed_by_header, first=6)
    assert [event.raw for event in resumed.events] == [event.raw for event in run.stream.events[3:]]
    assert [event.raw for event in resumed_by_header.events] == [event.raw for event in run.stream.events[5:]]

    # After the turn: a replay on B, whole and from a cursor, is still the same bytes.
    replay = api_b.subscribe(session_id, turn_id)
    assert [event.raw for event in replay.events] == [event.raw for event in run.stream.events]
    last = len(run.stream.events)
    tail = api_b.subscribe(session_id, turn_id, after=last - 1)
    assert [event.raw for event in tail.events] == [run.stream.events[-1].raw]


# --------------------------------------------------------------------------------------------
# Cancelling a turn that runs on the other replica
# --------------------------------------------------------------------------------------------


def test_a_cancel_sent_to_b_stops_the_turn_on_a_gateway(cluster, recorders):
    on_a, on_b = recorders
    session = on_a.client.create_session(agent_name=DEMO_AGENT)
    prepared = session.prepare_turn(input=user("[tokens:200][delay:100] cancel me from B"))
    items: list = []

    def execute() -> None:
        for item in prepared.execute():
            items.append(item)

    running = Background(execute)
    wire.wait_until(lambda: any(is_event_delta(item.event) for item in items), timeout=20,
                    what="a delta of the turn on A")

    started = time.monotonic()
    on_b.client.get_session(session.id).cancel()
    elapsed = time.monotonic() - started
    cancel = on_b.last("POST", f"/sessions/{session.id}/cancel")
    assert (cancel.status, cancel.json, cancel.response_json) == (200, {}, {})

    # B answers once the turn has recorded its end, as a local cancel does.
    state = turn_state(cluster.b.require_api(), session.id, prepared.id)
    assert (state["status"], state["reason"]) == ("cancelled", "client-cancelled")
    assert elapsed < 8, f"the cancel took {elapsed:.1f}s"

    running.result()
    done = items[-1].event
    assert isinstance(done, TurnDoneEvent) and isinstance(done.state, TurnStateCancelled)
    assert done.state.reason == "client-cancelled"
    assert sum(1 for item in items if is_event_delta(item.event)) < 200, "the turn stopped early"


def test_a_cancel_sent_to_b_stops_the_turn_on_a_native(cluster):
    api_a, api_b = cluster.a.require_api(), cluster.b.require_api()
    session_id = api_a.create_session(DEMO_AGENT)["id"]
    turn_id = api_a.start_turn(session_id, "[tokens:200][delay:100] cancel me natively from B")["id"]
    api_b.read_until_delta(session_id, turn_id)

    response = api_b.post(f"/api/v1/sessions/{session_id}/cancel", json={})
    assert api_b.ok(response) == {}
    state = turn_state(api_a, session_id, turn_id)
    assert (state["status"], state["reason"]) == ("cancelled", "client-cancelled")

    stream = api_a.subscribe(session_id, turn_id)
    wire.assert_sse_framing(stream)
    assert stream.payloads[-1]["state"]["reason"] == "client-cancelled"

    # Nothing is left to cancel: idempotent on both replicas.
    for api in (api_a, api_b):
        assert api.ok(api.post(f"/api/v1/sessions/{session_id}/cancel", json={})) == {}


# --------------------------------------------------------------------------------------------
# Two replicas starting a turn on one session at once
# --------------------------------------------------------------------------------------------


def start_together(cluster: Cluster, session_id: str, texts: tuple[str, str], **body: typing.Any) -> list[httpx.Response]:
    """Starts one turn through A and one through B at the same moment (`stream: false`)."""
    barrier = threading.Barrier(2)

    def start(server: TeamsterServer, text: str) -> httpx.Response:
        api = server.require_api()
        payload = {"input": [{"type": "user.message", "content": text}], "stream": False, **body}
        barrier.wait(timeout=10)
        return api.post(f"/api/v1/sessions/{session_id}/turns", json=payload)

    racers = [Background(lambda server=server, text=text: start(server, text))
              for server, text in zip(cluster, texts)]
    return [racer.result() for racer in racers]


def first_model_message_at(api: wire.Api, session_id: str, turn_id: str) -> str:
    events = api.ok(api.get(f"/api/v1/sessions/{session_id}/turns/{turn_id}/events"))["data"]
    return next(event["created_at"] for event in events if event["type"] == "model.message")


@pytest.mark.parametrize("round_", range(3))
def test_racing_auto_turns_run_one_at_a_time(cluster, round_):
    api_a = cluster.a.require_api()
    session_id = api_a.create_session(DEMO_AGENT)["id"]
    responses = start_together(cluster, session_id, ("[tokens:20][delay:50] racer on A", "[tokens:20][delay:50] racer on B"))

    started = []
    for response in responses:
        if response.status_code == 409:
            wire.assert_error(response, 409, {"turn_running"})
        else:
            started.append(api_a.ok(response)["data"])
    assert started, "at least one of the racing turns starts"
    finished = {turn["id"]: api_a.wait_terminal(session_id, turn["id"]) for turn in started}

    last = last_turn_id(api_a, session_id)
    if len(started) == 1:
        (only,) = finished.values()
        assert last == only["id"] and only["state"]["status"] == "done"
        return
    # Both started: the second chained onto the first and cancelled it, and ran only once the
    # first had ended.
    later = finished[last]
    earlier = finished[later["previous_turn_id"]]
    assert {earlier["id"], later["id"]} == set(finished)
    assert (earlier["state"]["status"], earlier["state"]["reason"]) == ("cancelled", "cancelled-for-next-turn")
    assert later["state"]["status"] == "done"
    assert first_model_message_at(api_a, session_id, later["id"]) >= earlier["state"]["completed_at"], \
        "the later turn called the model only after the earlier one had ended"


def test_racing_new_root_turns_have_one_winner(cluster):
    api_a, api_b = cluster.a.require_api(), cluster.b.require_api()
    session_id = api_a.create_session(DEMO_AGENT)["id"]
    responses = start_together(cluster, session_id, ("[tokens:20][delay:100] root on A", "[tokens:20][delay:100] root on B"),
                               previous_turn_id="none")
    statuses = sorted(response.status_code for response in responses)
    assert statuses == [200, 409], [response.text for response in responses]
    loser = next(response for response in responses if response.status_code == 409)
    wire.assert_error(loser, 409, {"turn_running"})
    winner = next(api_a.ok(response)["data"] for response in responses if response.status_code == 200)

    # While it runs, either replica refuses another root turn and chains an `auto` one.
    for api in (api_a, api_b):
        refused = api.post(f"/api/v1/sessions/{session_id}/turns",
                           json={"input": [{"type": "user.message", "content": "no"}], "stream": False,
                                 "previous_turn_id": "none"})
        wire.assert_error(refused, 409, {"turn_running"})
    chained = api_b.start_turn(session_id, "[tokens:3] after the winner")
    assert chained["previous_turn_id"] == winner["id"]
    state = api_a.wait_terminal(session_id, winner["id"])["state"]
    assert (state["status"], state["reason"]) == ("cancelled", "cancelled-for-next-turn")
    assert api_a.wait_terminal(session_id, chained["id"])["state"]["status"] == "done"


# --------------------------------------------------------------------------------------------
# Settings and agents written through one replica
# --------------------------------------------------------------------------------------------


def test_a_provider_added_through_a_is_used_by_a_turn_through_b(cluster, fake_model):
    api_a, api_b = cluster.a.require_api(), cluster.b.require_api()
    name = wire.unique("fake-added")
    manifest = {**fake_model.provider_manifest(), "name": name}
    api_a.ok(api_a.put("/api/v1/settings/model-providers", json={"manifest": manifest}))
    agent = api_a.create_agent(wire.unique("uses-added"), model=f"{name}/fake-model")

    wire.wait_until(lambda: any(provider["name"] == name for provider in
                                api_b.ok(api_b.get("/api/v1/settings/model-providers"))["data"]),
                    what="B to load the provider A added")
    session_id = api_b.create_session(agent["name"])["id"]
    marker = wire.unique("through-b")
    run = api_b.run_turn(session_id, f"[tokens:2] {marker}")
    assert run.done["state"]["status"] == "done", run.done
    assert fake_model.client.requests_for(marker), "the turn on B called the model of A's provider"


def test_mcp_server_settings_written_through_a_are_seen_by_b(cluster):
    api_a, api_b = cluster.a.require_api(), cluster.b.require_api()
    name = wire.unique("cluster-tools")
    manifest = {"type": "remote", "name": name, "description": "First.", "url": "http://127.0.0.1:9/mcp"}
    api_a.ok(api_a.post("/api/v1/settings/mcp-servers", json={"manifest": manifest}), 201)

    def described_on_b() -> typing.Optional[str]:
        response = api_b.get(f"/api/v1/settings/mcp-servers/{name}")
        return response.json()["data"]["manifest"]["description"] if response.status_code == 200 else None

    assert wire.wait_until(described_on_b, what="B to load the MCP server A added") == "First."
    api_a.ok(api_a.put("/api/v1/settings/mcp-servers", json={"manifest": {**manifest, "description": "Second."}}))
    wire.wait_until(lambda: described_on_b() == "Second.", what="B to load the change A made")


def test_an_agent_created_on_a_is_visible_on_b(cluster):
    api_a, api_b = cluster.a.require_api(), cluster.b.require_api()
    created = api_a.create_agent(wire.unique("shared-agent"), instructions="Version one.")
    on_b = api_b.ok(api_b.get(f"/api/v1/agents/{created['id']}"))["data"]
    assert on_b == created
    assert created["id"] in [agent["id"] for agent in api_b.ok(api_b.get("/api/v1/agents"))["data"]]

    body = {"manifest": {"model": {"name": "fake/fake-model"}, "instructions": "Version two."}}
    updated = api_b.ok(api_b.put(f"/api/v1/agents/{created['id']}", json=body))["data"]
    assert api_a.ok(api_a.get(f"/api/v1/agents/{created['id']}"))["data"] == updated
    assert updated["manifest"]["instructions"] == "Version two."


# --------------------------------------------------------------------------------------------
# A sandbox on the shared sandbox root
# --------------------------------------------------------------------------------------------


def test_a_file_written_on_a_is_read_and_downloaded_on_b(cluster):
    on_a, on_b = cluster.a.require_api(), cluster.b.require_api()
    session = on_a.create_session(spec=sandbox_spec())
    marker = wire.unique("shared")
    first = on_a.run_turn(session["id"], exec_call(f"echo {marker} > from-a.txt") + " " + wire.unique("sbx"))
    size = len(marker) + 1
    assert tool_results(first) == [{"exit_code": 0, "stdout": "", "stderr": "",
                                     "files": [{"path": "/workspace/from-a.txt", "size": size}]}]
    (sandbox_id,) = sandboxes_created(first)

    second = on_b.run_turn(session["id"], exec_call("cat from-a.txt") + " " + wire.unique("sbx"))
    assert sandboxes_created(second) == [], "B found the sandbox A made"
    assert tool_results(second) == [{"exit_code": 0, "stdout": f"{marker}\n", "stderr": ""}]
    for response in (download(on_b, session["id"], first.turn_id, "/workspace/from-a.txt"),
                     gateway_download(on_b, sandbox_id, "/workspace/from-a.txt")):
        assert response.status_code == 200, response.text
        assert response.content == f"{marker}\n".encode()


def test_follow_ups_queued_on_b_run_in_order_after_a_turn_running_on_a(cluster: Cluster, fake) -> None:
    from test_control import follow_ups_run_in_order_after_the_running_turn
    follow_ups_run_in_order_after_the_running_turn(cluster.a.require_api(), cluster.b.require_api(), fake)


def test_steering_sent_to_b_joins_a_turn_running_on_a(cluster: Cluster, fake) -> None:
    from test_control import steer_joins_the_running_turn
    steer_joins_the_running_turn(cluster.a.require_api(), cluster.b.require_api(), fake)


@pytest.fixture(scope="module")
def oauth_server(workdir) -> typing.Iterator["test_mcp_oauth.OAuthServer"]:
    instance = test_mcp_oauth.OAuthServer(workdir)
    try:
        yield instance
    finally:
        instance.close()


def test_an_authorization_replaced_through_b_reaches_the_connection_a_holds(cluster, oauth_server):
    # A keeps an open connection to the MCP server with the user's access token in memory. The
    # user authorizes again through B, as someone else; B registers a client of its own (its
    # redirect URI is its own) and replaces the grant. A hears of both through the change feed:
    # it drops its cached client and closes the connection of the replaced grant, so its next
    # turn uses the new grant, not the token it held.
    api_a, api_b = cluster.a.require_api(), cluster.b.require_api()
    name = test_mcp_oauth.register(api_a, oauth_server)
    browser_a = test_mcp_oauth.Browser(cluster.a, oauth_server)
    browser_b = test_mcp_oauth.Browser(cluster.b, oauth_server)
    try:
        test_mcp_oauth.authorize_directly(api_a, browser_a, name, "alice")
        session = test_mcp_oauth.session_with(api_a, test_mcp_oauth.registry(name))
        who = test_mcp_oauth.whoami
        assert test_mcp_oauth.tool_results(api_a.run_turn(session, who())) == ["alice"]

        api_b.ok(api_b.delete(f"/api/v1/mcp-servers/{name}/authorize"))
        test_mcp_oauth.authorize_directly(api_b, browser_b, name, "bob")
        assert test_mcp_oauth.tool_results(api_b.run_turn(session, who())) == ["bob"]
        wire.wait_until(lambda: test_mcp_oauth.tool_results(api_a.run_turn(session, who())) == ["bob"],
                        timeout=15, what="A's turns to use the grant made through B")
        assert oauth_server.grants()["registrations"] == 2, "one client per replica's redirect URI"
    finally:
        browser_a.close()
        browser_b.close()


def test_chained_turns_alternating_replicas_send_the_whole_history_once(cluster, fake_model):
    # Each replica caches the histories of the turns it ran; a turn whose previous turn ran on
    # the other replica reads back only to the nearest turn cached here. The model must still
    # get the whole conversation, every earlier message once and in order.
    apis = [cluster.a.require_api(), cluster.b.require_api()]
    session_id = apis[0].create_session(DEMO_AGENT)["id"]
    markers = [wire.unique(f"chain{index}") for index in range(7)]
    for index, marker in enumerate(markers):
        run = apis[index % 2].run_turn(session_id, f"[tokens:2] {marker}", previous_turn_id="auto")
        assert run.done["state"]["status"] == "done", run.done
        (request,) = fake_model.client.requests_for(marker)
        users = [message["content"] for message in request["messages"] if message["role"] == "user"]
        texts = [content if isinstance(content, str) else "".join(part.get("text", "") for part in content)
                 for content in users]
        seen = [next((m for m in markers if m in text), None) for text in texts]
        assert seen == markers[:index + 1], f"turn {index} sent {seen}"


@pytest.fixture(scope="module")
def deaf_replica(cluster: Cluster, postgres_database: str, workdir, fake_model: FakeModelServer) -> typing.Iterator[TeamsterServer]:
    """A third replica whose live channels never re-read on their own (once an hour): all it
    shows of other replicas' changes comes from the store's change feed."""
    server = TeamsterServer(workdir, fake_model, database=postgres_database, extra_args=["--live-reread-secs", "3600"])
    try:
        yield server.start()
    finally:
        server.close()


@pytest.mark.parametrize("watcher", ["a", "deaf"])
def test_live_channels_on_a_show_what_clients_of_b_do(cluster, deaf_replica, watcher):
    """A session's channel and the caller's, held on A (or on a replica that relies on the change
    feed alone), while another client works through B: a rename, a turn, a new session, a
    follow-up, a deletion. Each change is announced on the store's change feed."""
    from test_live import LiveReader

    on = cluster.a if watcher == "a" else deaf_replica
    session = cluster.a.require_api().create_session(DEMO_AGENT)
    on_b = cluster.b.require_api()
    channel = LiveReader(on.url, session["id"])
    callers = LiveReader(on.url, None)
    try:
        on_b.ok(on_b.patch(f"/api/v1/sessions/{session['id']}", json={"title": "renamed on B"}))
        assert channel.wait_for("thread_changed")["title"] == "renamed on B"
        assert callers.wait_for("thread_changed")["title"] == "renamed on B"
        run = on_b.run_turn(session["id"], "hello from B " + wire.unique("b"))
        assert channel.wait_for("agent_end") == {"type": "agent_end", "turn_id": run.turn_id, "status": "done"}
        assert "message_end" in channel.names()
        made = on_b.create_session(DEMO_AGENT)
        assert callers.wait_for("thread_created")["session"]["id"] == made["id"]
        assert on_b.delete(f"/api/v1/sessions/{made['id']}").status_code == 204
        assert callers.wait_for("thread_deleted")["session_id"] == made["id"]
    finally:
        channel.close()
        callers.close()
