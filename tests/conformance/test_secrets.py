"""Secrets at rest (issue 17): a provider API key and an MCP header secret set through the
settings API appear in no API response, in no line of the server's debug log, and not in plain
text in the database (the SQLite file and its -wal, or the PostgreSQL settings table read with
psql), while the provider and the MCP server still work after a restart. A plain-text row
written before sealing still reads, and is sealed when the server starts.

The fake model here requires the key (`fake-model --api-key`), and the MCP test server requires
the header (`--require-token`), so a secret that did not survive sealing fails the turn.
"""

from __future__ import annotations

import json
import pathlib
import sqlite3
import typing
import uuid

import httpx
import pytest

import conftest
import wire
from python_servers import PythonServer

PROVIDER_KEY = f"sk-at-rest-{uuid.uuid4().hex}"
MCP_TOKEN = f"mcp-at-rest-{uuid.uuid4().hex}"
SECRETS = (PROVIDER_KEY, MCP_TOKEN)


@pytest.fixture(scope="module")
def keyed_fake(workdir: pathlib.Path) -> typing.Iterator[conftest.FakeModelServer]:
    fake = conftest.FakeModelServer(workdir, api_key=PROVIDER_KEY)
    try:
        yield fake
    finally:
        fake.close()


@pytest.fixture(scope="module")
def mcp_server(workdir: pathlib.Path) -> typing.Iterator[PythonServer]:
    instance = PythonServer(workdir, "tools_server.py", "--transport", "streamable-http",
                            "--require-token", MCP_TOKEN)
    try:
        yield instance
    finally:
        instance.close()


@pytest.fixture
def debug_server(workdir: pathlib.Path, keyed_fake: conftest.FakeModelServer) -> typing.Iterator[conftest.TeamsterServer]:
    instance = conftest.TeamsterServer(workdir, keyed_fake, env={"TEAMSTER_LOG": "debug"})
    try:
        yield instance.start()
    finally:
        instance.close()


def mcp_manifest(name: str, url: str) -> dict:
    return {"type": "remote", "name": name, "description": "Tools behind a token.", "url": url,
            "auth": {"type": "header", "headers": {"Authorization": f"Bearer {MCP_TOKEN}"}}}


def assert_no_secret(text: str, where: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"a secret is in {where}"


def run_with_tool(api: wire.Api, mcp_name: str) -> wire.TurnRun:
    """A turn through the keyed fake model that calls the MCP server's `echo`."""
    spec = {"model": {"name": "fake/fake-model"},
            "mcp_servers": [{"type": "truefoundry-mcp-registry", "name": mcp_name, "preload": True,
                             "require_approval_for_tools": []}]}
    session_id = api.create_session(spec=spec)["id"]
    marker = wire.unique("echoed")
    run = api.run_turn(session_id, f'[tool:echo {json.dumps({"text": marker})}]')
    assert run.done["state"]["status"] == "done", run.done
    responses = [event for event in wire.fold_stream(run.stream.payloads) if event["type"] == "tool.response"]
    assert [event["content"] for event in responses] == [marker], responses
    assert_no_secret(run.stream.body.decode(errors="replace"), "the turn's stream")
    return run


def stored_settings(server: conftest.TeamsterServer) -> str:
    """The settings as stored: every byte of the SQLite file and its -wal, or the PostgreSQL
    table as psql prints it."""
    if server.own_database is not None:
        return conftest.psql(server.own_database, "COPY (SELECT kind, name, value FROM settings) TO STDOUT")
    files = [path for path in server.db_path.parent.glob(server.db_path.name + "*") if path.is_file()]
    assert server.db_path in files
    return "".join(path.read_bytes().decode("latin-1") for path in files)


def write_plain_row(server: conftest.TeamsterServer, name: str, manifest: dict) -> None:
    """Overwrites a provider's row with plain JSON, as a server before sealing wrote it."""
    value = json.dumps(manifest)
    if server.own_database is not None:
        quoted = value.replace("'", "''")
        conftest.psql(server.own_database,
                      f"UPDATE settings SET value = '{quoted}' WHERE kind = 'model-provider' AND name = '{name}'")
        return
    connection = sqlite3.connect(str(server.db_path), timeout=10)
    try:
        with connection:
            updated = connection.execute("UPDATE settings SET value = ? WHERE kind = 'model-provider' AND name = ?",
                                         (value, name)).rowcount
        assert updated == 1
    finally:
        connection.close()


def test_settings_secrets_are_sealed_masked_and_never_logged(debug_server, keyed_fake, mcp_server):
    server = debug_server
    api = server.require_api()
    # The fake model really checks the key.
    refused = httpx.post(f"{keyed_fake.url}/v1/chat/completions", timeout=wire.TIMEOUT,
                         headers={"Authorization": "Bearer wrong"}, json={"model": "fake-model", "messages": []})
    assert refused.status_code == 401, refused.text

    responses: list[httpx.Response] = []
    responses.append(api.put("/api/v1/settings/model-providers", json={"manifest": keyed_fake.provider_manifest(PROVIDER_KEY)}))
    api.ok(responses[-1])
    mcp_name = wire.unique("sealed")
    responses.append(api.post("/api/v1/settings/mcp-servers", json={"manifest": mcp_manifest(mcp_name, f"{mcp_server.base}/mcp")}))
    api.ok(responses[-1], 201)
    for path in ("/api/v1/settings/model-providers", "/api/v1/settings/mcp-servers",
                 f"/api/v1/settings/mcp-servers/{mcp_name}", "/api/v1/mcp-servers", f"/api/v1/mcp-servers/{mcp_name}/tools",
                 "/api/v1/models"):
        responses.append(api.get(path))
        api.ok(responses[-1])
    listed = api.ok(api.get("/api/v1/settings/model-providers"))["data"]
    assert [entry["manifest"]["auth"]["api_key"] for entry in listed if entry["name"] == "fake"] == ["********"]
    # A masked key sent back keeps the stored one.
    kept = next(entry["manifest"] for entry in listed if entry["name"] == "fake")
    responses.append(api.put("/api/v1/settings/model-providers", json={"manifest": kept}))
    api.ok(responses[-1])
    for response in responses:
        assert_no_secret(response.text, f"{response.request.method} {response.request.url.path}")

    run_with_tool(api, mcp_name)
    stored = stored_settings(server)
    assert "sealed:" in stored, "the settings rows were read"
    assert_no_secret(stored, "the database")

    # After a restart the sealed secrets open again.
    server.restart()
    api = server.require_api()
    run_with_tool(api, mcp_name)

    # A row stored in plain text (before sealing) still reads, and is sealed at start-up.
    server.stop()
    write_plain_row(server, "fake", keyed_fake.provider_manifest(PROVIDER_KEY))
    assert PROVIDER_KEY in stored_settings(server)
    server.start()
    api = server.require_api()
    run_with_tool(api, mcp_name)
    assert_no_secret(stored_settings(server), "the database after the start-up sealed the plain row")

    assert server.process is not None
    log = server.process.log_path.read_text(errors="replace")
    assert "DEBUG" in log, "the server logged at debug level"
    assert "sealed the secrets stored in plain text" in log
    assert_no_secret(log, "the server's log")
