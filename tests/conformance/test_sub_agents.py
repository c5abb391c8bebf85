"""Sub-agents in parallel threads, with the real gateway SDK: the main agent starts several
sub-agents in one message (the fake model's `[tool:run_sub_agent {...}]`), each runs on its own
thread (`thread.created`, its events, `thread.done`), they run at the same time, and the parent's
answer uses all their outputs. Also: replays, a failing sub-agent, cancel, and gated tools in
two sub-agents resumed by one turn."""

from __future__ import annotations

import json
import time
import typing

import pytest

import wire
from test_mcp import call, registered_tools_server, registry
from truefoundry_gateway_sdk import ApprovalAllow, UserMessage
from truefoundry_gateway_sdk.agents import (
    ModelMessageEvent,
    ThreadCreatedEvent,
    ThreadDoneEvent,
    ToolApprovalRequiredEvent,
    TurnDoneEvent,
    UserToolApprovalEvent,
    is_event_delta,
    merge_event_delta,
)


def spawn(name: str, task: str) -> str:
    return f"[tool:run_sub_agent {json.dumps({'name': name, 'task': task})}]"


def fold_by_message(items) -> dict[str, ModelMessageEvent]:
    messages: dict[str, ModelMessageEvent] = {}
    for item in items:
        event = item.event
        if is_event_delta(event):
            merge_event_delta(messages[event.id], event)
        elif isinstance(event, ModelMessageEvent):
            messages[event.id] = event.model_copy(deep=True)
    return messages


def run_turn(session, text: str):
    prepared = session.prepare_turn(input=[UserMessage(content=text)])
    return prepared, list(prepared.execute())


def test_three_sub_agents_run_at_once_and_the_parent_uses_all_outputs(client):
    session = client.create_session(agent_name="demo")
    # Each sub-agent streams 6 chunks 150 ms apart: about 0.9 s alone, 2.7 s one after another.
    tasks = {name: f"[tokens:6][delay:150] work {name}" for name in ("alpha", "beta", "gamma")}
    started = time.monotonic()
    prepared, items = run_turn(session, "".join(spawn(name, task) for name, task in tasks.items()))
    elapsed = time.monotonic() - started
    assert prepared.state.status == "done"
    assert [item.sequence_number for item in items] == list(range(1, len(items) + 1))

    created = [item.event for item in items if isinstance(item.event, ThreadCreatedEvent)]
    done = {item.event.thread_id: item.event for item in items if isinstance(item.event, ThreadDoneEvent)}
    assert [event.title for event in created] == list(tasks)
    messages = fold_by_message(items)
    spawning = [message for message in messages.values() if message.thread_id == "main" and message.tool_calls][0]
    assert [event.parent.tool_call_id for event in created] == [call.id for call in spawning.tool_calls]
    assert all(event.parent.thread_id == "main" and event.agent_info.input == tasks[event.title] for event in created)
    outputs = {}
    for thread in created:
        own = [message for message in messages.values() if message.thread_id == thread.thread_id]
        assert len(own) == 1
        # Each thread's deltas fold by thread into exactly its own answer.
        assert own[0].content == "".join(f"tok{i} " for i in range(1, 7))
        state = done[thread.thread_id].state
        assert state.status == "done" and state.output.content == own[0].content
        outputs[thread.title] = own[0].content
    # The three threads' deltas interleave on the one stream, and the turn took about as long as
    # the slowest sub-agent, not the sum.
    positions = {thread.thread_id: [index for index, item in enumerate(items)
                                    if is_event_delta(item.event) and item.event.thread_id == thread.thread_id]
                 for thread in created}
    first_ends = min(positions_of[-1] for positions_of in positions.values())
    assert all(positions_of[0] < first_ends for positions_of in positions.values()), "interleaved"
    assert elapsed < 2.4, f"the sub-agents ran one after another: {elapsed:.2f} s"
    # The parent received every output as a tool result and its answer uses all three.
    final = items[-1].event.state.output.content
    assert final == "Tool result: " + " | ".join(outputs[name] for name in tasks)
    # Turn metrics include every thread.
    usage = [message.usage for message in messages.values() if message.usage is not None]
    metrics = items[-1].event.state.metrics
    assert metrics.total_input_tokens == sum(u.input_tokens for u in usage)
    assert metrics.total_output_tokens == sum(u.output_tokens for u in usage)

    # The same turn replays identically through subscribe and the event lists.
    replay = list(prepared.stream(after_sequence_number=0))
    assert [(item.sequence_number, item.event.type) for item in replay] == \
        [(item.sequence_number, item.event.type) for item in items]
    listed = prepared.list_events()
    assert [event.id for event in listed] == [
        item.event.id for item in items
        if not is_event_delta(item.event) and item.event.type not in ("turn.created", "turn.done")]
    for event in listed:
        if isinstance(event, ModelMessageEvent):
            assert event.content == messages[event.id].content


