"""Served API docs: /api/v1/openapi.json, fetched from a live server without a key, is a valid
OpenAPI 3.1 document by a real validator (openapi-spec-validator), agrees with our spec of the
native API (docs/spec/trueforge-openapi.json) on every route both have, and describes what the
server really answers: live bodies (an agent, a session, a turn, events, lists, errors, health)
validate against the schemas the document gives their operation and status. /api/v1/docs is a
page that needs nothing from elsewhere."""

from __future__ import annotations

import copy
import json
import typing

import httpx
import jsonschema
import pytest
from openapi_spec_validator import OpenAPIV31SpecValidator, validate
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

import conftest
import wire

SPEC = conftest.REPO_ROOT / "docs" / "spec" / "trueforge-openapi.json"
METHODS = ("get", "post", "put", "patch", "delete")
# Where the document is registered for `$ref`s to resolve.
BASE = "urn:teamster:openapi"
# Routes of our spec this server does not serve: the catalogs and sandbox provider settings it
# has no use for yet. A route that lands leaves this list.
NOT_SERVED = {
    ("get", "/api/v1/catalogs/mcp-servers"),
    ("get", "/api/v1/catalogs/model-providers"),
    ("get", "/api/v1/catalogs/sandbox-providers"),
    ("get", "/api/v1/settings/sandbox-providers"),
    ("put", "/api/v1/settings/sandbox-providers"),
}


@pytest.fixture(scope="module")
def document(server) -> dict:
    """The document as served, to a client without a key."""
    response = httpx.get(f"{server.url}/api/v1/openapi.json", timeout=wire.TIMEOUT)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    return response.json()


def operations(document: dict) -> dict[tuple[str, str], dict]:
    return {(method, path): operation for path, item in document["paths"].items()
            for method, operation in item.items() if method in METHODS}


class Checker:
    """Validates bodies against the document's schemas, its `$ref`s resolved within it."""

    def __init__(self, document: dict) -> None:
        self.document = document
        rebased = rebase(copy.deepcopy(document))
        self.registry = Registry().with_resource(BASE, Resource.from_contents(rebased, default_specification=DRAFT202012))
        self.operations = operations(rebased)

    def schema(self, method: str, path: str, status: int) -> dict:
        """The JSON schema the document gives an answer of `status` to `method path` (the
        operation's `default` answer when it names no such status)."""
        responses = self.operations[(method, path)]["responses"]
        response = responses.get(str(status)) or responses["default"]
        return response["content"]["application/json"]["schema"]

    def check(self, method: str, path: str, response: httpx.Response) -> typing.Any:
        body = response.json()
        schema = self.schema(method, path, response.status_code)
        validator = jsonschema.Draft202012Validator(schema, registry=self.registry)
        errors = sorted(validator.iter_errors(body), key=lambda error: list(error.absolute_path))
        assert not errors, (f"{method.upper()} {path} {response.status_code} does not match its documented schema:\n"
                            + "\n".join(f"  at {list(error.absolute_path)}: {error.message[:300]}" for error in errors[:10]))
        return body


def rebase(value: typing.Any) -> typing.Any:
    """Points every local `$ref` at the registered document."""
    if isinstance(value, dict):
        return {key: (BASE + item if key == "$ref" and isinstance(item, str) and item.startswith("#") else rebase(item))
                for key, item in value.items()}
    if isinstance(value, list):
        return [rebase(item) for item in value]
    return value


