"""Settings you can undo (issue 41): model providers and MCP servers are deleted and renamed
through the settings API, and an agent that still names what is gone gets an error naming it; an
MCP server's connection is tested through the API (a verdict, not an error); a body that does not
decode is refused naming the field, never a line and column of JSON; a model of a provider that is
not configured says how to configure it; a replica whose secret key cannot open the stored
secrets is not ready and says why, at start and on `/readyz`.
"""

from __future__ import annotations

import base64
import os
import pathlib
import typing

import httpx
import pytest

import conftest
import wire
from python_servers import PythonServer


@pytest.fixture(scope="module")
def mcp_http(workdir: pathlib.Path) -> typing.Iterator[PythonServer]:
    instance = PythonServer(workdir, "tools_server.py", "--transport", "streamable-http")
    try:
        yield instance
    finally:
        instance.close()


def provider(fake: conftest.FakeModelServer, name: str) -> dict:
    return {**fake.provider_manifest(), "name": name}


def provider_names(api: wire.Api) -> list[str]:
    return [entry["name"] for entry in api.ok(api.get("/api/v1/settings/model-providers"))["data"]]


def test_a_provider_is_renamed_and_deleted(server, api):
    name, renamed = wire.unique("prov"), wire.unique("moved")
    api.ok(api.post("/api/v1/settings/model-providers", json={"manifest": provider(server.fake, name)}), 201)
    session = api.create_session(spec={"model": {"name": f"{name}/fake-model"}})

    moved = api.ok(api.patch(f"/api/v1/settings/model-providers/{name}", json={"name": renamed}))["data"]
    assert moved["name"] == renamed and moved["manifest"]["name"] == renamed, moved
    assert moved["manifest"]["auth"]["api_key"] != wire.API_KEY_SECRET, "the key stays redacted"
    assert renamed in provider_names(api) and name not in provider_names(api)
    # The stored key went with the provider: a turn on the new name reaches the model.
    on_new = api.create_session(spec={"model": {"name": f"{renamed}/fake-model"}})
    assert api.run_turn(on_new["id"], "hello " + wire.unique("renamed")).done["state"]["status"] == "done"

    # A session that names the old name is refused its next turn with an error naming it.
    refused = api.post(f"/api/v1/sessions/{session['id']}/turns",
                       json={"input": [{"type": "user.message", "content": "hello"}], "stream": False})
    error = wire.assert_error(refused, 422)
    assert f'no model provider named "{name}"' in error["message"] and renamed in error["message"], error

    taken = wire.assert_error(api.patch(f"/api/v1/settings/model-providers/{renamed}", json={"name": "fake"}), 409)
    assert "already exists" in taken["message"], taken
    bad = wire.assert_error(api.patch(f"/api/v1/settings/model-providers/{renamed}", json={"name": "Bad Name"}), 400)
    assert bad["param"] == "name", bad

    assert api.delete(f"/api/v1/settings/model-providers/{renamed}").status_code == 204
    assert renamed not in provider_names(api)
    wire.assert_error(api.delete(f"/api/v1/settings/model-providers/{renamed}"), 404)
    wire.assert_error(api.patch(f"/api/v1/settings/model-providers/{renamed}", json={"name": name}), 404)


def test_a_model_of_a_missing_provider_says_how_to_add_it(api):
    error = wire.assert_error(api.post("/api/v1/sessions", json={"agent": {"spec": {"model": {"name": "openai/gpt-4o"}}}}), 400)
    message = error["message"]
    assert 'no model provider named "openai"' in message, error
    assert "set OPENAI_API_KEY" in message and "restart" in message and "add the provider in the settings" in message, error


def test_an_mcp_server_is_tested_renamed_and_deleted(server, api, mcp_http):
    name, renamed = wire.unique("tools"), wire.unique("moved")
    manifest = {"type": "remote", "name": name, "description": "Test tools.", "url": f"{mcp_http.base}/mcp",
                "auth": {"type": "header", "headers": {"Authorization": "Bearer kept-secret"}}}
    api.ok(api.post("/api/v1/settings/mcp-servers", json={"manifest": manifest}), 201)

    verdict = api.ok(api.post(f"/api/v1/mcp-servers/{name}/test"))["data"]
    assert verdict["ok"] is True and "echo" in verdict["tools"], verdict
    assert isinstance(verdict["elapsed_ms"], int) and "error" not in verdict, verdict

    spec = {"model": {"name": "fake/fake-model"},
            "mcp_servers": [{"type": "truefoundry-mcp-registry", "name": name, "require_approval_for_tools": []}]}
    session = api.create_session(spec=spec)

    moved = api.ok(api.patch(f"/api/v1/settings/mcp-servers/{name}", json={"name": renamed}))["data"]
    assert moved["name"] == renamed and moved["manifest"]["name"] == renamed, moved
    assert moved["manifest"]["auth"]["headers"]["Authorization"] != "Bearer kept-secret", moved
    assert api.ok(api.post(f"/api/v1/mcp-servers/{renamed}/test"))["data"]["ok"] is True
    wire.assert_error(api.post(f"/api/v1/mcp-servers/{name}/test"), 404)

    # The session still names the old name: its turn says the server is not configured.
    run = api.run_turn(session["id"], "hello " + wire.unique("gone"))
    initialized = [event for event in run.stream.payloads if event["type"] == "mcp.initialize"]
    assert initialized, [event["type"] for event in run.stream.payloads]
    assert [server["error"] for server in initialized[0]["mcp_servers"]] == [f"no MCP server named {name!r} is configured".replace("'", '"')], initialized

    assert api.delete(f"/api/v1/settings/mcp-servers/{renamed}").status_code == 204
    wire.assert_error(api.get(f"/api/v1/settings/mcp-servers/{renamed}"), 404)
    wire.assert_error(api.delete(f"/api/v1/settings/mcp-servers/{renamed}"), 404)


