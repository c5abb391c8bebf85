"""MCP server URLs that carry credentials (`http://svc:PASS@host/mcp?api_key=SECRET`): the
operator who registers one sees and uses it whole; members of every tenant see it without user
info or query, in the listing and in every event they can read (a server that is down included,
whose error quotes the URL); and the stored settings row holds it sealed, opened again after a
restart. Runs on SQLite and, with TEAMSTER_TEST_BACKEND=postgres, on PostgreSQL."""

from __future__ import annotations

import json
import sqlite3
import typing

import pytest

import conftest
import wire
from conftest import TeamsterServer
from test_mcp import McpHttpServer, mcp_http  # noqa: F401 (mcp_http is a fixture)

PASSWORD = "pw" + wire.unique("pass").replace("-", "")
SECRET = "key" + wire.unique("secret").replace("-", "")


def with_credentials(url: str) -> str:
    scheme, rest = url.split("://", 1)
    return f"{scheme}://svc:{PASSWORD}@{rest}?api_key={SECRET}"


class World(typing.NamedTuple):
    server: TeamsterServer
    operator: wire.Api
    members: list[wire.Api]
    working: str
    dead: str
    plain_url: str


@pytest.fixture
def world(workdir, fake_model, mcp_http) -> typing.Iterator[World]:  # noqa: F811
    server = TeamsterServer(workdir, fake_model, ["--auth", "api-keys", "--no-sandbox"])
    made = conftest.teamster("keys", "create", "--subject", "root", "--tenant", "ops", "--role", "operator",
                    "--database", server.database, "--data-dir", str(workdir))
    if made.returncode != 0 and "invalid value 'operator'" in made.stderr:
        # A binary from before the operator role: its admins configure the server.
        made = conftest.teamster("keys", "create", "--subject", "root", "--tenant", "ops", "--role", "admin",
                        "--database", server.database, "--data-dir", str(workdir))
    assert made.returncode == 0, made.stderr
    try:
        server.start()
        operator = wire.Api(server.url, key=made.stdout.strip())
        operator.ok(operator.put("/api/v1/settings/model-providers", json={"manifest": server.fake.provider_manifest()}))
        working, dead = wire.unique("creds"), wire.unique("down")
        for name, url in ((working, mcp_http.url), (dead, f"http://127.0.0.1:{conftest.free_port()}/mcp")):
            manifest = {"type": "remote", "name": name, "description": "Test tools.", "url": with_credentials(url)}
            operator.ok(operator.post("/api/v1/settings/mcp-servers", json={"manifest": manifest}), 201)
        members = []
        for tenant, role in (("acme", "member"), ("globex", "member"), ("acme", "admin")):
            key = operator.ok(operator.post("/api/v1/keys", json={"subject": wire.unique(tenant), "tenant": tenant, "role": role}), 201)
            members.append(wire.Api(server.url, key=key["data"]["secret"]))
        yield World(server, operator, members, working, dead, mcp_http.url)
    finally:
        server.close()


def assert_no_credentials(text: str, where: str) -> None:
    assert PASSWORD not in text and SECRET not in text, f"{where}: {text[:2000]}"


def run_with_servers(api: wire.Api, *names: str) -> tuple[dict, str]:
    """A turn of a session using the registry servers `names`: its `mcp.initialize` entries by
    name, and all the caller can read of it (stream and stored events)."""
    spec = {"model": {"name": "fake/fake-model"}, "mcp_servers": [{"type": "truefoundry-mcp-registry", "name": name} for name in names]}
    session = api.create_session(spec=spec)["id"]
    run = api.run_turn(session, f"hello {wire.unique('creds')}")
    assert run.done["state"]["status"] == "done", run.done
    (init,) = [event for event in wire.fold_stream(run.stream.payloads) if event["type"] == "mcp.initialize"]
    stored = api.get(f"/api/v1/sessions/{session}/events").text
    return {entry["name"]: entry for entry in init["mcp_servers"]}, json.dumps(run.stream.payloads) + stored


def stored_settings(server: TeamsterServer) -> str:
    sql = "SELECT value FROM settings WHERE kind = 'mcp-server'"
    if server.database.startswith("postgres"):
        return conftest.psql(server.database, sql)
    with sqlite3.connect(server.db_path) as connection:
        return "\n".join(row[0] for row in connection.execute(sql))


def test_members_never_see_the_credentials_of_an_mcp_server_url(world: World):
    for member in world.members:
        listing = member.get("/api/v1/mcp-servers")
        assert listing.status_code == 200, listing.text
        assert_no_credentials(listing.text, "the member's listing")
        urls = {entry["name"]: entry["url"] for entry in listing.json()["data"]}
        assert urls[world.working] == world.plain_url, urls
        for name in (world.working, world.dead):
            assert_no_credentials(member.get(f"/api/v1/mcp-servers/{name}/tools").text, f"the tools of {name}")

    member = world.members[0]
    entries, readable = run_with_servers(member, world.working, world.dead)
    # The operator's URL is used whole (the member's turn reaches the server through it).
    assert "error" not in entries[world.working], entries
    assert entries[world.dead].get("error"), entries
    assert_no_credentials(readable, "the member's events")


def test_the_operator_sees_the_whole_url_and_it_is_sealed_at_rest(world: World):
    shown = world.operator.ok(world.operator.get("/api/v1/settings/mcp-servers"))["data"]
    urls = {entry["name"]: entry["manifest"]["url"] for entry in shown}
    assert urls[world.working] == with_credentials(world.plain_url), urls

    stored = stored_settings(world.server)
    assert world.working in stored and "sealed:" in stored, stored
    assert_no_credentials(stored, "the stored settings rows")

    # Sealed, and opened again after a restart: the server is still reached through it.
    world.server.restart()
    member = wire.Api(world.server.url, key=world.members[0].http.headers["Authorization"].removeprefix("Bearer "))
    entries, readable = run_with_servers(member, world.working)
    assert "error" not in entries[world.working], entries
    assert_no_credentials(readable, "the member's events after a restart")
