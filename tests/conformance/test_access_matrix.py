"""The access matrix (issue 17): every route the server serves × every kind of caller.

The routes are every path and method of the served `/api/v1/openapi.json` plus the gateway
dialect's E1–E17 (read from the wire protocol's summary table, under the `/t1` prefix). Each is
called, on a server with `--auth api-keys`, as:

- `owner`: a member who made the agent, the sessions and the turns the paths name;
- `same_tenant`: another member of the owner's tenant, not a collaborator of the agent;
- `collaborator`: a member of the owner's tenant the agent names as an `agent-user`;
- `other_tenant`: a member of another tenant;
- `admin`: an admin of the owner's tenant; `other_admin`: an admin of another tenant;
- `operator`: the server's operator (its key made with the CLI, in a tenant of its own);
- `no_key`, and `revoked`: a key that was revoked.

Each route belongs to a class in ROUTES, a small declarative table giving the status every
caller gets; a served route the table does not name fails the test, so no new route slips
past. Every answer is checked: its status, the error shape for every 4xx, and that no body
shows a caller what it may not see of the owner's (the title of its sessions, the text of its
turns, its agent's instructions, its subject id). Runs on SQLite and, with
TEAMSTER_TEST_BACKEND=postgres, on PostgreSQL (scripts/test runs both)."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
import typing
import uuid

import httpx
import pytest

import conftest
import wire
from conftest import TeamsterServer

MEMBERS = ("owner", "same_tenant", "collaborator", "other_tenant")
ADMINS = ("admin", "other_admin")
KEYED = MEMBERS + ADMINS + ("operator",)
CALLERS = KEYED + ("no_key", "revoked")
# Who may see and run the owner's agent (its creator, its agent-user, its tenant's admin).
RUNNERS = ("owner", "collaborator", "admin")
GATEWAY_DOC = conftest.REPO_ROOT / "docs/spec/gateway-wire-protocol.md"


# The expectation classes: each maps every caller to the status it must get.

def unauthenticated(expected: dict[str, int]) -> dict[str, int]:
    """A route that needs a key: no key and a revoked key are 401."""
    return {**expected, "no_key": 401, "revoked": 401}


def public(status: int) -> dict[str, int]:
    """Anyone, without a key; a key that is sent is still checked (a revoked one is 401)."""
    return {**{caller: status for caller in KEYED}, "no_key": status, "revoked": 401}


def any_caller(status: int) -> dict[str, int]:
    """Every caller with a key, alike (what it sees is its own)."""
    return unauthenticated({caller: status for caller in KEYED})


def operator_only(status: int) -> dict[str, int]:
    """Settings, providers, MCP servers, skills, metrics: the operator's; tenant admins and
    members are refused (403)."""
    return unauthenticated({**{caller: 403 for caller in MEMBERS + ADMINS}, "operator": status})


def keys_of_the_owners_tenant(status: int, other_admin: int) -> dict[str, int]:
    """A key of the owner's tenant: its tenant's admin and the operator; another tenant's admin
    gets `other_admin` (403 to create, 404 for a key it may not know of); members 403."""
    return unauthenticated({**{caller: 403 for caller in MEMBERS}, "admin": status, "other_admin": other_admin, "operator": status})


def agent_use(status: int) -> dict[str, int]:
    """Seeing or running the owner's agent: its runners; anyone else is told it does not exist."""
    return unauthenticated({caller: status if caller in RUNNERS else 404 for caller in KEYED})


def agent_manage(status: int) -> dict[str, int]:
    """Editing the owner's agent: its creator and its tenant's admin; its user is refused (403)."""
    expected = {caller: status if caller in ("owner", "admin") else 404 for caller in KEYED}
    return unauthenticated({**expected, "collaborator": 403})


def agent_delete(status: int) -> dict[str, int]:
    """Deleting is idempotent: whoever may not see the agent deletes nothing and is told so alike."""
    expected = {caller: status for caller in KEYED}
    return unauthenticated({**expected, "collaborator": 403})


