"""The control layer: the task list an agent keeps with its task tools, read by clients at
`GET /api/v1/sessions/{id}/tasks` and durable across restarts; an agent's modes, switched by
clients and by approved plans, and its plans answered through the real gateway client."""

from __future__ import annotations

import concurrent.futures
import json
import typing

import pytest
from truefoundry_gateway_sdk import ApprovalAllow, ApprovalDeny, ToolApprovalRequiredEvent, UserMessage
from truefoundry_gateway_sdk import UserToolApprovalEvent

import wire


def call(name: str, arguments: dict) -> str:
    return f"[tool:{name} {json.dumps(arguments)}]"


def tasks_spec() -> dict:
    return {"model": {"name": "fake/fake-model"}, "config": {"tasks": {"enabled": True}}}


def tool_contents(run: wire.TurnRun) -> list[str]:
    return [event["content"] for event in run.stream.payloads if event["type"] == "tool.response"]


def test_tasks_are_kept_across_turns_read_over_http_and_survive_a_restart(server_factory, fake):
    own = server_factory()
    api = own.require_api()
    session = api.create_session(spec=tasks_spec())
    tasks_url = f"/api/v1/sessions/{session['id']}/tasks"
    assert api.ok(api.get(tasks_url))["data"] == \
        {"version": 0, "tasks": [], "summary": {"total": 0, "pending": 0, "in_progress": 0, "completed": 0}}

    marker = wire.unique("tasks")
    first = api.run_turn(session["id"], call("task_write", {"tasks": [
        {"title": "Read the invoices"}, {"id": "sum", "title": "Sum the totals", "status": "in_progress"},
        {"title": "Write the report"}]}) + f" {marker}")
    assert first.done["state"]["status"] == "done", first.done
    (request,) = fake.requests_for(marker)[:1]
    offered = {tool["function"]["name"] for tool in request["tools"]}
    assert {"task_write", "task_update", "task_complete", "task_check"} <= offered, offered

    # Two changes in one message (run in parallel), then a check, in a second turn.
    second = api.run_turn(session["id"], call("task_complete", {"id": "task-1"})
                          + call("task_update", {"id": "task-2", "notes": "one page"}))
    assert all(not content.startswith("Error") for content in tool_contents(second)), tool_contents(second)
    third = api.run_turn(session["id"], call("task_check", {}) + call("task_update", {"id": "nope", "title": "x"}))
    checked, failed = tool_contents(third)
    assert [task["id"] for task in json.loads(checked)["incomplete"]] == ["sum", "task-2"], checked
    assert "there is no task" in failed

    tasks = api.ok(api.get(tasks_url))["data"]
    assert tasks["version"] == 3 and tasks["summary"] == {"total": 3, "pending": 1, "in_progress": 1, "completed": 1}
    assert [(task["id"], task["status"], task.get("notes")) for task in tasks["tasks"]] == [
        ("task-1", "completed", None), ("sum", "in_progress", None), ("task-2", "pending", "one page")]

    own.restart()
    api = own.require_api()
    assert api.ok(api.get(tasks_url))["data"] == tasks
    # The agent's tools see the same list after the restart.
    again = api.run_turn(session["id"], call("task_check", {}))
    (content,) = tool_contents(again)
    assert json.loads(content)["tasks"] == tasks["tasks"]


def test_agents_without_tasks_have_no_task_tools_and_unknown_sessions_are_404(api, fake):
    marker = wire.unique("notasks")
    session = api.create_session(spec={"model": {"name": "fake/fake-model"}})
    api.run_turn(session["id"], f"hello {marker}")
    (request,) = fake.requests_for(marker)
    assert not {tool["function"]["name"] for tool in request.get("tools", [])} & {"task_write", "task_check"}
    wire.assert_error(api.get("/api/v1/sessions/ses_nope/tasks"), 404)


# --------------------------------------------------------------------------------------------
# Modes and plans
# --------------------------------------------------------------------------------------------


