"""Slow bodies, as an attack: authenticated requests that trickle their bodies must neither fill
the server nor hold their connections for ever.

A server with `--auth api-keys`, 20 connections, a 2 s body timeout and at most 4 requests in
flight per subject. One subject opens 20 connections, each a `POST` whose head promises a body
of which it sends one byte (what a probe did, with one byte every 10 s, to a server that then
stopped answering `/healthz`): the subject gets 4 slots, the rest 429 at once in the API's error
shape; `/healthz` and `/readyz` answer, and another subject is served, while the 4 are held; the
4 are cut by the body deadline (408 in the error shape, their connections closed). Then five
subjects do it together: the total cap keeps its reserve below the connection cap, and the
health checks still answer. Runs on the suite's backend."""

from __future__ import annotations

import json
import select
import socket
import time
import typing
import urllib.parse

import httpx
import pytest

import conftest
import wire
from conftest import TeamsterServer

BODY_TIMEOUT_SECS = 3
PER_SUBJECT = 4
MAX_CONNECTIONS = 20


class Setup(typing.NamedTuple):
    server: TeamsterServer
    operator: wire.Api


@pytest.fixture(scope="module")
def setup(workdir, fake_model) -> typing.Iterator[Setup]:
    server = TeamsterServer(workdir, fake_model, [
        "--auth", "api-keys", "--no-sandbox", "--max-connections", str(MAX_CONNECTIONS),
        "--body-timeout-secs", str(BODY_TIMEOUT_SECS), "--max-requests-per-subject", str(PER_SUBJECT)])
    operator_key = conftest.cli_key(server, "root", "ops", "operator")
    try:
        server.start()
        operator = wire.Api(server.url, key=operator_key)
        yield Setup(server, operator)
        operator.close()
    finally:
        server.close()


def member_key(setup: Setup, name: str) -> str:
    made = setup.operator.post("/api/v1/keys", json={"subject": wire.unique(name), "tenant": "acme"})
    return setup.operator.ok(made, 201)["data"]["secret"]


def slow_request(url: str, key: str) -> socket.socket:
    """A connection carrying a `POST /api/v1/sessions` whose head promises 1000 bytes of body,
    of which one is sent."""
    address = urllib.parse.urlsplit(url)
    connection = socket.create_connection((address.hostname, address.port), timeout=10)
    head = (f"POST /api/v1/sessions HTTP/1.1\r\nHost: {address.netloc}\r\nAuthorization: Bearer {key}\r\n"
            "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
    connection.sendall(head.encode())
    return connection


def answer(connection: socket.socket, timeout: float) -> tuple[int, dict, bool]:
    """The status and JSON body the server sent on `connection` within `timeout`, and whether it
    then closed the connection."""
    connection.settimeout(timeout)
    received = b""
    closed = False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = connection.recv(65536)
        except socket.timeout:
            break
        except ConnectionResetError:
            closed = True
            break
        if not chunk:
            closed = True
            break
        received += chunk
        head, _, body = received.partition(b"\r\n\r\n")
        length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), None)
        if length is not None and len(body) >= length:
            connection.settimeout(2)
            try:
                closed = connection.recv(1) == b""
            except (socket.timeout, ConnectionResetError):
                closed = False
            break
    if not received:
        return 0, {}, closed
    head, _, body = received.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body) if body else {}, closed


def answered_at_once(connections: list[socket.socket], expected: int) -> tuple[list[tuple[int, dict, bool]], list[socket.socket]]:
    """Waits (well within the body timeout) until `expected` of `connections` have an answer;
    returns those answers and the connections still waiting, which must be exactly the rest."""
    readable: set[socket.socket] = set()

    def enough() -> bool:
        ready, _, _ = select.select([c for c in connections if c not in readable], [], [], 0.05)
        readable.update(ready)
        return len(readable) >= expected

    wire.wait_until(enough, timeout=BODY_TIMEOUT_SECS - 1, what=f"{expected} immediate answers")
    answers = [answer(connection, 1.0) for connection in connections if connection in readable]
    waiting = [connection for connection in connections if connection not in readable]
    assert len(waiting) == len(connections) - expected
    assert not select.select(waiting, [], [], 0)[0], "more requests were answered than expected"
    return answers, waiting


def assert_error_shape(body: dict, code: str) -> None:
    assert set(body) == {"error"} and body["error"]["code"] == code and body["error"]["message"], body


def quick_get(url: str, path: str) -> httpx.Response:
    return httpx.get(f"{url}{path}", timeout=httpx.Timeout(3.0, connect=3.0))


def test_one_subject_trickling_bodies_gets_its_share_and_is_cut(setup: Setup):
    url = setup.server.url
    attacker, other = member_key(setup, "slow"), member_key(setup, "other")
    started = time.monotonic()
    connections = [slow_request(url, attacker) for _ in range(MAX_CONNECTIONS)]
    # The subject's requests beyond its cap are answered at once: 429, the error shape, closed.
    refused, held = answered_at_once(connections, MAX_CONNECTIONS - PER_SUBJECT)
    assert [item[0] for item in refused] == [429] * (MAX_CONNECTIONS - PER_SUBJECT), refused
    for status, body, closed in refused:
        assert_error_shape(body, "too_many_requests_in_flight")
        assert closed
    # While the subject holds its share: the health checks answer, and another subject is served.
    assert time.monotonic() - started < BODY_TIMEOUT_SECS, "the checks below must run while the slow bodies are held"
    assert quick_get(url, "/healthz").status_code == 200
    assert quick_get(url, "/readyz").status_code == 200
    served = httpx.post(f"{url}/api/v1/sessions", timeout=3, headers={"authorization": f"Bearer {other}"},
                        json={"agent": {"spec": {"model": {"name": "offline/echo"}}}})
    assert served.status_code == 201, served.text
    # The held requests are cut by the body deadline: 408 in the error shape, connection closed.
    for connection in held:
        status, body, closed = answer(connection, BODY_TIMEOUT_SECS + 5)
        assert status == 408, (status, body)
        assert_error_shape(body, "request_timeout")
        assert closed
        connection.close()
    assert time.monotonic() - started < BODY_TIMEOUT_SECS + 5
    # Its slots are back: the subject is served again.
    again = httpx.get(f"{url}/api/v1/sessions", timeout=3, headers={"authorization": f"Bearer {attacker}"})
    assert again.status_code == 200, again.text


def test_many_subjects_trickling_bodies_leave_the_health_checks_their_reserve(setup: Setup):
    url = setup.server.url
    keys = [member_key(setup, f"swarm{index}") for index in range(5)]
    connections = [slow_request(url, key) for key in keys for _ in range(PER_SUBJECT)]
    # 20 connections keep 2 for the health checks: 18 requests may be in flight, the others are
    # refused at once (503 in the error shape), however many subjects share the load.
    refused, held = answered_at_once(connections, 2)
    assert len(held) == MAX_CONNECTIONS - 2
    for status, body, _ in refused:
        assert status == 503, (status, body)
        assert_error_shape(body, "server_busy")
    for _ in range(3):
        assert quick_get(url, "/healthz").status_code == 200
        assert quick_get(url, "/readyz").status_code == 200
    for connection in held:
        assert answer(connection, BODY_TIMEOUT_SECS + 5)[0] == 408
    for connection in connections:
        connection.close()