def own_session(status: int, intruder: int = 404) -> dict[str, int]:
    """Everything about a session is its creator's alone: anyone else is told it does not exist."""
    return unauthenticated({caller: status if caller == "owner" else intruder for caller in KEYED})


def visible_session(status: int) -> dict[str, int]:
    """The gateway's E3: the owner, and the managers of the session's agent (its tenant's admin)."""
    return unauthenticated({caller: status if caller in ("owner", "admin") else 404 for caller in KEYED})


@dataclasses.dataclass
class Route:
    """How to call one route and what each caller gets."""

    expected: dict[str, int]
    body: typing.Optional[typing.Callable[["World", str], typing.Any]] = None
    # Resources made afresh for each call (the call may delete or change them).
    fresh: bool = False
    # Callers that may see the owner's session titles in this route's answers.
    sees_titles: tuple[str, ...] = ("owner",)
    # Callers that may see the owner's subject id in this route's answers (besides its runners).
    sees_subjects: tuple[str, ...] = ()
    query: str = ""
    # An answer that streams until the client leaves (a live channel): its status and first
    # chunk are read, then the connection is closed.
    streams: bool = False


def turn_body(world: "World", caller: str) -> dict:
    return {"input": [{"type": "user.message", "content": f"from {caller}"}], "stream": False}


def chat_body(world: "World", caller: str) -> dict:
    return {"id": f"chat_{uuid.uuid4().hex}", "agent": world.agent_name, "trigger": "submit-message",
            "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": f"hi from {caller}"}]}]}


def agent_body(world: "World", caller: str) -> dict:
    return {"manifest": world.manifest()}


def new_agent_body(world: "World", caller: str) -> dict:
    return {"name": wire.unique(f"made-by-{caller.replace('_', '-')}"), "manifest": {"model": {"name": "fake/fake-model"}}}


