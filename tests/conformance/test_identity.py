"""Identity: API keys (made with `teamster keys create` and `POST /api/v1/keys`, only their hash
stored), `--auth api-keys`, and who sees what: another subject's session is a 404 on every
session route, settings and keys are for admins, a missing or revoked key is a 401; the real
gateway client works with a key; a server without authentication listens on loopback only."""

from __future__ import annotations

import subprocess
import typing

import pytest
from truefoundry_gateway_sdk import UserMessage

import conftest
import wire
from conftest import TeamsterServer


def teamster(*args: str) -> subprocess.CompletedProcess:
    program = str(conftest.binary("TEAMSTER_BIN", "target/debug/teamster"))
    return subprocess.run([program, *args], stdin=subprocess.DEVNULL, capture_output=True, timeout=60, text=True)


class Keyed(typing.NamedTuple):
    server: TeamsterServer
    admin: str


@pytest.fixture
def keyed(workdir, fake_model) -> typing.Iterator[Keyed]:
    """A server with `--auth api-keys` whose first admin key was made with the CLI before it
    started, configured through that key."""
    server = TeamsterServer(workdir, fake_model, ["--auth", "api-keys"])
    made = teamster("keys", "create", "--subject", "root", "--tenant", "ops", "--role", "admin",
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


def session_routes(session: str, turn: str) -> list[tuple[str, str, typing.Optional[dict]]]:
    """Every route about one session, as (method, path, JSON body)."""
    base = f"/api/v1/sessions/{session}"
    return [
        ("GET", base, None),
        ("PATCH", base, {"title": "mine now"}),
        ("GET", f"{base}/turns", None),
        ("POST", f"{base}/turns", {"input": [{"type": "user.message", "content": "hi"}], "stream": False}),
        ("GET", f"{base}/turns/{turn}", None),
        ("GET", f"{base}/turns/{turn}/events", None),
        ("GET", f"{base}/turns/{turn}/subscribe", None),
        ("GET", f"{base}/events", None),
        ("GET", f"{base}/tasks", None),
        ("GET", f"{base}/plans", None),
        ("GET", f"{base}/grants", None),
        ("GET", f"{base}/state", None),
        ("GET", f"{base}/follow-ups", None),
        ("POST", f"{base}/follow-ups", {"content": "later"}),
        ("POST", f"{base}/steer", {"content": "now"}),
        ("POST", f"{base}/clone", {}),
        ("POST", f"{base}/cancel", {}),
        ("GET", f"{base}/turns/{turn}/download-sandbox-file?path=/workspace/x", None),
        ("GET", f"/v1/agents/sessions/{session}", None),
        ("GET", f"/v1/agents/sessions/{session}/turns/{turn}", None),
        ("GET", f"/v1/agents/sessions/{session}/events", None),
        ("GET", f"/api/v1/chat/{session}/stream", None),
        ("DELETE", base, None),
    ]


def test_sessions_are_their_creators_alone_and_settings_are_for_admins(keyed: Keyed):
    url, admin = keyed.server.url, wire.Api(keyed.server.url, key=keyed.admin)
    keys = {name: key_for(admin, name, tenant) for name, tenant in [("alice", "acme"), ("bob", "acme"), ("carol", "other")]}
    # The same name in another tenant is another subject.
    keys["alice-elsewhere"] = key_for(admin, "alice", "other")
    apis = {name: wire.Api(url, key=key) for name, key in keys.items()}
    alice = apis["alice"]
    session = alice.create_session(agent_name=conftest.DEMO_AGENT)
    turn = alice.run_turn(session["id"], "secret-plan-7f3").turn_id

    # Every route answers an intruder exactly as it answers for a session that does not exist
    # (404; 204 for the idempotent DELETE, which deletes nothing).
    missing = {(method, path): alice.http.request(method, path, json=body).status_code
               for method, path, body in session_routes("sess_0000000000000000000000000000", turn)}
    intruders = {**{name: api for name, api in apis.items() if name != "alice"}, "admin": admin}
    for name, api in intruders.items():
        for (method, path, body), expected in zip(session_routes(session["id"], turn), missing.values()):
            response = api.http.request(method, path, json=body)
            assert response.status_code == expected and expected in (404, 204), (name, method, path, response.status_code, expected)
            assert "secret-plan-7f3" not in response.text
        listed = api.ok(api.get("/api/v1/sessions"))["data"]
        assert session["id"] not in {item["id"] for item in listed}, name
        # A chat id that is another's session: nothing runs in it.
        chat = {"id": session["id"], "agent": conftest.DEMO_AGENT, "trigger": "submit-message",
                "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": "let me in"}]}]}
        wire.assert_error(api.post("/api/v1/chat", json=chat), 404)
    # Nothing an intruder sent changed the session.
    assert alice.ok(alice.get(f"/api/v1/sessions/{session['id']}"))["data"]["title"] == session["title"]
    assert len(alice.ok(alice.get(f"/api/v1/sessions/{session['id']}/turns"))["data"]) == 1

    # Settings and keys: admins only.
    for method, path, body in [("GET", "/api/v1/settings/model-providers", None),
                               ("PUT", "/api/v1/settings/model-providers", {"manifest": keyed.server.fake.provider_manifest()}),
                               ("GET", "/api/v1/settings/mcp-servers", None), ("GET", "/api/v1/keys", None),
                               ("POST", "/api/v1/keys", {"subject": "mallory"})]:
        wire.assert_error(alice.http.request(method, path, json=body), 403)
        assert admin.http.request(method, path, json=body).status_code in (200, 201), (method, path)
    listed = admin.ok(admin.get("/api/v1/keys"))["data"]
    assert {"root", "alice", "bob", "carol", "mallory"} <= {key["subject"]["subject_slug"] for key in listed}
    assert not any("secret" in key or "secret_sha256" in key for key in listed)

    # No key, a malformed one, a revoked one: 401, and the health check needs none.
    anonymous = httpx_get(url, "/api/v1/sessions", None)
    assert anonymous.status_code == 401 and anonymous.headers["www-authenticate"] == "Bearer"
    assert httpx_get(url, "/api/v1/sessions", "tsk_nope_nope").status_code == 401
    assert httpx_get(url, "/healthz", None).status_code == 200
    bob_id = next(key["id"] for key in listed if key["subject"]["subject_slug"] == "bob")
    assert admin.ok(admin.delete(f"/api/v1/keys/{bob_id}"))["data"]["revoked_at"]
    wire.assert_error(apis["bob"].get("/api/v1/sessions"), 401)
    # The CLI reads a PostgreSQL store beside the running server; a SQLite file is the server's alone.
    listed_by_cli = teamster("keys", "list", "--database", keyed.server.database, "--data-dir", str(keyed.server.workdir))
    if keyed.server.database.startswith("postgres"):
        assert listed_by_cli.returncode == 0, listed_by_cli.stderr
        assert any(line.startswith(bob_id) and "revoked" in line for line in listed_by_cli.stdout.splitlines())
    else:
        assert listed_by_cli.returncode != 0 and "opening" in listed_by_cli.stderr, listed_by_cli.stderr


