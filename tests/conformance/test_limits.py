"""Limits: the per-subject request rate (`--rate-limit-per-minute`) and running-turn quota
(`--max-concurrent-turns-per-subject`) answer 429 in the spec's error shape with `Retry-After`
and accept again once there is room; a session budget (`config.budget`) and a tenant budget
(`--tenant-token-budget`) end a turn cleanly, before its next model call, in `error` naming the
budget, with every earlier event still listed; an oversize request body is a 413."""

import concurrent.futures
import subprocess
import time

import conftest
import wire
from conftest import TeamsterServer


def assert_error_shape(response, status: int) -> dict:
    assert response.status_code == status, response.text[:300]
    error = response.json()["error"]
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["type"], str) and isinstance(error["code"], str)
    return error


def test_request_rate_limit_then_recovery(server_factory):
    # 30 a minute: one request back every 2 s after the burst.
    server = server_factory(extra_args=["--rate-limit-per-minute", "30"])
    api = server.require_api()
    accepted = 0
    refused = None
    for _ in range(60):
        response = api.get("/api/v1/agents")
        if response.status_code == 429:
            refused = response
            break
        assert response.status_code == 200, response.text[:300]
        accepted += 1
    assert refused is not None, "no 429 after 60 requests at 30 a minute"
    # The burst is 30, of which configuring the server took two (health checks are free).
    assert 28 <= accepted <= 30, accepted
    error = assert_error_shape(refused, 429)
    assert error["code"] == "rate_limited" and "30 per minute" in error["message"]
    retry_after = int(refused.headers["retry-after"])
    assert 1 <= retry_after <= 2
    # Health checks are not counted, and pass while the subject is limited.
    assert api.get("/healthz").status_code == 200
    time.sleep(retry_after)
    assert api.get("/api/v1/agents").status_code == 200
    # That was the one request the wait bought.
    assert api.get("/api/v1/agents").status_code == 429


def test_rate_limit_is_per_subject(workdir, fake_model):
    """With API keys, each subject has its own bucket: one limited subject leaves another
    subject (of the same tenant) served."""
    server = TeamsterServer(workdir, fake_model, ["--auth", "api-keys", "--rate-limit-per-minute", "5"])
    program = str(conftest.binary("TEAMSTER_BIN", "target/debug/teamster"))
    made = subprocess.run([program, "keys", "create", "--subject", "root", "--tenant", "acme", "--role", "operator",
                           "--database", server.database, "--data-dir", str(workdir)],
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=60, text=True)
    assert made.returncode == 0, made.stderr
    try:
        server.start()
        admin = wire.Api(server.url, key=made.stdout.strip())
        created = admin.ok(admin.post("/api/v1/keys", json={"subject": "ann", "tenant": "acme", "role": "member"}), 201)
        ann = wire.Api(server.url, key=created["data"]["secret"])
        # The admin spent one of its five on the key; four more pass, then 429.
        statuses = [admin.get("/api/v1/agents").status_code for _ in range(5)]
        assert statuses == [200, 200, 200, 200, 429], statuses
        assert int(admin.get("/api/v1/agents").headers["retry-after"]) >= 1
        # Another subject is served all the while.
        assert [ann.get("/api/v1/agents").status_code for _ in range(5)] == [200] * 5
        assert ann.get("/api/v1/agents").status_code == 429
        # A request with a key that is not valid is refused (401), never counted as a 429.
        unknown = wire.Api(server.url, key="tsk_unknown_key")
        assert [unknown.get("/api/v1/agents").status_code for _ in range(6)] == [401] * 6
        unknown.close()
        admin.close()
        ann.close()
    finally:
        server.close()