# Every route, by method and path as the OpenAPI document (or the gateway table) spells it.
ROUTES: dict[tuple[str, str], Route] = {
    # Health, the document, the docs page and the browser's OAuth and login pages are public.
    ("GET", "/healthz"): Route(public(200)),
    ("GET", "/readyz"): Route(public(200)),
    ("GET", "/api/v1/openapi.json"): Route(public(200)),
    ("GET", "/api/v1/schemas/agent-manifest.json"): Route(public(200)),
    ("GET", "/api/v1/docs"): Route(public(200)),
    ("GET", "/api/v1/mcp-servers/oauth/callback"): Route(public(400)),
    # The authorize page needs a key, or a ticket of its own, which this call does not carry.
    ("GET", "/api/v1/mcp-servers/{name}/authorize"): Route(any_caller(404)),
    ("GET", "/api/v1/auth/login"): Route(public(302)),
    ("GET", "/api/v1/auth/callback"): Route(public(302), query="?state=x"),
    ("POST", "/api/v1/auth/logout"): Route(public(204)),
    ("GET", "/api/v1/auth/me"): Route(any_caller(200)),
    # The operator's alone: what is server-wide.
    ("GET", "/metrics"): Route(operator_only(200)),
    # Keys: the operator sees every key's subject, a tenant admin its own tenant's keys only.
    ("GET", "/api/v1/keys"): Route(keys_of_the_owners_tenant(200, 200), sees_subjects=("admin", "operator")),
    ("POST", "/api/v1/keys"): Route(keys_of_the_owners_tenant(201, 403), body=lambda world, caller: {"subject": wire.unique("made"), "tenant": "acme"}),
    ("DELETE", "/api/v1/keys/{key_id}"): Route(keys_of_the_owners_tenant(200, 404), fresh=True),
    ("GET", "/api/v1/settings/model-providers"): Route(operator_only(200)),
    ("PUT", "/api/v1/settings/model-providers"): Route(operator_only(200), body=lambda world, caller: {"manifest": world.provider}),
    ("POST", "/api/v1/settings/model-providers"): Route(operator_only(409), body=lambda world, caller: {"manifest": world.provider}),
    ("GET", "/api/v1/settings/mcp-servers"): Route(operator_only(200)),
    ("GET", "/api/v1/settings/mcp-servers/{name}"): Route(operator_only(404)),
    ("DELETE", "/api/v1/settings/mcp-servers/{name}"): Route(operator_only(404)),
    ("PATCH", "/api/v1/settings/mcp-servers/{name}"): Route(operator_only(404), body=lambda world, caller: {"name": "renamed"}),
    ("DELETE", "/api/v1/settings/model-providers/{name}"): Route(operator_only(404)),
    ("PATCH", "/api/v1/settings/model-providers/{name}"): Route(operator_only(404), body=lambda world, caller: {"name": "renamed"}),
    ("PUT", "/api/v1/settings/mcp-servers"): Route(operator_only(400), body=lambda world, caller: {}),
    ("POST", "/api/v1/settings/mcp-servers"): Route(operator_only(400), body=lambda world, caller: {}),
    ("GET", "/api/v1/settings/skills"): Route(operator_only(200)),
    ("PUT", "/api/v1/settings/skills"): Route(operator_only(400), body=lambda world, caller: {}),
    ("POST", "/api/v1/settings/skills"): Route(operator_only(400), body=lambda world, caller: {}),
    # What every caller may read (the server's, not anyone's).
    ("GET", "/api/v1/capabilities"): Route(any_caller(200)),
    ("GET", "/api/v1/models"): Route(any_caller(200)),
    ("GET", "/api/v1/models/current"): Route(own_session(200), query="?session_id={session_id}"),
    ("GET", "/api/v1/skills"): Route(any_caller(200)),
    ("GET", "/api/v1/catalogs/skills"): Route(any_caller(200)),
    ("GET", "/api/v1/mcp-servers"): Route(any_caller(200)),
    ("GET", "/api/v1/mcp-servers/{name}/tools"): Route(any_caller(404)),
    # Testing a server connects as listing its tools does (with the caller's own authorization).
    ("POST", "/api/v1/mcp-servers/{name}/test"): Route(any_caller(404), body=lambda world, caller: {}),
    ("DELETE", "/api/v1/mcp-servers/{name}/authorize"): Route(any_caller(404)),
    # Agents: listed to whoever may see each; read and run by its runners, edited by its managers.
    ("GET", "/api/v1/agents"): Route(any_caller(200)),
    ("POST", "/api/v1/agents"): Route(any_caller(201), body=new_agent_body),
    # A check stores nothing and names only what the caller sent.
    ("POST", "/api/v1/agents/check"): Route(any_caller(200), body=new_agent_body),
    ("GET", "/api/v1/agents/{agent_id}"): Route(agent_use(200)),
    ("PUT", "/api/v1/agents/{agent_id}"): Route(agent_manage(200), body=agent_body),
    ("DELETE", "/api/v1/agents/{agent_id}"): Route(agent_delete(200), fresh=True),
    # Sessions: a new one of the owner's agent is for its runners; the rest is the creator's.
    ("GET", "/api/v1/sessions"): Route(any_caller(200)),
    ("GET", "/api/v1/live"): Route(any_caller(200), streams=True),
    ("POST", "/api/v1/sessions"): Route(agent_use(201), body=lambda world, caller: {"agent": {"name": world.agent_name}}),
    ("POST", "/api/v1/chat"): Route(agent_use(200), body=chat_body),
    # Nothing runs in the owner's chat; for anyone else, the chat is one where nothing runs
    # (204, as for a chat id never used).
    ("GET", "/api/v1/chat/{chat_id}/stream"): Route(any_caller(204)),
    ("GET", "/api/v1/sessions/{session_id}"): Route(own_session(200)),
    ("PATCH", "/api/v1/sessions/{session_id}"): Route(own_session(200), body=lambda world, caller: {"title": world.title}),
    ("DELETE", "/api/v1/sessions/{session_id}"): Route(own_session(204, intruder=204), fresh=True),
    ("POST", "/api/v1/sessions/{session_id}/cancel"): Route(own_session(200), body=lambda world, caller: {}),
    ("POST", "/api/v1/sessions/{session_id}/clone"): Route(own_session(201), body=lambda world, caller: {}),
    ("GET", "/api/v1/sessions/{session_id}/events"): Route(own_session(200)),
    ("GET", "/api/v1/sessions/{session_id}/files/{digest}"): Route(own_session(404)),
    ("GET", "/api/v1/sessions/{session_id}/follow-ups"): Route(own_session(200)),
    ("POST", "/api/v1/sessions/{session_id}/follow-ups"): Route(own_session(201), body=lambda world, caller: {"content": "later"}, fresh=True),
    ("DELETE", "/api/v1/sessions/{session_id}/follow-ups/{follow_up_id}"): Route(own_session(404)),
    ("GET", "/api/v1/sessions/{session_id}/grants"): Route(own_session(200)),
    ("GET", "/api/v1/sessions/{session_id}/tools"): Route(own_session(200)),
    ("GET", "/api/v1/sessions/{session_id}/live"): Route(own_session(200), streams=True),
    ("GET", "/api/v1/sessions/{session_id}/display"): Route(own_session(200)),
    # Each caller's own resources.
    ("GET", "/api/v1/resources"): Route(any_caller(200)),
    # The owner's agent has no sandbox: its workspace is `none`, and cannot be made or destroyed.
    ("GET", "/api/v1/sessions/{session_id}/workspace"): Route(own_session(200)),
    ("POST", "/api/v1/sessions/{session_id}/workspace"): Route(own_session(409), body=lambda world, caller: {}),
    ("DELETE", "/api/v1/sessions/{session_id}/workspace"): Route(own_session(409)),
    ("DELETE", "/api/v1/sessions/{session_id}/grants/{grant_id}"): Route(own_session(404)),
    ("GET", "/api/v1/sessions/{session_id}/plans"): Route(own_session(200)),
    ("GET", "/api/v1/sessions/{session_id}/threads"): Route(own_session(200)),
    # The owner's agent declares no state schema.
    ("GET", "/api/v1/sessions/{session_id}/state"): Route(own_session(400)),
    ("POST", "/api/v1/sessions/{session_id}/steer"): Route(own_session(409), body=lambda world, caller: {"content": "now"}),
    ("GET", "/api/v1/sessions/{session_id}/tasks"): Route(own_session(200)),
    ("GET", "/api/v1/sessions/{session_id}/turns"): Route(own_session(200)),
    ("POST", "/api/v1/sessions/{session_id}/turns"): Route(own_session(200), body=turn_body, fresh=True),
    ("GET", "/api/v1/sessions/{session_id}/turns/{turn_id}"): Route(own_session(200)),
    ("GET", "/api/v1/sessions/{session_id}/turns/{turn_id}/download-sandbox-file"): Route(own_session(412), query="?path=/workspace/x"),
    ("GET", "/api/v1/sessions/{session_id}/turns/{turn_id}/events"): Route(own_session(200)),
    ("GET", "/api/v1/sessions/{session_id}/turns/{turn_id}/subscribe"): Route(own_session(200)),
    # The gateway dialect (E1–E17).
    ("POST", "/t1/v1/agents/sessions"): Route(agent_use(200), body=lambda world, caller: {"agent_name": world.agent_name}),
    ("GET", "/t1/v1/agents/sessions"): Route(agent_use(200), query="?agent_name={agent_name}&limit=10"),
    ("GET", "/t1/v1/agents/sessions/{session_id}"): Route(visible_session(200), sees_titles=("owner", "admin")),
    ("POST", "/t1/v1/agents/sessions/{session_id}/cancel"): Route(own_session(200), body=lambda world, caller: {}),
    ("GET", "/t1/v1/agents/sessions/{session_id}/turns"): Route(own_session(200), query="?limit=10"),
    ("POST", "/t1/v1/agents/sessions/{session_id}/turns"): Route(own_session(200), body=turn_body, fresh=True),
    ("GET", "/t1/v1/agents/sessions/{session_id}/turns/{turn_id}"): Route(own_session(200)),
    ("POST", "/t1/v1/agents/sessions/{session_id}/turns/{turn_id}/subscribe"): Route(own_session(200), body=lambda world, caller: {}),
    ("GET", "/t1/v1/agents/sessions/{session_id}/turns/{turn_id}/events"): Route(own_session(200), query="?limit=25"),
    ("GET", "/t1/v1/agents/sessions/{session_id}/events"): Route(own_session(200), query="?limit=100"),
    ("GET", "/t1/v1/agents/draft-sessions"): Route(any_caller(200), query="?limit=10"),
    ("POST", "/t1/v1/agents/draft-sessions"): Route(any_caller(200), body=lambda world, caller: {"agent_spec": {"model": {"name": "fake/fake-model"}}}),
    ("GET", "/t1/v1/agents/draft-sessions/{draft_session_id}"): Route(own_session(200)),
    ("PATCH", "/t1/v1/agents/draft-sessions/{draft_session_id}"): Route(own_session(200), body=lambda world, caller: {}),
    ("GET", "/t1/v1/x/agents/owned-sessions"): Route(any_caller(200), query="?limit=100"),
    ("GET", "/t1/v1/x/agents/search-sessions"): Route(any_caller(200), query="?limit=100", sees_titles=("owner", "admin")),
    ("GET", "/t1/v1/agents/sandbox/{sandbox_id}/file"): Route(any_caller(404), query="?path=/workspace/x"),
}