def modes_spec() -> dict:
    return {
        "model": {"name": "fake/fake-model"},
        "instructions": "You are a coding agent.",
        "config": {"tasks": {"enabled": True}},
        "modes": [
            {"id": "plan", "name": "Plan", "instructions": "PLAN-MODE: investigate, then submit a plan.",
             "tools": ["task_check"], "transitions_to": "build", "default": True},
            {"id": "build", "name": "Build", "instructions": "BUILD-MODE: carry the plan out."},
        ],
    }


def offered(request: dict) -> set[str]:
    return {tool["function"]["name"] for tool in request.get("tools") or []}


def system(request: dict) -> str:
    return "\n".join(str(m.get("content")) for m in request.get("messages", []) if m.get("role") == "system")


def pause(session, text: str):
    """Runs a turn through the SDK that must end waiting for one approval."""
    prepared = session.prepare_turn(input=[UserMessage(content=text)])
    items = list(prepared.execute())
    pending = [item.event for item in items if isinstance(item.event, ToolApprovalRequiredEvent)]
    assert len(pending) == 1 and prepared.state.status == "done", [item.event.type for item in items]
    return prepared, pending[0]


def decide(session, pending, approval):
    prepared = session.prepare_turn(input=[UserToolApprovalEvent(
        thread_id=pending.thread_id, tool_call_id=pending.tool_calls[0].id, approval=approval)])
    items = list(prepared.execute())
    assert prepared.state.status == "done", prepared.state
    told = {item.event.tool_call_id: item.event.content for item in items if item.event.type == "tool.response"}
    return prepared, told[pending.tool_calls[0].id]


def test_a_plan_rejected_revised_and_approved_switches_the_session_to_build_mode(api, client, fake):
    name = wire.unique("planner")
    api.ok(api.post("/api/v1/agents", json={"name": name, "manifest": modes_spec()}), 201)
    session = client.create_session(agent_name=name)
    plans_url = f"/api/v1/sessions/{session.id}/plans"

    first_marker = wire.unique("plan")
    first, pending = pause(session, call("submit_plan", {"title": "Fix the bug", "plan": "1. read\n2. fix"})
                           + f" {first_marker}")
    assert pending.tool_calls[0].id
    (request,) = fake.requests_for(first_marker)
    # `tools` limits the agent's tools; the harness's own (questions, sub-agents) stay.
    assert {"submit_plan", "task_check"} <= offered(request), offered(request)
    assert not offered(request) & {"task_write", "task_update", "task_complete"}, offered(request)
    assert "PLAN-MODE" in system(request) and "BUILD-MODE" not in system(request)
    assert api.get_turn(session.id, first.id)["mode"] == "plan"
    (plan,) = api.ok(api.get(plans_url))["data"]
    assert (plan["title"], plan["plan"], plan["status"], plan["mode"], plan["transitions_to"]) == \
        ("Fix the bug", "1. read\n2. fix", "pending_approval", "plan", "build")

    # Rejected: the feedback reaches the model, the session stays in plan mode.
    rejected, told = decide(session, pending, ApprovalDeny(reason="add a regression test"))
    assert "rejected" in told and "add a regression test" in told, told
    assert api.get_turn(session.id, rejected.id)["mode"] == "plan"
    (plan,) = api.ok(api.get(plans_url))["data"]
    assert (plan["status"], plan.get("feedback")) == ("draft", "add a regression test"), plan

    # The revised plan is approved: the resumed turn runs in build mode.
    second_marker = wire.unique("plan")
    _, pending = pause(session, call("submit_plan", {"title": "Fix the bug, tested", "plan": "1. test\n2. fix"})
                       + f" {second_marker}")
    approved, told = decide(session, pending, ApprovalAllow())
    assert "approved" in told and "build" in told, told
    planning, building = fake.requests_for(second_marker)
    assert "PLAN-MODE" in system(planning) and "submit_plan" in offered(planning)
    assert "BUILD-MODE" in system(building) and "PLAN-MODE" not in system(building), system(building)
    assert "submit_plan" not in offered(building)
    assert {"task_write", "task_update", "task_complete", "task_check"} <= offered(building), offered(building)
    assert approved.state.output.content.startswith("Tool result: The user approved the plan")
    assert api.get_turn(session.id, approved.id)["mode"] == "build"
    assert api.ok(api.get(f"/api/v1/sessions/{session.id}"))["data"]["mode"] == "build"
    assert [(plan["title"], plan["status"]) for plan in api.ok(api.get(plans_url))["data"]] == \
        [("Fix the bug", "draft"), ("Fix the bug, tested", "executed")]

    # The next turn stays in build mode.
    third_marker = wire.unique("build")
    after = api.run_turn(session.id, f"go on {third_marker}")
    assert after.done["state"]["status"] == "done"
    (request,) = fake.requests_for(third_marker)
    assert "BUILD-MODE" in system(request) and "submit_plan" not in offered(request)


