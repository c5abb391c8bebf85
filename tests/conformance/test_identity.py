"""Identity: API keys (made with `teamster keys create` and `POST /api/v1/keys`, only their hash
stored) and `--auth api-keys`: keys are listed without secrets, a missing, malformed or revoked
key is a 401; the real gateway client works with a key, its owned and search listings showing
what each subject may see; a server without authentication listens on loopback only. Who may
call which route, for every route and kind of caller, is test_access_matrix.py's."""

from __future__ import annotations

import typing

import pytest
from truefoundry_gateway_sdk import UserMessage

import conftest
import wire
from conftest import TeamsterServer, teamster


class Keyed(typing.NamedTuple):
    server: TeamsterServer
    admin: str


@pytest.fixture
def keyed(workdir, fake_model) -> typing.Iterator[Keyed]:
    """A server with `--auth api-keys` whose first admin key was made with the CLI before it
    started, configured through that key."""
    server = TeamsterServer(workdir, fake_model, ["--auth", "api-keys"])
    made = teamster("keys", "create", "--subject", "root", "--tenant", "ops", "--role", "operator",
                    "--database", server.database, "--data-dir", str(workdir))
    assert made.returncode == 0, made.stderr
    admin = made.stdout.strip()
    assert admin.startswith("tsk_") and "shown this once" in made.stderr
    try:
        server.start()
        server.api = wire.Api(server.url, key=admin)
        server.configure()
        yield Keyed(server, admin)
    finally:
        server.close()


def key_for(admin: wire.Api, subject: str, tenant: str, role: str = "member") -> str:
    created = admin.ok(admin.post("/api/v1/keys", json={"subject": subject, "tenant": tenant, "role": role}), 201)["data"]
    assert created["subject"]["subject_slug"] == subject and created["role"] == role and "secret_sha256" not in created
    return created["secret"]


def test_keys_are_listed_without_secrets_and_a_revoked_key_stops_working(keyed: Keyed):
    """Who may call which route, for every route, is test_access_matrix.py's; here are the keys
    themselves."""
    url, admin = keyed.server.url, wire.Api(keyed.server.url, key=keyed.admin)
    keys = {name: key_for(admin, name, tenant) for name, tenant in [("alice", "acme"), ("bob", "acme")]}
    # The same name in another tenant is another subject.
    elsewhere = admin.ok(admin.post("/api/v1/keys", json={"subject": "alice", "tenant": "other"}), 201)["data"]
    listed = admin.ok(admin.get("/api/v1/keys"))["data"]
    assert {"root", "alice", "bob"} <= {key["subject"]["subject_slug"] for key in listed}
    assert elsewhere["subject"]["subject_id"] == "other:alice"
    assert "acme:alice" in {key["subject"]["subject_id"] for key in listed}
    assert not any("secret" in key or "secret_sha256" in key for key in listed)

    # No key, a malformed one, a revoked one: 401 saying which scheme; the health check needs none.
    anonymous = httpx_get(url, "/api/v1/sessions", None)
    assert anonymous.status_code == 401 and anonymous.headers["www-authenticate"] == "Bearer"
    assert httpx_get(url, "/api/v1/sessions", "tsk_nope_nope").status_code == 401
    assert httpx_get(url, "/api/v1/sessions", keys["bob"]).status_code == 200
    assert httpx_get(url, "/healthz", None).status_code == 200
    bob_id = next(key["id"] for key in listed if key["subject"]["subject_id"] == "acme:bob")
    assert admin.ok(admin.delete(f"/api/v1/keys/{bob_id}"))["data"]["revoked_at"]
    wire.assert_error(wire.Api(url, key=keys["bob"]).get("/api/v1/sessions"), 401)
    assert httpx_get(url, "/api/v1/sessions", keys["alice"]).status_code == 200
    # The CLI reads a PostgreSQL store beside the running server; a SQLite file is the server's alone.
    listed_by_cli = teamster("keys", "list", "--database", keyed.server.database, "--data-dir", str(keyed.server.workdir))
    if keyed.server.database.startswith("postgres"):
        assert listed_by_cli.returncode == 0, listed_by_cli.stderr
        assert any(line.startswith(bob_id) and "revoked" in line for line in listed_by_cli.stdout.splitlines())
    else:
        assert listed_by_cli.returncode != 0 and "opening" in listed_by_cli.stderr, listed_by_cli.stderr


