"""The workspace's file tools beside `exec` (`teamster-workspace`): `read_file`, `write_file`,
`edit_file`, `list_files`, `glob` and `grep`, driven through the fake model on a real
bubblewrap sandbox, their files checked through downloads and `exec`, and every way out of the
workspace refused."""

from __future__ import annotations

import json
import typing

import wire


def sandbox_spec() -> dict:
    return {"model": {"name": "fake/fake-model"}, "config": {"sandbox": {"enabled": True}}}


def call(api: wire.Api, session_id: str, name: str, arguments: dict) -> tuple[bool, typing.Any]:
    """Runs one turn calling tool `name`; answers whether the call failed, and its result (the
    parsed JSON of a success, the message of a failure)."""
    run = api.run_turn(session_id, f"[tool:{name} {json.dumps(arguments)}] " + wire.unique("files"))
    (content,) = [event["content"] for event in run.stream.payloads if event["type"] == "tool.response"]
    if content.startswith("Error: "):
        return True, content.removeprefix("Error: ")
    return False, json.loads(content)


def ok(api: wire.Api, session_id: str, name: str, arguments: dict) -> typing.Any:
    failed, result = call(api, session_id, name, arguments)
    assert not failed, f"{name} failed: {result}"
    return result


def refused(api: wire.Api, session_id: str, name: str, arguments: dict) -> str:
    failed, result = call(api, session_id, name, arguments)
    assert failed, f"{name} {arguments} was not refused: {result}"
    return result


def test_the_file_tools_read_write_edit_list_and_search_the_workspace(api: wire.Api):
    sid = api.create_session(spec=sandbox_spec())["id"]
    written = ok(api, sid, "write_file", {"path": "src/app/main.py", "content": "def main():\n    print('hi')\n\nmain()\n"})
    assert written == {"path": "src/app/main.py", "bytes": 36}
    ok(api, sid, "write_file", {"path": "/workspace/README.md", "content": "# Demo\nprint me\n"})

    read = ok(api, sid, "read_file", {"path": "src/app/main.py"})
    assert read["content"] == "     1\tdef main():\n     2\t    print('hi')\n     3\t\n     4\tmain()"
    assert (read["lines"], read["total_lines"], read["truncated"]) == ([1, 4], 4, False)
    part = ok(api, sid, "read_file", {"path": "src/app/main.py", "offset": 2, "limit": 1})
    assert (part["content"], part["lines"], part["truncated"]) == ("     2\t    print('hi')", [2, 2], True)

    edited = ok(api, sid, "edit_file", {"path": "src/app/main.py", "old_string": "print('hi')", "new_string": "print('hello')"})
    assert edited["line"] == 2
    # A match at the start of a line is on that line.
    assert ok(api, sid, "edit_file", {"path": "src/app/main.py", "old_string": "main()\n", "new_string": "main()  # run\n"})["line"] == 4
    # The file as a command in the sandbox sees it.
    run = api.run_turn(sid, "[tool:exec {\"command\": \"cat src/app/main.py\"}] " + wire.unique("files"))
    (shown,) = [json.loads(event["content"]) for event in run.stream.payloads if event["type"] == "tool.response"]
    assert shown["stdout"] == "def main():\n    print('hello')\n\nmain()  # run\n"
    # And as the user downloads it.
    downloaded = api.get(f"/api/v1/sessions/{sid}/turns/{run.turn_id}/download-sandbox-file", params={"path": "/workspace/src/app/main.py"})
    assert downloaded.status_code == 200 and b"print('hello')" in downloaded.content

    listed = ok(api, sid, "list_files", {})
    assert {"path": "/workspace/README.md", "type": "file", "bytes": 16} in listed["entries"]
    assert {"path": "/workspace/src", "type": "directory"} in listed["entries"]
    assert {"path": "/workspace/src/app", "type": "directory"} in listed["entries"]
    assert not any(entry["path"] == "/workspace/src/app/main.py" for entry in listed["entries"]), "depth 2 by default"
    deep = ok(api, sid, "list_files", {"path": "src", "depth": 5})
    assert [entry["path"] for entry in deep["entries"]] == ["/workspace/src/app", "/workspace/src/app/main.py"]

    globbed = ok(api, sid, "glob", {"pattern": "**/*.py"})
    assert [entry["path"] for entry in globbed["files"]] == ["/workspace/src/app/main.py"]
    assert ok(api, sid, "glob", {"pattern": "*.md"})["files"] == [{"path": "/workspace/README.md", "bytes": 16}]

    grepped = ok(api, sid, "grep", {"pattern": r"print\(", "include": "**/*.py"})
    assert grepped["matches"] == [{"path": "/workspace/src/app/main.py", "line": 2, "text": "    print('hello')"}]
    everywhere = ok(api, sid, "grep", {"pattern": "print"})
    assert [(match["path"], match["line"]) for match in everywhere["matches"]] == \
        [("/workspace/README.md", 2), ("/workspace/src/app/main.py", 2)]


