"""The AI SDK data stream dialect (`?stream_format=data-stream` on turn creation and subscribe),
table-driven over the suite's scenarios: text only, tools, approvals, questions, plans, parallel
sub-agents, tool progress, sandbox files, provider error, cancel, iteration limit. Each scenario is one or more turns (later
ones answer what the one before left waiting); for every turn it checks the parts against the
seed's ordering guarantees (over the scenario's turns in order, since a call and its approval
sit in one turn and the decision and result in the next), `finish` at most once and only
summaries after it, nothing after `error`, one of them last, and that the live stream, a
replay, and a resume after every `id:` it carried give the same parts."""

from __future__ import annotations

import json
import threading
import typing

import pytest

import wire
from test_mcp import call, registry
from test_sub_agents import gated_server, spawn  # noqa: F401 (a fixture)

Part = dict
Frame = tuple[typing.Optional[int], Part]


def data_frames(result: wire.StreamResult) -> list[Frame]:
    """The (id or None, part) frames of a data stream, asserting its framing."""
    assert result.status == 200, f"{result.status}: {result.body[:300]!r}"
    frames: list[Frame] = []
    for block in result.body.decode().split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        if not lines:
            continue
        ids = [int(line[4:]) for line in lines if line.startswith("id: ")]
        data = "\n".join(line[6:] for line in lines if line.startswith("data: "))
        frames.append((ids[0] if ids else None, json.loads(data)))
    ids = [frame_id for frame_id, _ in frames if frame_id is not None]
    assert ids == sorted(set(ids)), f"ids must grow: {ids}"
    assert not frames or frames[-1][0] is not None, "the last frame carries an id"
    return frames


def parts(frames: list[Frame]) -> list[Part]:
    return [part for _, part in frames]


def turns_path(session_id: str) -> str:
    return f"/api/v1/sessions/{session_id}/turns?stream_format=data-stream"


def subscribe(api: wire.Api, session_id: str, turn_id: str, after: typing.Optional[int] = None) -> list[Frame]:
    params = {"stream_format": "data-stream"}
    if after is not None:
        params["after_sequence_number"] = str(after)
    return data_frames(api.stream("GET", f"/api/v1/sessions/{session_id}/turns/{turn_id}/subscribe", params=params))


def check_one_stream(stream: list[Part]) -> None:
    """`finish` at most once, followed only by the summaries; nothing after `error`; the
    stream ends with one of them; `step-start` before any text or reasoning."""
    kinds = [part["type"] for part in stream]
    assert kinds.count("finish") + kinds.count("error") == 1, kinds
    if "error" in kinds:
        assert kinds[-1] == "error", kinds
    else:
        end = kinds.index("finish")
        assert kinds[end + 1:] == ["data-cost-summary", "data-latency-summary"], kinds
        finish = stream[end]
        usage = finish["usage"]
        assert usage["totalTokens"] == usage["promptTokens"] + usage["completionTokens"], finish
    seen_step = False
    for kind in kinds:
        seen_step = seen_step or kind == "step-start"
        if kind in ("text", "reasoning"):
            assert seen_step, f"{kind} before any step-start: {kinds}"


def check_order(streams: list[list[Part]]) -> None:
    """The seed's partial order over a scenario's streams in turn order: a call before its
    progress and its approval request, before its decision, before its result; a sub-agent's
    call before its result."""
    position: dict[tuple[str, str], int] = {}
    progress: list[tuple[str, int]] = []
    flat = [part for stream in streams for part in stream]
    for index, part in enumerate(flat):
        kind = part["type"]
        if kind == "tool-progress":
            progress.append((part["toolCallId"], index))
            continue
        if kind == "tool-invocation":
            key = (f"invocation-{part['state']}", part["toolInvocationId"])
        elif kind == "tool-agent":
            key = (f"agent-{part['state']}", part["toolCallId"])
        elif kind in ("approval-required", "approval-decision"):
            key = (kind, part["data"]["id"])
        else:
            continue
        assert key not in position, f"{key} twice"
        position[key] = index
    for (kind, call_id), index in position.items():
        before = {
            "invocation-result": ["invocation-call", "approval-decision"],
            "approval-decision": ["approval-required"],
            "approval-required": ["invocation-call"],
            "agent-result": ["agent-call"],
        }.get(kind, [])
        for earlier in before:
            if earlier == "approval-decision" and ("approval-required", call_id) not in position:
                continue
            assert position.get((earlier, call_id), len(flat)) < index, f"{earlier} of {call_id} must precede its {kind}"
    for call_id, index in progress:
        assert position[("invocation-call", call_id)] < index < position[("invocation-result", call_id)], \
            f"the progress of {call_id} must come between its call and its result"


