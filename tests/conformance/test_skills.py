"""Skills through the native API: the registry of `/api/v1/settings/skills`, what agents can
name (`/api/v1/skills`), and the shipped catalog; then skills at work: a git repository the test
makes, served by `git daemon`, named inline and through the registry, listed to the model by
name and description only, read on demand with `exec`, and preloaded when asked."""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import time

import pytest

import wire


def manifest(name: str, **overrides) -> dict:
    return {"type": "git", "name": name, "description": "Reads PDF invoices.",
            "url": "https://github.com/acme/skills", "ref": "main", "path": "skills/pdf", **overrides}


def test_skills_are_created_listed_and_replaced(api):
    name = wire.unique("pdf").lower()
    created = api.ok(api.post("/api/v1/settings/skills", json={"manifest": manifest(name)}), 201)["data"]
    assert created == {"name": name, "manifest": manifest(name)}
    wire.assert_error(api.post("/api/v1/settings/skills", json={"manifest": manifest(name)}), 409)

    replaced = manifest(name, description="Reads PDF invoices and receipts.", ref="v2")
    assert api.ok(api.put("/api/v1/settings/skills", json={"manifest": replaced}))["data"]["manifest"] == replaced
    listed = api.ok(api.get("/api/v1/settings/skills"))["data"]
    assert {"name": name, "manifest": replaced} in listed
    available = api.ok(api.get("/api/v1/skills"))["data"]
    assert {"name": name, "description": "Reads PDF invoices and receipts."} in available
    assert api.ok(api.get("/api/v1/catalogs/skills")) == {"data": []}


@pytest.mark.parametrize("field, value", [
    ("name", "Bad Name"),
    ("description", " "),
    ("url", "file:///etc"),
    ("url", "https://user:secret@github.com/a/b"),
    ("ref", "--upload-pack=touch /tmp/x"),
    ("path", "../outside"),
    ("type", "zip"),
])
def test_bad_manifests_are_400_naming_the_field(api, field, value):
    body = {"manifest": {**manifest(wire.unique("bad").lower()), field: value}}
    error = wire.assert_error(api.post("/api/v1/settings/skills", json=body), 400)
    assert field in (error.get("param") or "") + error["message"], error
    assert "secret" not in error["message"]


# --------------------------------------------------------------------------------------------
# Skills at work
# --------------------------------------------------------------------------------------------

CSV_BODY_MARKER = "csv-skill-body-7f3a"
NOTES_BODY_MARKER = "notes-skill-body-91c2"

FILES = {
    "csv/SKILL.md": f"""---
name: csv-sum
description: Sums a column of a CSV file.
---
# Summing a column ({CSV_BODY_MARKER})

Run `python3 /workspace/skills/csv/sum.py FILE COLUMN`.
""",
    "csv/sum.py": "import csv, sys\n"
                  "rows = csv.DictReader(open(sys.argv[1]))\n"
                  "print(sum(float(row[sys.argv[2]]) for row in rows))\n",
    "notes/SKILL.md": f"""---
name: notes
description: >
  Writes meeting notes
  in the house style.
---
Always start with the date ({NOTES_BODY_MARKER}).
""",
    "broken/SKILL.md": "no front matter here\n",
}