def gateway_routes() -> set[tuple[str, str]]:
    """E1–E17 from the wire protocol's summary table, under the tenant prefix."""
    rows = re.findall(r"^\| E\d+[ab]? \| `(GET|POST|PUT|PATCH|DELETE) (v1/[^`]+)`", GATEWAY_DOC.read_text(), re.MULTILINE)
    assert len(rows) >= 17, "the gateway wire protocol's summary table was not found"
    return {(method, f"{wire.GATEWAY_PREFIX}/{path}") for method, path in rows}


def served_routes(document: dict) -> set[tuple[str, str]]:
    return {(method.upper(), path) for path, item in document["paths"].items()
            for method in item if method in ("get", "post", "put", "patch", "delete")}


class World:
    """A keyed server, a key per caller, and the owner's agent, sessions and turns."""

    def __init__(self, server: TeamsterServer, operator_key: str) -> None:
        self.server = server
        self.url = server.url
        # The operator sets the server up and makes everyone's keys.
        self.admin = wire.Api(self.url, key=operator_key)
        self.provider = server.fake.provider_manifest()
        self.admin.ok(self.admin.put("/api/v1/settings/model-providers", json={"manifest": self.provider}))
        self.keys = {"operator": operator_key}
        people = {"owner": ("acme", "member"), "same_tenant": ("acme", "member"),
                  "collaborator": ("acme", "member"), "other_tenant": ("globex", "member"),
                  "admin": ("acme", "admin"), "other_admin": ("globex", "admin"), "revoked": ("acme", "member")}
        self.subjects: dict[str, str] = {"operator": "ops:root"}
        for caller, (tenant, role) in people.items():
            slug = wire.unique(caller.replace("_", "-"))
            made = self.admin.ok(self.admin.post("/api/v1/keys", json={"subject": slug, "tenant": tenant, "role": role}), 201)["data"]
            self.keys[caller] = made["secret"]
            self.subjects[caller] = made["subject"]["subject_id"]
            if caller == "revoked":
                self.admin.ok(self.admin.delete(f"/api/v1/keys/{made['id']}"))
        self.slugs = {caller: subject.split(":", 1)[1] for caller, subject in self.subjects.items()}
        self.apis = {caller: wire.Api(self.url, key=key) for caller, key in self.keys.items()}
        self.apis["no_key"] = wire.Api(self.url)
        self.apis["no_key"].http.headers.pop("Authorization")
        self.owner = self.apis["owner"]
        # What no one but the owner (and whom it shares with) may ever read.
        self.secret = wire.unique("owner-agent-instructions")
        self.title = wire.unique("owner-session-title")
        self.turn_text = wire.unique("owner-turn-text")
        self.agent_name = wire.unique("owners-agent")
        agent = self.owner.ok(self.owner.post("/api/v1/agents", json={"name": self.agent_name, "manifest": self.manifest()}), 201)["data"]
        assert agent["tenant"] == "acme" and agent["created_by_subject"]["subject_id"] == self.subjects["owner"], agent
        self.agent_id = agent["id"]
        self.session, self.turn = self.owned_session()
        self.draft = self.owner.ok(self.owner.post(wire.Api.gw("draft-sessions"), json={"agent_spec": {"model": {"name": "fake/fake-model"}, "instructions": self.secret}}))["data"]

    def manifest(self) -> dict:
        collaborators = [{"subject": f"user:{self.slugs['collaborator']}", "role_id": "agent-user"}]
        return {"model": {"name": "fake/fake-model"}, "instructions": self.secret, "collaborators": collaborators}

    def owned_session(self) -> tuple[str, str]:
        session = self.owner.ok(self.owner.post("/api/v1/sessions", json={"agent": {"name": self.agent_name}, "title": self.title}), 201)["data"]
        turn = self.owner.run_turn(session["id"], self.turn_text).turn_id
        return session["id"], turn

    def fresh_agent(self) -> str:
        body = {"name": wire.unique("doomed"), "manifest": self.manifest()}
        return self.owner.ok(self.owner.post("/api/v1/agents", json=body), 201)["data"]["id"]

    def path_values(self, fresh: bool, path: str) -> dict[str, str]:
        session, turn = self.owned_session() if fresh and "{session_id}" in path else (self.session, self.turn)
        values = {"session_id": session, "turn_id": turn, "chat_id": session, "draft_session_id": self.draft["id"],
                  "agent_id": self.agent_id, "agent_name": self.agent_name, "name": "no-such-server",
                  "digest": "0" * 64, "follow_up_id": "fup_missing", "grant_id": "grant_missing",
                  "sandbox_id": "sbx_missing", "key_id": "missing"}
        if fresh and "{agent_id}" in path:
            values["agent_id"] = self.fresh_agent()
        if "{key_id}" in path:
            made = self.admin.ok(self.admin.post("/api/v1/keys", json={"subject": wire.unique("doomed"), "tenant": "acme"}), 201)
            values["key_id"] = made["data"]["id"]
        return values

    def forbidden_markers(self, caller: str, route: Route) -> list[str]:
        """What `caller` must never read in this route's answers (ids are left out: an answer may
        repeat the path the caller sent)."""
        if caller == "owner":
            return []
        markers = [self.turn_text]
        if caller not in route.sees_titles:
            markers.append(self.title)
        if caller not in RUNNERS:
            markers.append(self.secret)
            if caller not in route.sees_subjects:
                markers.append(self.subjects["owner"])
        return markers

    def close(self) -> None:
        for api in self.apis.values():
            api.close()
        self.admin.close()


