"""The control layer: the task list an agent keeps with its task tools, read by clients at
`GET /api/v1/sessions/{id}/tasks` and durable across restarts; an agent's modes, switched by
clients and by approved plans, and its plans answered through the real gateway client."""

from __future__ import annotations

import json

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
