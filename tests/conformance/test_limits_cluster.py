"""Limits across replicas: two `teamster serve` replicas, A and B, on one PostgreSQL database
hold a subject to one request rate, one running-turn quota and one tenant budget together, as
one replica does (the counts live in the database, migration 0010):
- requests sent in round robin to A and B get their first 429 at the configured total, not at
  twice it, and then both replicas refuse;
- with a quota of one running turn, a turn running on A makes B refuse a turn in another
  session (429), and B accepts once it has ended; of three turns created at the same instant
  through both replicas exactly one is accepted;
- a tenant budget spent by a turn on A ends the next turn on B cleanly: `turn.done` in `error`
  naming the budget before any model call, with A's turn and its events all kept;
- an API key revoked through A is refused by B too, although B cached its record.

Each test gets a database of its own from TEAMSTER_TEST_POSTGRES_URL (scripts/test sets it),
and fails without it. No timing is asserted: waits are bounded, and the rate limit's bounds
allow for a token refilled while the requests are sent.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import subprocess
import typing

import pytest

import conftest
import wire
from conftest import FakeModelServer, TeamsterServer, create_postgres_database, drop_postgres_database


class Pair(typing.NamedTuple):
    a: TeamsterServer
    b: TeamsterServer


@pytest.fixture
def pair_factory(workdir, fake_model: FakeModelServer) -> typing.Iterator[typing.Callable[..., Pair]]:
    """`pair_factory(*args)`: A (configured: the fake provider, the `demo` agent) and B, both
    with `args`, on a fresh PostgreSQL database."""
    made: list[tuple[Pair, str]] = []

    def make(*extra_args: str) -> Pair:
        database = create_postgres_database("limits_cluster")
        a = TeamsterServer(workdir, fake_model, list(extra_args), database=database)
        b = TeamsterServer(workdir, fake_model, list(extra_args), database=database)
        made.append((Pair(a, b), database))
        a.start().configure()
        b.start()
        return Pair(a, b)

    try:
        yield make
    finally:
        for pair, database in made:
            pair.b.close()
            pair.a.close()
            drop_postgres_database(database)


def assert_429(response) -> dict:
    assert response.status_code == 429, response.text[:300]
    assert int(response.headers["retry-after"]) >= 1
    error = response.json()["error"]
    assert isinstance(error["message"], str) and isinstance(error["type"], str) and isinstance(error["code"], str)
    return error


def test_request_rate_is_one_limit_across_replicas(pair_factory):
    # 20 a minute: one request back every 3 s after the burst.
    pair = pair_factory("--rate-limit-per-minute", "20")
    apis = [pair.a.require_api(), pair.b.require_api()]
    accepted = 0
    refused = None
    for api in itertools.islice(itertools.cycle(apis), 60):
        response = api.get("/api/v1/agents")
        if response.status_code == 429:
            refused = response
            break
        assert response.status_code == 200, response.text[:300]
        accepted += 1
    assert refused is not None, "no 429 after 60 requests at 20 a minute"
    # The burst is 20, of which configuring A took two; one more may have refilled meanwhile.
    # Limits per replica would have let about 38 through.
    assert 18 <= accepted <= 19, accepted
    error = assert_429(refused)
    assert error["code"] == "rate_limited" and "20 per minute" in error["message"]
    # Both replicas refuse now, whichever refused first.
    assert [api.get("/api/v1/agents").status_code for api in apis] == [429, 429]
    # Health checks are not counted.
    assert all(api.get("/healthz").status_code == 200 for api in apis)


def test_running_turn_quota_is_one_limit_across_replicas(pair_factory):
    pair = pair_factory("--max-concurrent-turns-per-subject", "1")
    on_a, on_b = pair.a.require_api(), pair.b.require_api()
    first = on_a.create_session("demo")
    second = on_b.create_session("demo")
    # About 5 s of streaming, on A.
    slow = on_a.start_turn(first["id"], "[delay:100][tokens:50] slow")
    refused = on_b.post(f"/api/v1/sessions/{second['id']}/turns",
                        json={"input": [{"type": "user.message", "content": "hello"}], "stream": False})
    error = assert_429(refused)
    assert "running" in error["message"] and "1" in error["message"]
    # Once A's turn has ended, B accepts.
    assert on_a.wait_terminal(first["id"], slow["id"])["state"]["status"] == "done"
    accepted = on_b.start_turn(second["id"], "hello")
    assert on_b.wait_terminal(second["id"], accepted["id"])["state"]["status"] == "done"

    # Turns created at the same instant in three sessions, through A, B and A: exactly one
    # gets the place.
    sessions = [on_a.create_session("demo")["id"] for _ in range(3)]
    urls = [pair.a.url, pair.b.url, pair.a.url]
    body = {"input": [{"type": "user.message", "content": "[delay:100][tokens:20] race"}], "stream": False}

    def create(target: tuple[str, str]):
        url, session_id = target
        client = wire.Api(url)
        try:
            return client.post(f"/api/v1/sessions/{session_id}/turns", json=body)
        finally:
            client.close()

    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(create, zip(urls, sessions)))
    assert sorted(answer.status_code for answer in answers) == [200, 429, 429], [a.text[:200] for a in answers]
    for session_id, answer in zip(sessions, answers):
        if answer.status_code == 200:
            assert on_b.wait_terminal(session_id, answer.json()["data"]["id"])["state"]["status"] == "done"


def test_tenant_budget_spent_on_one_replica_ends_the_next_turn_on_the_other(pair_factory, fake):
    pair = pair_factory("--tenant-token-budget", "40")
    on_a, on_b = pair.a.require_api(), pair.b.require_api()
    spender = on_a.create_session("demo")
    # One call spends more than 40 tokens (50 output chunks); it was allowed to start.
    run = on_a.run_turn(spender["id"], "[tokens:50] spend")
    assert run.done["state"]["status"] == "done"
    assert run.done["state"]["metrics"]["total_tokens"] > 40

    other = on_b.create_session("demo")
    marker = wire.unique("tenant-across")
    started = on_b.start_turn(other["id"], f"{marker} hello")
    state = on_b.wait_terminal(other["id"], started["id"])["state"]
    assert state["status"] == "error", state
    assert "tenant \"local\"'s token budget of 40 tokens" in state["message"], state["message"]
    assert fake.requests_for(marker) == [], "the turn on B made a model call"
    # B's turn ended cleanly: its stream, on either replica, ends with that `turn.done`.
    for api in (on_a, on_b):
        replay = wire.TurnRun(api.subscribe(other["id"], started["id"]))
        assert replay.done["state"] == state
    # Nothing was lost: A's turn and its events, read through B.
    listed, _ = on_b.list_all(f"/api/v1/sessions/{spender['id']}/events", limit=100)
    types = [item["event"]["type"] for item in listed]
    assert types.count("model.message") == 1 and types.count("turn.done") == 1, types
    assert on_b.get_turn(spender["id"], run.turn_id)["state"] == run.done["state"]


def test_a_revoked_key_is_refused_on_every_replica(workdir, fake_model):
    """Replicas cache the key records they authenticated with; a revocation on A is refused on A
    at once and on B as soon as the change feed tells it, long before a cached record would
    expire (30 s)."""
    database = create_postgres_database("limits_cluster_keys")
    a = TeamsterServer(workdir, fake_model, ["--auth", "api-keys"], database=database)
    b = TeamsterServer(workdir, fake_model, ["--auth", "api-keys"], database=database)
    try:
        program = str(conftest.binary("TEAMSTER_BIN", "target/debug/teamster"))
        made = subprocess.run([program, "keys", "create", "--subject", "root", "--tenant", "acme", "--role", "operator",
                               "--database", database, "--data-dir", str(workdir)],
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=60, text=True)
        assert made.returncode == 0, made.stderr
        a.start()
        b.start()
        admin = wire.Api(a.url, key=made.stdout.strip())
        members = []
        for name in ("ann", "bob"):
            created = admin.ok(admin.post("/api/v1/keys", json={"subject": name, "tenant": "acme", "role": "member"}), 201)
            key = created["data"]["secret"]
            members.append((created["data"]["id"], key))
        clients = {(name, server.url): wire.Api(server.url, key=key)
                   for name, (_, key) in zip(("ann", "bob"), members) for server in (a, b)}
        # Both keys work on both replicas (and are cached there now).
        for client in clients.values():
            for _ in range(3):
                assert client.get("/api/v1/agents").status_code == 200
        # Ann's key is revoked through A: refused on A at once, and on B once it hears of it.
        ann_id = members[0][0]
        assert admin.delete(f"/api/v1/keys/{ann_id}").status_code == 200
        assert clients[("ann", a.url)].get("/api/v1/agents").status_code == 401
        wire.wait_until(lambda: clients[("ann", b.url)].get("/api/v1/agents").status_code == 401,
                        timeout=10, what="B to refuse the revoked key")
        # Bob's key is untouched on both.
        assert clients[("bob", a.url)].get("/api/v1/agents").status_code == 200
        assert clients[("bob", b.url)].get("/api/v1/agents").status_code == 200
        for client in clients.values():
            client.close()
        admin.close()
    finally:
        b.close()
        a.close()
        drop_postgres_database(database)