@pytest.fixture(scope="module")
def world(workdir, fake_model) -> typing.Iterator[World]:
    server = TeamsterServer(workdir, fake_model, ["--auth", "api-keys"])
    made = conftest.teamster("keys", "create", "--subject", "root", "--tenant", "ops", "--role", "operator",
                    "--database", server.database, "--data-dir", str(workdir))
    assert made.returncode == 0, made.stderr
    try:
        server.start()
        instance = World(server, made.stdout.strip())
        yield instance
        instance.close()
    finally:
        server.close()


def test_every_served_route_has_an_expectation(world: World):
    document = world.apis["no_key"].ok(world.apis["no_key"].get("/api/v1/openapi.json"))
    routes = served_routes(document) | gateway_routes()
    missing = sorted(routes - set(ROUTES))
    assert not missing, f"routes without an access expectation (add them to ROUTES): {missing}"
    stale = sorted(set(ROUTES) - routes)
    assert not stale, f"expectations of routes nobody serves: {stale}"


def call(world: World, caller: str, method: str, path: str, route: Route) -> httpx.Response:
    values = world.path_values(route.fresh, path)
    target = (path + route.query).format(**values)
    body = route.body(world, caller) if route.body is not None else None
    http = world.apis[caller].http
    if route.streams:
        with http.stream(method, target, json=body, follow_redirects=False) as response:
            first = b"" if response.status_code != 200 else next(response.iter_bytes(), b"")
            content = first if response.status_code == 200 else response.read()
            headers = {"content-type": response.headers.get("content-type", "")}
            return httpx.Response(response.status_code, headers=headers, content=content, request=response.request)
    return http.request(method, target, json=body, follow_redirects=False)


