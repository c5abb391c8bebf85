"""Existence oracles, as attacks: nothing tells a tenant what another tenant has.

- Agent names are unique per tenant: tenant globex may name an agent `support` though acme has
  one (before, its create was a 409 "already exists", telling it acme's name), and a name
  always resolves within the caller's tenant, in both dialects (the gateway addresses agents by
  name) and for a turn's saved sub-agents.
- A sandbox download by id answers a caller who does not own the sandbox exactly as for an id
  that never was (404, the same message), also once the owner deleted the session, when only
  the owner learns that the sandbox went with it (410; before, anyone got the 410 "removed",
  which told them the id had existed).

On a server with `--auth api-keys`; runs on the suite's backend (SQLite, or PostgreSQL with
TEAMSTER_TEST_BACKEND=postgres)."""

from __future__ import annotations

import json
import typing

import pytest

import conftest
import wire
from conftest import TeamsterServer


class Tenants(typing.NamedTuple):
    server: TeamsterServer
    acme: wire.Api
    globex: wire.Api
    # Another member of acme.
    acme_peer: wire.Api


@pytest.fixture(scope="module")
def tenants(workdir, fake_model) -> typing.Iterator[Tenants]:
    server = TeamsterServer(workdir, fake_model, ["--auth", "api-keys"])
    operator_key = conftest.cli_key(server, "root", "ops", "operator")
    try:
        server.start()
        operator = wire.Api(server.url, key=operator_key)
        operator.ok(operator.put("/api/v1/settings/model-providers", json={"manifest": fake_model.provider_manifest()}))

        def member(tenant: str) -> wire.Api:
            created = operator.post("/api/v1/keys", json={"subject": wire.unique("member"), "tenant": tenant})
            return wire.Api(server.url, key=operator.ok(created, 201)["data"]["secret"])

        yield Tenants(server, member("acme"), member("globex"), member("acme"))
        operator.close()
    finally:
        server.close()


def manifest(instructions: str, **extra: typing.Any) -> dict:
    return {"model": {"name": "fake/fake-model"}, "instructions": instructions, **extra}


def test_agent_names_are_unique_per_tenant_and_resolve_within_the_callers(tenants: Tenants, fake: wire.FakeModel):
    acme, globex, peer = tenants.acme, tenants.globex, tenants.acme_peer
    name = wire.unique("support")
    ours = acme.ok(acme.post("/api/v1/agents", json={"name": name, "manifest": manifest("acme's")}), 201)["data"]
    # The same name in another tenant is another agent, not a conflict.
    theirs = globex.ok(globex.post("/api/v1/agents", json={"name": name, "manifest": manifest("globex's")}), 201)["data"]
    assert theirs["id"] != ours["id"] and theirs["tenant"] == "globex"
    # In its own tenant the name is still taken (409), whoever of the tenant asks.
    wire.assert_error(peer.post("/api/v1/agents", json={"name": name, "manifest": manifest("again")}), 409)

    # Each tenant's name finds its own agent: by name in the native API, in the gateway's new
    # session (E1) and its listing by agent name (E15).
    assert globex.ok(globex.get(f"/api/v1/agents/{name}"))["data"]["id"] == theirs["id"]
    native = globex.ok(globex.post("/api/v1/sessions", json={"agent": {"name": name}}), 201)["data"]
    assert native["agent"]["id"] == theirs["id"], native
    gateway = globex.ok(globex.post(wire.Api.gw("sessions"), json={"agent_name": name}))["data"]
    assert gateway["agent"]["id"] == theirs["id"], gateway
    listed = globex.ok(globex.get(wire.Api.gw("sessions"), params={"agent_name": name, "limit": 10}))["data"]
    assert {session["id"] for session in listed} == {native["id"], gateway["id"]}
    assert globex.run_turn(gateway["id"], "hello " + wire.unique("e1")).done["state"]["status"] == "done"

    # A spec naming the agent as a saved sub-agent gets the caller's tenant's.
    helper, acme_secret, globex_marker = wire.unique("helper"), wire.unique("ACME-HELPER-SECRET"), wire.unique("globex-helper")
    acme.ok(acme.post("/api/v1/agents", json={"name": helper, "manifest": manifest(acme_secret)}), 201)
    globex.ok(globex.post("/api/v1/agents", json={"name": helper, "manifest": manifest(globex_marker)}), 201)
    spec = manifest("lead", sub_agents=[{"name": "helper", "description": "helps", "agent": helper}])
    session = globex.ok(globex.post("/api/v1/sessions", json={"agent": {"spec": spec}}), 201)["data"]
    task = wire.unique("task")
    run = globex.run_turn(session["id"], f"[tool:run_sub_agent {json.dumps({'name': 'h', 'agent': 'helper', 'task': task})}]")
    assert run.done["state"]["status"] == "done", run.done
    sub_agent_calls = fake.requests_mentioning(task)
    assert any(globex_marker in json.dumps(body) for body in sub_agent_calls), json.dumps(sub_agent_calls)[:3000]
    assert not fake.requests_mentioning(acme_secret), "acme's helper never ran for globex"

    # Deleting globex's agent leaves acme's alone.
    globex.ok(globex.delete(f"/api/v1/agents/{theirs['id']}"))
    assert acme.ok(acme.get(f"/api/v1/agents/{name}"))["data"]["id"] == ours["id"]
    wire.assert_error(globex.get(f"/api/v1/agents/{name}"), 404)


def exec_call(command: str) -> str:
    return f"[tool:exec {json.dumps({'command': command})}]"


def download(api: wire.Api, sandbox_id: str, path: str):
    return api.get(wire.Api.gw(f"sandbox/{sandbox_id}/file"), params={"path": path})


def test_a_sandbox_not_ours_is_answered_as_one_that_never_was(tenants: Tenants):
    acme, globex, peer = tenants.acme, tenants.globex, tenants.acme_peer
    spec = {"model": {"name": "fake/fake-model"}, "config": {"sandbox": {"enabled": True}}}
    session = acme.ok(acme.post("/api/v1/sessions", json={"agent": {"spec": spec}}), 201)["data"]
    run = acme.run_turn(session["id"], exec_call("echo kept > kept.txt") + " " + wire.unique("oracle"))
    (sandbox_id,) = [event["sandbox_id"] for event in run.stream.payloads if event["type"] == "sandbox.created"]
    assert download(acme, sandbox_id, "/workspace/kept.txt").content == b"kept\n"

    never = "sbx_" + "0" * len(sandbox_id.removeprefix("sbx_"))

    def unknown_message(api: wire.Api) -> str:
        return wire.assert_error(download(api, never, "/workspace/kept.txt"), 404)["message"]

    # Another tenant's member and a member of the owner's own tenant: the same 404 as for an id
    # that never was.
    for intruder in (globex, peer):
        error = wire.assert_error(download(intruder, sandbox_id, "/workspace/kept.txt"), 404)
        assert error["message"].replace(sandbox_id, never) == unknown_message(intruder), error
    # Once the owner deletes the session, its sandbox is gone: the owner learns so (410, as the
    # gateway dialect's contract says of a destroyed sandbox), everyone else still gets the 404
    # of an id that never was.
    assert acme.delete(f"/api/v1/sessions/{session['id']}").status_code == 204
    wire.assert_error(download(acme, sandbox_id, "/workspace/kept.txt"), 410)
    for caller in (globex, peer):
        error = wire.assert_error(download(caller, sandbox_id, "/workspace/kept.txt"), 404)
        assert error["message"].replace(sandbox_id, never) == unknown_message(caller), error
