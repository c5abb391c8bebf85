"""MCP servers behind OAuth, against the real OAuth-protected test server
`tests/mcp_servers/oauth_server.py` (authorization server and MCP server in one process, on the
official Python `mcp` package), registered with `auth: {"type": "dcr"}`.

Covered: a turn that needs a server the user has not authorized pauses before any model call
with `mcp.auth_required` (in the stream and in `required_actions`, its `auth_url` on this
server); the browser round trip (our authorize route, a 302 to the authorization server, its
redirect to our callback); a turn with an empty input resumes the paused turn and the tool runs
with the user's token; `GET/DELETE /api/v1/mcp-servers/{name}/authorize` and the auth status in
the listings; an expired access token is refreshed; bad, replayed and refused callbacks are
400s; `return_to`; tokens used only with the URL they were issued for; every step taken up by a
restarted server; no token, refresh token or client secret in the database file or the log.

The browser is an httpx client that does not follow redirects. The test server's `/authorize`
shows no login page: `login_as=<user>` logs that user in and redirects back at once. There is
one local user (the spec has no per-user credentials without OIDC), so keeping two users apart
is tested in Rust (`crates/teamster-service/tests/mcp_oauth.rs`).
"""

from __future__ import annotations

import json
import pathlib
import time
import typing
import urllib.parse

import httpx
import pytest

import conftest
import wire
from python_servers import PythonServer
from truefoundry_gateway_sdk import UserMessage
from truefoundry_gateway_sdk.agents import McpAuthRequiredEvent, TurnDoneEvent, TurnStateDone

CALLBACK_PATH = "/api/v1/mcp-servers/oauth/callback"


# --------------------------------------------------------------------------------------------
# Fixtures and helpers
# --------------------------------------------------------------------------------------------


class OAuthServer(PythonServer):
    """oauth_server.py on a free loopback port."""

    def __init__(self, workdir: pathlib.Path, *args: str) -> None:
        super().__init__(workdir, "oauth_server.py", *args)
        self.url = f"{self.base}/mcp"

    def grants(self) -> dict:
        return httpx.get(f"{self.base}/test/grants", timeout=wire.TIMEOUT).json()

    def secrets(self) -> list[str]:
        issued = httpx.get(f"{self.base}/test/secrets", timeout=wire.TIMEOUT).json()
        return issued["access_tokens"] + issued["refresh_tokens"] + issued["client_secrets"]


@pytest.fixture(scope="module")
def oauth(workdir: pathlib.Path) -> typing.Iterator[OAuthServer]:
    instance = OAuthServer(workdir)
    try:
        yield instance
    finally:
        instance.close()


@pytest.fixture(scope="module")
def short_lived(workdir: pathlib.Path) -> typing.Iterator[OAuthServer]:
    """An authorization server whose access tokens live two seconds."""
    instance = OAuthServer(workdir, "--token-ttl", "2")
    try:
        yield instance
    finally:
        instance.close()


def register(api: wire.Api, oauth_server: OAuthServer) -> str:
    """The OAuth server under a fresh name (each name has its own client and grants)."""
    name = wire.unique("oauth")
    manifest = {"type": "remote", "name": name, "description": "OAuth-protected test tools.",
                "url": oauth_server.url, "auth": {"type": "dcr"}}
    created = api.ok(api.post("/api/v1/settings/mcp-servers", json={"manifest": manifest}), 201)["data"]
    assert created["auth_status"] == {"status": "auth_required"}
    return name


def registry(name: str) -> dict:
    return {"type": "truefoundry-mcp-registry", "name": name, "preload": True}


def session_with(api: wire.Api, *servers: dict) -> str:
    return api.create_session(spec={"model": {"name": "fake/fake-model"}, "mcp_servers": list(servers)})["id"]


def whoami(marker: str = "") -> str:
    return f"[tool:whoami {{}}] {marker or wire.unique('who')}"