def test_concurrent_turn_quota(server_factory):
    server = server_factory(extra_args=["--max-concurrent-turns-per-subject", "1"])
    api = server.require_api()
    first = api.create_session("demo")
    second = api.create_session("demo")
    # About 5 s of streaming.
    slow = api.start_turn(first["id"], "[delay:100][tokens:50] slow")
    refused = api.post(f"/api/v1/sessions/{second['id']}/turns",
                       json={"input": [{"type": "user.message", "content": "hello"}], "stream": False})
    error = assert_error_shape(refused, 429)
    assert "running" in error["message"] and "1" in error["message"]
    assert int(refused.headers["retry-after"]) >= 1
    # A new turn in the same session replaces the running one, so it is not refused.
    assert api.wait_terminal(first["id"], slow["id"])["state"]["status"] == "done"
    accepted = api.start_turn(second["id"], "hello")
    assert api.wait_terminal(second["id"], accepted["id"])["state"]["status"] == "done"

    # Turns created at the same instant in three sessions: exactly one gets the place.
    sessions = [api.create_session("demo")["id"] for _ in range(3)]
    body = {"input": [{"type": "user.message", "content": "[delay:100][tokens:20] race"}], "stream": False}
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(lambda sid: wire.Api(server.url).post(f"/api/v1/sessions/{sid}/turns", json=body), sessions))
    assert sorted(answer.status_code for answer in answers) == [200, 429, 429], [a.text[:200] for a in answers]
    for session_id, answer in zip(sessions, answers):
        if answer.status_code == 200:
            api.wait_terminal(session_id, answer.json()["data"]["id"])


def test_session_budget_ends_a_multi_step_turn_cleanly(server_factory, fake):
    server = server_factory()
    api = server.require_api()
    spec = {"model": {"name": "fake/fake-model"}, "instructions": "You are a test agent.",
            "config": {"budget": {"max_tokens": 10}}}
    for bad, param in [({"max_tokens": 0}, "config.budget.max_tokens"),
                       ({"max_cost_usd": -1}, "config.budget.max_cost_usd")]:
        refused = api.post("/api/v1/sessions", json={"agent": {"spec": {**spec, "config": {"budget": bad}}}})
        assert assert_error_shape(refused, 400)["param"] == param
    session = api.create_session(spec=spec)
    marker = wire.unique("budget")
    # Step one calls a tool and spends more than 10 tokens; step two would answer.
    started = api.start_turn(session["id"], f"[tool:get_current_datetime {{}}] {marker} what time is it?")
    turn = api.wait_terminal(session["id"], started["id"])
    state = turn["state"]
    assert state["status"] == "error", state
    assert "session's token budget of 10 tokens" in state["message"], state["message"]
    assert state["metrics"]["total_tokens"] >= 10
    # Exactly one model call was made; the tool ran and its result is kept.
    assert len(fake.requests_for(marker)) == 1
    listed, _ = api.list_all(f"/api/v1/sessions/{session['id']}/turns/{started['id']}/events", limit=100)
    types = [event["type"] for event in listed]
    assert "model.message" in types and "tool.response" in types, types
    message = next(event for event in listed if event["type"] == "model.message")
    assert message["tool_calls"][0]["function"]["name"] == "get_current_datetime"
    assert types[-1] == "tool.response", types
    # The stream of the turn ends with its `turn.done`, in error.
    replay = wire.TurnRun(api.subscribe(session["id"], started["id"]))
    assert replay.done["state"] == state
    # The session has nothing left: the next turn ends at once, without a model call.
    again = wire.unique("again")
    next_turn = api.start_turn(session["id"], f"{again} hello")
    ended = api.wait_terminal(session["id"], next_turn["id"])
    assert ended["state"]["status"] == "error" and "session's token budget" in ended["state"]["message"]
    assert fake.requests_for(again) == []


