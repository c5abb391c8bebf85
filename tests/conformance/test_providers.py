"""Both provider adapters through the real gateway client, each against the fake model speaking
that provider's own streaming format (OpenAI chat completions, Anthropic Messages): streaming,
tool calls, cancel, resume by subscribe, retries and usage. The fake's request log shows what
each provider was sent."""

from __future__ import annotations

import pytest

import wire
from truefoundry_gateway_sdk import UserMessage
from truefoundry_gateway_sdk.agents import (
    AgentSessionClient,
    TurnDoneEvent,
    TurnStateCancelled,
    TurnStateDone,
    is_event_delta,
    merge_event_delta,
)

# The provider each adapter is configured as, and the model an agent names.
PROVIDERS = {
    "openai-compatible": "fake/fake-model",
    "anthropic": "anthropic/claude-test",
}


@pytest.fixture(scope="module")
def agents(server) -> dict[str, str]:
    """One agent per adapter on the shared server, by adapter name."""
    api = server.require_api()
    manifest = {
        "type": "anthropic",
        "base_url": f"{server.fake.url}/v1",
        "auth": {"api_key": wire.API_KEY_SECRET},
        "models": [{"name": "claude-test", "model_id": "claude-sonnet-4-5", "properties": {}}],
    }
    api.ok(api.put("/api/v1/settings/model-providers", json={"manifest": manifest}))
    return {
        adapter: api.create_agent(wire.unique(f"agent-{adapter}"), model=model)["name"]
        for adapter, model in PROVIDERS.items()
    }


@pytest.fixture(params=list(PROVIDERS))
def agent(request, agents) -> str:
    return agents[request.param]


def fold(items) -> list:
    messages = {}
    for item in items:
        event = item.event
        if is_event_delta(event):
            merge_event_delta(messages[event.id], event)
        elif event.type == "model.message":
            messages[event.id] = event.model_copy(deep=True)
    return list(messages.values())


def start(client: AgentSessionClient, agent: str, text: str):
    session = client.create_session(agent_name=agent)
    return session, session.prepare_turn(input=[UserMessage(content=text)])


def test_streaming_turn(client, agent, fake):
    marker = wire.unique("stream")
    session, prepared = start(client, agent, f"hello {marker}")
    items = list(prepared.execute())
    assert [item.sequence_number for item in items] == list(range(1, len(items) + 1))
    done = items[-1].event
    assert isinstance(done, TurnDoneEvent) and isinstance(done.state, TurnStateDone)
    (message,) = fold(items)
    assert message.content == f"You said: hello {marker}"
    assert message.finish_reason == "stop"
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0
    # The listed message is the fold of the stream, and the metrics are its usage.
    listed = [event for event in prepared.list_events() if event.type == "model.message"]
    assert [event.content for event in listed] == [message.content]
    metrics = done.state.metrics
    assert metrics.total_input_tokens == message.usage.input_tokens
    assert metrics.total_output_tokens == message.usage.output_tokens
    (request,) = fake.requests_for(marker)
    assert request["stream"] is True


def test_tool_call_round_trip(client, agent, fake):
    marker = wire.unique("tool")
    session, prepared = start(client, agent, f"[tool:get_current_datetime {{}}] {marker}")
    items = list(prepared.execute())
    messages = fold(items)
    assert len(messages) == 2
    (call,) = messages[0].tool_calls
    assert call.function.name == "get_current_datetime"
    assert call.tool_info.type == "truefoundry-system"
    responses = [item.event for item in items if item.event.type == "tool.response"]
    assert [response.tool_call_id for response in responses] == [call.id]
    assert messages[1].content == f"Tool result: {responses[0].content}"
    # The second request carried the call and its result in the provider's own shape.
    requests = fake.requests_mentioning(marker)
    assert len(requests) == 2
    assert call.id in str(requests[1]["messages"]) and responses[0].content in str(requests[1]["messages"])
    metrics = items[-1].event.state.metrics
    assert metrics.total_input_tokens == sum(message.usage.input_tokens for message in messages)
    assert metrics.total_output_tokens == sum(message.usage.output_tokens for message in messages)


def thinking_blocks(message) -> list:
    """The Teamster extension on a model message: its reasoning blocks as the provider sent them."""
    return (message.model_extra or {}).get("thinking_blocks") or []