def events(run: wire.TurnRun, kind: str) -> list[dict]:
    return [event for event in wire.fold_stream(run.stream.payloads) if event["type"] == kind]


def pause(api: wire.Api, session_id: str, text: str) -> tuple[wire.TurnRun, dict]:
    """Runs a turn that must pause for authorization; answers it and its one auth entry."""
    run = api.run_turn(session_id, text)
    wire.assert_sse_framing(run.stream)
    state = run.done["state"]
    assert state["status"] == "done", state
    (action,) = state["required_actions"]
    assert action["type"] == "mcp.auth_required"
    assert events(run, "mcp.auth_required") == [action]
    assert not events(run, "model.message"), "no model call before the authorization"
    (entry,) = action["mcp_servers"]
    return run, entry


def resume(api: wire.Api, session_id: str) -> wire.TurnRun:
    """A turn with an empty input, which resumes a paused one."""
    result = api.stream("POST", f"/api/v1/sessions/{session_id}/turns", json={"input": []})
    assert result.status == 200, f"{result.status} {result.body[:500]!r}"
    run = wire.TurnRun(result)
    wire.assert_sse_framing(run.stream)
    return run


def error(response: typing.Any, status: int, param: typing.Optional[str] = None) -> dict:
    """The spec's error body with `status`, naming `param` when given."""
    body = wire.assert_error(response, status)
    if param is not None:
        assert body.get("param") == param, body
    return body


def tool_results(run: wire.TurnRun) -> list[str]:
    return [event["content"] for event in events(run, "tool.response")]