def test_clients_switch_modes_and_models_and_bad_values_change_nothing(api, fake):
    session = api.create_session(spec=modes_spec())
    url = f"/api/v1/sessions/{session['id']}"
    switched = api.ok(api.patch(url, json={"mode": "build", "title": "Build it"}))["data"]
    assert (switched["mode"], switched["title"]) == ("build", "Build it")
    marker = wire.unique("switched")
    run = api.run_turn(session["id"], f"hello {marker}")
    assert run.done["state"]["status"] == "done"
    (request,) = fake.requests_for(marker)
    assert "BUILD-MODE" in system(request) and "submit_plan" not in offered(request)
    assert api.get_turn(session["id"], run.turn_id)["mode"] == "build"

    # A model of another provider replaces the agent's for the next turns; "" goes back.
    other = {"type": "custom", "name": "fake-alt", "base_url": f"{fake.url}/v1", "auth": {"api_key": "sk-alt"},
             "models": [{"name": "big", "model_id": "big-model", "properties": {}}]}
    api.ok(api.put("/api/v1/settings/model-providers", json={"manifest": other}))
    with_model = api.ok(api.patch(url, json={"model": "fake-alt/big"}))["data"]
    assert with_model["model"] == "fake-alt/big"
    marker = wire.unique("model")
    api.run_turn(session["id"], f"hello {marker}")
    (request,) = fake.requests_for(marker)
    assert request["model"] == "big-model", request["model"]
    assert "model" not in api.ok(api.patch(url, json={"model": ""}))["data"]

    before = api.ok(api.get(url))["data"]
    for body, param, needle in [
        ({"mode": "nope"}, "mode", "plan, build"),
        ({"mode": "plan", "model": "nowhere/x"}, "model", "no model provider"),
        ({"model": "no-slash"}, "model", "provider/model"),
        ({"model": "fake/other-model"}, "model", "its models: fake-model"),
    ]:
        response = api.patch(url, json=body)
        wire.assert_error(response, 400)
        error = response.json()["error"]
        assert error.get("param") == param and needle in error["message"], error
        assert api.ok(api.get(url))["data"] == before, "a refused update changes nothing"

    plain = api.create_session(spec={"model": {"name": "fake/fake-model"}})
    response = api.patch(f"/api/v1/sessions/{plain['id']}", json={"mode": "plan"})
    wire.assert_error(response, 400)
    assert "no modes" in response.json()["error"]["message"]


@pytest.mark.parametrize("modes, needle", [
    ([], "at least one mode"),
    ([{"id": "plan", "transitions_to": "ship"}], "transitions_to"),
    ([{"id": "a"}, {"id": "a"}], "two modes"),
    ([{"id": "a", "tools": ["x"], "additional_tools": []}], "give one"),
    ([{"id": "a", "model": "nowhere/x"}], "no model provider"),
])
def test_bad_modes_are_refused_naming_the_mode(api, modes, needle):
    body = {"name": wire.unique("modes"), "manifest": {"model": {"name": "fake/fake-model"}, "modes": modes}}
    response = api.post("/api/v1/agents", json=body)
    wire.assert_error(response, 400)
    assert needle in response.json()["error"]["message"], response.json()