@pytest.mark.timeout(900)
def test_every_route_answers_each_caller_as_the_matrix_says(world: World):
    failures = []
    for (method, path), route in sorted(ROUTES.items()):
        assert set(route.expected) == set(CALLERS), (method, path)
        for caller in CALLERS:
            response = call(world, caller, method, path, route)
            expected = route.expected[caller]
            where = f"{caller:>12} {method} {path}"
            if response.status_code != expected:
                failures.append(f"{where}: {response.status_code}, expected {expected}: {response.text[:200]}")
                continue
            if 400 <= expected < 500:
                try:
                    wire.assert_error(response, expected)
                except AssertionError as error:
                    failures.append(f"{where}: not the error shape: {error}")
            for marker in world.forbidden_markers(caller, route):
                if marker in response.text:
                    failures.append(f"{where}: the answer shows {marker!r}")
    assert not failures, "\n".join(failures)


def test_what_the_others_did_changed_nothing_of_the_owners(world: World):
    """Run after the matrix (pytest keeps file order): the intruders' deletes and edits were
    refused or deleted nothing."""
    owner = world.owner
    agent = owner.ok(owner.get(f"/api/v1/agents/{world.agent_id}"))["data"]
    assert agent["manifest"]["instructions"] == world.secret
    session = owner.ok(owner.get(f"/api/v1/sessions/{world.session}"))["data"]
    assert session["title"] == world.title
    turns = owner.ok(owner.get(f"/api/v1/sessions/{world.session}/turns"))["data"]
    assert all(turn["created_by_subject"]["subject_id"] == world.subjects["owner"] for turn in turns), turns


