"""A session's live channel (`GET /api/v1/sessions/{id}/live`): one SSE stream a UI subscribes
to once. It opens with the whole display state, then sends the control layer's events as turns
run and as other clients change the session (its title, mode, model, follow-ups), each followed
by the display state; the last one equals `GET /api/v1/sessions/{id}/display`."""

from __future__ import annotations

import json
import threading
import typing

import httpx

import wire
from test_identity import Keyed, key_for, keyed  # noqa: F401 (the fixture)
from test_mcp import mcp_http, registered, registry  # noqa: F401 (the fixtures)


def call(name: str, arguments: dict) -> str:
    return f"[tool:{name} {json.dumps(arguments)}]"


class LiveReader:
    """Reads a live channel on a thread of its own: every event as `(name, body)`, in order.
    `session_id` None reads the caller's channel (`GET /api/v1/live`)."""

    def __init__(self, root: str, session_id: typing.Optional[str], key: str = "K") -> None:
        self.events: list[tuple[str, dict]] = []
        self.session_id = session_id
        self.status: typing.Optional[int] = None
        self.error: typing.Optional[str] = None
        self.closed = False
        self.http = httpx.Client(base_url=root, headers={"Authorization": f"Bearer {key}"},
                                 timeout=httpx.Timeout(60.0, connect=5.0))
        self.thread = threading.Thread(target=self._read, args=(session_id,), daemon=True)
        self.opened = False
        self.thread.start()
        wire.wait_until(lambda: (self.events if session_id else self.opened) or self.error, what="the channel to open")

    def _read(self, session_id: typing.Optional[str]) -> None:
        path = "/api/v1/live" if session_id is None else f"/api/v1/sessions/{session_id}/live"
        try:
            with self.http.stream("GET", path) as response:
                self.status = response.status_code
                if response.status_code != 200:
                    self.error = response.read().decode()
                    return
                name = None
                for line in response.iter_lines():
                    self.opened = True
                    if line.startswith("event: "):
                        name = line[len("event: "):]
                    elif line.startswith("data: "):
                        body = json.loads(line[len("data: "):])
                        assert body["type"] == name, (name, body)
                        self.events.append((name, body))
                        self.opened = True
                    elif line == "":
                        name = None
        except Exception as error:  # noqa: BLE001 - closing the client ends the read
            if not self.closed:
                self.error = repr(error)

    def names(self, start: int = 0) -> list[str]:
        return [name for name, _ in self.events[start:]]

    def wait_for(self, name: str, start: int = 0, what: typing.Optional[str] = None) -> dict:
        """The first `name` event at or after index `start`, waiting for it."""
        def found() -> typing.Optional[dict]:
            assert self.error is None, self.error
            return next((body for event, body in self.events[start:] if event == name), None)
        return wire.wait_until(found, what=what or f"{name} on the channel (got {self.names(start)})")

    def wait_ordered(self, start: int, expected: list[str]) -> None:
        """Waits until `expected` has come in this order (other events between) from `start`."""
        wire.wait_until(lambda: ordered(self.names(start), expected), what=f"{expected} in order (got {self.names(start)})")

    def last_display(self) -> dict:
        return next(body["display"] for name, body in reversed(self.events) if name == "display_state_changed")

    def close(self) -> None:
        self.closed = True
        self.http.close()


def ordered(names: list[str], expected: list[str]) -> bool:
    """Whether `expected` appears in `names` in this order (other events between)."""
    position = 0
    for name in names:
        if position < len(expected) and name == expected[position]:
            position += 1
    return position == len(expected)


def spec() -> dict:
    return {"model": {"name": "fake/fake-model"}, "config": {"tasks": {"enabled": True}},
            "modes": [{"id": "ask", "default": True}, {"id": "code", "instructions": "Write code."}]}