# --------------------------------------------------------------------------------------------
# Follow-ups
# --------------------------------------------------------------------------------------------


def session_turns(api: wire.Api, session_id: str) -> list[dict]:
    """The session's turns, oldest first."""
    return list(reversed(api.ok(api.get(f"/api/v1/sessions/{session_id}/turns", params={"limit": 50}))["data"]))


def follow_ups_run_in_order_after_the_running_turn(running_on: wire.Api, queued_on: wire.Api, fake) -> None:
    """Follow-ups queued through `queued_on` while a turn runs on `running_on` start one
    after another once it ends, in order, chained; a cancelled one never runs; with no turn
    running a follow-up starts at once."""
    session = running_on.create_session(spec={"model": {"name": "fake/fake-model"}})
    sid, url = session["id"], f"/api/v1/sessions/{session['id']}/follow-ups"
    running_on.start_turn(sid, "[tokens:5][delay:300] slow")
    first, second, dropped = wire.unique("first"), wire.unique("second"), wire.unique("dropped")
    queued = [queued_on.ok(queued_on.post(url, json={"content": text}), 201)["data"] for text in (first, second, dropped)]
    assert not any("turn_id" in item for item in queued), queued
    assert [item["id"] for item in queued_on.ok(queued_on.get(url))["data"]] == [item["id"] for item in queued]
    assert queued_on.delete(f"{url}/{queued[2]['id']}").status_code == 204
    wire.assert_error(queued_on.delete(f"{url}/{queued[2]['id']}"), 404)

    def settled() -> typing.Optional[list[dict]]:
        turns = session_turns(running_on, sid)
        return turns if len(turns) == 3 and all(t["state"]["status"] in wire.TERMINAL for t in turns) else None
    turns = wire.wait_until(settled, timeout=30, what="the follow-ups to run")
    assert [turn["input"][0]["content"] for turn in turns] == ["[tokens:5][delay:300] slow", first, second]
    assert [turn["previous_turn_id"] for turn in turns[1:]] == [turns[0]["id"], turns[1]["id"]]
    assert [turn["state"]["status"] for turn in turns] == ["done"] * 3
    assert turns[2]["state"]["output"]["content"] == f"You said: {second}"
    assert running_on.ok(running_on.get(url))["data"] == []
    assert not fake.requests_mentioning(dropped)

    # With no turn running, a follow-up starts one at once.
    now = wire.unique("now")
    started = queued_on.ok(queued_on.post(url, json={"content": now}), 201)["data"]
    assert started["turn_id"], started
    done = running_on.wait_terminal(sid, started["turn_id"])
    assert done["previous_turn_id"] == turns[2]["id"] and done["state"]["output"]["content"] == f"You said: {now}"


def test_follow_ups_run_in_order_after_the_running_turn(api, fake):
    follow_ups_run_in_order_after_the_running_turn(api, api, fake)


def test_follow_up_queue_is_bounded_and_checked(api):
    session = api.create_session(spec={"model": {"name": "fake/fake-model"}})
    sid, url = session["id"], f"/api/v1/sessions/{session['id']}/follow-ups"
    running = api.start_turn(sid, "[tokens:3][delay:3000] long")
    ids = [api.ok(api.post(url, json={"content": f"queued {n}"}), 201)["data"]["id"] for n in range(16)]
    wire.assert_error(api.post(url, json={"content": "one too many"}), 429)
    wire.assert_error(api.post(url, json={"content": ""}), 400)
    wire.assert_error(api.post(url, json={"text": "wrong field"}), 400)
    wire.assert_error(api.post("/api/v1/sessions/ses_nope/follow-ups", json={"content": "x"}), 404)
    for follow_up in ids:
        assert api.delete(f"{url}/{follow_up}").status_code == 204
    api.ok(api.post(f"/api/v1/sessions/{sid}/cancel", json={}))
    api.wait_terminal(sid, running["id"])
    assert len(session_turns(api, sid)) == 1, "nothing was left to start"