def test_listings_show_exactly_what_each_caller_may_see(world: World):
    """The listings (native agents and sessions, gateway E15, E16) as data, not only as
    statuses: the owner's sessions appear to the owner everywhere and to its tenant's admin in
    E16 only (which shows an admin every session of its tenant); the agent to its runners only."""
    for caller in KEYED:
        api = world.apis[caller]
        agents = {agent["id"] for agent in api.ok(api.get("/api/v1/agents"))["data"]}
        assert (world.agent_id in agents) == (caller in RUNNERS), caller
        def ids(path: str, limit: int, **params: typing.Any) -> set[str]:
            return {item["id"] for item in api.list_all(path, limit, **params)[0]}

        native = ids("/api/v1/sessions", 25)
        owned = ids(f"{wire.GATEWAY_PREFIX}/v1/x/agents/owned-sessions", 100)
        searched = ids(f"{wire.GATEWAY_PREFIX}/v1/x/agents/search-sessions", 100)
        assert (world.session in native) == (caller == "owner"), caller
        assert (world.session in owned) == (caller == "owner"), caller
        assert (world.session in searched) == (caller in ("owner", "admin")), caller
        # A draft belongs to no agent: besides its creator, only the tenant's admin finds it.
        assert (world.draft["id"] in searched) == (caller in ("owner", "admin")), caller
        # Filtering by the owner's subject shows the admin the owner's sessions, anyone else none.
        by_owner = api.list_all(f"{wire.GATEWAY_PREFIX}/v1/x/agents/search-sessions", 100,
                                created_by_subject_id=world.subjects["owner"])[0]
        assert {item["created_by"] for item in by_owner} <= {world.subjects["owner"]}
        assert (world.session in {item["id"] for item in by_owner}) == (caller in ("owner", "admin")), caller
        # E3 answers for what E16 lists: the tenant's admin reads the owner's draft too.
        draft = api.get(wire.Api.gw(f"sessions/{world.draft['id']}"))
        if caller in ("owner", "admin"):
            assert api.ok(draft)["data"]["id"] == world.draft["id"]
        else:
            wire.assert_error(draft, 404)


