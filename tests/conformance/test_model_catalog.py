"""The model catalog (`GET /api/v1/models`) as a model picker reads it: each model's display
name, whether its provider has a key and where the key comes from, and how often the tenant
switched to it or ran turns on it; and `GET /api/v1/models/current`, a session's model with
what chose it and whether it can be called."""

from __future__ import annotations

import wire


def catalog(api: wire.Api) -> dict[str, dict]:
    return {model["name"]: model for model in api.ok(api.get("/api/v1/models"))["data"]}


def current(api: wire.Api, session_id: str) -> dict:
    return api.ok(api.get(f"/api/v1/models/current?session_id={session_id}"))["data"]


def test_the_catalog_tells_keys_display_names_and_use_counts(server_factory):
    # The environment's OpenAI provider, and a keyless local endpoint beside the fake one.
    server = server_factory(env={"OPENAI_API_KEY": "sk-from-the-environment"})
    api = server.require_api()
    local = {"type": "custom", "name": "local", "base_url": f"{server.fake.url}/v1",
             "models": [{"name": "small", "model_id": "fake-model", "properties": {"display_name": "Small (local)"}}]}
    api.ok(api.put("/api/v1/settings/model-providers", json={"manifest": local}))
    models = catalog(api)
    fake, gpt, small, echo = models["fake/fake-model"], models["openai/gpt-4o"], models["local/small"], models["offline/echo"]
    assert (fake["display_name"], fake["has_api_key"], fake["has_auth"], fake["use_count"]) == ("fake-model", True, True, 0)
    assert "api_key_env_var" not in fake, "a stored key"
    assert (gpt["has_api_key"], gpt["api_key_env_var"]) == (True, "OPENAI_API_KEY")
    assert (small["display_name"], small["has_api_key"], small["has_auth"]) == ("Small (local)", False, True)
    assert (echo["has_api_key"], echo["has_auth"]) == (False, True)

    # Turns on a model and switches to it count; a switch back to the agent's does not.
    session = api.create_session("demo")["id"]
    assert current(api, session) == {"name": "fake/fake-model", "selected_by": "agent", "has_auth": True,
                                     "model": catalog(api)["fake/fake-model"]}
    for text in ("one", "two"):
        assert api.run_turn(session, text).done["state"]["status"] == "done"
    api.ok(api.patch(f"/api/v1/sessions/{session}", json={"model": "local/small"}))
    now = current(api, session)
    assert (now["name"], now["selected_by"], now["model"]["display_name"]) == ("local/small", "session", "Small (local)")
    assert api.run_turn(session, "three").done["state"]["status"] == "done"
    api.ok(api.patch(f"/api/v1/sessions/{session}", json={"model": ""}))
    models = catalog(api)
    assert (models["fake/fake-model"]["use_count"], models["local/small"]["use_count"]) == (2, 2)
    assert models["openai/gpt-4o"]["use_count"] == 0

    # A mode's model comes before the agent's.
    moded = {"model": {"name": "fake/fake-model"}, "modes": [{"id": "quick", "default": True, "model": "local/small"}]}
    mode_session = api.create_session(spec=moded)["id"]
    assert (current(api, mode_session)["name"], current(api, mode_session)["selected_by"]) == ("local/small", "mode")
    wire.assert_error(api.get("/api/v1/models/current"), 400)
    wire.assert_error(api.get("/api/v1/models/current?session_id=ses_nope"), 404)
    wire.assert_error(api.get(f"/api/v1/models/current?session_id={session}&verbose=1"), 400)
    wire.assert_error(api.get("/api/v1/models?verbose=1"), 400)