def test_the_document_is_valid_openapi_3_1(document):
    assert document["openapi"] == "3.1.0"
    validate(document, cls=OpenAPIV31SpecValidator)
    assert document["info"]["title"] == "Teamster API"
    scheme = document["components"]["securitySchemes"]["BearerAuth"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    assert document["security"] == [{"BearerAuth": []}]
    error = document["components"]["schemas"]["RequestErrorResponse"]
    assert error["required"] == ["error"]
    # Every operation answers failures in the error shape; the public ones need no key.
    for (method, path), operation in operations(document).items():
        assert operation["responses"]["default"]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/RequestErrorResponse"}, (method, path)
    public = {(method, path) for (method, path), operation in operations(document).items() if {} in operation.get("security", [])}
    assert public == {("get", "/healthz"), ("get", "/readyz"), ("get", "/api/v1/openapi.json"), ("get", "/api/v1/docs"),
                      ("get", "/api/v1/schemas/agent-manifest.json"),
                      ("get", "/api/v1/mcp-servers/oauth/callback"), ("get", "/api/v1/mcp-servers/{name}/authorize"),
                      ("get", "/api/v1/auth/login"), ("get", "/api/v1/auth/callback")}


# Success statuses of our extensions on the spec's routes: "select or create" answers an
# existing session with 200 (`POST /sessions?reuse_latest=true`).
EXTENSION_SUCCESS = {("post", "/api/v1/sessions"): {"200"}}


def test_it_agrees_with_our_spec_where_both_have_the_route(document):
    spec = json.loads(SPEC.read_text())
    ours, theirs = operations(document), operations(spec)
    assert set(theirs) - set(ours) == NOT_SERVED
    for key in sorted(set(theirs) & set(ours)):
        mine, spec_op = ours[key], theirs[key]
        assert mine.get("tags") == spec_op.get("tags"), key
        assert mine.get("summary") == spec_op.get("summary"), key
        in_path = lambda op: [p["name"] for p in op.get("parameters", []) if p["in"] == "path"]  # noqa: E731
        in_query = lambda op: {p["name"] for p in op.get("parameters", []) if p["in"] == "query"}  # noqa: E731
        assert in_path(mine) == in_path(spec_op), key
        assert in_query(spec_op) <= in_query(mine), key
        success = lambda op: sorted(status for status in op["responses"] if status.startswith("2"))  # noqa: E731
        assert success(mine) == sorted(set(success(spec_op)) | EXTENSION_SUCCESS.get(key, set())), key
    # Our additions are documented too.
    for added in [("post", "/api/v1/chat"), ("get", "/api/v1/sessions/{session_id}/plans"),
                  ("get", "/api/v1/sessions/{session_id}/grants"), ("get", "/api/v1/sessions/{session_id}/state"),
                  ("post", "/api/v1/sessions/{session_id}/follow-ups"), ("post", "/api/v1/sessions/{session_id}/steer"),
                  ("post", "/api/v1/sessions/{session_id}/clone"), ("post", "/api/v1/keys"), ("get", "/metrics"),
                  ("get", "/readyz"), ("get", "/api/v1/sessions/{session_id}/files/{digest}"),
                  ("get", "/api/v1/sessions/{session_id}/live"), ("get", "/api/v1/sessions/{session_id}/display"),
                  ("get", "/api/v1/live"), ("get", "/api/v1/sessions/{session_id}/tools"),
                  ("get", "/api/v1/models/current"), ("get", "/api/v1/resources"),
                  ("get", "/api/v1/sessions/{session_id}/workspace"), ("post", "/api/v1/sessions/{session_id}/workspace"),
                  ("delete", "/api/v1/sessions/{session_id}/workspace")]:
        assert added in ours, added


def test_live_answers_match_their_documented_schemas(document, server_factory):
    server = server_factory()
    api = server.require_api()
    checker = Checker(document)
    check = checker.check

    agent = check("post", "/api/v1/agents", api.post("/api/v1/agents", json={
        "name": "documented", "manifest": {"model": {"name": "fake/fake-model"}, "instructions": "Be brief."}}))["data"]
    check("get", "/api/v1/agents/{agent_id}", api.get(f"/api/v1/agents/{agent['id']}"))
    check("get", "/api/v1/agents", api.get("/api/v1/agents"))
    session = check("post", "/api/v1/sessions", api.post("/api/v1/sessions", json={"agent": {"name": "documented"}}))["data"]
    sid = session["id"]
    check("get", "/api/v1/sessions/{session_id}", api.get(f"/api/v1/sessions/{sid}"))
    check("patch", "/api/v1/sessions/{session_id}", api.patch(f"/api/v1/sessions/{sid}", json={"title": "documented"}))

    run = api.run_turn(sid, "[tool:get_current_datetime {}] what time is it?")
    assert run.done["state"]["status"] == "done"
    streamed_schema = checker.schema("post", "/api/v1/sessions/{session_id}/turns", 200)
    assert streamed_schema  # the JSON answer (stream: false); the streamed events are checked below
    event_schema = {"$ref": BASE + "#/components/schemas/Event"}
    for payload in run.stream.payloads:
        errors = list(jsonschema.Draft202012Validator(event_schema, registry=checker.registry).iter_errors(payload))
        assert not errors, (payload.get("type"), [error.message[:300] for error in errors[:5]])
    turn = run.turn_id
    check("get", "/api/v1/sessions/{session_id}/turns/{turn_id}", api.get(f"/api/v1/sessions/{sid}/turns/{turn}"))
    check("get", "/api/v1/sessions/{session_id}/turns", api.get(f"/api/v1/sessions/{sid}/turns"))
    events = check("get", "/api/v1/sessions/{session_id}/turns/{turn_id}/events",
                   api.get(f"/api/v1/sessions/{sid}/turns/{turn}/events"))
    assert {event["type"] for event in events["data"]} >= {"model.message", "tool.response"}
    check("get", "/api/v1/sessions/{session_id}/events", api.get(f"/api/v1/sessions/{sid}/events"))
    check("get", "/api/v1/sessions", api.get("/api/v1/sessions"))
    running = check("post", "/api/v1/sessions/{session_id}/turns", api.post(
        f"/api/v1/sessions/{sid}/turns", json={"input": [{"type": "user.message", "content": "again"}], "stream": False}))
    api.wait_terminal(sid, running["data"]["id"])
    for path in ("tasks", "plans", "grants", "follow-ups", "tools"):
        check("get", f"/api/v1/sessions/{{session_id}}/{path}", api.get(f"/api/v1/sessions/{sid}/{path}"))
    check("get", "/api/v1/models/current", api.get(f"/api/v1/models/current?session_id={sid}"))
    check("post", "/api/v1/sessions/{session_id}/clone", api.post(f"/api/v1/sessions/{sid}/clone", json={}))
    check("post", "/api/v1/sessions/{session_id}/cancel", api.post(f"/api/v1/sessions/{sid}/cancel", json={}))
    for path in ("/api/v1/capabilities", "/api/v1/models", "/api/v1/mcp-servers", "/api/v1/skills",
                 "/api/v1/settings/model-providers", "/api/v1/settings/mcp-servers", "/api/v1/keys", "/healthz", "/readyz"):
        check("get", path, api.get(path))

    # Errors, in the shape every operation documents.
    missing = api.get("/api/v1/sessions/no-such-session")
    assert missing.status_code == 404
    check("get", "/api/v1/sessions/{session_id}", missing)
    bad = api.post("/api/v1/agents", json={"name": "Not A Name", "manifest": {"model": {"name": "fake/fake-model"}}})
    assert bad.status_code == 400, bad.text
    assert check("post", "/api/v1/agents", bad)["error"]["message"]
    taken = api.post("/api/v1/agents", json={"name": "documented", "manifest": {"model": {"name": "fake/fake-model"}}})
    assert taken.status_code == 409, taken.text
    check("post", "/api/v1/agents", taken)


def test_the_docs_page_is_public_and_self_contained(server):
    response = httpx.get(f"{server.url}/api/v1/docs", headers={"Accept": "text/html"}, timeout=wire.TIMEOUT)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/html")
    policy = response.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy
    assert 'fetch("openapi.json"' in response.text
    assert "http://" not in response.text and "https://" not in response.text


def test_the_document_and_page_need_no_key_on_a_keyed_server(server_factory):
    server = server_factory(extra_args=("--auth", "api-keys"), configure=False)
    for path in ("/api/v1/openapi.json", "/api/v1/docs"):
        assert httpx.get(f"{server.url}{path}", timeout=wire.TIMEOUT).status_code == 200, path
    refused = httpx.get(f"{server.url}/api/v1/agents", timeout=wire.TIMEOUT)
    assert refused.status_code == 401
