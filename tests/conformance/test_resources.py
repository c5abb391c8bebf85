"""Resources: what a session is about (`resource_id`, set at creation or by `PATCH`), the
caller's sessions of one resource (`GET /api/v1/sessions?resource_id=`), the caller's resources
(`GET /api/v1/resources`), and "select or create" (`POST /api/v1/sessions?reuse_latest=true`)."""

from __future__ import annotations

import wire
from test_identity import Keyed, key_for, keyed  # noqa: F401 (the fixture)

DEMO = "demo"


def create(api: wire.Api, status: int = 201, reuse: bool = False, **body) -> dict:
    params = {"reuse_latest": "true"} if reuse else {}
    return api.ok(api.post("/api/v1/sessions", params=params, json={"agent": {"name": DEMO}, **body}), status)["data"]


def listed(api: wire.Api, **params: str) -> list[str]:
    return [session["id"] for session in api.ok(api.get("/api/v1/sessions", params=params))["data"]]


def test_sessions_about_a_resource_are_listed_selected_and_moved(api: wire.Api):
    repo, ticket = wire.unique("repo/a"), wire.unique("ticket ✓")
    first = create(api, resource_id=repo)
    assert first["resource_id"] == repo
    second = create(api, resource_id=repo, title="second")
    other = create(api, resource_id=ticket)
    plain = create(api)
    assert "resource_id" not in plain

    assert listed(api, resource_id=repo) == [second["id"], first["id"]]
    assert listed(api, resource_id=ticket) == [other["id"]]
    assert listed(api, resource_id=wire.unique("nothing")) == []

    # Select or create: the resource's latest session of the agent, else a new one.
    again = create(api, 200, reuse=True, resource_id=repo)
    assert again["id"] == second["id"]
    api.run_turn(first["id"], "touch " + wire.unique("r"))
    assert create(api, 200, reuse=True, resource_id=repo)["id"] == first["id"], "the latest updated"
    fresh_resource = wire.unique("new")
    made = create(api, 201, reuse=True, resource_id=fresh_resource)
    assert made["resource_id"] == fresh_resource
    assert create(api, 200, reuse=True, resource_id=fresh_resource)["id"] == made["id"]

    resources = {resource["resource_id"]: resource for resource in api.ok(api.get("/api/v1/resources"))["data"]}
    assert resources[repo]["session_count"] == 2 and resources[ticket]["session_count"] == 1
    assert resources[fresh_resource]["session_count"] == 1
    ordered = [resource["resource_id"] for resource in api.ok(api.get("/api/v1/resources"))["data"]]
    assert ordered.index(fresh_resource) < ordered.index(ticket), "the latest updated first"

    # PATCH moves a session to another resource, or takes it off any.
    moved = api.ok(api.patch(f"/api/v1/sessions/{other['id']}", json={"resource_id": repo}))["data"]
    assert moved["resource_id"] == repo
    assert set(listed(api, resource_id=repo)) == {first["id"], second["id"], other["id"]}
    cleared = api.ok(api.patch(f"/api/v1/sessions/{other['id']}", json={"resource_id": ""}))["data"]
    assert "resource_id" not in cleared
    assert other["id"] not in listed(api, resource_id=repo)
    assert ticket not in {resource["resource_id"] for resource in api.ok(api.get("/api/v1/resources"))["data"]}


def test_bad_resource_input_is_refused(api: wire.Api):
    for body, params, param in [
        ({"resource_id": "x" * 257}, {}, "resource_id"),
        ({"resource_id": "a\nb"}, {}, "resource_id"),
        ({"resource_id": "   "}, {}, "resource_id"),
        ({"resource_id": ""}, {}, "resource_id"),
        ({}, {"reuse_latest": "true"}, "resource_id"),
        ({"resource_id": "r"}, {"reuse_latest": "yes"}, "reuse_latest"),
        ({"resource_id": "r"}, {"unknown": "1"}, "unknown"),
    ]:
        response = api.post("/api/v1/sessions", params=params, json={"agent": {"name": DEMO}, **body})
        assert wire.assert_error(response, 400)["param"] == param, (body, params)
    inline = api.post("/api/v1/sessions", params={"reuse_latest": "true"},
                      json={"agent": {"spec": {"model": {"name": "fake/fake-model"}}}, "resource_id": "r"})
    assert wire.assert_error(inline, 400)["param"] == "agent"
    session = create(api)
    refused = api.patch(f"/api/v1/sessions/{session['id']}", json={"resource_id": "\u0007"})
    assert wire.assert_error(refused, 400)["param"] == "resource_id"
    assert wire.assert_error(api.get("/api/v1/resources", params={"limit": "0"}), 400)["param"] == "limit"


def test_a_callers_resources_and_selections_are_its_own(keyed: Keyed):
    admin = wire.Api(keyed.server.url, key=keyed.admin)
    alice = wire.Api(keyed.server.url, key=key_for(admin, "alice", "acme"))
    bob = wire.Api(keyed.server.url, key=key_for(admin, "bob", "acme"))
    # Alice's agent, which Bob may use too.
    manifest = {"model": {"name": "fake/fake-model"}, "collaborators": [{"subject": "user:bob", "role_id": "agent-user"}]}
    alice.ok(alice.post("/api/v1/agents", json={"name": "shared", "manifest": manifest}), 201)
    shared = wire.unique("shared")
    hers = alice.ok(alice.post("/api/v1/sessions", json={"agent": {"name": "shared"}, "resource_id": shared}), 201)["data"]
    # Bob's "select or create" on the same resource makes his own session.
    his = bob.ok(bob.post("/api/v1/sessions", params={"reuse_latest": "true"},
                          json={"agent": {"name": "shared"}, "resource_id": shared}), 201)["data"]
    assert his["id"] != hers["id"]
    assert [s["id"] for s in bob.ok(bob.get("/api/v1/sessions", params={"resource_id": shared}))["data"]] == [his["id"]]
    assert [r["session_count"] for r in bob.ok(bob.get("/api/v1/resources"))["data"]] == [1]