def check_replays(api: wire.Api, session_id: str, turn_id: str, live: list[Frame]) -> None:
    """A replay gives the live parts; a resume after each id gives the parts after that frame."""
    assert subscribe(api, session_id, turn_id) == live
    for index, (frame_id, _) in enumerate(live):
        if frame_id is not None:
            assert subscribe(api, session_id, turn_id, after=frame_id) == live[index + 1:], f"resumed after {frame_id}"


def approvals_of(stream: list[Part]) -> list[dict]:
    return [part["data"] for part in stream if part["type"] == "approval-required"]


def decisions(stream: list[Part], allow: bool = True) -> list[dict]:
    """The next turn's input answering every request of a stream."""
    answers = []
    for request in approvals_of(stream):
        base = {"thread_id": request["threadId"], "tool_call_id": request["id"]}
        if request["kind"] == "question":
            answers.append({"type": "user.tool_response", "content": "Blue", **base})
        else:
            approval = {"status": "allow"} if allow else {"status": "deny", "reason": "too vague"}
            answers.append({"type": "user.tool_approval", "approval": approval, **base})
    return answers


PLAN_SPEC = {
    "model": {"name": "fake/fake-model"},
    "modes": [
        {"id": "plan", "name": "Plan", "instructions": "Plan first.", "transitions_to": "build", "default": True},
        {"id": "build", "name": "Build", "instructions": "Carry the plan out."},
    ],
}


class Scenario(typing.NamedTuple):
    name: str
    spec: typing.Callable[[str], typing.Optional[dict]]  # from the gated MCP server's name
    message: str
    # The turns after the first, as inputs made from the stream before; none for one turn.
    follow_ups: int
    # Checks of the scenario's streams, beyond the guarantees every scenario meets.
    expect: typing.Callable[[list[list[Part]]], None]


def kinds_of(stream: list[Part]) -> list[str]:
    return [part["type"] for part in stream]


def text_of(stream: list[Part]) -> str:
    return "".join(part["text"] for part in stream if part["type"] == "text")


def finish_of(stream: list[Part]) -> dict:
    (finish,) = [part for part in stream if part["type"] == "finish"]
    return finish


def expect_text(streams: list[list[Part]]) -> None:
    (stream,) = streams
    assert text_of(stream) == "You said: hello there", stream
    assert kinds_of(stream)[0] == "step-start"
    assert finish_of(stream)["finishReason"] == "stop"
    assert finish_of(stream)["usage"]["promptTokens"] > 0


def expect_tools(streams: list[list[Part]]) -> None:
    (stream,) = streams
    invocations = [part for part in stream if part["type"] == "tool-invocation"]
    assert [(part["toolName"], part["state"]) for part in invocations] == [
        ("get_current_datetime", "call"), ("get_current_datetime", "result")]
    assert invocations[0]["args"] == {} and invocations[1]["args"] == {}
    assert kinds_of(stream).count("step-start") == 2, "one step per model call"
    assert text_of(stream).startswith("Tool result:")


def expect_approval(streams: list[list[Part]]) -> None:
    first, second = streams
    (request,) = approvals_of(first)
    assert request["kind"] == "tool" and request["target"] == "echo" and request["payload"] == {"text": "hi"}
    assert request["threadId"] == "main"
    assert finish_of(first)["finishReason"] == "tool-calls"
    decision = [part["data"] for part in second if part["type"] == "approval-decision"]
    assert decision == [{"id": request["id"], "outcome": {"outcome": "approve"}}]
    (result,) = [part for part in second if part["type"] == "tool-invocation"]
    assert result["state"] == "result" and result["toolName"] == "echo" and result["args"] == {"text": "hi"}
    assert text_of(second) == "Tool result: hi"


def expect_question(streams: list[list[Part]]) -> None:
    first, second = streams
    (request,) = approvals_of(first)
    assert request["kind"] == "question" and request["target"] == "ask_user_question"
    assert request["payload"]["question"] == "Which colour?"
    (decision,) = [part["data"] for part in second if part["type"] == "approval-decision"]
    assert decision["response"] == "Blue"
    (result,) = [part for part in second if part["type"] == "tool-invocation"]
    assert result["result"] == "Blue" and result["toolName"] == "ask_user_question"
    assert finish_of(second)["finishReason"] == "stop"