def test_thinking_goes_back_as_received_across_a_tool_step_and_turns(client, agent, agents, fake):
    marker = wire.unique("think")
    session, prepared = start(client, agent, f"[thinking] [tool:get_current_datetime {{}}] {marker}")
    assert isinstance(list(prepared.execute())[-1].event.state, TurnStateDone)
    later = session.prepare_turn(input=[UserMessage(content=f"[thinking] and now? {marker}")])
    assert isinstance(list(later.execute())[-1].event.state, TurnStateDone)
    listed = [event for turn in (prepared, later) for event in turn.list_events() if event.type == "model.message"]
    assert len(listed) == 3 and all(message.reasoning_content == "Let me think." for message in listed)
    first_step, tool_step, next_turn = fake.requests_mentioning(marker)

    def assistants(request: dict) -> list[dict]:
        return [message for message in request["messages"] if message["role"] == "assistant"]

    assert assistants(first_step) == []
    if agent == agents["anthropic"]:
        # Each answer's signed thinking block and redacted block, recorded whole ...
        blocks = [thinking_blocks(message) for message in listed]
        for answer in blocks:
            assert [block["type"] for block in answer] == ["thinking", "redacted_thinking"]
            assert answer[0]["thinking"] == "Let me think." and "+" in answer[0]["signature"]
        assert len({answer[0]["signature"] for answer in blocks}) == 3
        # ... go back first in their assistant turn, byte for byte: with the tool call, then on
        # the next turn for both answers of the first (the fake refuses anything else).
        assert [message["content"][:2] for message in assistants(tool_step)] == blocks[:1]
        assert [message["content"][:2] for message in assistants(next_turn)] == blocks[:2]
        assert tool_step["messages"][1]["content"][2]["type"] == "tool_use"
    else:
        assert all(thinking_blocks(message) == [] for message in listed)
        assert [message["reasoning_content"] for message in assistants(tool_step)] == ["Let me think."]
        assert [message["reasoning_content"] for message in assistants(next_turn)] == ["Let me think."] * 2


def test_cancel_keeps_the_partial_message(client, agent):
    session, prepared = start(client, agent, "[tokens:50][delay:100] cancel me")
    items = []
    cancelled = False
    for item in prepared.execute():
        items.append(item)
        if is_event_delta(item.event) and item.event.content and not cancelled:
            session.cancel()
            cancelled = True
    done = items[-1].event
    assert isinstance(done.state, TurnStateCancelled) and done.state.reason == "client-cancelled"
    streamed = "".join(item.event.content or "" for item in items if is_event_delta(item.event))
    assert streamed.startswith("tok1 ") and "tok50" not in streamed
    listed = [event for event in prepared.list_events() if event.type == "model.message"]
    assert [event.content for event in listed] == [streamed]


def test_resume_by_subscribe(client, agent, srv):
    session, prepared = start(client, agent, "[tokens:12][delay:30] count")
    first = []
    for item in prepared.execute():
        first.append(item)
        if len(first) == 4:
            break
    # A second client resumes after the last event the first one saw.
    other = AgentSessionClient(base_url=f"{srv}/t1", api_key="K", timeout=30)
    turn = other.get_session(session.id).get_turn(prepared.id)
    rest = list(turn.stream(after_sequence_number=first[-1].sequence_number))
    items = first + rest
    assert [item.sequence_number for item in items] == list(range(1, len(items) + 1))
    assert isinstance(items[-1].event, TurnDoneEvent)
    (message,) = fold(items)
    assert message.content == "".join(f"tok{i} " for i in range(1, 13))


@pytest.mark.parametrize("status", [429, 503, 529])
def test_transient_failures_are_retried_invisibly(api, agents, fake, status):
    for adapter in PROVIDERS:
        marker = wire.unique(f"flaky-{adapter}")
        session = api.create_session(agents[adapter])
        run = api.run_turn(session["id"], f"[flaky:2:{status}] {marker}")
        assert run.done["state"]["status"] == "done", run.done["state"]
        assert run.output_text == f"You said: [flaky:2:{status}] {marker}"
        assert len(fake.requests_for(marker)) == 3, "two failures, then the answer"
        # The retries left no trace in the log: one placeholder, one message.
        kinds = [event["type"] for event in run.stream.payloads]
        assert kinds.count("model.message") == 1


def test_permanent_failures_are_not_retried(api, agents, fake):
    for adapter in PROVIDERS:
        marker = wire.unique(f"denied-{adapter}")
        session = api.create_session(agents[adapter])
        run = api.run_turn(session["id"], f"[error:401] {marker}")
        state = run.done["state"]
        assert state["status"] == "error"
        assert "401" in state["message"] and "fake error" in state["message"], state["message"]
        assert len(fake.requests_for(marker)) == 1