def test_a_failing_sub_agent_does_not_fail_its_siblings(client):
    session = client.create_session(agent_name="demo")
    prepared, items = run_turn(session, spawn("ok", "[tokens:3] fine") + spawn("broken", "[error:401] fail"))
    assert prepared.state.status == "done"
    done = {item.event.title: item.event for item in items if isinstance(item.event, ThreadDoneEvent)}
    assert done["ok"].state.status == "done"
    assert done["broken"].state.status == "error" and "401" in done["broken"].state.error
    final = items[-1].event.state.output.content
    assert final.startswith("Tool result: tok1 tok2 tok3 ") and "The sub-agent failed" in final


def test_cancel_stops_every_thread_and_keeps_partial_output(client):
    session = client.create_session(agent_name="demo")
    prepared = session.prepare_turn(input=[UserMessage(
        content=spawn("slow-a", "[tokens:60][delay:100] a") + spawn("slow-b", "[tokens:60][delay:100] b"))])
    items = []
    cancelled_at: typing.Optional[float] = None
    for item in prepared.execute():
        items.append(item)
        deltas = [i for i in items if is_event_delta(i.event) and i.event.thread_id != "main" and i.event.content]
        if cancelled_at is None and len(deltas) >= 4:
            session.cancel()
            cancelled_at = time.monotonic()
    assert cancelled_at is not None
    assert time.monotonic() - cancelled_at < 5, "every thread stopped promptly"
    done = items[-1].event
    assert isinstance(done, TurnDoneEvent) and done.state.status == "cancelled"
    threads = [item.event for item in items if isinstance(item.event, ThreadDoneEvent)]
    assert len(threads) == 2 and all(thread.state.status == "error" for thread in threads)
    # What the sub-agents streamed is kept, and so is its usage.
    listed = [event for event in prepared.list_events() if isinstance(event, ModelMessageEvent) and event.thread_id != "main"]
    assert all(event.content and event.content.startswith("tok1 ") and "tok60" not in event.content for event in listed)
    assert done.state.metrics.total_output_tokens > 0


@pytest.fixture(scope="module")
def gated_server(server, workdir) -> typing.Iterator[str]:
    with registered_tools_server(server, workdir, "tools") as name:
        yield name


def test_gated_tools_in_two_sub_agents_pause_and_resume_in_one_turn(api, client, gated_server):
    agent = wire.unique("coordinator")
    manifest = {"model": {"name": "fake/fake-model"},
                "mcp_servers": [registry(gated_server, preload=True, enable_tools=["echo"],
                                         require_approval_for_tools=["@all"])]}
    api.ok(api.post("/api/v1/agents", json={"name": agent, "manifest": manifest}), 201)
    session = client.create_session(agent_name=agent)
    first, items = run_turn(session, spawn("left", call("echo", {"text": "L"})) + spawn("right", call("echo", {"text": "R"})))
    assert first.state.status == "done"
    pending = [item.event for item in items if isinstance(item.event, ToolApprovalRequiredEvent)]
    created = {item.event.thread_id: item.event.title for item in items if isinstance(item.event, ThreadCreatedEvent)}
    assert sorted(created[event.thread_id] for event in pending) == ["left", "right"]
    assert sorted(action.id for action in first.state.required_actions) == sorted(event.id for event in pending)
    assert not [item for item in items if isinstance(item.event, ThreadDoneEvent)], "both threads wait"
    listed = api.ok(api.get(f"/api/v1/sessions/{session.id}/threads"))["data"]
    assert [(thread["title"], thread["status"], thread["turn_id"]) for thread in listed] == [
        ("left", "running", first.id), ("right", "running", first.id)], listed

    decisions = [UserToolApprovalEvent(thread_id=event.thread_id, tool_call_id=ref.id, approval=ApprovalAllow())
                 for event in pending for ref in event.tool_calls]
    second = session.prepare_turn(input=decisions)
    items = list(second.execute())
    assert second.state.status == "done", second.state
    done = {item.event.title: item.event for item in items if isinstance(item.event, ThreadDoneEvent)}
    assert done["left"].state.output.content == "Tool result: L"
    assert done["right"].state.output.content == "Tool result: R"
    assert second.state.output.content == "Tool result: Tool result: L | Tool result: R"
    # Each thread ended in the turn that resumed it, and is listed with the turn it started in.
    listed = api.ok(api.get(f"/api/v1/sessions/{session.id}/threads"))["data"]
    assert [(thread["title"], thread["status"], thread["turn_id"]) for thread in listed] == [
        ("left", "done", first.id), ("right", "done", first.id)], listed
    assert all(thread["ended_at"] == done[thread["title"]].created_at for thread in listed)