# --------------------------------------------------------------------------------------------
# Session state
# --------------------------------------------------------------------------------------------


def state_spec() -> dict:
    return {
        "model": {"name": "fake/fake-model"},
        "state_schema": {
            "type": "object",
            "properties": {"count": {"type": "integer", "minimum": 0, "default": 0},
                           "items": {"type": "array", "items": {"type": "string"}}},
            "required": ["count"],
        },
        "config": {"state_tool": {"enabled": True}},
    }


def test_session_state_is_patched_by_clients_and_the_agent_within_its_schema(api):
    session = api.create_session(spec=state_spec())
    url, state_url = f"/api/v1/sessions/{session['id']}", f"/api/v1/sessions/{session['id']}/state"
    assert api.ok(api.get(state_url))["data"] == {"count": 0}, "the schema's defaults"
    assert api.ok(api.patch(url, json={"state": {"count": 2}}))["data"]["state"] == {"count": 2}

    refused = api.patch(url, json={"state": {"count": -1, "items": ["x"]}})
    error = wire.assert_error(refused, 422)
    assert "schema" in error["message"] and "/count" in error["message"], error
    assert api.ok(api.get(state_url))["data"] == {"count": 2}, "a refused patch changes nothing"

    # The agent changes it with state_update; a change that breaks the schema is an error result.
    run = api.run_turn(session["id"], call("state_update", {"patch": {"count": 5, "items": ["a", "b"]}}))
    (updated,) = tool_contents(run)
    assert json.loads(updated) == {"count": 5, "items": ["a", "b"]}
    assert api.ok(api.get(state_url))["data"] == {"count": 5, "items": ["a", "b"]}
    (read,) = tool_contents(api.run_turn(session["id"], call("state_get", {})))
    assert json.loads(read) == {"count": 5, "items": ["a", "b"]}
    run = api.run_turn(session["id"], call("state_update", {"patch": {"items": [1]}}))
    (refused_content,) = tool_contents(run)
    assert "breaks the schema" in refused_content, refused_content
    assert api.ok(api.get(state_url))["data"] == {"count": 5, "items": ["a", "b"]}
    # A merge patch removes a key with null.
    assert api.ok(api.patch(url, json={"state": {"items": None}}))["data"]["state"] == {"count": 5}


def test_sessions_without_a_state_schema_have_no_state_and_bad_schemas_are_refused(api):
    plain = api.create_session(spec={"model": {"name": "fake/fake-model"}})
    wire.assert_error(api.get(f"/api/v1/sessions/{plain['id']}/state"), 400)
    wire.assert_error(api.patch(f"/api/v1/sessions/{plain['id']}", json={"state": {"a": 1}}), 400)
    for spec, param in [
        ({**state_spec(), "state_schema": {"type": "array"}}, "state_schema"),
        ({**state_spec(), "state_schema": {"type": "object", "properties": {"n": {"type": "integer", "default": "x"}}}},
         "state_schema"),
        ({"model": {"name": "fake/fake-model"}, "config": {"state_tool": {"enabled": True}}}, "config.state_tool"),
    ]:
        response = api.post("/api/v1/sessions", json={"agent": {"spec": spec}})
        assert wire.assert_error(response, 400)["param"] == param


