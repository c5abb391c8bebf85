"""Context management, usage and cost, and structured output over the native API, with the fake
model's request log as the witness of what each model call was sent."""

from __future__ import annotations

import json

import pytest

import wire


def prompt_tokens(body: dict) -> int:
    """The fake model's own count of a request's input: characters of every message / 4."""
    total = 0
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, str):
            total += len(content)
        elif isinstance(content, list):
            total += sum(len(block.get("text") or json.dumps(block.get("content", ""))) for block in content)
    for block in body.get("system", []) if isinstance(body.get("system"), list) else []:
        total += len(block.get("text", ""))
    return total // 4


def listed_events(api: wire.Api, session_id: str) -> list[dict]:
    items, _ = api.list_all(f"/api/v1/sessions/{session_id}/events", limit=100)
    return [item["event"] for item in items]


def test_a_long_conversation_is_compacted_and_keeps_an_early_fact(api, fake):
    threshold = 900
    marker = wire.unique("compact")
    spec = {
        "model": {"name": "fake/fake-model"},
        "instructions": "You are a test agent.",
        "config": {"context_management": {"compaction": {"enabled": True, "compaction_threshold_tokens": threshold}}},
    }
    session = api.create_session(spec=spec)
    filler = "filler " * 100
    first = api.run_turn(session["id"], f"{marker} Remember: the vault code is 4711. {filler}")
    assert first.done["state"]["status"] == "done"
    for index in range(6):
        run = api.run_turn(session["id"], f"{marker} turn {index}. {filler}")
        assert run.done["state"]["status"] == "done", run.done["state"]
    final = api.run_turn(session["id"], f"[history] {marker} what was the code?")
    assert final.done["state"]["status"] == "done", final.done["state"]
    # The answer still sees the fact, through the summary.
    assert "4711" in final.output_text, final.output_text

    requests = fake.requests_mentioning(marker)
    assert requests, "the fake saw the session"
    # No model call of the session ever got more than the threshold.
    assert max(prompt_tokens(body) for body in requests) <= threshold
    # The summarising calls carry no tools, and one of them read the fact.
    summaries = [body for body in requests if not body.get("tools")]
    assert summaries, "compaction happened"
    assert any("the vault code is 4711" in json.dumps(body["messages"]) for body in summaries)
    # The compaction shows in the event log as a thread of its own, with its model calls.
    events = listed_events(api, session["id"])
    created = [event for event in events if event["type"] == "thread.created"]
    assert created and all(event["title"] == "Context compaction" for event in created)
    assert all(event["parent"]["thread_id"] == "main" for event in created)
    done = [event for event in events if event["type"] == "thread.done"]
    assert len(done) == len(created)
    assert all(event["state"]["status"] == "done" and event["compaction"]["replaced_messages"] > 0 for event in done)
    # The agent's calls after a compaction count the summary as harness framing.
    main_messages = [event for event in events if event["type"] == "model.message" and event["thread_id"] == "main"]
    assert any(message["usage"]["input_tokens_breakdown"]["harness"] > 0 for message in main_messages)
    # The instructions stay the first message of every agent call (a byte-identical prefix).
    agent_calls = [body for body in requests if body.get("tools")]
    assert {json.dumps(body["messages"][0]) for body in agent_calls} == {
        json.dumps({"role": "system", "content": "You are a test agent."})
    }


def priced_provider(fake_url: str, name: str, kind: str = "custom") -> dict:
    manifest = {
        "type": kind,
        "base_url": f"{fake_url}/v1",
        "auth": {"api_key": wire.API_KEY_SECRET},
        "models": [{
            "name": "priced",
            "model_id": "claude-sonnet-4-5" if kind == "anthropic" else "fake-model",
            "properties": {"pricing": {
                "input_per_million": 3.0, "output_per_million": 15.0,
                "cache_read_per_million": 0.3, "cache_write_per_million": 3.75,
            }},
        }],
    }
    if kind == "custom":
        manifest["name"] = name
    return manifest


def expected_cost(usage: dict) -> float:
    cache_read = usage.get("cache_read_tokens") or 0
    cache_write = usage.get("cache_write_tokens") or 0
    uncached = usage["input_tokens"] - cache_read - cache_write
    return (uncached * 3.0 + cache_read * 0.3 + cache_write * 3.75 + usage["output_tokens"] * 15.0) / 1e6


