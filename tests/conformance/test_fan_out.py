"""Fan-out attacks on the real server: a turn whose model asks for fifty `run_sub_agent` calls in
one message, each sub-agent asking for twenty more, must stay within the thread cap
(`--max-threads-per-turn`, 16 by default) and the parallel-call cap (`--max-parallel-tool-calls`,
4), with its model calls within the subject's quota (`--max-concurrent-turns-per-subject`); and
sub-agents racing for a nearly spent tenant budget (`--tenant-token-budget`) overrun it by at
most one model call. Concurrency is measured on the turn's own stream: a model call runs from
its placeholder `model.message` to the delta that carries its usage, a sub-agent from its
`thread.created` to its `thread.done`."""

import json

FAKE = {"model": {"name": "fake/fake-model"}, "instructions": "You are a test agent."}


def spawn(name: str, task: str) -> str:
    return f"[tool:run_sub_agent {json.dumps({'name': name, 'task': task})}]"


def peak(intervals: list[tuple[int, int]]) -> int:
    """The most intervals (start, end) of stream positions open at once."""
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    open_now = best = 0
    for _, step in edges:
        open_now += step
        best = max(best, open_now)
    return best


def model_calls(payloads: list[dict]) -> list[tuple[int, int, int]]:
    """Each model call's (start, end) position on the stream and the tokens it spent."""
    started: dict[str, int] = {}
    calls = []
    for position, event in enumerate(payloads):
        if event.get("type") == "model.message" and event["id"] not in started:
            started[event["id"]] = position
        elif event.get("usage") and event.get("id") in started:
            usage = event["usage"]
            calls.append((started.pop(event["id"]), position, usage["input_tokens"] + usage["output_tokens"]))
    assert not started, f"model calls without an end: {started}"
    return calls


def threads(payloads: list[dict]) -> dict[str, tuple[str, int, int]]:
    """Each sub-agent thread's parent thread and its (start, end) positions."""
    opened: dict[str, tuple[str, int]] = {}
    closed = {}
    for position, event in enumerate(payloads):
        if event.get("type") == "thread.created":
            opened[event["thread_id"]] = (event["parent"]["thread_id"], position)
        elif event.get("type") == "thread.done":
            parent, start = opened[event["thread_id"]]
            closed[event["thread_id"]] = (parent, start, position)
    assert set(closed) == set(opened), "every thread that was opened was closed"
    return closed


def test_fifty_sub_agents_at_every_depth_stay_within_the_caps_and_the_quota(server_factory):
    server = server_factory(extra_args=["--max-concurrent-turns-per-subject", "3"])
    api = server.require_api()
    session = api.create_session(spec={**FAKE, "config": {"dynamic_sub_agents": {"enabled": True, "max_depth": 2}}})
    leaf = "[delay:5][tokens:4] leaf"
    middle = "".join(spawn(f"leaf{i}", leaf) for i in range(20))
    run = api.run_turn(session["id"], "".join(spawn(f"worker{i}", middle) for i in range(50)))
    assert run.done["state"]["status"] == "done", run.done["state"]
    payloads = run.stream.payloads

    started = threads(payloads)
    assert len(started) == 16, f"{len(started)} sub-agent threads in one turn"
    responses = [event for event in payloads if event.get("type") == "tool.response"]
    capped = [event for event in responses
              if event["content"].startswith("Error: This turn has started its limit of 16 sub-agent threads")]
    assert capped, "the calls beyond the cap got a tool error saying so"
    asked = sum(1 for event in payloads for call in event.get("tool_calls") or [] if call.get("id"))
    assert len(responses) == asked > 16, "every call was answered, those beyond the cap with an error"

    # No parent ever had more than 4 of its sub-agents running at once.
    by_parent: dict[str, list[tuple[int, int]]] = {}
    for parent, start, end in started.values():
        by_parent.setdefault(parent, []).append((start, end))
    assert max(peak(intervals) for intervals in by_parent.values()) <= 4, by_parent
    # The subject's quota of 3 turns bounds its model calls at once, on every thread.
    calls = model_calls(payloads)
    assert 16 < len(calls) <= 1 + 2 * 16 + 1, len(calls)
    assert peak([(start, end) for start, end, _ in calls]) <= 3


def test_sub_agents_racing_for_a_tenant_budget_overrun_it_by_at_most_one_call(server_factory):
    budget = 2000
    server = server_factory(extra_args=["--tenant-token-budget", str(budget)])
    api = server.require_api()
    session = api.create_session(spec=FAKE)
    # Each sub-agent's one model call spends about 350 tokens; a dozen would spend 4,000.
    run = api.run_turn(session["id"], "".join(spawn(f"spender{i}", "[delay:1][tokens:300] spend") for i in range(12)))
    state = run.done["state"]
    assert state["status"] == "error" and "tenant \"local\"'s token budget of 2000 tokens" in state["message"], state
    calls = model_calls(run.stream.payloads)
    largest = max(tokens for _, _, tokens in calls)
    spent = state["metrics"]["total_tokens"]
    assert spent == sum(tokens for _, _, tokens in calls)
    assert budget <= spent <= budget + largest, f"spent {spent} of {budget} (largest call {largest})"
    refused = [event for event in run.stream.payloads
               if event.get("type") == "thread.done" and "token budget" in (event["state"].get("error") or "")]
    assert refused, "the sub-agents that found the budget spent ended saying so"