def test_an_agent_sets_the_initial_state_the_default_mode_and_mode_metadata(api):
    spec = {**state_spec(), "initial_state": {"count": 3}, "config": {"tasks": {"enabled": True}},
            "modes": [{"id": "open"}, {"id": "locked", "tools": ["task_check"], "metadata": {"icon": "lock", "order": [2, 1]}}],
            "default_mode": "locked"}
    session = api.create_session(spec=spec)
    sid = session["id"]
    assert api.ok(api.get(f"/api/v1/sessions/{sid}/state"))["data"] == {"count": 3}, "the initial state over the defaults"
    # The session starts in the default mode, whatever the order of the modes.
    offered = {tool["name"] for tool in api.ok(api.get(f"/api/v1/sessions/{sid}/tools"))["data"]}
    assert "task_check" in offered and "task_write" not in offered, offered
    api.ok(api.patch(f"/api/v1/sessions/{sid}", json={"mode": "open"}))
    offered = {tool["name"] for tool in api.ok(api.get(f"/api/v1/sessions/{sid}/tools"))["data"]}
    assert "task_write" in offered, offered
    # A mode's metadata comes back with it.
    modes = api.ok(api.get(f"/api/v1/sessions/{sid}"))["data"]["agent_spec"]["modes"]
    assert modes[1]["metadata"] == {"icon": "lock", "order": [2, 1]}

    for bad, param, words in [
        ({**state_spec(), "initial_state": {"count": -1}}, "initial_state", "/count"),
        ({"model": {"name": "fake/fake-model"}, "initial_state": {"count": 1}}, "initial_state", "needs a state_schema"),
        ({**spec, "default_mode": "nowhere"}, "default_mode", "nowhere"),
        ({"model": {"name": "fake/fake-model"}, "default_mode": "open"}, "default_mode", "has none"),
        ({**spec, "modes": [{"id": "open", "metadata": {"blob": "x" * 20000}}], "default_mode": "open"}, "modes", "metadata"),
    ]:
        error = wire.assert_error(api.post("/api/v1/sessions", json={"agent": {"spec": bad}}), 400)
        assert error["param"] == param and words in error["message"], (param, error)


# --------------------------------------------------------------------------------------------
# Clones
# --------------------------------------------------------------------------------------------


def test_a_clone_from_a_middle_turn_replays_up_to_it_then_diverges(api):
    session = api.create_session(spec={"model": {"name": "fake/fake-model"}})
    sid = session["id"]
    first, second, third = wire.unique("one"), wire.unique("two"), wire.unique("three")
    runs = [api.run_turn(sid, f"[reasoning][tokens:3] {first}"), api.run_turn(sid, second), api.run_turn(sid, third)]
    url = f"/api/v1/sessions/{sid}/clone"
    clone = api.ok(api.post(url, json={"turn_id": runs[1].turn_id, "title": "Fork"}), 201)["data"]
    assert clone["id"] != sid and clone["title"] == "Fork"
    copied = session_turns(api, clone["id"])
    assert [turn["input"] for turn in copied] == [api.get_turn(sid, run.turn_id)["input"] for run in runs[:2]]
    assert copied[0]["previous_turn_id"] is None and copied[1]["previous_turn_id"] == copied[0]["id"]
    assert not {turn["id"] for turn in copied} & {run.turn_id for run in runs}

    # Each copied turn replays the source's events, byte for byte but for the turn ids.
    new_ids = {run.turn_id: copy["id"] for run, copy in zip(runs, copied)}
    for run, copy in zip(runs, copied):
        expected = api.subscribe(sid, run.turn_id).body
        for old, new in new_ids.items():
            expected = expected.replace(old.encode(), new.encode())
        assert api.subscribe(clone["id"], copy["id"]).body == expected

    # Then the two diverge: each continues its own history.
    fork = api.run_turn(clone["id"], "[history] fork")
    assert first in fork.output_text and second in fork.output_text and third not in fork.output_text
    source = api.run_turn(sid, "[history] source")
    assert third in source.output_text and "fork" not in source.output_text
    assert len(session_turns(api, sid)) == 4 and len(session_turns(api, clone["id"])) == 3

    # A whole clone (no turn_id) copies every turn; running turns and unknown ones are refused.
    whole = api.ok(api.post(url, json={}), 201)["data"]
    assert len(session_turns(api, whole["id"])) == 4 and whole["title"] is None
    running = api.start_turn(sid, "[tokens:3][delay:800] slow")
    wire.assert_error(api.post(url, json={}), 409)
    api.wait_terminal(sid, running["id"])
    wire.assert_error(api.post(url, json={"turn_id": "turn_nope"}), 404)
    wire.assert_error(api.post(url, json={"turn": "x"}), 400)
    wire.assert_error(api.post("/api/v1/sessions/ses_nope/clone", json={}), 404)


