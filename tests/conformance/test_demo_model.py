"""The offline demo model stays out of the way (issue 41): its replies are short, its "use a real
model" hint comes once per session, in the first answer, and never in a sub-agent's answer."""

from __future__ import annotations

import json

import wire

HINT = "To use a real model, set OPENAI_API_KEY and restart Teamster, or add a provider in Settings."


def test_the_hint_comes_once_per_session_and_never_from_a_sub_agent(api):
    spec = {"model": {"name": "offline/echo"}, "config": {"dynamic_sub_agents": {"enabled": True}}}
    session = api.create_session(spec=spec)
    task = wire.unique("go west")
    first = api.run_turn(session["id"], "run_sub_agent " + json.dumps({"name": "scout", "task": task}))
    assert first.done["state"]["status"] == "done", first.done
    messages = [event for event in wire.fold_stream(first.stream.payloads) if event["type"] == "model.message"]
    sub_agent = [message for message in messages if message["thread_id"] != "main"]
    assert sub_agent and all("OPENAI_API_KEY" not in str(message.get("content")) for message in sub_agent), sub_agent
    assert any(f'You said: "{task}"' in str(message.get("content")) for message in sub_agent), sub_agent
    answer = first.output_text or ""
    assert answer.count(HINT) == 1 and len(answer) < 400, answer

    second = api.run_turn(session["id"], "and again")
    assert second.output_text == 'You said: "and again"', second.output_text