def httpx_get(url: str, path: str, key: typing.Optional[str]):
    import httpx
    headers = {} if key is None else {"Authorization": f"Bearer {key}"}
    return httpx.get(f"{url}{path}", headers=headers, timeout=wire.TIMEOUT)


def test_the_real_gateway_client_works_with_a_key(keyed: Keyed):
    admin = wire.Api(keyed.server.url, key=keyed.admin)
    key = key_for(admin, "sdk-user", "acme")
    client = conftest.AgentSessionClient(base_url=f"{keyed.server.url}/t1", api_key=key, timeout=30)
    session = client.create_session(agent_name=conftest.DEMO_AGENT)
    prepared = session.prepare_turn(input=[UserMessage(content="hello with a key")])
    list(prepared.execute())
    assert prepared.state.status == "done" and "hello with a key" in prepared.state.output.content
    # Another subject's client cannot reach it.
    other = conftest.AgentSessionClient(base_url=f"{keyed.server.url}/t1", api_key=key_for(admin, "other", "acme"), timeout=30)
    with pytest.raises(Exception) as raised:
        other.get_session(session_id=session.id)
    assert getattr(raised.value, "status_code", None) == 404


def test_without_authentication_a_server_listens_on_loopback_only(workdir):
    refused = teamster("serve", "--listen", "0.0.0.0:0", "--data-dir", str(workdir / "open"), "--no-example", "--no-sandbox")
    assert refused.returncode != 0 and "--insecure-no-auth" in refused.stderr, refused.stderr
    bad = teamster("keys", "create", "--subject", "has space", "--data-dir", str(workdir / "open"))
    assert bad.returncode != 0 and "subject" in bad.stderr