def check_metrics(api: wire.Api, session_id: str, run: wire.TurnRun) -> list[dict]:
    """Asserts the turn's metrics are the sums of its model messages' usage, priced; returns
    the messages."""
    events = api.ok(api.get(f"/api/v1/sessions/{session_id}/turns/{run.turn_id}/events"))["data"]
    messages = [event for event in events if event["type"] == "model.message"]
    metrics = run.done["state"]["metrics"]
    usages = [message["usage"] for message in messages]
    assert metrics["total_input_tokens"] == sum(usage["input_tokens"] for usage in usages)
    assert metrics["total_output_tokens"] == sum(usage["output_tokens"] for usage in usages)
    assert metrics["total_tokens"] == metrics["total_input_tokens"] + metrics["total_output_tokens"]
    assert metrics.get("total_cache_read_tokens", 0) == sum(usage.get("cache_read_tokens") or 0 for usage in usages)
    assert metrics.get("total_cache_write_tokens", 0) == sum(usage.get("cache_write_tokens") or 0 for usage in usages)
    assert metrics["total_cost_in_usd"] == pytest.approx(sum(expected_cost(usage) for usage in usages), rel=1e-9)
    for usage in usages:
        breakdown = usage["input_tokens_breakdown"]
        assert sum(breakdown.values()) == usage["input_tokens"], breakdown
        assert breakdown["instructions"] > 0 and breakdown["tool_definitions"] > 0
    # The stored turn carries the same metrics.
    assert api.get_turn(session_id, run.turn_id)["state"]["metrics"] == metrics
    return messages


def test_turn_metrics_sum_every_call_and_cost_follows_the_prices(api, fake_model):
    name = wire.unique("priced").replace("_", "-")
    api.ok(api.put("/api/v1/settings/model-providers", json={"manifest": priced_provider(fake_model.url, name)}))
    session = api.create_session(spec={"model": {"name": f"{name}/priced"}, "instructions": "Be brief. " * 20})
    run = api.run_turn(session["id"], "[tool:get_current_datetime {}] what time is it?")
    assert run.done["state"]["status"] == "done"
    messages = check_metrics(api, session["id"], run)
    assert len(messages) == 2, "the tool call and the answer"


def test_anthropic_prompt_caching_is_reported_and_priced(api, fake_model, fake):
    api.ok(api.put("/api/v1/settings/model-providers",
                   json={"manifest": priced_provider(fake_model.url, "anthropic", kind="anthropic")}))
    marker = wire.unique("cache")
    spec = {
        "model": {"name": "anthropic/priced", "params": {"cache_control": {"type": "ephemeral"}}},
        "instructions": f"You are a cached agent {marker}. " + "Stable words. " * 50,
    }
    session = api.create_session(spec=spec)
    first = api.run_turn(session["id"], f"first {marker}")
    second = api.run_turn(session["id"], f"second {marker}")
    (written,) = check_metrics(api, session["id"], first)
    (read,) = check_metrics(api, session["id"], second)
    assert written["usage"].get("cache_write_tokens", 0) > 0
    assert read["usage"].get("cache_read_tokens", 0) > 0
    # The requests asked for caching on the stable prefix.
    body = fake.requests_for(f"second {marker}")[0]
    assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}


CITY = {
    "type": "json_schema",
    "json_schema": {
        "name": "city",
        "schema": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "population": {"type": "integer"}},
            "required": ["name", "population"],
        },
    },
}


def test_structured_output_is_valid_or_the_turn_says_why(api, fake):
    session = api.create_session(spec={"model": {"name": "fake/fake-model"}, "response_format": CITY})
    marker = wire.unique("json")
    good = api.run_turn(session["id"], f'[json:{{"name": "Oslo", "population": 700000}}] {marker}')
    assert good.done["state"]["status"] == "done"
    assert json.loads(good.output_text) == {"name": "Oslo", "population": 700000}
    (request,) = fake.requests_for(marker)
    assert request["response_format"]["type"] == "json_schema"
    assert request["response_format"]["json_schema"]["name"] == "city"

    bad = api.run_turn(session["id"], f"just words {wire.unique('json')}")
    state = bad.done["state"]
    assert state["status"] == "error"
    assert "not in the required format" in state["message"] and "not valid JSON" in state["message"]
