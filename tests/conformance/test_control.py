"""The control layer through the native API: the task list an agent keeps with its task tools,
read by clients at `GET /api/v1/sessions/{id}/tasks`, durable across restarts."""

from __future__ import annotations

import json

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