class Browser:
    """Follows our authorize link to the authorization server and back, one hop at a time."""

    def __init__(self, server: conftest.TeamsterServer, oauth_server: OAuthServer) -> None:
        self.server = server
        self.oauth = oauth_server
        self.http = httpx.Client(timeout=wire.TIMEOUT, follow_redirects=False)

    def to_authorization_server(self, auth_url: str) -> str:
        """Opens an `auth_url`: a 302 to the authorization server, whose URL is answered."""
        answer = self.http.get(auth_url)
        assert answer.status_code == 302, answer.text
        assert answer.headers["cache-control"] == "no-store"
        location = answer.headers["location"]
        self.check_authorization_url(location)
        return location

    def check_authorization_url(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        assert f"{parts.scheme}://{parts.netloc}{parts.path}" == f"{self.oauth.base}/authorize", url
        query = urllib.parse.parse_qs(parts.query)
        assert query["redirect_uri"] == [f"{self.server.url}{CALLBACK_PATH}"]
        assert query["response_type"] == ["code"] and query["code_challenge_method"] == ["S256"]
        assert query["resource"] == [self.oauth.url]
        assert len(query["state"][0]) >= 32 and len(query["code_challenge"][0]) >= 43

    def back_to_callback(self, authorization_url: str, user: typing.Optional[str]) -> str:
        """Logs in at the authorization server (or not): its redirect to our callback."""
        url = authorization_url + (f"&login_as={urllib.parse.quote(user)}" if user else "")
        answer = self.http.get(url)
        assert answer.status_code == 302, answer.text
        location = answer.headers["location"]
        assert location.startswith(f"{self.server.url}{CALLBACK_PATH}?"), location
        return location

    def authorize(self, auth_url: str, user: str = "alice") -> httpx.Response:
        """The whole round trip; answers the callback's response."""
        callback = self.back_to_callback(self.to_authorization_server(auth_url), user)
        return self.http.get(callback)

    def close(self) -> None:
        self.http.close()


@pytest.fixture
def browser(server: conftest.TeamsterServer, oauth: OAuthServer) -> typing.Iterator[Browser]:
    instance = Browser(server, oauth)
    try:
        yield instance
    finally:
        instance.close()


def authorize_directly(api: wire.Api, browser: Browser, name: str, user: str = "alice") -> None:
    """Authorizes through `GET .../authorize` (the settings page's way), without a turn."""
    status = api.ok(api.get(f"/api/v1/mcp-servers/{name}/authorize"))
    assert status["status"] == "auth_required", status
    browser.check_authorization_url(status["authorization_url"])
    callback = browser.back_to_callback(status["authorization_url"], user)
    assert api.ok(browser.http.get(callback)) == {"success": True}


# --------------------------------------------------------------------------------------------
# The round trip
# --------------------------------------------------------------------------------------------


def test_the_gateway_client_sees_the_pause_and_resumes_after_authorization(client, api, fake, server, oauth, browser):
    name = register(api, oauth)
    agent = wire.unique("oauth-agent")
    api.ok(api.post("/api/v1/agents", json={"name": agent, "manifest": {
        "model": {"name": "fake/fake-model"}, "mcp_servers": [registry(name)]}}), 201)
    session = client.create_session(agent_name=agent)
    marker = wire.unique("who")
    first = session.prepare_turn(input=[UserMessage(content=whoami(marker))])
    items = list(first.execute())

    required = [item.event for item in items if isinstance(item.event, McpAuthRequiredEvent)]
    assert len(required) == 1
    assert required[0].thread_id is None
    (entry,) = required[0].mcp_servers
    assert (entry.id, entry.name) == (f"mcp:{name}", name)
    assert entry.auth_url.startswith(f"{server.url}/api/v1/mcp-servers/{name}/authorize?ticket=v1.")
    done = items[-1].event
    assert isinstance(done, TurnDoneEvent) and isinstance(done.state, TurnStateDone)
    assert [action.id for action in done.state.required_actions] == [required[0].id]
    assert done.state.output is None
    assert fake.requests_for(marker) == [], "the model is not called before the authorization"

    callback = browser.authorize(entry.auth_url)
    assert callback.status_code == 200 and callback.json() == {"success": True}

    second = session.prepare_turn(input=[])
    items = list(second.execute())
    assert second.previous_turn_id == first.id
    responses = [item.event for item in items if item.event.type == "tool.response"]
    assert [response.content for response in responses] == ["alice"]
    (initialize,) = [item.event for item in items if item.event.type == "mcp.initialize"]
    assert [(server_init.name, getattr(server_init, "error", None)) for server_init in initialize.mcp_servers] == [(name, None)]
    final = items[-1].event
    assert final.state.status == "done" and final.state.required_actions == []
    assert final.state.output.content == "Tool result: alice"
    # The resumed turn ran the model on the paused turn's message.
    assert len(fake.requests_for(marker)) == 2


def test_the_native_api_round_trip_with_the_auth_status(api, server, oauth, browser):
    name = register(api, oauth)
    session = session_with(api, registry(name))
    run, entry = pause(api, session, whoami())
    assert entry["auth_url"].startswith(f"{server.url}/api/v1/mcp-servers/{name}/authorize?ticket=")
    assert api.get_turn(session, run.turn_id)["state"]["required_actions"][0]["mcp_servers"] == [entry]

    # Nothing else resumes a pause: decisions name nothing that waits.
    decision = {"type": "user.tool_approval", "thread_id": "main", "tool_call_id": "call_x",
                "approval": {"status": "allow"}}
    error(api.post(f"/api/v1/sessions/{session}/turns", json={"input": [decision]}), 400)

    # Still not authorized: the empty turn pauses again, with a fresh link.
    again = resume(api, session)
    (action,) = again.done["state"]["required_actions"]
    assert action["type"] == "mcp.auth_required" and action["mcp_servers"][0]["auth_url"] != entry["auth_url"]

    assert browser.authorize(action["mcp_servers"][0]["auth_url"]).json() == {"success": True}
    resumed = resume(api, session)
    assert resumed.done["state"]["status"] == "done", resumed.done
    assert tool_results(resumed) == ["alice"]
    assert resumed.done["state"]["output"]["content"] == "Tool result: alice"

    # The status follows the user's grant everywhere it is shown.
    assert api.ok(api.get(f"/api/v1/mcp-servers/{name}/authorize")) == {"status": "authenticated"}
    setting = api.ok(api.get(f"/api/v1/settings/mcp-servers/{name}"))["data"]
    assert setting["auth_status"] == {"status": "authenticated"} and setting["manifest"]["auth"] == {"type": "dcr"}
    (available,) = [item for item in api.ok(api.get("/api/v1/mcp-servers"))["data"] if item["name"] == name]
    assert available["auth"] == {"type": "dcr"} and available["auth_status"] == {"status": "authenticated"}

    # A later turn and a new session need no authorization; one registration served them all.
    assert tool_results(api.run_turn(session, whoami())) == ["alice"]
    assert tool_results(api.run_turn(session_with(api, registry(name)), whoami())) == ["alice"]

    # Listing the server's tools uses the user's token too.
    tools = api.ok(api.get(f"/api/v1/mcp-servers/{name}/tools"))["data"]
    assert {tool["name"] for tool in tools} == {"whoami", "echo"}

    # Disconnecting forgets the tokens: the user is asked again.
    disconnected = api.ok(api.delete(f"/api/v1/mcp-servers/{name}/authorize"))["data"]
    assert disconnected["name"] == name and disconnected["auth_status"] == {"status": "auth_required"}
    pause(api, session, whoami())
    error(api.get(f"/api/v1/mcp-servers/{name}/tools"), 422)


def test_tokens_are_only_sent_to_the_url_they_were_issued_for(api, oauth, browser):
    name = register(api, oauth)
    authorize_directly(api, browser, name)
    assert api.ok(api.get(f"/api/v1/mcp-servers/{name}/authorize")) == {"status": "authenticated"}
    moved = f"{oauth.url}?tenant=2"
    api.ok(api.put("/api/v1/settings/mcp-servers", json={"manifest": {
        "type": "remote", "name": name, "description": "Moved.", "url": moved, "auth": {"type": "dcr"}}}))
    status = api.ok(api.get(f"/api/v1/mcp-servers/{name}/authorize"))
    assert status["status"] == "auth_required"
    browser.check_authorization_url(status["authorization_url"])
    session = session_with(api, registry(name))
    pause(api, session, whoami())
    # Authorized for the new URL, the user's turns go on.
    callback = browser.back_to_callback(status["authorization_url"], "alice")
    assert api.ok(browser.http.get(callback)) == {"success": True}
    assert tool_results(resume(api, session)) == ["alice"]


def test_an_expired_access_token_is_refreshed(api, server, short_lived):
    name = register(api, short_lived)
    browser = Browser(server, short_lived)
    try:
        authorize_directly(api, browser, name)
    finally:
        browser.close()
    before = short_lived.grants()
    assert before["authorization_code"] == 1
    time.sleep(3)  # The two-second access token has expired.
    session = session_with(api, registry(name))
    run = api.run_turn(session, whoami())
    assert run.done["state"]["status"] == "done", run.done
    assert tool_results(run) == ["alice"]
    after = short_lived.grants()
    assert after["refresh_token"] > before["refresh_token"], (before, after)
    assert after["authorization_code"] == 1, "no new authorization was needed"
    time.sleep(3)
    assert tool_results(api.run_turn(session, whoami())) == ["alice"]
    assert short_lived.grants()["authorization_code"] == 1


# --------------------------------------------------------------------------------------------
# The authorize route and the callback
# --------------------------------------------------------------------------------------------


def test_authorize_answers_the_status_of_each_kind_of_server(api, oauth, browser):
    plain = wire.unique("plain")
    api.ok(api.post("/api/v1/settings/mcp-servers", json={"manifest": {
        "type": "remote", "name": plain, "description": "No auth.", "url": oauth.url}}), 201)
    assert api.ok(api.get(f"/api/v1/mcp-servers/{plain}/authorize")) == {"status": "not_required"}
    header = wire.unique("header")
    api.ok(api.post("/api/v1/settings/mcp-servers", json={"manifest": {
        "type": "remote", "name": header, "description": "Header auth.", "url": oauth.url,
        "auth": {"type": "header", "headers": {"Authorization": "Bearer x"}}}}), 201)
    assert api.ok(api.get(f"/api/v1/mcp-servers/{header}/authorize")) == {"status": "authenticated"}
    assert api.ok(api.delete(f"/api/v1/mcp-servers/{header}/authorize"))["data"]["auth_status"] == {"status": "authenticated"}
    error(api.get("/api/v1/mcp-servers/no-such-server/authorize"), 404)
    error(api.delete("/api/v1/mcp-servers/no-such-server/authorize"), 404)

    name = register(api, oauth)
    registrations = oauth.grants()["registrations"]
    for bad in ["https://evil.example/", "//evil.example/x", "chat"]:
        error(api.get(f"/api/v1/mcp-servers/{name}/authorize", params={"return_to": bad}), 400,
                          param="return_to")
    # Each call starts a new authorization, with one registered client.
    first = api.ok(api.get(f"/api/v1/mcp-servers/{name}/authorize"))["authorization_url"]
    second = api.ok(api.get(f"/api/v1/mcp-servers/{name}/authorize"))["authorization_url"]
    assert first != second
    assert oauth.grants()["registrations"] == registrations + 1

    # A server that is not OAuth has nothing to authorize with a ticket.
    session = session_with(api, registry(name))
    _, entry = pause(api, session, whoami())
    ticket = urllib.parse.parse_qs(urllib.parse.urlsplit(entry["auth_url"]).query)["ticket"][0]
    error(browser.http.get(f"{api.root}/api/v1/mcp-servers/{plain}/authorize",
                                       params={"ticket": ticket}), 400, param="ticket")
    # A ticket is bound to its server and cannot be altered.
    other = register(api, oauth)
    error(browser.http.get(f"{api.root}/api/v1/mcp-servers/{other}/authorize",
                                       params={"ticket": ticket}), 400, param="ticket")
    error(browser.http.get(f"{api.root}/api/v1/mcp-servers/{name}/authorize",
                                       params={"ticket": ticket[:-4] + "AAAA"}), 400, param="ticket")


def test_bad_refused_and_replayed_callbacks_are_400s(api, server, oauth, browser):
    name = register(api, oauth)
    callback = f"{server.url}{CALLBACK_PATH}"
    error(browser.http.get(callback), 400, param="state")
    error(browser.http.get(callback, params={"code": "c", "state": "no-such-state"}), 400, param="state")
    error(browser.http.get(callback, params={"state": "s" * 20000}), 400)

    # The user is not logged in at the authorization server: it refuses, and says why.
    status = api.ok(api.get(f"/api/v1/mcp-servers/{name}/authorize"))
    refused = browser.back_to_callback(status["authorization_url"], None)
    assert "error=access_denied" in refused
    answer = browser.http.get(refused)
    error(answer, 400, param="error")
    assert "access_denied" in answer.json()["error"]["message"]
    assert "login_as" in answer.json()["error"]["message"], "the authorization server's description is shown"

    # A state finishes once: the replay is unknown, and the first answer stored the grant.
    status = api.ok(api.get(f"/api/v1/mcp-servers/{name}/authorize"))
    back = browser.back_to_callback(status["authorization_url"], "alice")
    assert browser.http.get(back).json() == {"success": True}
    error(browser.http.get(back), 400, param="state")
    assert api.ok(api.get(f"/api/v1/mcp-servers/{name}/authorize")) == {"status": "authenticated"}

    # A code is checked by the authorization server: a made-up one is refused, state used up.
    api.ok(api.delete(f"/api/v1/mcp-servers/{name}/authorize"))
    status = api.ok(api.get(f"/api/v1/mcp-servers/{name}/authorize"))
    state = urllib.parse.parse_qs(urllib.parse.urlsplit(status["authorization_url"]).query)["state"][0]
    forged = browser.http.get(callback, params={"code": "made-up", "state": state})
    error(forged, 400, param="code")
    error(browser.http.get(callback, params={"code": "made-up", "state": state}), 400, param="state")


def test_return_to_receives_the_outcome(api, oauth, browser):
    name = register(api, oauth)
    status = api.ok(api.get(f"/api/v1/mcp-servers/{name}/authorize", params={"return_to": "/chat?tab=2"}))
    answer = browser.http.get(browser.back_to_callback(status["authorization_url"], "alice"))
    assert answer.status_code == 302 and answer.headers["location"] == "/chat?tab=2&isSuccess=true"

    other = register(api, oauth)
    session = session_with(api, registry(other))
    _, entry = pause(api, session, whoami())
    location = browser.to_authorization_server(entry["auth_url"] + "&return_to=%2Fchat")
    answer = browser.http.get(browser.back_to_callback(location, None))
    assert answer.status_code == 302
    target = urllib.parse.urlsplit(answer.headers["location"])
    assert target.path == "/chat"
    query = urllib.parse.parse_qs(target.query)
    assert query["isSuccess"] == ["false"] and "access_denied" in query["reason"][0]


def test_a_browser_gets_a_page_to_return_from(api, oauth, browser):
    name = register(api, oauth)
    status = api.ok(api.get(f"/api/v1/mcp-servers/{name}/authorize"))
    back = browser.back_to_callback(status["authorization_url"], "alice")
    page = browser.http.get(back, headers={"accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "return to the chat" in page.text


def at(url: str, origin: str) -> str:
    """`url` on another origin: the restarted server listens on another port, where a
    deployment's public URL would stay the same."""
    parts = urllib.parse.urlsplit(url)
    return f"{origin}{parts.path}?{parts.query}"


def test_a_pause_and_an_authorization_outlive_a_restart(server_factory, oauth):
    """Tickets, pending authorizations, clients and grants are all in the database, sealed with
    the key file's key: a restarted server (or another replica) takes up any step."""
    own = server_factory()
    api = own.require_api()
    name = register(api, oauth)
    session = session_with(api, registry(name))
    _, entry = pause(api, session, whoami())
    browser = Browser(own, oauth)
    try:
        authorization_url = browser.to_authorization_server(entry["auth_url"])
        own.restart()
        answer = browser.http.get(authorization_url + "&login_as=alice")
        assert answer.status_code == 302
        finished = browser.http.get(at(answer.headers["location"], own.url))
        assert own.require_api().ok(finished) == {"success": True}
        own.restart()
        api = own.require_api()
        assert tool_results(resume(api, session)) == ["alice"]

        # A link from before a restart still works after it.
        other = register(api, oauth)
        _, entry = pause(api, session_with(api, registry(other)), whoami())
        own.restart()
        assert own.require_api().ok(browser.authorize(at(entry["auth_url"], own.url))) == {"success": True}
    finally:
        browser.close()


# --------------------------------------------------------------------------------------------
# Secrets at rest
# --------------------------------------------------------------------------------------------


@conftest.sqlite_only
def test_tokens_and_client_secrets_are_not_stored_or_logged_in_the_clear(api, server, oauth, browser):
    name = register(api, oauth)
    authorize_directly(api, browser, name)
    assert tool_results(api.run_turn(session_with(api, registry(name)), whoami())) == ["alice"]
    secrets = oauth.secrets()
    assert secrets, "the authorization server issued tokens"
    files = [path for path in server.db_path.parent.glob(server.db_path.name + "*") if path.is_file()]
    assert server.db_path in files
    assert server.process is not None
    files.append(server.process.log_path)
    for path in files:
        data = path.read_bytes()
        for secret in secrets:
            assert secret.encode() not in data, f"a token or client secret is in {path.name} in the clear"
    key = server.workdir / "secret.key"
    assert key.stat().st_mode & 0o077 == 0, "the key file is private"
