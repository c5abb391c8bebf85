"""Attacks on a single-user server, each refused at every layer it must pass.

A web page or a network peer must not be able to run programs as the server's user or steal
provider keys: request bodies are JSON only with a JSON content type (415), the `Host` must be
one of the server's names (421, against DNS rebinding), cross-origin browser requests are
refused unless the operator allows the origin (403, with a CORS policy for allowed ones), stdio
MCP servers exist only when the operator enables them, and a stored secret never follows a
changed destination. Each test failed on the code before these defences.
"""

from __future__ import annotations

import http.server
import os
import pathlib
import threading
import typing

import httpx
import pytest

import conftest
import wire

EVIL = "http://evil.example"
PWN = {"manifest": {"type": "stdio", "name": "pwn", "description": "x", "command": "sh",
                    "args": ["-c", "id > pwned.txt"]}}


def raw(url: str, method: str, path: str, *, body: typing.Optional[bytes] = None,
        headers: typing.Optional[dict] = None) -> httpx.Response:
    """One request with exactly the given headers (httpx adds only Host and framing ones)."""
    with httpx.Client(base_url=url, timeout=wire.TIMEOUT) as client:
        return client.request(method, path, content=body, headers=headers or {})


def error_code(response: httpx.Response) -> str:
    return response.json()["error"]["code"]


@pytest.fixture
def plain(server_factory):
    """A server of the test's own, with the defaults an operator gets (no stdio MCP)."""
    return server_factory(configure=False)


def test_the_cross_site_stdio_registration_is_refused_and_runs_nothing(plain):
    body = b'{"manifest":{"type":"stdio","name":"pwn","description":"x","command":"sh","args":["-c","id > pwned.txt"]}}'
    attack = raw(plain.url, "POST", "/api/v1/settings/mcp-servers", body=body,
                 headers={"Content-Type": "text/plain", "Origin": EVIL})
    assert attack.status_code == 403 and error_code(attack) == "origin_not_allowed", attack.text
    listing = raw(plain.url, "GET", "/api/v1/mcp-servers/pwn/tools")
    assert listing.status_code == 404, listing.text
    settings = raw(plain.url, "GET", "/api/v1/settings/mcp-servers").json()["data"]
    assert [server for server in settings if server["name"] == "pwn"] == []
    assert not (pathlib.Path(plain.workdir) / "pwned.txt").exists()


@pytest.mark.parametrize("path", ["/api/v1/settings/mcp-servers", "/api/v1/agents", "/api/v1/sessions",
                                  "/v1/agents/sessions"])