def test_a_channel_shows_turns_and_changes_from_other_clients_in_order(server, api: wire.Api):
    session = api.create_session(spec=spec())
    sid = session["id"]
    live = LiveReader(server.url, sid)
    try:
        first_name, first = live.events[0]
        assert first_name == "display_state_changed"
        assert first["display"]["session_id"] == sid and first["display"]["running_turn_id"] is None

        # A text turn.
        start = len(live.events)
        run = api.run_turn(sid, "Hello there " + wire.unique("text"))
        assert run.done["state"]["status"] == "done"
        live.wait_ordered(start, ["agent_start", "message_start", "message_update", "message_end",
                                  "usage_update", "agent_end", "display_state_changed"])
        end = live.wait_for("agent_end", start)
        assert end == {"type": "agent_end", "turn_id": run.turn_id, "status": "done"}

        # A tool that changes the task list.
        start = len(live.events)
        api.run_turn(sid, call("task_write", {"tasks": [{"title": "Read"}, {"title": "Write"}]}))
        updated = live.wait_for("task_updated", start)
        assert [task["title"] for task in updated["tasks"]["tasks"]] == ["Read", "Write"]
        # The list shows as the tool ends, before the turn does.
        live.wait_ordered(start, ["agent_start", "tool_start", "tool_end", "task_updated", "agent_end"])

        # A sub-agent.
        start = len(live.events)
        api.run_turn(sid, call("run_sub_agent", {"name": "helper", "task": "say hi " + wire.unique("sub")}))
        ended = live.wait_for("subagent_end", start)
        assert ended["status"] == "done", ended
        live.wait_ordered(start, ["agent_start", "tool_start", "subagent_start", "subagent_end", "tool_end", "agent_end"])

        # Another client renames the session, switches its mode and its model.
        start = len(live.events)
        api.ok(api.patch(f"/api/v1/sessions/{sid}", json={"title": "Renamed elsewhere"}))
        assert live.wait_for("thread_changed", start) == {"type": "thread_changed", "session_id": sid, "title": "Renamed elsewhere"}
        api.ok(api.patch(f"/api/v1/sessions/{sid}", json={"mode": "code", "model": "fake/fake-model"}))
        assert live.wait_for("mode_changed", start)["mode"] == "code"
        assert live.wait_for("model_changed", start)["model"] == "fake/fake-model"

        # A question: the turn ends waiting, the call suspended with its input as the payload.
        start = len(live.events)
        question = {"question": "Which colour?", "options": [{"label": "Blue"}, {"label": "Red"}]}
        api.run_turn(sid, call("ask_user_question", question))
        suspended = live.wait_for("tool_suspended", start)
        assert suspended["tool_name"] == "ask_user_question" and suspended["suspend_payload"]["question"] == "Which colour?"
        assert live.wait_for("agent_end", start)["status"] == "waiting"

        # A follow-up queued while the turn waits, then cancelled.
        start = len(live.events)
        queued = api.ok(api.post(f"/api/v1/sessions/{sid}/follow-ups", json={"content": "later"}), 201)["data"]
        shown = live.wait_for("follow_up_queued", start)
        assert shown["follow_up"]["id"] == queued["id"] and [item["id"] for item in shown["follow_ups"]] == [queued["id"]]
        start = len(live.events)
        assert api.delete(f"/api/v1/sessions/{sid}/follow-ups/{queued['id']}").status_code == 204
        assert live.wait_for("follow_up_queued", start)["follow_ups"] == []

        # A turn that fails says why.
        start = len(live.events)
        api.run_turn(sid, "[error:400] " + wire.unique("fails"))
        error = live.wait_for("error", start)
        assert "400" in error["message"], error
        assert live.wait_for("agent_end", start)["status"] == "error"

        # Once quiet, the last snapshot is the display state as GET reads it.
        seen: list[dict] = []

        def settled() -> bool:
            current = api.ok(api.get(f"/api/v1/sessions/{sid}/display"))["data"]
            seen[:] = [current, live.last_display()]
            return live.events[-1][0] == "display_state_changed" and live.last_display() == current
        try:
            wire.wait_until(settled, timeout=5, what="the channel's last display state to equal GET /display")
        except AssertionError:
            differing = {key: (seen[0].get(key), seen[1].get(key)) for key in seen[0] if seen[0].get(key) != seen[1].get(key)}
            raise AssertionError(f"GET /display and the channel's last snapshot differ (GET, channel): {differing}")
        display = live.last_display()
        assert display["title"] == "Renamed elsewhere" and display["mode"] == "code"
        assert display["last_turn_status"] == "error" and display["usage"]["input_tokens"] > 0
        assert [task["title"] for task in display["tasks"]["tasks"]] == ["Read", "Write"]
    finally:
        live.close()