# --------------------------------------------------------------------------------------------
# Steering
# --------------------------------------------------------------------------------------------


def steer_joins_the_running_turn(running_on: wire.Api, steered_on: wire.Api, fake) -> None:
    """An instruction sent through `steered_on` while a turn runs on `running_on` (its first
    model step streams slowly, then calls a tool) reaches the turn's next model call, is recorded
    on the message it steered, and stays in the history of later turns."""
    session = running_on.create_session(spec={"model": {"name": "fake/fake-model"}})
    sid = session["id"]
    steer_url = f"/api/v1/sessions/{sid}/steer"
    wire.assert_error(steered_on.post(steer_url, json={"content": "too early"}), 409)
    marker, instruction = wire.unique("steered"), wire.unique("instruction")
    turn = running_on.start_turn(sid, f"[tool:get_current_datetime {{}}][delay:400] {marker}")
    wire.wait_until(lambda: fake.requests_for(marker), timeout=20, what="the first model call")
    queued = steered_on.ok(steered_on.post(steer_url, json={"content": f"Use UTC. {instruction}"}), 202)["data"]
    done = running_on.wait_terminal(sid, turn["id"], timeout=60)
    assert done["state"]["status"] == "done", done

    (request,) = fake.requests_mentioning(instruction)
    *_, tool_result, steer = request["messages"]
    assert tool_result["role"] == "tool" and steer == {"role": "user", "content": f"Use UTC. {instruction}"}, request["messages"][-2:]
    events = running_on.ok(running_on.get(f"/api/v1/sessions/{sid}/turns/{turn['id']}/events"))["data"]
    messages = [event for event in events if event["type"] == "model.message"]
    assert "steering" not in messages[0]
    assert [(s["id"], s["content"]) for s in messages[1]["steering"]] == [(queued["id"], f"Use UTC. {instruction}")]

    later = running_on.run_turn(sid, "[history] later")
    assert instruction in later.output_text, "the instruction stays in the session's history"


def test_steering_joins_the_running_turn_at_its_next_model_call(api, fake):
    steer_joins_the_running_turn(api, api, fake)


def test_an_instruction_the_turn_ended_before_taking_starts_the_next_turn(api, fake):
    session = api.create_session(spec={"model": {"name": "fake/fake-model"}})
    sid = session["id"]
    marker, instruction = wire.unique("short"), wire.unique("late")
    turn = api.start_turn(sid, f"[tokens:3][delay:300] {marker}")
    wire.wait_until(lambda: fake.requests_for(marker), timeout=20, what="the model call")
    api.ok(api.post(f"/api/v1/sessions/{sid}/steer", json={"content": instruction}), 202)
    api.wait_terminal(sid, turn["id"])

    def two_turns() -> typing.Optional[list[dict]]:
        turns = session_turns(api, sid)
        return turns if len(turns) == 2 and turns[1]["state"]["status"] in wire.TERMINAL else None
    first, second = wire.wait_until(two_turns, timeout=30, what="the instruction's turn")
    assert second["input"] == [{"type": "user.message", "content": instruction}]
    assert second["previous_turn_id"] == first["id"]
    wire.assert_error(api.post("/api/v1/sessions/ses_nope/steer", json={"content": "x"}), 404)
    wire.assert_error(api.post(f"/api/v1/sessions/{sid}/steer", json={"content": ""}), 400)