def test_the_file_tools_refuse_every_way_out_and_say_why(api: wire.Api):
    sid = api.create_session(spec=sandbox_spec())["id"]
    setup = ("ln -s /etc escape; ln -s ../../etc/passwd up; printf 'a\\0b' > binary; "
             "head -c 300000 /dev/zero | tr '\\\\0' a > big; printf 'x x x' > three")
    api.run_turn(sid, "[tool:exec " + json.dumps({"command": setup}) + "] " + wire.unique("files"))

    for path in ["../etc/passwd", "/etc/passwd", "escape/passwd", "up", "/workspace/../etc/passwd"]:
        message = refused(api, sid, "read_file", {"path": path})
        assert "root:" not in message, message
    assert "outside the workspace" in refused(api, sid, "read_file", {"path": "escape/passwd"})
    assert "outside the workspace" in refused(api, sid, "list_files", {"path": "escape"})
    # Through the link nothing is written either.
    refused(api, sid, "write_file", {"path": "escape/teamster-test", "content": "no"})
    run = api.run_turn(sid, "[tool:exec {\"command\": \"ls /etc/teamster-test\"}] " + wire.unique("files"))
    (listed,) = [json.loads(event["content"].removeprefix("Error: ")) for event in run.stream.payloads if event["type"] == "tool.response"]
    assert listed["exit_code"] != 0, listed
    # A link is listed as a link, never followed by a walk.
    entries = ok(api, sid, "list_files", {"depth": 3})["entries"]
    assert {"path": "/workspace/escape", "type": "link"} in entries
    assert not any(entry["path"].startswith("/workspace/escape/") for entry in entries)
    assert ok(api, sid, "grep", {"pattern": "root"})["matches"] == []

    assert "not a text file" in refused(api, sid, "read_file", {"path": "binary"})
    assert "300000 bytes" in refused(api, sid, "read_file", {"path": "big"})
    assert "occurs 3 times" in refused(api, sid, "edit_file", {"path": "three", "old_string": "x", "new_string": "y"})
    assert "does not occur" in refused(api, sid, "edit_file", {"path": "three", "old_string": "z", "new_string": "y"})
    assert "not a regular expression" in refused(api, sid, "grep", {"pattern": "("})
    assert "not closed" in refused(api, sid, "glob", {"pattern": "[abc"})
    assert "invalid arguments" in refused(api, sid, "read_file", {"file": "three"})


def test_the_agent_check_lists_the_file_tools_with_their_categories(api: wire.Api):
    sid = api.create_session(spec=sandbox_spec())["id"]
    tools = {tool["name"]: tool for tool in api.ok(api.get(f"/api/v1/sessions/{sid}/tools"))["data"]}
    for name in ["read_file", "list_files", "glob", "grep"]:
        assert tools[name]["category"] == "read", tools[name]
    for name in ["write_file", "edit_file"]:
        assert tools[name]["category"] == "edit", tools[name]
    assert tools["exec"]["category"] == "execute"


def test_an_agent_chooses_and_renames_its_sandbox_tools(api: wire.Api):
    spec = {"model": {"name": "fake/fake-model"},
            "config": {"sandbox": {"enabled": True, "tools": {"exec": True, "read_file": "Read", "write_file": True, "grep": False}}}}
    sid = api.create_session(spec=spec)["id"]
    tools = {tool["name"]: tool for tool in api.ok(api.get(f"/api/v1/sessions/{sid}/tools"))["data"]}
    assert {"exec", "Read", "write_file"} <= set(tools) and not {"read_file", "grep", "glob", "edit_file", "list_files"} & set(tools)
    assert tools["Read"]["category"] == "read", tools["Read"]

    ok(api, sid, "write_file", {"path": "note.txt", "content": "chosen\n"})
    assert ok(api, sid, "Read", {"path": "note.txt"})["content"] == "     1\tchosen"
    assert "no tool named" in refused(api, sid, "grep", {"pattern": "chosen"})

    for tools_choice, words in [({"rm": True}, "not a sandbox tool"), ({"read_file": "x", "glob": "x"}, "two tools"),
                                ({"read_file": "no spaces"}, "letters, digits")]:
        bad = {"model": {"name": "fake/fake-model"}, "config": {"sandbox": {"enabled": True, "tools": tools_choice}}}
        error = wire.assert_error(api.post("/api/v1/sessions", json={"agent": {"spec": bad}}), 400)
        assert error["param"] == "config.sandbox.tools" and words in error["message"], error