def expect_plan(streams: list[list[Part]]) -> None:
    first, second = streams
    (request,) = approvals_of(first)
    assert request["kind"] == "plan" and request["target"] == request["id"]
    assert request["payload"] == {"title": "Fix it", "plan": "1. fix"}
    changes = [(part["data"]["from"], part["data"]["to"]) for stream in streams for part in stream
               if part["type"] == "plan-status-change"]
    assert changes == [("draft", "pending_approval"), ("pending_approval", "approved"),
                       ("approved", "executing"), ("executing", "executed")], changes
    change_ids = {part["data"]["planId"] for stream in streams for part in stream if part["type"] == "plan-status-change"}
    assert change_ids == {request["id"]}
    assert kinds_of(first).index("plan-status-change") < kinds_of(first).index("approval-required")


def expect_sub_agents(streams: list[list[Part]]) -> None:
    (stream,) = streams
    agents = [part for part in stream if part["type"] == "tool-agent"]
    assert sorted((part["agentName"], part["state"]) for part in agents) == [
        ("left", "call"), ("left", "result"), ("right", "call"), ("right", "result")]
    results = {part["agentName"]: part["result"] for part in agents if part["state"] == "result"}
    assert results == {"left": "You said: one", "right": "You said: two"}
    usage = [part["data"] for part in stream if part["type"] == "data-tool-agent"]
    assert sorted(data["agentName"] for data in usage) == ["left", "right"]
    assert all(data["usage"]["completionTokens"] > 0 for data in usage)
    # Each data-tool-agent follows its thread's result.
    kinds = [(part["type"], part.get("agentName") or part.get("data", {}).get("agentName")) for part in stream]
    for name in ("left", "right"):
        assert kinds.index(("tool-agent", name)) < kinds.index(("data-tool-agent", name))
    # Sub-agents' own text is theirs: the main text is the parent's answer only.
    assert text_of(stream).startswith("Tool result:")


def expect_progress(streams: list[list[Part]]) -> None:
    (stream,) = streams
    progress = [part for part in stream if part["type"] == "tool-progress"]
    assert [(part["toolName"], part["label"], part["phaseIndex"], part["totalPhases"]) for part in progress] == [
        ("phases", f"phase {step} of 3", step, 3) for step in (1, 2, 3)], progress
    assert progress[0]["milestone"] == {"progress": 1, "total": 3}
    (result,) = [part for part in stream if part["type"] == "tool-invocation" and part["state"] == "result"]
    assert result["result"] == "3 phases done" and result["toolInvocationId"] == progress[0]["toolCallId"]


def expect_files(streams: list[list[Part]]) -> None:
    (stream,) = streams
    kinds = kinds_of(stream)
    files = [part["data"] for part in stream if part["type"] == "data-file-registered"]
    (result,) = [part for part in stream if part["type"] == "tool-invocation" and part["state"] == "result"]
    assert sorted((file["path"], file["size"]) for file in files) == [("/workspace/out/b.txt", 2), ("/workspace/report.csv", 8)]
    assert {file["toolCallId"] for file in files} == {result["toolInvocationId"]} and "threadId" not in files[0]
    # Registered with the call's result, before the next step.
    assert kinds.index("tool-invocation", kinds.index("tool-invocation") + 1) < kinds.index("data-file-registered")
    assert max(i for i, kind in enumerate(kinds) if kind == "data-file-registered") < len(kinds) - kinds[::-1].index("step-start") - 1


def expect_error(streams: list[list[Part]]) -> None:
    (stream,) = streams
    assert "fake error 400" in stream[-1]["error"]["message"]
    assert "finish" not in kinds_of(stream)


def expect_iteration_limit(streams: list[list[Part]]) -> None:
    (stream,) = streams
    assert "iteration limit of 1" in stream[-1]["error"]["message"]
    assert [part["state"] for part in stream if part["type"] == "tool-invocation"] == ["call", "result"]


def expect_cancel(streams: list[list[Part]]) -> None:
    (stream,) = streams
    finish = finish_of(stream)
    assert finish["finishReason"] == "other" and finish["cancelReason"] == "client-cancelled"


def gated_spec(tools: str) -> dict:
    return {"model": {"name": "fake/fake-model"},
            "mcp_servers": [registry(tools, preload=True, enable_tools=["echo"], require_approval_for_tools=["@all"])]}


QUESTION = {"question": "Which colour?", "options": [{"label": "Blue"}, {"label": "Red"}]}