def test_a_cancel_drops_the_steering_and_follow_ups_queued_for_the_turn(api, fake):
    """Stop means stop: an instruction and a follow-up queued while a turn runs are dropped
    when the client cancels it, so no turn starts behind the user's back; a follow-up posted
    after the cancel starts at once, right after the cancelled turn."""
    session = api.create_session(spec={"model": {"name": "fake/fake-model"}})
    sid, url = session["id"], f"/api/v1/sessions/{session['id']}/follow-ups"
    marker, instruction, queued = wire.unique("stopped"), wire.unique("steer"), wire.unique("queued")
    turn = api.start_turn(sid, f"[tokens:50][delay:200] {marker}")
    wire.wait_until(lambda: fake.requests_for(marker), timeout=20, what="the model call")
    api.ok(api.post(f"/api/v1/sessions/{sid}/steer", json={"content": instruction}), 202)
    api.ok(api.post(url, json={"content": queued}), 201)
    api.ok(api.post(f"/api/v1/sessions/{sid}/cancel", json={}))
    assert api.get_turn(sid, turn["id"])["state"]["status"] == "cancelled"
    assert api.ok(api.get(url))["data"] == [], "the cancel dropped the queued follow-up"

    # Nothing runs now: a new follow-up starts its turn at once, chained to the cancelled one.
    after = wire.unique("after")
    started = api.ok(api.post(url, json={"content": after}), 201)["data"]
    assert started.get("turn_id"), f"a turn was running after the cancel: {started}"
    done = api.wait_terminal(sid, started["turn_id"])
    assert done["previous_turn_id"] == turn["id"] and done["state"]["status"] == "done", done
    turns = session_turns(api, sid)
    assert [t["id"] for t in turns] == [turn["id"], started["turn_id"]], turns
    assert not fake.requests_mentioning(instruction) and not fake.requests_mentioning(queued)


def test_follow_ups_queued_before_a_crash_run_after_the_restart(server_factory, fake):
    own = server_factory(extra_args=("--lease-ttl-ms", "1000", "--lease-renew-ms", "200", "--takeover-interval-ms", "200"))
    api = own.require_api()
    session = api.create_session(spec={"model": {"name": "fake/fake-model"}})
    sid = session["id"]
    marker, after = wire.unique("crash"), wire.unique("after")
    api.start_turn(sid, f"[tokens:3][delay:1000] {marker}")
    wire.wait_until(lambda: fake.requests_for(marker), timeout=20, what="the model call")
    api.ok(api.post(f"/api/v1/sessions/{sid}/follow-ups", json={"content": after}), 201)
    own.kill()
    own.start()
    api = own.require_api()

    def followed() -> typing.Optional[list[dict]]:
        turns = session_turns(api, sid)
        return turns if len(turns) == 2 and turns[1]["state"]["status"] in wire.TERMINAL else None
    first, second = wire.wait_until(followed, timeout=60, what="the follow-up after the restart")
    assert first["state"]["status"] in wire.TERMINAL
    assert second["input"] == [{"type": "user.message", "content": after}] and second["previous_turn_id"] == first["id"]
    assert second["state"]["output"]["content"] == f"You said: {after}"


def test_a_title_and_the_permissions_patched_at_once_are_both_kept(api):
    """A title change and a control change racing each other: neither reverts the other (the
    store writes a session's fields and its control apart)."""
    session = api.create_session("demo")["id"]
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for round_ in range(15):
            title = pool.submit(api.patch, f"/api/v1/sessions/{session}", json={"title": f"title {round_}"})
            permissions = {"tools": {f"tool_{round_}": "ask"}}
            control = pool.submit(api.patch, f"/api/v1/sessions/{session}", json={"permissions": permissions})
            assert title.result().status_code == 200 and control.result().status_code == 200
            stored = api.ok(api.get(f"/api/v1/sessions/{session}"))["data"]
            assert stored["title"] == f"title {round_}", stored
            assert stored["permissions"] == permissions, stored