def test_a_body_that_is_not_declared_json_is_415(plain, path):
    for content_type in [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"]:
        headers = {} if content_type is None else {"Content-Type": content_type}
        response = raw(plain.url, "POST", path, body=b'{"name": "x"}', headers=headers)
        assert response.status_code == 415, (content_type, response.text)
        assert response.json()["error"]["type"] == "invalid_request_error"


def test_json_declared_properly_is_read(plain):
    ok = raw(plain.url, "POST", "/api/v1/settings/model-providers", headers={"Content-Type": "application/json; charset=utf-8"},
             body=b'{"manifest": {"type": "custom", "name": "prov-a", "base_url": "http://127.0.0.1:9/v1", "models": [{"name": "m", "model_id": "m"}]}}')
    assert ok.status_code == 201, ok.text
    patch = raw(plain.url, "POST", "/api/v1/agents", headers={"Content-Type": "application/merge-patch+json"},
                body=b'{"name": "agent-a", "manifest": {"model": {"name": "offline/echo"}}}')
    assert patch.status_code == 201, patch.text
    empty = raw(plain.url, "POST", "/api/v1/sessions/missing/cancel")
    assert empty.status_code == 404, "an empty body needs no content type"


def test_stdio_servers_need_the_operator_even_from_a_same_origin_json_request(plain):
    response = raw(plain.url, "POST", "/api/v1/settings/mcp-servers", body=httpx.Request("POST", "/", json=PWN).content,
                   headers={"Content-Type": "application/json"})
    assert response.status_code == 403 and "--allow-stdio-mcp" in response.json()["error"]["message"], response.text
    settings = raw(plain.url, "GET", "/api/v1/settings/mcp-servers").json()["data"]
    assert settings == []


def test_a_stored_stdio_server_is_never_started_without_the_flag(server_factory, workdir):
    marker = pathlib.Path(workdir) / f"{wire.unique('ran')}.txt"
    manifest = {"manifest": {"type": "stdio", "name": "local", "description": "x", "command": "sh",
                             "args": ["-c", f"touch {marker}"]}}
    allowed = server_factory(extra_args=["--allow-stdio-mcp"], configure=False)
    api = allowed.require_api()
    api.ok(api.put("/api/v1/settings/mcp-servers", json=manifest))
    allowed.stop()
    # The same database, served without the flag: the stored server is listed but never run.
    allowed.extra_args = []
    allowed.start()
    api = allowed.require_api()
    listing = api.get("/api/v1/mcp-servers/local/tools")
    assert listing.status_code == 403 and "--allow-stdio-mcp" in listing.json()["error"]["message"], listing.text
    assert not marker.exists()


def test_origins(server_factory):
    allowed_origin = "https://app.example.com"
    server = server_factory(extra_args=["--allowed-origins", allowed_origin], configure=False)
    json_headers = {"Content-Type": "application/json"}
    body = b'{"manifest": {"type": "custom", "name": "prov-a", "base_url": "http://127.0.0.1:9/v1", "models": [{"name": "m", "model_id": "m"}]}}'
    # Another site, another local port, an opaque origin: refused, whatever the body.
    port = server.url.rsplit(":", 1)[1]
    for origin in [EVIL, "http://127.0.0.1:3000", "null", f"http://localhost.evil.example:{port}"]:
        refused = raw(server.url, "PUT", "/api/v1/settings/model-providers", body=body, headers={**json_headers, "Origin": origin})
        assert refused.status_code == 403 and error_code(refused) == "origin_not_allowed", (origin, refused.text)
    assert raw(server.url, "GET", "/api/v1/settings/model-providers").json()["data"] == []
    # The server's own origin is not cross-origin.
    same = raw(server.url, "PUT", "/api/v1/settings/model-providers", body=body, headers={**json_headers, "Origin": server.url})
    assert same.status_code == 200, same.text
    # An allowed origin gets a preflight answer and CORS headers.
    preflight = raw(server.url, "OPTIONS", "/api/v1/sessions", headers={
        "Origin": allowed_origin, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type, authorization"})
    assert preflight.status_code == 204, preflight.text
    assert preflight.headers["access-control-allow-origin"] == allowed_origin
    assert "POST" in preflight.headers["access-control-allow-methods"]
    assert preflight.headers["access-control-allow-headers"] == "content-type, authorization"
    listed = raw(server.url, "GET", "/api/v1/sessions", headers={"Origin": allowed_origin})
    assert listed.status_code == 200 and listed.headers["access-control-allow-origin"] == allowed_origin
    assert "origin" in listed.headers["vary"].lower()
    # A refused origin's preflight gets no CORS answer.
    evil_preflight = raw(server.url, "OPTIONS", "/api/v1/sessions", headers={
        "Origin": EVIL, "Access-Control-Request-Method": "POST"})
    assert evil_preflight.status_code == 403 and "access-control-allow-origin" not in evil_preflight.headers


def test_cross_site_requests_without_origin(plain):
    # An <img> or a link from another site carries no Origin, but the browser says where it comes from.
    for site in ["cross-site", "same-site"]:
        response = raw(plain.url, "GET", "/api/v1/mcp-servers/x/tools", headers={"Sec-Fetch-Site": site})
        assert response.status_code == 403 and error_code(response) == "origin_not_allowed", response.text
    assert raw(plain.url, "GET", "/api/v1/sessions", headers={"Sec-Fetch-Site": "same-origin"}).status_code == 200
    assert raw(plain.url, "GET", "/api/v1/sessions", headers={"Sec-Fetch-Site": "none"}).status_code == 200
    # The authorization server sends the browser back across sites: the OAuth pages stay reachable.
    callback = raw(plain.url, "GET", "/api/v1/mcp-servers/oauth/callback?state=x&code=y",
                   headers={"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"})
    assert callback.status_code not in (403, 421), callback.text
    authorize = raw(plain.url, "GET", "/api/v1/mcp-servers/gh/authorize?ticket=t",
                    headers={"Sec-Fetch-Site": "cross-site", "Origin": EVIL})
    assert authorize.status_code not in (403, 421), authorize.text


def test_hosts(server_factory):
    server = server_factory(extra_args=["--allowed-hosts", "agents.example.com"], configure=False)
    port = server.url.rsplit(":", 1)[1]
    for host in ["evil.example", f"rebound.evil.example:{port}", "10.0.0.1"]:
        response = raw(server.url, "GET", "/api/v1/sessions", headers={"Host": host})
        assert response.status_code == 421 and error_code(response) == "host_not_allowed", (host, response.text)
    for host in [f"127.0.0.1:{port}", f"localhost:{port}", "agents.example.com", "AGENTS.example.com:443"]:
        assert raw(server.url, "GET", "/api/v1/sessions", headers={"Host": host}).status_code == 200, host


# --------------------------------------------------------------------------------------------
# Stored secrets never follow a changed destination
# --------------------------------------------------------------------------------------------


class Listener(http.server.ThreadingHTTPServer):
    """Records the headers of every request it receives, and answers 500."""

    def __init__(self) -> None:
        self.received: list[dict] = []
        listener = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the standard library's name)
                listener.received.append(dict(self.headers))
                self.send_response(500)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST  # noqa: N815

            def log_message(self, *args: typing.Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def close(self) -> None:
        self.shutdown()
        self.server_close()


@pytest.fixture
def listener() -> typing.Iterator[Listener]:
    instance = Listener()
    try:
        yield instance
    finally:
        instance.close()


def test_a_provider_key_never_follows_a_changed_base_url(server_factory, listener):
    server = server_factory()
    api = server.require_api()
    manifest = server.fake.provider_manifest()
    moved = {**manifest, "base_url": f"{listener.url}/v1", "auth": {"api_key": "********"}}
    refused = api.put("/api/v1/settings/model-providers", json={"manifest": moved})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "manifest.auth.api_key", refused.text
    assert "base_url changed" in refused.json()["error"]["message"]
    # Nothing changed: turns still go to the original endpoint, and the listener heard nothing.
    session = api.create_session("demo")
    assert api.run_turn(session["id"], "still here").done["state"]["status"] == "done"
    assert listener.received == []
    # With the key sent again, the new endpoint gets the new key only.
    resent = {**moved, "auth": {"api_key": "sk-new-key"}}
    api.ok(api.put("/api/v1/settings/model-providers", json={"manifest": resent}))
    api.run_turn(session["id"], "to the new endpoint")
    assert listener.received, "the turn reached the new endpoint"
    assert all(wire.API_KEY_SECRET not in str(headers) for headers in listener.received)
    assert any("sk-new-key" in str(headers) for headers in listener.received)


def test_an_mcp_header_secret_never_follows_a_changed_url(plain, listener):
    api = plain.require_api()
    secret = "Bearer mcp-s3cret"
    first = {"type": "remote", "name": "tools", "description": "x", "url": "http://127.0.0.1:9/mcp",
             "auth": {"type": "header", "headers": {"Authorization": secret}}}
    api.ok(api.post("/api/v1/settings/mcp-servers", json={"manifest": first}), 201)
    moved = {**first, "url": f"{listener.url}/mcp", "auth": {"type": "header", "headers": {"Authorization": "********"}}}
    refused = api.put("/api/v1/settings/mcp-servers", json={"manifest": moved})
    assert refused.status_code == 400 and "dropped when the server's URL" in refused.json()["error"]["message"], refused.text
    api.get("/api/v1/mcp-servers/tools/tools")  # uses the stored (unchanged) server
    assert listener.received == []
    stored = api.ok(api.get("/api/v1/settings/mcp-servers/tools"))["data"]
    assert stored["manifest"]["url"] == "http://127.0.0.1:9/mcp"


# --------------------------------------------------------------------------------------------
# Shutdown and connections
# --------------------------------------------------------------------------------------------

FAST_LEASES = ("--lease-ttl-ms", "1000", "--lease-renew-ms", "200", "--takeover-interval-ms", "200")


def test_sigterm_ends_streams_at_once_and_the_turn_is_resumed(server_factory):
    import signal
    import time

    from truefoundry_gateway_sdk import UserMessage
    from truefoundry_gateway_sdk.agents import AgentSessionClient

    own = server_factory(extra_args=FAST_LEASES)
    session = AgentSessionClient(base_url=own.gateway_url, api_key="K", timeout=30).create_session(agent_name="demo")
    prepared = session.prepare_turn(input=[UserMessage(content="[tokens:300][delay:50] a long answer")])
    received = []
    stopped_at = None
    # The real client reads until the server closes the stream; SIGTERM comes mid-turn.
    for item in prepared.execute():
        received.append(item)
        if stopped_at is None and sum(i.event.type == "model.message.delta" for i in received) >= 3:
            own.process.popen.send_signal(signal.SIGTERM)
            stopped_at = time.monotonic()
    ended = time.monotonic()
    assert stopped_at is not None, "the turn streamed"
    assert ended - stopped_at < 3, f"the stream ended {ended - stopped_at:.1f}s after SIGTERM"
    assert received[-1].event.type != "turn.done", "the turn was still running"
    own.process.popen.wait(timeout=8)
    exited = time.monotonic()
    assert exited - stopped_at < 8, f"the server exited {exited - stopped_at:.1f}s after SIGTERM"
    assert own.process.popen.returncode == 0

    # Restarted on the same database, the server takes the turn over and finishes it; the client
    # resumes after the last sequence number it saw.
    own.start()
    api = own.require_api()
    turn = api.wait_terminal(session.id, prepared.id, timeout=30)
    assert turn["state"]["status"] == "done", turn["state"]
    last = received[-1].sequence_number
    rest = api.subscribe(session.id, prepared.id, after=last)
    wire.assert_sse_framing(rest, first=last + 1)


def test_half_open_connections_do_not_stop_the_server(server_factory):
    import socket
    import time

    own = server_factory(extra_args=["--header-timeout-secs", "2"], configure=False)
    host, port = own.url.removeprefix("http://").split(":")
    pid = own.process.popen.pid

    def open_files() -> int:
        return len(os.listdir(f"/proc/{pid}/fd"))

    baseline = open_files()
    sockets = []
    try:
        for _ in range(1000):
            half = socket.create_connection((host, int(port)), timeout=5)
            half.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")  # never finished
            sockets.append(half)
        started = time.monotonic()
        assert httpx.get(f"{own.url}/healthz", timeout=5).status_code == 200
        assert time.monotonic() - started < 2, "the health check answered while 1,000 connections hung"
        # The server closes each of them once the header timeout has passed.
        deadline = time.monotonic() + 10
        closed = 0
        for half in sockets:
            half.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                # Whatever the server may say first, the connection ends with EOF (or a reset).
                while half.recv(1024):
                    pass
                closed += 1
            except ConnectionResetError:
                closed += 1
            except socket.timeout:
                pass
        assert closed == len(sockets), f"{len(sockets) - closed} connections were still open"
        wire.wait_until(lambda: open_files() <= baseline + 20, timeout=10, what="the descriptors to be released")
    finally:
        for half in sockets:
            half.close()


# --------------------------------------------------------------------------------------------
# Smaller holes
# --------------------------------------------------------------------------------------------


def test_a_turn_on_a_deleted_agent_is_refused_up_front(api):
    name = wire.unique("doomed").lower().replace("_", "-")
    agent = api.create_agent(name)
    session = api.create_session(name)
    api.ok(api.delete(f"/api/v1/agents/{agent['id']}"))
    for stream in (True, False):
        response = api.post(f"/api/v1/sessions/{session['id']}/turns",
                            json={"input": [{"type": "user.message", "content": "hi"}], "stream": stream})
        assert response.status_code == 412, response.text
        assert "was deleted" in response.json()["error"]["message"]
    assert api.ok(api.get(f"/api/v1/sessions/{session['id']}/turns"))["data"] == [], "nothing was stored"


@pytest.mark.parametrize("model, says", [
    ("nowhere/gpt-4o", "there is no model provider named \"nowhere\""),
    ("fake/" + "m" * 300, "at most 256 bytes"),
])
def test_agents_name_only_models_this_server_can_reach(api, model, says):
    name = wire.unique("model").lower().replace("_", "-")
    for path, body in [
        ("/api/v1/agents", {"name": name, "manifest": {"model": {"name": model}}}),
        ("/api/v1/sessions", {"agent": {"spec": {"model": {"name": model}}}}),
        ("/v1/agents/draft-sessions", {"agent_spec": {"model": {"name": model}}}),
    ]:
        response = api.post(path, json=body)
        assert response.status_code == 400, (path, response.text)
        error = response.json()["error"]
        assert says in error["message"] and error["param"] == "model.name", (path, error)
    if "nowhere" in model:
        assert "fake" in error["message"] and "offline" in error["message"], "the configured providers are listed"


def test_errors_do_not_echo_megabytes(api):
    response = api.post("/api/v1/agents", json={"name": "x" * 1_000_000, "manifest": {"model": {"name": "offline/echo"}}})
    assert response.status_code == 400
    assert len(response.content) < 2_000, f"a {len(response.content)}-byte error"
    assert response.json()["error"]["message"].endswith("…")


def test_a_running_turn_conflict_says_when_to_retry(api):
    session = api.create_session("demo")
    running = api.start_turn(session["id"], "[tokens:100][delay:50] busy")
    conflict = api.post(f"/api/v1/sessions/{session['id']}/turns",
                        json={"input": [{"type": "user.message", "content": "me too"}], "previous_turn_id": "none",
                              "stream": False})
    assert conflict.status_code == 409 and error_code(conflict) == "turn_running", conflict.text
    assert conflict.headers["retry-after"] == "1"
    api.ok(api.post(f"/api/v1/sessions/{session['id']}/cancel", json={}))
    assert api.wait_terminal(session["id"], running["id"])["state"]["status"] == "cancelled"


@pytest.mark.skipif(conftest.BACKEND != "sqlite", reason="a SQLite database file")
def test_a_second_process_cannot_open_the_same_database(server_factory, tmp_path):
    import subprocess

    first = server_factory(configure=False)
    second = subprocess.run(
        [str(conftest.binary("TEAMSTER_BIN", "target/debug/teamster")), "serve", "--listen", "127.0.0.1:0",
         "--database", first.database, "--data-dir", str(tmp_path), "--no-example"],
        capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert second.returncode != 0
    assert "in use by another process" in second.stderr, second.stderr
    assert raw(first.url, "GET", "/healthz").status_code == 200


@pytest.mark.skipif(conftest.BACKEND != "sqlite", reason="a SQLite database file")
def test_the_secret_key_stays_beside_a_database_given_elsewhere(tmp_path, fake_model):
    data_dir = tmp_path / "data"
    elsewhere = tmp_path / "elsewhere"
    data_dir.mkdir()
    elsewhere.mkdir()
    # The server's data directory is `data_dir`; its database is elsewhere.
    server = conftest.TeamsterServer(data_dir, fake_model, db_path=elsewhere / "teamster.sqlite")
    try:
        server.start()
        assert (elsewhere / "secret.key").is_file()
        assert not (data_dir / "secret.key").exists(), "nothing is written to the data directory"
    finally:
        server.close()


def test_agents_are_addressed_by_id_or_name(api):
    name = wire.unique("named").lower().replace("_", "-")
    agent = api.create_agent(name)
    by_name = api.ok(api.get(f"/api/v1/agents/{name}"))["data"]
    assert by_name["id"] == agent["id"]
    assert api.ok(api.get(f"/api/v1/agents/{agent['id']}"))["data"]["name"] == name
    same = {"model": {"name": "fake/fake-model"}, "instructions": "You are a test agent."}
    unchanged = api.ok(api.put(f"/api/v1/agents/{name}", json={"manifest": same}))["data"]
    assert unchanged["version"] == agent["version"], "an unchanged manifest keeps the version"
    changed = api.ok(api.put(f"/api/v1/agents/{name}", json={"manifest": {**same, "instructions": "Other."}}))["data"]
    assert changed["version"] == agent["version"] + 1
    missing = api.get("/api/v1/agents/no-such-agent")
    assert missing.status_code == 404 and "id or name" in missing.json()["error"]["message"]
    api.ok(api.delete(f"/api/v1/agents/{name}"))
    assert api.get(f"/api/v1/agents/{agent['id']}").status_code == 404