def test_a_channel_joins_a_running_turn_and_opens_again_from_a_fresh_snapshot(server, api: wire.Api):
    session = api.create_session("demo")
    sid = session["id"]
    turn = api.start_turn(sid, "[delay:30] [tokens:40] slow " + wire.unique("slow"))
    live = LiveReader(server.url, sid)
    try:
        # Joined mid-turn: the snapshot names the running turn and the turn's events follow.
        assert live.events[0][1]["display"]["running_turn_id"] == turn["id"]
        assert live.wait_for("agent_end")["turn_id"] == turn["id"]
        live.wait_ordered(0, ["display_state_changed", "agent_start", "message_update", "agent_end"])
    finally:
        live.close()
    again = LiveReader(server.url, sid)
    try:
        display = again.events[0][1]["display"]
        assert display["running_turn_id"] is None and display["last_turn_id"] == turn["id"]
        assert display["last_answer"], display
    finally:
        again.close()


def test_a_channel_shows_progress_approvals_state_sub_agent_tools_and_info(server, api: wire.Api, registered: str):
    """The rest of the vocabulary over HTTP: a tool's progress (`tool_update`), an approval, a
    state change from another client, a sub-agent's own tool calls and text, and `info`."""
    spec = {"model": {"name": "fake/fake-model"}, "config": {"sandbox": {"enabled": True}},
            "state_schema": {"type": "object", "properties": {"step": {"type": "integer", "default": 0}}},
            "mcp_servers": [registry(registered, preload=True, enable_tools=["phases", "write_note"])]}
    sid = api.create_session(spec=spec)["id"]
    live = LiveReader(server.url, sid)
    try:
        # Progress: one tool_update per notification, between the tool's start and end.
        start = len(live.events)
        api.run_turn(sid, call("phases", {"steps": 3}))
        live.wait_ordered(start, ["agent_start", "tool_input_start", "tool_input_end", "tool_start",
                                  "tool_update", "tool_update", "tool_update", "tool_end", "agent_end"])
        updates = [body for name, body in live.events[start:] if name == "tool_update"]
        assert [(update["progress"], update["total"]) for update in updates] == [(1, 3), (2, 3), (3, 3)], updates
        # `info`: the session's sandbox, made as its first turn started.
        info = live.wait_for("info", start)
        assert info["message"].startswith("sandbox sbx_") and info["message"].endswith("is ready"), info

        # An approval: the turn waits, then the call runs once allowed.
        start = len(live.events)
        api.run_turn(sid, call("write_note", {"text": "approved " + wire.unique("note")}))
        required = live.wait_for("tool_approval_required", start)
        assert required["tool_name"] == "write_note", required
        assert live.wait_for("agent_end", start)["status"] == "waiting"
        start = len(live.events)
        allowed = api.stream("POST", f"/api/v1/sessions/{sid}/turns",
                             json={"input": [{"type": "user.tool_approval", "approval": {"status": "allow"}}]})
        assert allowed.status == 200, allowed.body[:300]
        ended = live.wait_for("tool_end", start)
        assert ended["tool_call_id"] == required["tool_call_id"] and "noted" in json.dumps(ended["result"]), ended

        # The state, changed by another client.
        start = len(live.events)
        api.ok(api.patch(f"/api/v1/sessions/{sid}", json={"state": {"step": 2}}))
        assert live.wait_for("state_changed", start) == {"type": "state_changed", "state": {"step": 2}}

        # A sub-agent's own tool call and text.
        start = len(live.events)
        task = call("phases", {"steps": 1}) + " sub " + wire.unique("sub")
        api.run_turn(sid, call("run_sub_agent", {"name": "worker", "task": task}))
        live.wait_ordered(start, ["subagent_start", "subagent_tool_start", "subagent_tool_end", "subagent_text_delta", "subagent_end"])
        tool = live.wait_for("subagent_tool_start", start)
        assert tool["tool_name"] == "phases", tool
    finally:
        live.close()