def test_collaborators_are_checked_and_shared_agents_follow_their_changes(world: World):
    owner, collaborator, same = world.owner, world.apis["collaborator"], world.apis["same_tenant"]
    for collaborators, fragment in [([{"subject": "bob", "role_id": "agent-user"}], "subject"),
                                    ([{"subject": "user:bob", "role_id": "owner"}], "role_id")]:
        bad = {"name": wire.unique("bad"), "manifest": {"model": {"name": "fake/fake-model"}, "collaborators": collaborators}}
        error = wire.assert_error(owner.post("/api/v1/agents", json=bad), 400)
        assert fragment in error["message"] and error["param"] == "collaborators", error
    # A team is every subject of its tenant: the same-tenant member may now run it, not edit it.
    name = wire.unique("shared")
    manifest = {"model": {"name": "fake/fake-model"}, "collaborators": [{"subject": "team:acme", "role_id": "agent-user"}]}
    agent = owner.ok(owner.post("/api/v1/agents", json={"name": name, "manifest": manifest}), 201)["data"]
    session = same.ok(same.post("/api/v1/sessions", json={"agent": {"name": name}}), 201)["data"]
    wire.assert_error(same.put(f"/api/v1/agents/{agent['id']}", json={"manifest": manifest}), 403)
    # Made a manager, it may edit it and take the team off; the owner keeps it, the team loses it.
    managed = {**manifest, "collaborators": [{"subject": f"user:{world.slugs['same_tenant']}", "role_id": "agent-manager"}]}
    owner.ok(owner.put(f"/api/v1/agents/{agent['id']}", json={"manifest": managed}))
    only_owner = {**manifest, "collaborators": []}
    same.ok(same.put(f"/api/v1/agents/{agent['id']}", json={"manifest": only_owner}))
    wire.assert_error(same.get(f"/api/v1/agents/{agent['id']}"), 404)
    # Its session stays its own, but runs the agent no more.
    assert same.ok(same.get(f"/api/v1/sessions/{session['id']}"))["data"]["id"] == session["id"]
    refused = same.post(f"/api/v1/sessions/{session['id']}/turns", json=turn_body(world, "same_tenant"))
    wire.assert_error(refused, 404)
    wire.assert_error(collaborator.post("/api/v1/sessions", json={"agent": {"name": name}}), 404)
    assert owner.ok(owner.get(f"/api/v1/agents/{agent['id']}"))["data"]["manifest"]["collaborators"] == []


def test_a_spec_cannot_reach_another_tenants_agent_as_a_sub_agent(world: World):
    outsider = world.apis["other_tenant"]
    spec = {"model": {"name": "fake/fake-model"}, "sub_agents": [{"name": "helper", "description": "helps", "agent": world.agent_name}]}
    session = outsider.ok(outsider.post("/api/v1/sessions", json={"agent": {"spec": spec}}), 201)["data"]
    refused = outsider.post(f"/api/v1/sessions/{session['id']}/turns", json=turn_body(world, "other_tenant"))
    error = wire.assert_error(refused, 404)
    assert world.secret not in json.dumps(error)


def test_ids_and_names_of_the_owners_reach_nothing_in_new_requests(world: World):
    """A chat whose id is the owner's session runs nothing in it; a draft cannot link to an agent
    its caller may not see."""
    for caller in ("same_tenant", "collaborator", "other_tenant", "admin", "other_admin", "operator"):
        api = world.apis[caller]
        chat = {**chat_body(world, caller), "id": world.session}
        wire.assert_error(api.post("/api/v1/chat", json=chat), 404)
        draft = {"agent_spec": {"model": {"name": "fake/fake-model"}}, "agent_name": world.agent_name}
        answer = api.post(wire.Api.gw("draft-sessions"), json=draft)
        if caller in RUNNERS:
            assert api.ok(answer)["data"]["agent_name"] == world.agent_name
        else:
            wire.assert_error(answer, 404)
    turns = world.owner.ok(world.owner.get(f"/api/v1/sessions/{world.session}/turns"))["data"]
    assert all(turn["created_by_subject"]["subject_id"] == world.subjects["owner"] for turn in turns), turns