def test_an_unreachable_mcp_server_is_a_verdict_not_an_error(api):
    name = wire.unique("down")
    manifest = {"type": "remote", "name": name, "description": "Nobody listens.", "url": f"http://127.0.0.1:{conftest.free_port()}/mcp"}
    api.ok(api.post("/api/v1/settings/mcp-servers", json={"manifest": manifest}), 201)
    verdict = api.ok(api.post(f"/api/v1/mcp-servers/{name}/test"))["data"]
    assert verdict["ok"] is False and verdict["tools"] == [] and verdict["error_code"] == "unreachable", verdict
    assert name in verdict["error"], verdict
    assert api.delete(f"/api/v1/settings/mcp-servers/{name}").status_code == 204


def test_body_errors_name_the_field_not_a_line_and_column(api):
    manifest = {"type": "custom", "name": wire.unique("typo"), "base_url": "http://127.0.0.1:1/v1",
                "models": [{"name": "m", "model_id": "m", "properties": {"context_length": "lots"}}]}
    error = wire.assert_error(api.put("/api/v1/settings/model-providers", json={"manifest": manifest}), 400)
    assert error["param"] == "manifest.models[0].properties.context_length", error
    assert error["message"].startswith("the request body is invalid: manifest.models[0].properties.context_length: "), error
    assert "line" not in error["message"] and "column" not in error["message"], error

    missing = {key: value for key, value in manifest.items() if key != "models"}
    error = wire.assert_error(api.put("/api/v1/settings/model-providers", json={"manifest": missing}), 400)
    assert error["param"] == "manifest.models" and "manifest.models is required" in error["message"], error


def secret_key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def test_a_replica_with_another_secret_key_is_not_ready_and_says_why(server_factory, fake_model):
    own = server_factory(configure=False, env={"TEAMSTER_SECRET_KEY": secret_key()})
    api = own.require_api()
    name = wire.unique("sealed")
    api.ok(api.post("/api/v1/settings/model-providers", json={"manifest": provider(fake_model, name)}), 201)
    assert httpx.get(f"{own.url}/readyz", timeout=wire.TIMEOUT).status_code == 200

    # The same database, another key: the provider's key cannot be opened.
    own.stop()
    own.env = {"TEAMSTER_SECRET_KEY": secret_key()}
    own.start()
    ready = httpx.get(f"{own.url}/readyz", timeout=wire.TIMEOUT)
    error = wire.assert_error(ready, 503)
    assert f'model-provider "{name}"' in error["message"], error
    assert "TEAMSTER_SECRET_KEY" in error["message"] and "--secret-key-file" in error["message"], error
    assert own.process is not None
    log = own.process.log_path.read_text(errors="replace")
    assert "every replica that shares a database needs the same secret key" in log, log[-2000:]

    # Deleting what cannot be opened makes the replica ready again.
    assert own.require_api().delete(f"/api/v1/settings/model-providers/{name}").status_code == 204
    assert httpx.get(f"{own.url}/readyz", timeout=wire.TIMEOUT).status_code == 200


def test_the_cli_lists_renames_tests_and_deletes_settings(server, api, mcp_http):
    def cli(*args: str):
        return conftest.teamster("settings", *args, "--server", server.url)

    name, renamed = wire.unique("cliprov"), wire.unique("clinew")
    api.ok(api.post("/api/v1/settings/model-providers", json={"manifest": provider(server.fake, name)}), 201)
    listed = cli("providers", "list")
    assert listed.returncode == 0 and f"{name}\tcustom\tfake-model" in listed.stdout.splitlines(), listed
    moved = cli("providers", "rename", name, renamed)
    assert moved.returncode == 0 and moved.stdout.strip() == f"renamed model provider {name} to {renamed}", moved
    gone = cli("providers", "delete", renamed)
    assert gone.returncode == 0 and renamed not in provider_names(api), gone
    again = cli("providers", "delete", renamed)
    assert again.returncode == 1 and "404" in again.stderr and renamed in again.stderr, again

    server_name = wire.unique("clitools")
    manifest = {"type": "remote", "name": server_name, "description": "Test tools.", "url": f"{mcp_http.base}/mcp"}
    api.ok(api.post("/api/v1/settings/mcp-servers", json={"manifest": manifest}), 201)
    tested = cli("mcp-servers", "test", server_name)
    assert tested.returncode == 0 and f"MCP server {server_name} works" in tested.stdout and "echo" in tested.stdout, tested
    assert cli("mcp-servers", "rename", server_name, server_name + "-b").returncode == 0
    assert f"{server_name}-b\tremote\t{mcp_http.base}/mcp" in cli("mcp-servers", "list").stdout.splitlines()
    assert cli("mcp-servers", "delete", server_name + "-b").returncode == 0

    down = wire.unique("clidown")
    unreachable = {"type": "remote", "name": down, "description": "Nobody listens.", "url": f"http://127.0.0.1:{conftest.free_port()}/mcp"}
    api.ok(api.post("/api/v1/settings/mcp-servers", json={"manifest": unreachable}), 201)
    failed = cli("mcp-servers", "test", down)
    assert failed.returncode == 1 and f"MCP server {down} does not work (unreachable)" in failed.stderr, failed
    assert cli("mcp-servers", "delete", down).returncode == 0