def share_with_team(admin: wire.Api, agent: str, team: str) -> None:
    """Lets every subject of tenant `team` run `agent` (a collaborator `team:<team>`, role
    `agent-user`)."""
    stored = admin.ok(admin.get(f"/api/v1/agents/{agent}"))["data"]
    shared = {**stored["manifest"], "collaborators": [{"subject": f"team:{team}", "role_id": "agent-user"}]}
    admin.ok(admin.put(f"/api/v1/agents/{stored['id']}", json={"manifest": shared}))


def httpx_get(url: str, path: str, key: typing.Optional[str]):
    import httpx
    headers = {} if key is None else {"Authorization": f"Bearer {key}"}
    return httpx.get(f"{url}{path}", headers=headers, timeout=wire.TIMEOUT)


def test_the_real_gateway_client_works_with_a_key(keyed: Keyed):
    """The real SDK with API keys: the agent of the ops tenant is shared with its team, so a
    member runs it; the owned (E15) and search (E16) listings show each subject what it may
    see (the tenant's admin sees every session of the tenant in E16); another tenant's client
    is told the agent and the session do not exist."""
    admin = wire.Api(keyed.server.url, key=keyed.admin)
    share_with_team(admin, conftest.DEMO_AGENT, "ops")
    key = key_for(admin, "sdk-user", "ops")
    base_url = f"{keyed.server.url}/t1"
    client = conftest.AgentSessionClient(base_url=base_url, api_key=key, timeout=30)
    session = client.create_session(agent_name=conftest.DEMO_AGENT)
    prepared = session.prepare_turn(input=[UserMessage(content="hello with a key")])
    list(prepared.execute())
    assert prepared.state.status == "done" and "hello with a key" in prepared.state.output.content

    private = conftest.PrivateAgentSessionClient(base_url=base_url, api_key=key, timeout=30)
    draft = private.create_draft_session(agent_spec={"model": {"name": "fake/fake-model"}})
    assert {item.id for item in private.list_owned_sessions(limit=100)} >= {session.id, draft.id}
    assert {item.id for item in private.search_sessions(limit=100)} >= {session.id, draft.id}

    # A teammate runs the agent too, and sees none of the other's sessions.
    teammate_key = key_for(admin, "teammate", "ops")
    teammate = conftest.PrivateAgentSessionClient(base_url=base_url, api_key=teammate_key, timeout=30)
    assert not {session.id, draft.id} & {item.id for item in teammate.search_sessions(limit=100)}
    assert not {session.id, draft.id} & {item.id for item in teammate.list_owned_sessions(limit=100)}
    with pytest.raises(Exception) as raised:
        conftest.AgentSessionClient(base_url=base_url, api_key=teammate_key, timeout=30).get_session(session_id=session.id)
    assert getattr(raised.value, "status_code", None) == 404

    # The tenant's admin: E3 and E16 show it the member's session and draft, E15 does not.
    root = conftest.PrivateAgentSessionClient(base_url=base_url, api_key=keyed.admin, timeout=30)
    searched = {item.id for item in root.search_sessions(limit=100, created_by_subject_id="ops:sdk-user")}
    assert {session.id, draft.id} <= searched
    assert session.id not in {item.id for item in root.list_owned_sessions(limit=100)}
    seen = conftest.AgentSessionClient(base_url=base_url, api_key=keyed.admin, timeout=30).get_session(session_id=session.id)
    assert seen.id == session.id

    # Another tenant's client: no agent, no session.
    outsider = conftest.AgentSessionClient(base_url=base_url, api_key=key_for(admin, "outsider", "acme"), timeout=30)
    for attempt in (lambda: outsider.create_session(agent_name=conftest.DEMO_AGENT),
                    lambda: outsider.get_session(session_id=session.id)):
        with pytest.raises(Exception) as raised:
            attempt()
        assert getattr(raised.value, "status_code", None) == 404


def test_without_authentication_a_server_listens_on_loopback_only(workdir):
    refused = teamster("serve", "--listen", "0.0.0.0:0", "--data-dir", str(workdir / "open"), "--no-example", "--no-sandbox")
    assert refused.returncode != 0 and "--insecure-no-auth" in refused.stderr, refused.stderr
    bad = teamster("keys", "create", "--subject", "has space", "--data-dir", str(workdir / "open"))
    assert bad.returncode != 0 and "subject" in bad.stderr
