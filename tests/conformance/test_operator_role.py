"""The operator role, as an attack: a tenant's admin is an admin of its own tenant only.

A server with `--auth api-keys` whose operator key was made with `teamster keys create --role
operator`; tenant admins of `acme` and `globex`, and a key the CLI made with `--role admin` (what
every admin key stored before the operator role existed says) are tenant admins. globex's admin
tries what a probe did: mint an admin key for acme, mint an operator key, list, revoke acme's
keys, read and write settings, providers, MCP servers and skills, scrape `/metrics`. Each is
refused in the API's error shape (403, or 404 for a key it may not know of), and nothing it
tried changed anything; the operator does all of it, and each tenant admin still manages its
own tenant's keys. Runs on the suite's backend (SQLite, or PostgreSQL with
TEAMSTER_TEST_BACKEND=postgres)."""

from __future__ import annotations

import typing

import pytest

import conftest
import wire
from conftest import TeamsterServer


class Tenants(typing.NamedTuple):
    server: TeamsterServer
    operator: wire.Api
    acme: wire.Api
    globex: wire.Api
    # A `--role admin` key the CLI made: a tenant admin of globex.
    legacy: wire.Api


@pytest.fixture(scope="module")
def tenants(workdir, fake_model) -> typing.Iterator[Tenants]:
    server = TeamsterServer(workdir, fake_model, ["--auth", "api-keys"])
    operator_key = conftest.cli_key(server, "root", "ops", "operator")
    legacy_key = conftest.cli_key(server, "old-admin", "globex", "admin")
    try:
        server.start()
        operator = wire.Api(server.url, key=operator_key)
        operator.ok(operator.put("/api/v1/settings/model-providers", json={"manifest": fake_model.provider_manifest()}))
        admins = {}
        for tenant in ("acme", "globex"):
            made = operator.ok(operator.post("/api/v1/keys", json={"subject": f"{tenant}-admin", "tenant": tenant, "role": "admin"}), 201)
            admins[tenant] = wire.Api(server.url, key=made["data"]["secret"])
        yield Tenants(server, operator, admins["acme"], admins["globex"], wire.Api(server.url, key=legacy_key))
    finally:
        server.close()


def key_ids(api: wire.Api) -> dict[str, dict]:
    return {key["id"]: key for key in api.ok(api.get("/api/v1/keys"))["data"]}


def test_a_tenant_admin_cannot_touch_another_tenants_keys_nor_mint_an_operator(tenants: Tenants):
    operator, acme, globex = tenants.operator, tenants.acme, tenants.globex
    acme_member = acme.ok(acme.post("/api/v1/keys", json={"subject": "ann"}), 201)["data"]
    assert (acme_member["tenant"], acme_member["role"]) == ("acme", "member")

    for attacker in (globex, tenants.legacy):
        # Minting an admin (or member) key for acme: refused, and no key was made.
        before = set(key_ids(operator))
        for body in ({"subject": "mallory", "tenant": "acme", "role": "admin"}, {"subject": "mallory", "tenant": "acme"}):
            wire.assert_error(attacker.post("/api/v1/keys", json=body), 403)
        # An operator key, even in its own tenant: refused.
        wire.assert_error(attacker.post("/api/v1/keys", json={"subject": "mallory", "role": "operator"}), 403)
        wire.assert_error(attacker.post("/api/v1/keys", json={"subject": "mallory", "tenant": "globex", "role": "operator"}), 403)
        assert set(key_ids(operator)) == before
        # Listing shows its own tenant's keys only: no acme key, no operator key.
        listed = key_ids(attacker).values()
        assert listed and {key["tenant"] for key in listed} == {"globex"}, listed
        assert all(key["role"] != "operator" for key in listed), listed
        # Revoking acme's key is answered as for a key that does not exist, and the key works on.
        unknown = wire.assert_error(attacker.delete("/api/v1/keys/nosuchkey"), 404)
        refused = wire.assert_error(attacker.delete(f"/api/v1/keys/{acme_member['id']}"), 404)
        assert refused["message"].replace(acme_member["id"], "nosuchkey") == unknown["message"]
        assert wire.Api(tenants.server.url, key=acme_member["secret"]).get("/api/v1/sessions").status_code == 200
        # Nor the operator's key, though it may guess its id.
        operator_id = next(key["id"] for key in key_ids(operator).values() if key["role"] == "operator")
        wire.assert_error(attacker.delete(f"/api/v1/keys/{operator_id}"), 404)
        assert key_ids(operator)[operator_id].get("revoked_at") is None


