"""A revoked API key's queued work never runs: follow-ups and steering instructions queued with a
key that is revoked before they start are dropped, while those the same subject queued with a
key still in force run (so the queue was worked, not stalled). The attack: a stolen key queues
work in a session, the owner revokes the key, and the work starts anyway once the running turn
ends."""

from __future__ import annotations

import typing

import wire
from test_control import session_turns
from test_identity import Keyed, key_for, keyed  # noqa: F401 (the fixture)


class Member(typing.NamedTuple):
    operator: wire.Api
    stolen: wire.Api
    stolen_id: str
    kept: wire.Api


def member_with_two_keys(keyed: Keyed) -> Member:
    """A member with two keys: the first stolen (its id is the one to revoke), the second kept."""
    operator = wire.Api(keyed.server.url, key=keyed.admin)
    stolen = wire.Api(keyed.server.url, key=key_for(operator, "mallory", "acme"))
    (stolen_id,) = [key["id"] for key in operator.ok(operator.get("/api/v1/keys"))["data"]
                    if key["subject"]["subject_id"] == "acme:mallory"]
    kept = wire.Api(keyed.server.url, key=key_for(operator, "mallory", "acme"))
    return Member(operator, stolen, stolen_id, kept)


def test_follow_ups_and_instructions_queued_with_a_revoked_key_never_start(keyed: Keyed, fake):
    operator, stolen, stolen_id, kept = member_with_two_keys(keyed)

    session = kept.create_session(spec={"model": {"name": "fake/fake-model"}})
    sid = session["id"]
    running = kept.start_turn(sid, "[tokens:5][delay:300] slow")
    instruction, smuggled, legitimate = wire.unique("instruction"), wire.unique("smuggled"), wire.unique("legitimate")
    # The stolen key queues an instruction and a follow-up; then the owner queues one of its own.
    stolen.ok(stolen.post(f"/api/v1/sessions/{sid}/steer", json={"content": instruction}), 202)
    stolen.ok(stolen.post(f"/api/v1/sessions/{sid}/follow-ups", json={"content": smuggled}), 201)
    kept.ok(kept.post(f"/api/v1/sessions/{sid}/follow-ups", json={"content": legitimate}), 201)
    assert operator.ok(operator.delete(f"/api/v1/keys/{stolen_id}"))["data"]["revoked_at"]
    wire.assert_error(stolen.get("/api/v1/sessions"), 401)

    def settled() -> typing.Optional[list[dict]]:
        turns = session_turns(kept, sid)
        done = len(turns) >= 2 and all(turn["state"]["status"] in wire.TERMINAL for turn in turns)
        queue_empty = kept.ok(kept.get(f"/api/v1/sessions/{sid}/follow-ups"))["data"] == []
        return turns if done and queue_empty else None
    turns = wire.wait_until(settled, timeout=30, what="the kept key's follow-up to run")
    assert [turn["input"][0]["content"] for turn in turns] == ["[tokens:5][delay:300] slow", legitimate]
    assert turns[0]["id"] == running["id"]
    assert not fake.requests_mentioning(instruction) and not fake.requests_mentioning(smuggled)


def test_an_instruction_whose_key_was_revoked_never_joins_the_running_turn(keyed: Keyed, fake):
    operator, stolen, stolen_id, kept = member_with_two_keys(keyed)

    session = kept.create_session(spec={"model": {"name": "fake/fake-model"}})
    sid = session["id"]
    marker, smuggled, legitimate = wire.unique("steered"), wire.unique("smuggled"), wire.unique("legitimate")
    # The first model step streams slowly, then calls a tool: the instructions join the second.
    turn = kept.start_turn(sid, f"[tool:get_current_datetime {{}}][delay:1500] {marker}")
    wire.wait_until(lambda: fake.requests_for(marker), timeout=20, what="the first model call")
    stolen.ok(stolen.post(f"/api/v1/sessions/{sid}/steer", json={"content": smuggled}), 202)
    assert operator.ok(operator.delete(f"/api/v1/keys/{stolen_id}"))["data"]["revoked_at"]
    kept.ok(kept.post(f"/api/v1/sessions/{sid}/steer", json={"content": legitimate}), 202)
    done = kept.wait_terminal(sid, turn["id"], timeout=60)
    assert done["state"]["status"] == "done", done

    (request,) = fake.requests_mentioning(legitimate)
    assert request["messages"][-1] == {"role": "user", "content": legitimate}, request["messages"][-2:]
    assert not fake.requests_mentioning(smuggled)


def test_a_revoked_keys_live_channels_end(keyed: Keyed):
    from test_live import LiveReader

    operator = wire.Api(keyed.server.url, key=keyed.admin)
    def key_ids() -> set[str]:
        return {key["id"] for key in operator.ok(operator.get("/api/v1/keys"))["data"]}
    before = key_ids()
    stolen_key = key_for(operator, "mallory", "acme")
    (stolen_id,) = key_ids() - before
    kept_key = key_for(operator, "mallory", "acme")
    kept = wire.Api(keyed.server.url, key=kept_key)
    sid = kept.create_session(spec={"model": {"name": "fake/fake-model"}})["id"]
    channels = [LiveReader(keyed.server.url, sid, key=stolen_key), LiveReader(keyed.server.url, None, key=stolen_key)]
    survivor = LiveReader(keyed.server.url, sid, key=kept_key)
    assert operator.ok(operator.delete(f"/api/v1/keys/{stolen_id}"))["data"]["revoked_at"]
    # Both of the stolen key's channels end by themselves (their reading threads finish);
    # the kept key's channel goes on and still follows the session.
    for channel in channels:
        channel.thread.join(timeout=20)
        assert not channel.thread.is_alive() and channel.error is None, channel.error
    kept.ok(kept.patch(f"/api/v1/sessions/{sid}", json={"title": "still followed"}))
    survivor.wait_for("thread_changed")
    survivor.close()