def test_a_declared_sub_agents_model_is_chosen_per_session(server, api: wire.Api):
    """`subagent_models` on `PATCH /sessions/{id}` (the seed's per-sub-agent model): the channel
    says `subagent_model_changed`, and the sub-agents started from then on run on it."""
    declared = {**spec(), "sub_agents": [{"name": "researcher", "description": "Looks things up."}]}
    sid = api.create_session(spec=declared)["id"]
    live = LiveReader(server.url, sid)
    try:
        start = len(live.events)
        api.ok(api.patch(f"/api/v1/sessions/{sid}", json={"subagent_models": {"researcher": "offline/echo"}}))
        changed = live.wait_for("subagent_model_changed", start)
        assert changed == {"type": "subagent_model_changed", "agent_name": "researcher", "model": "offline/echo"}
        session = api.ok(api.get(f"/api/v1/sessions/{sid}"))["data"]
        assert session["subagent_models"] == {"researcher": "offline/echo"}, session

        start = len(live.events)
        api.run_turn(sid, call("run_sub_agent", {"name": "lookup", "agent": "researcher", "task": "find it " + wire.unique("sub")}))
        started = live.wait_for("subagent_start", start)
        assert (started["agent_name"], started["model"]) == ("lookup", "offline/echo"), started
        assert live.wait_for("subagent_end", start)["status"] == "done"

        # Given back to its declaration's (the parent's model here).
        start = len(live.events)
        api.ok(api.patch(f"/api/v1/sessions/{sid}", json={"subagent_models": {"researcher": ""}}))
        assert live.wait_for("subagent_model_changed", start) == {"type": "subagent_model_changed", "agent_name": "researcher", "model": None}
        wire.wait_until(lambda: live.last_display()["subagent_models"] == {}, what="the display to drop the choice")

        # Only declared sub-agents, only models this server has.
        refused = wire.assert_error(api.patch(f"/api/v1/sessions/{sid}", json={"subagent_models": {"nobody": "offline/echo"}}), 400)
        assert refused["param"] == "subagent_models" and "researcher" in refused["message"], refused
        refused = wire.assert_error(api.patch(f"/api/v1/sessions/{sid}", json={"subagent_models": {"researcher": "nope/model"}}), 400)
        assert refused["param"] == "subagent_models", refused
        assert "subagent_models" not in api.ok(api.get(f"/api/v1/sessions/{sid}"))["data"]
    finally:
        live.close()


def test_a_channel_joining_a_followed_session_continues_its_display_exactly(server, api: wire.Api):
    """The session's channels share one follower: one opened mid-turn starts from the display
    state as of the last event sent, and what it then receives continues it exactly."""
    session = api.create_session("demo")
    sid = session["id"]
    first = LiveReader(server.url, sid)
    second = None
    try:
        turn = api.start_turn(sid, "[delay:30] [tokens:40] slow " + wire.unique("joined"))
        first.wait_for("message_update", what="the turn to stream on the first channel")
        second = LiveReader(server.url, sid)
        name, opened = second.events[0]
        assert name == "display_state_changed"
        assert opened["display"]["running_turn_id"] == turn["id"]
        assert opened["display"]["streaming_text"], "the snapshot holds the text streamed so far"
        end = second.wait_for("message_end", what="the message to end on the joined channel")
        second.wait_for("agent_end")
        deltas = [body.get("text_delta", "") for name, body in second.events if name == "message_update"]
        assert opened["display"]["streaming_text"] + "".join(deltas) == end["text"], "the joined channel continues the text exactly"
        first_updates = [body for name, body in first.events if name == "message_update"]
        second_updates = [body for name, body in second.events if name == "message_update"]
        assert second_updates and first_updates[-len(second_updates):] == second_updates, "the same events, shared"
        # Quiet again, both hold the display state the API reads.
        wire.wait_until(lambda: second.last_display()["running_turn_id"] is None and first.last_display()["running_turn_id"] is None,
                        what="both channels to show the turn ended")
        display = api.get(f"/api/v1/sessions/{sid}/display").json()["data"]
        assert first.last_display() == display == second.last_display()
    finally:
        first.close()
        if second is not None:
            second.close()