def test_a_tenant_admin_is_refused_everything_server_wide(tenants: Tenants):
    provider = tenants.server.fake.provider_manifest()
    calls = [
        ("GET", "/metrics", None),
        ("GET", "/api/v1/settings/model-providers", None),
        ("PUT", "/api/v1/settings/model-providers", {"manifest": {**provider, "base_url": "http://127.0.0.1:9/v1"}}),
        ("POST", "/api/v1/settings/model-providers", {"manifest": {**provider, "name": "evil"}}),
        ("GET", "/api/v1/settings/mcp-servers", None),
        ("POST", "/api/v1/settings/mcp-servers", {"manifest": {"name": "evil", "type": "streamable-http", "url": "http://127.0.0.1:9/mcp"}}),
        ("PUT", "/api/v1/settings/mcp-servers", {"manifest": {"name": "evil", "type": "streamable-http", "url": "http://127.0.0.1:9/mcp"}}),
        ("GET", "/api/v1/settings/skills", None),
        ("PUT", "/api/v1/settings/skills", {}),
    ]
    for admin in (tenants.acme, tenants.globex, tenants.legacy):
        for method, path, body in calls:
            wire.assert_error(admin.http.request(method, path, json=body), 403)
    # Nothing they sent took: the provider is the operator's, and there is no `evil` anything.
    operator = tenants.operator
    providers = operator.get("/api/v1/settings/model-providers")
    assert provider["name"] in providers.text and "evil" not in providers.text and "127.0.0.1:9/" not in providers.text
    assert "evil" not in operator.get("/api/v1/settings/mcp-servers").text


def test_the_operator_does_all_and_each_admin_manages_its_own_tenant(tenants: Tenants):
    operator, acme, globex = tenants.operator, tenants.acme, tenants.globex
    assert operator.get("/metrics").status_code == 200
    for path in ("/api/v1/settings/model-providers", "/api/v1/settings/mcp-servers", "/api/v1/settings/skills"):
        operator.ok(operator.get(path))
    # The operator makes keys in any tenant, operator keys included, and revokes any.
    second = operator.ok(operator.post("/api/v1/keys", json={"subject": "deputy", "tenant": "ops", "role": "operator"}), 201)["data"]
    assert second["role"] == "operator"
    deputy = wire.Api(tenants.server.url, key=second["secret"])
    assert deputy.get("/api/v1/settings/mcp-servers").status_code == 200
    made = operator.ok(operator.post("/api/v1/keys", json={"subject": "bo", "tenant": "acme"}), 201)["data"]
    assert {key["tenant"] for key in key_ids(operator).values()} >= {"ops", "acme", "globex"}
    assert operator.ok(operator.delete(f"/api/v1/keys/{made['id']}"))["data"]["revoked_at"]
    assert operator.ok(operator.delete(f"/api/v1/keys/{second['id']}"))["data"]["revoked_at"]
    wire.assert_error(deputy.get("/api/v1/sessions"), 401)
    # A tenant admin makes, lists and revokes its own tenant's keys; a key it names no tenant
    # for is its own tenant's.
    for admin, tenant in ((acme, "acme"), (globex, "globex")):
        mine = admin.ok(admin.post("/api/v1/keys", json={"subject": "helper", "role": "admin"}), 201)["data"]
        assert (mine["tenant"], mine["role"]) == (tenant, "admin")
        named = admin.ok(admin.post("/api/v1/keys", json={"subject": "helper2", "tenant": tenant}), 201)["data"]
        assert named["id"] in key_ids(admin)
        assert admin.ok(admin.delete(f"/api/v1/keys/{named['id']}"))["data"]["revoked_at"]
        assert admin.ok(admin.delete(f"/api/v1/keys/{mine['id']}"))["data"]["revoked_at"]
    me = operator.ok(operator.get("/api/v1/auth/me"))
    assert me["role"] == "operator", me
    assert globex.ok(globex.get("/api/v1/auth/me"))["role"] == "admin"
