"""Seed 000's request options and wire fields, added beside the real gateway client's without
changing what that client sends or reads ("add, never break"): each is read here over the raw
wire, while the real client's own suite (test_gateway_sdk.py) runs unchanged.

So far: a gateway session created with a `title` (E1)."""

from __future__ import annotations

import pytest

import wire


@pytest.mark.parametrize("title", ["Quarterly report", "Ünïcödé title ✓", "x" * 512])
def test_a_gateway_session_may_be_created_with_a_title(api, title):
    created = api.ok(api.post(wire.Api.gw("sessions"), json={"agent_name": "demo", "title": title}))["data"]
    assert created["title"] == title
    assert api.ok(api.get(wire.Api.gw(f"sessions/{created['id']}")))["data"]["title"] == title
    # The native API sees the same session, titled.
    assert api.ok(api.get(f"/api/v1/sessions/{created['id']}"))["data"]["title"] == title


def test_without_a_title_a_gateway_session_is_untitled_as_before(api):
    created = api.ok(api.post(wire.Api.gw("sessions"), json={"agent_name": "demo"}))["data"]
    assert created.get("title") is None


@pytest.mark.parametrize("title, status, param", [
    ("x" * 513, 400, "title"),
    (7, 400, "title"),
])
def test_a_bad_title_is_refused_and_no_session_is_made(api, title, status, param):
    before = api.ok(api.get(wire.Api.gw("sessions"), params={"agent_name": "demo", "limit": 100,
                                                              "start_timestamp": "2000-01-01T00:00:00Z"}))["data"]
    error = wire.assert_error(api.post(wire.Api.gw("sessions"), json={"agent_name": "demo", "title": title}), status)
    assert error["param"] == param, error
    after = api.ok(api.get(wire.Api.gw("sessions"), params={"agent_name": "demo", "limit": 100,
                                                             "start_timestamp": "2000-01-01T00:00:00Z"}))["data"]
    assert len(after) == len(before)
