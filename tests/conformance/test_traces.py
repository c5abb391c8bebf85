"""Traces and structured logs: a turn with a tool call and a sub-agent, started with a W3C
`traceparent`, is exported over OTLP/HTTP to a receiver started here, which decodes it with the
official OpenTelemetry protobuf definitions (`opentelemetry-proto`); the span tree follows the
GenAI conventions and continues the caller's trace. With `--log-format json` the server's log
lines are JSON objects, and a turn's carry its session, turn and trace ids."""

from __future__ import annotations

import http.server
import json
import threading
import typing

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

import wire
from test_sub_agents import spawn

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN = "00f067aa0ba902b7"


class Receiver:
    """An OTLP/HTTP trace receiver on 127.0.0.1: keeps every decoded span."""

    def __init__(self) -> None:
        self.spans: list[typing.Any] = []
        self.resources: list[typing.Any] = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
                body = self.rfile.read(int(self.headers["content-length"]))
                assert self.path == "/v1/traces" and self.headers["content-type"] == "application/x-protobuf"
                request = ExportTraceServiceRequest.FromString(body)
                for resource_spans in request.resource_spans:
                    receiver.resources.append(resource_spans.resource)
                    for scope_spans in resource_spans.scope_spans:
                        receiver.spans.extend(scope_spans.spans)
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *_: typing.Any) -> None:
                pass

        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.http.shutdown()


@pytest.fixture
def receiver() -> typing.Iterator[Receiver]:
    instance = Receiver()
    try:
        yield instance
    finally:
        instance.close()


def attributes(span: typing.Any) -> dict[str, typing.Any]:
    values = {}
    for pair in span.attributes:
        kind = pair.value.WhichOneof("value")
        values[pair.key] = getattr(pair.value, kind)
    return values


def test_a_turn_is_one_trace_of_genai_spans_under_the_callers(server_factory, receiver):
    server = server_factory(["--otlp-endpoint", receiver.url, "--log-format", "json"])
    api = server.require_api()
    session = api.create_session("demo")["id"]
    text = spawn("helper", "[tool:get_current_datetime]") + " [tool:get_current_datetime]"
    result = api.stream("POST", f"/api/v1/sessions/{session}/turns",
                        json={"input": [{"type": "user.message", "content": text}]},
                        headers={"traceparent": f"00-{TRACE_ID}-{PARENT_SPAN}-01"})
    run = wire.TurnRun(result)
    assert run.done["state"]["status"] == "done", run.done
    spans = wire.wait_until(lambda: receiver.spans or None, timeout=15, what="the turn's trace")

    assert {span.trace_id.hex() for span in spans} == {TRACE_ID}, "the caller's trace continues"
    assert [attributes(resource)["service.name"] for resource in receiver.resources] == ["teamster"]
    by_id = {span.span_id: span for span in spans}
    assert len(by_id) == len(spans), "span ids are unique"
    (turn,) = [span for span in spans if span.name == "invoke_agent turn"]
    assert turn.parent_span_id.hex() == PARENT_SPAN
    turn_attributes = attributes(turn)
    assert turn_attributes["gen_ai.operation.name"] == "invoke_agent"
    assert turn_attributes["gen_ai.conversation.id"] == session
    assert turn_attributes["teamster.turn.id"] == run.turn_id
    assert turn_attributes["teamster.turn.status"] == "done"
    assert turn_attributes["gen_ai.usage.input_tokens"] > 0 and turn_attributes["gen_ai.usage.output_tokens"] > 0

    def children(parent: typing.Any, name: typing.Optional[str] = None) -> list[typing.Any]:
        return [span for span in spans if span.parent_span_id == parent.span_id and (name is None or span.name == name)]

    # The main thread: two model calls (the calls, then the answer) and the two tool calls.
    chats = children(turn, "chat model")
    assert len(chats) == 2, [span.name for span in children(turn)]
    for chat in chats:
        chat_attributes = attributes(chat)
        assert chat_attributes["gen_ai.operation.name"] == "chat" and chat.kind == 3  # client
        assert chat_attributes["gen_ai.usage.input_tokens"] > 0
    assert sorted(attributes(chat)["gen_ai.response.finish_reasons"] for chat in chats) == ["stop", "tool_calls"]
    (clock,) = children(turn, "execute_tool get_current_datetime")
    assert attributes(clock)["gen_ai.tool.name"] == "get_current_datetime" and attributes(clock)["gen_ai.tool.call.id"]
    (sub_agent_call,) = children(turn, "execute_tool run_sub_agent")
    # The sub-agent's thread sits under the call that started it, with its own calls inside.
    (helper,) = children(sub_agent_call, "invoke_agent helper")
    assert attributes(helper)["gen_ai.agent.name"] == "helper"
    assert len(children(helper, "chat model")) == 2 and len(children(helper, "execute_tool get_current_datetime")) == 1
    assert len(spans) == 1 + 2 + 2 + 1 + 2 + 1
    for span in spans:
        assert span.end_time_unix_nano >= span.start_time_unix_nano > 0
        parent = by_id.get(span.parent_span_id)
        if parent is not None:
            assert parent.start_time_unix_nano <= span.start_time_unix_nano
            assert span.end_time_unix_nano <= parent.end_time_unix_nano, (span.name, parent.name)
        assert span.status.code == 0, (span.name, span.status)

    # The log: JSON lines; the turn's carry its ids and its trace's.
    lines = [line for line in server.process.log_path.read_text().splitlines() if line.startswith("{")]
    records = [json.loads(line) for line in lines]
    assert records and all("level" in record and "message" in record for record in records)
    (ended,) = [record for record in records if record.get("message") == "turn ended"
                and record.get("span", {}).get("turn_id") == run.turn_id]
    assert ended["status"] == "done"
    assert ended["span"]["session_id"] == session and ended["span"]["trace_id"] == TRACE_ID


def test_without_a_collector_nothing_is_traced_and_a_bad_endpoint_is_refused(server_factory, receiver, workdir):
    api = server_factory().require_api()
    run = api.run_turn(api.create_session("demo")["id"], "hello")
    assert run.done["state"]["status"] == "done"
    assert receiver.spans == []
    with pytest.raises(Exception) as refused:
        server_factory(["--otlp-endpoint", "ftp://collector"])
    assert "OTLP endpoint must be an http:// or https:// URL" in str(refused.value)