def test_tenant_budget_across_sessions(server_factory, fake):
    server = server_factory(extra_args=["--tenant-token-budget", "40"])
    api = server.require_api()
    first = api.create_session("demo")
    # One call spends more than 40 tokens (50 output chunks); it was allowed to start.
    run = api.run_turn(first["id"], "[tokens:50] spend")
    assert run.done["state"]["status"] == "done"
    assert run.done["state"]["metrics"]["total_tokens"] > 40
    second = api.create_session("demo")
    marker = wire.unique("tenant")
    started = api.start_turn(second["id"], f"{marker} hello")
    ended = api.wait_terminal(second["id"], started["id"])
    assert ended["state"]["status"] == "error"
    assert "tenant \"local\"'s token budget of 40 tokens" in ended["state"]["message"], ended["state"]["message"]
    assert fake.requests_for(marker) == []
    # The first session's events are all still there.
    listed, _ = api.list_all(f"/api/v1/sessions/{first['id']}/events", limit=100)
    assert [item["event"]["type"] for item in listed].count("model.message") == 1


def test_cost_budgets(server_factory, fake_model, fake):
    """Cost budgets count the priced model's dollars: a session's ends a multi-step turn after
    its first call, a tenant's ends a turn in another session before any call."""
    server = server_factory(extra_args=["--tenant-cost-budget-usd", "0.0005"])
    api = server.require_api()
    manifest = {"type": "custom", "name": "pricedfake", "base_url": f"{fake_model.url}/v1",
                "auth": {"api_key": wire.API_KEY_SECRET},
                "models": [{"name": "priced", "model_id": "fake-model",
                            "properties": {"pricing": {"input_per_million": 3.0, "output_per_million": 15.0}}}]}
    api.ok(api.put("/api/v1/settings/model-providers", json={"manifest": manifest}))
    spec = {"model": {"name": "pricedfake/priced"}, "instructions": "You are a test agent."}
    capped = api.create_session(spec={**spec, "config": {"budget": {"max_cost_usd": 0.00005}}})
    marker = wire.unique("cost")
    started = api.start_turn(capped["id"], f"[tool:get_current_datetime {{}}] {marker} what time is it?")
    state = api.wait_terminal(capped["id"], started["id"])["state"]
    assert state["status"] == "error" and "session's cost budget" in state["message"], state
    assert state["metrics"]["total_cost_in_usd"] >= 0.00005
    assert len(fake.requests_for(marker)) == 1
    # 50 output tokens cost $0.00075, more than the tenant's $0.0005; that turn may finish.
    spender = api.create_session(spec=spec)
    assert api.run_turn(spender["id"], "[tokens:50] spend").done["state"]["status"] == "done"
    other = api.create_session(spec=spec)
    marker = wire.unique("tenant-cost")
    started = api.start_turn(other["id"], f"{marker} hello")
    state = api.wait_terminal(other["id"], started["id"])["state"]
    assert state["status"] == "error" and "tenant \"local\"'s cost budget of $0.0005" in state["message"], state
    assert fake.requests_for(marker) == []


def test_oversize_request_body_is_413(server_factory):
    server = server_factory(extra_args=["--max-body-bytes", "4096"])
    api = server.require_api()
    session = api.create_session("demo")
    big = "x" * 8192
    refused = api.post(f"/api/v1/sessions/{session['id']}/turns",
                       json={"input": [{"type": "user.message", "content": big}], "stream": False})
    assert assert_error_shape(refused, 413)["type"] == "invalid_request_error"
    refused = api.post("/api/v1/agents", json={"name": "big", "manifest": {"model": {"name": "fake/fake-model"},
                                                                        "instructions": big}})
    assert_error_shape(refused, 413)
    # A body under the limit is served.
    assert api.start_turn(session["id"], "small")["state"]["status"] in ("running", "done")
    # Events are bounded too: a message text longer than an event may carry is a 413 even
    # within the body limit.
    server = server_factory()
    api = server.require_api()
    session = api.create_session("demo")
    refused = api.post(f"/api/v1/sessions/{session['id']}/turns",
                       json={"input": [{"type": "user.message", "content": "y" * (600 * 1024)}], "stream": False})
    assert "a message may carry" in assert_error_shape(refused, 413)["message"]