SCENARIOS = [
    Scenario("text only", lambda _: None, "hello there", 0, expect_text),
    Scenario("tools", lambda _: None, "[tool:get_current_datetime]", 0, expect_tools),
    Scenario("approvals", gated_spec, call("echo", {"text": "hi"}), 1, expect_approval),
    Scenario("questions", lambda _: None, f"[tool:ask_user_question {json.dumps(QUESTION)}]", 1, expect_question),
    Scenario("plans", lambda _: PLAN_SPEC, call("submit_plan", {"title": "Fix it", "plan": "1. fix"}), 1, expect_plan),
    Scenario("parallel sub-agents", lambda _: None, spawn("left", "one") + spawn("right", "two"), 0, expect_sub_agents),
    Scenario("tool progress", lambda tools: {"model": {"name": "fake/fake-model"},
                                             "mcp_servers": [registry(tools, preload=True, enable_tools=["phases"])]},
             call("phases", {"steps": 3}), 0, expect_progress),
    Scenario("sandbox files", lambda _: {"model": {"name": "fake/fake-model"}, "config": {"sandbox": {"enabled": True}}},
             call("exec", {"command": "printf 'a,b\\n1,2\\n' > report.csv && mkdir -p out && echo b > out/b.txt && cat report.csv"}),
             0, expect_files),
    Scenario("provider error", lambda _: None, "[error:400]", 0, expect_error),
    Scenario("iteration limit", lambda _: {"model": {"name": "fake/fake-model"}, "config": {"iteration_limit": 1}},
             "[tool:get_current_datetime]", 0, expect_iteration_limit),
]


def newest_turn(api: wire.Api, session_id: str) -> typing.Optional[str]:
    turns = api.ok(api.get(f"/api/v1/sessions/{session_id}/turns"))["data"]
    return turns[0]["id"] if turns else None


def start(api: wire.Api, session_id: str, body: dict) -> tuple[str, list[Frame]]:
    frames = data_frames(api.stream("POST", turns_path(session_id), json=body))
    turn_id = newest_turn(api, session_id)
    assert turn_id is not None
    return turn_id, frames


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[scenario.name for scenario in SCENARIOS])
def test_data_stream_scenario(api, gated_server, scenario):
    spec = scenario.spec(gated_server)
    session_id = api.create_session("demo" if spec is None else None, spec=spec)["id"]
    body = {"input": [{"type": "user.message", "content": scenario.message}]}
    streams: list[list[Part]] = []
    for _ in range(1 + scenario.follow_ups):
        turn_id, live = start(api, session_id, body)
        stream = parts(live)
        check_one_stream(stream)
        check_replays(api, session_id, turn_id, live)
        streams.append(stream)
        body = {"input": decisions(stream)}
    check_order(streams)
    scenario.expect(streams)


def test_cancel_ends_with_finish_and_every_reading_agrees(api):
    session_id = api.create_session("demo")["id"]
    body = {"input": [{"type": "user.message", "content": f"[delay:100] [tokens:200] {wire.unique('cancel')}"}]}
    results: list[wire.StreamResult] = []
    reader = threading.Thread(target=lambda: results.append(api.stream("POST", turns_path(session_id), json=body)))
    reader.start()
    turn_id = wire.wait_until(lambda: newest_turn(api, session_id), what="the turn to exist")
    api.read_until_delta(session_id, turn_id)
    api.ok(api.post(f"/api/v1/sessions/{session_id}/cancel"))
    reader.join(timeout=30)
    (result,) = results
    live = data_frames(result)
    stream = parts(live)
    check_one_stream(stream)
    assert "text" in kinds_of(stream), "the partial output was streamed"
    check_replays(api, session_id, turn_id, live)
    expect_cancel([stream])


@pytest.mark.parametrize("path", ["/turns?stream_format=ndjson", "/turns/{turn}/subscribe?stream_format=ui"])
def test_an_unknown_stream_format_is_400_listing_the_allowed_ones_and_stores_nothing(api, path):
    session_id = api.create_session("demo")["id"]
    first = api.ok(api.post(f"/api/v1/sessions/{session_id}/turns", json={"input": [{"type": "user.message", "content": "hi"}],
                                                                        "stream": False}))["data"]
    api.wait_terminal(session_id, first["id"])
    response = api.post(f"/api/v1/sessions/{session_id}" + path.format(turn=first["id"]),
                        json={"input": [{"type": "user.message", "content": "again"}]}) if "subscribe" not in path \
        else api.get(f"/api/v1/sessions/{session_id}" + path.format(turn=first["id"]))
    wire.assert_error(response, 400, ["invalid_request"])
    error = response.json()["error"]
    assert error["param"] == "stream_format"
    assert '"native"' in error["message"] and '"data-stream"' in error["message"]
    assert newest_turn(api, session_id) == first["id"]