def test_a_session_the_caller_may_not_read_is_404_and_unknown_parameters_400(server, api: wire.Api):
    assert api.get("/api/v1/sessions/ses_nope/live").status_code == 404
    wire.assert_error(api.get("/api/v1/sessions/ses_nope/display"), 404)
    session = api.create_session("demo")
    wire.assert_error(api.get(f"/api/v1/sessions/{session['id']}/live", params={"after": "1"}), 400)
    wire.assert_error(api.get(f"/api/v1/sessions/{session['id']}/display", params={"x": "1"}), 400)


def test_a_deleted_session_ends_its_channel(server, api: wire.Api):
    session = api.create_session("demo")
    live = LiveReader(server.url, session["id"])
    try:
        api.delete(f"/api/v1/sessions/{session['id']}")
        wire.wait_until(lambda: not live.thread.is_alive(), what="the channel to end with its session")
        assert live.error is None
    finally:
        live.close()


def test_the_callers_channel_shows_its_sessions_created_renamed_and_deleted_by_other_clients(server, api: wire.Api):
    live = LiveReader(server.url, None)
    try:
        # Another client (the same user) creates a session: it shows before any list call.
        made = api.create_session("demo")
        created = live.wait_for("thread_created")
        assert created["session"]["id"] == made["id"] and created["session"]["agent_name"] == "demo"
        start = len(live.events)
        api.ok(api.patch(f"/api/v1/sessions/{made['id']}", json={"title": "Quarterly numbers"}))
        assert live.wait_for("thread_changed", start) == {"type": "thread_changed", "session_id": made["id"], "title": "Quarterly numbers"}
        # A mode or turn change is not a list change: nothing is sent for it.
        api.run_turn(made["id"], "hello " + wire.unique("quiet"))
        start = len(live.events)
        assert api.delete(f"/api/v1/sessions/{made['id']}").status_code == 204
        assert live.wait_for("thread_deleted", start) == {"type": "thread_deleted", "session_id": made["id"]}
        assert [name for name, _ in live.events] == ["thread_created", "thread_changed", "thread_deleted"], live.names()
    finally:
        live.close()


def test_the_callers_channel_shows_no_one_elses_sessions(keyed: Keyed):
    admin = wire.Api(keyed.server.url, key=keyed.admin)
    alice = wire.Api(keyed.server.url, key=key_for(admin, "alice", "acme"))
    bob_key = key_for(admin, "bob", "acme")
    bob = wire.Api(keyed.server.url, key=bob_key)
    live = LiveReader(keyed.server.url, None, key=bob_key)
    try:
        draft = {"model": {"name": "fake/fake-model"}}
        hers = alice.create_session(spec=draft)
        alice.ok(alice.patch(f"/api/v1/sessions/{hers['id']}", json={"title": "secret plans"}))
        his = bob.create_session(spec=draft)
        bob.ok(bob.patch(f"/api/v1/sessions/{his['id']}", json={"title": "bob's"}))
        live.wait_for("thread_changed")
        assert [(name, body.get("session", {}).get("id", body.get("session_id"))) for name, body in live.events] == \
            [("thread_created", his["id"]), ("thread_changed", his["id"])]
        assert hers["id"] not in json.dumps(live.events) and "secret plans" not in json.dumps(live.events)
    finally:
        live.close()
        for api in (admin, alice, bob):
            api.close()