def git(cwd: pathlib.Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def skill_repo(tmp_path_factory):
    """`git://` URL of a repository with the skills of FILES on branch main, served by the
    real `git-daemon` on a free port (killed, with nothing left behind, at the end)."""
    root = tmp_path_factory.mktemp("skills")
    work, served = root / "work", root / "served"
    work.mkdir()
    served.mkdir()
    git(work, "init", "--quiet", "--initial-branch=main")
    for path, text in FILES.items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text(text)
    git(work, "add", ".")
    git(work, "commit", "--quiet", "-m", "skills")
    git(root, "clone", "--quiet", "--bare", str(work), str(served / "skills.git"))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    daemon = subprocess.Popen(
        [os.path.join(git(root, "--exec-path"), "git-daemon"), "--export-all", "--listen=127.0.0.1", "--reuseaddr",
         f"--base-path={served}", f"--port={port}", str(served)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline, "git daemon did not start"
            time.sleep(0.05)
    yield f"git://127.0.0.1:{port}/skills.git"
    daemon.kill()
    daemon.wait()


def git_skill(url: str, name: str, path: str, ref: str = "main") -> dict:
    return {"type": "git", "url": url, "ref": ref, "path": path, "name": name}


def skills_spec(skills: list, **sandbox) -> dict:
    return {"model": {"name": "fake/fake-model"}, "skills": skills,
            "config": {"sandbox": {"enabled": True, **sandbox}}}


def exec_call(command: str) -> str:
    return f"[tool:exec {json.dumps({'command': command})}]"


def system_prompt(request: dict) -> str:
    return "\n".join(m["content"] for m in request["messages"] if m["role"] == "system")


def exec_result(run: wire.TurnRun) -> dict:
    (content,) = [event["content"] for event in run.stream.payloads if event["type"] == "tool.response"]
    return json.loads(content.removeprefix("Error: "))


def test_skills_are_listed_by_description_read_on_demand_and_preloaded(api, fake, skill_repo):
    notes = wire.unique("notes").lower()
    api.ok(api.post("/api/v1/settings/skills", json={"manifest": {
        "type": "git", "name": notes, "description": "Meeting notes (the registry's description).",
        "url": skill_repo, "ref": "main", "path": "notes"}}), 201)
    spec = skills_spec([git_skill(skill_repo, "csv", "csv"),
                        {"type": "truefoundry-skills-registry", "fqn": f"skill:tenant/{notes}:1", "preload": True}])
    session = api.create_session(spec=spec)
    marker = wire.unique("skills")
    command = ("cat /workspace/skills/csv/SKILL.md; printf 'item,price\\n1,2.5\\n2,4\\n' > prices.csv; "
               "python3 /workspace/skills/csv/sum.py prices.csv price; ls /workspace/skills; "
               "touch /workspace/skills/csv/new 2>/dev/null && echo writable || echo read-only")
    run = api.run_turn(session["id"], f"{exec_call(command)} {marker}")
    assert run.done["state"]["status"] == "done", run.done

    # The model was told each skill's name, description and SKILL.md path; only the preloaded
    # skill's body is in its context.
    (request, *_) = fake.requests_for(marker)
    prompt = system_prompt(request)
    assert "- csv: Sums a column of a CSV file. (SKILL.md: /workspace/skills/csv/SKILL.md)" in prompt, prompt
    assert f"- {notes}: Writes meeting notes in the house style. (SKILL.md: /workspace/skills/{notes}/SKILL.md)" \
        in prompt, prompt
    assert NOTES_BODY_MARKER in prompt and CSV_BODY_MARKER not in prompt, prompt

    # The model read the skill's SKILL.md and ran its script; the skills are read-only.
    result = exec_result(run)
    assert result["exit_code"] == 0, result
    lines = result["stdout"].splitlines()
    assert CSV_BODY_MARKER in result["stdout"] and "6.5" in lines, result
    assert lines[-3:] == ["csv", notes, "read-only"], result

    # The skills have their share of the reported usage.
    events = api.ok(api.get(f"/api/v1/sessions/{session['id']}/turns/{run.turn_id}/events"))["data"]
    breakdowns = [e["usage"]["input_tokens_breakdown"] for e in events if e["type"] == "model.message"]
    assert breakdowns and all(breakdown["skills"] > 0 for breakdown in breakdowns), breakdowns

    # The prompt prefix stays the same on the next turn (the skills are fetched from the cache).
    again = wire.unique("skills")
    api.run_turn(session["id"], f"hello {again}")
    assert system_prompt(fake.requests_for(again)[0]) == prompt


def test_skills_that_cannot_be_had_fail_the_turn_saying_why_without_secrets(api, skill_repo):
    secret = "hunter2-" + wire.unique("pw")
    auth = {"network_policy": {"auth_inject": [{"type": "git", "match": {"hosts": ["127.0.0.1:9"]},
                                                "auth_data": {"type": "basic", "username": "u", "password": secret}}]}}
    cases = [
        (git_skill(skill_repo, "csv", "csv", ref="no-such-branch"), "no-such-branch"),
        (git_skill(skill_repo, "gone", "no/such/dir"), "no/such/dir"),
        (git_skill(skill_repo, "broken", "broken"), "malformed SKILL.md"),
        (git_skill("https://127.0.0.1:9/private.git", "private", "x"), "127.0.0.1:9"),
        ({"name": wire.unique("unknown").lower()}, "no skill of that name"),
    ]
    for skill, expected in cases:
        session = api.create_session(spec=skills_spec([skill], **auth))
        run = api.run_turn(session["id"], f"hello {wire.unique('bad-skill')}")
        state = run.done["state"]
        assert state["status"] == "error", (skill, state)
        assert expected in state["message"] and secret not in json.dumps(run.stream.payloads), (skill, state)


def test_skills_need_a_sandbox_and_valid_entries(api):
    assert api.ok(api.get("/api/v1/capabilities"))["data"]["skill"] == {"enabled": True}
    good = git_skill("git://127.0.0.1:9/skills.git", "csv", "csv")
    for spec, expected in [
        ({"model": {"name": "fake/fake-model"}, "skills": [good]}, "config.sandbox.enabled"),
        (skills_spec([good, good]), "two skills are named"),
        (skills_spec([git_skill("https://u:pw@example.com/s.git", "csv", "csv")]), "must not carry credentials"),
        (skills_spec([git_skill("file:///etc", "csv", "csv")]), "url"),
    ]:
        for response in (api.post("/api/v1/agents", json={"name": wire.unique("skills"), "manifest": spec}),
                         api.post("/api/v1/sessions", json={"agent": {"spec": spec}})):
            error = wire.assert_error(response, 400)
            assert error.get("param") == "skills" and expected in error["message"], error
