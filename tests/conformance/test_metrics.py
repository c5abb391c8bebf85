"""Metrics and health checks: /metrics read by the Prometheus client library's own parser moves
by exactly what a server of the test's own did (turns with tools, a failed tool call, a provider
retry, an error and a cancel), and /readyz follows the store (503 while PostgreSQL refuses
connections, 200 again after)."""

import urllib.parse

import pytest
from prometheus_client.parser import text_string_to_metric_families

import wire
from conftest import postgres_server_url, psql


def scrape(api: wire.Api) -> dict:
    """Every sample of /metrics by (name, sorted labels), as the reference parser reads it."""
    response = api.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def moved(before: dict, after: dict, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def test_metrics_move_by_what_the_turns_did(server_factory):
    server = server_factory()
    api = server.require_api()
    before = scrape(api)
    session = api.create_session("demo")
    sid = session["id"]

    tools = api.run_turn(sid, "[tool:get_current_datetime {}][tool:get_current_datetime not json] two calls")
    assert tools.done["state"]["status"] == "done"
    retried = api.run_turn(sid, "[flaky:2:503] retried twice")
    assert retried.done["state"]["status"] == "done"
    failed = api.run_turn(sid, "[error:400] refused")
    assert failed.done["state"]["status"] == "error"
    running = api.start_turn(sid, "[tokens:60][delay:100] cancel me")
    api.read_until_delta(sid, running["id"])
    api.ok(api.post(f"/api/v1/sessions/{sid}/cancel", json={}))
    assert api.wait_terminal(sid, running["id"])["state"]["status"] == "cancelled"

    after = wire.wait_until(lambda: (lambda s: s if value(s, "teamster_active_streams") == 0 else None)(scrape(api)),
                            what="every stream closed")
    assert moved(before, after, "teamster_turns_total", status="done") == 2
    assert moved(before, after, "teamster_turns_total", status="error") == 1
    assert moved(before, after, "teamster_turns_total", status="cancelled") == 1
    assert moved(before, after, "teamster_turn_duration_seconds_count") == 4
    assert moved(before, after, "teamster_turn_duration_seconds_bucket", le="+Inf") == 4
    assert moved(before, after, "teamster_turn_duration_seconds_sum") > 0
    # Every turn but the refused one streamed a model delta.
    assert moved(before, after, "teamster_turn_first_token_seconds_count") == 3
    assert moved(before, after, "teamster_tool_calls_total", tool="get_current_datetime") == 2
    assert moved(before, after, "teamster_tool_errors_total", tool="get_current_datetime") == 1
    assert moved(before, after, "teamster_provider_retries_total") == 2
    assert value(after, "teamster_running_turns") == 0

    # The tokens are those the turns report, added up.
    turns = [api.get_turn(sid, turn_id) for turn_id in (tools.turn_id, retried.turn_id, failed.turn_id, running["id"])]
    reported = lambda key: sum((turn["state"].get("metrics") or {}).get(key, 0) for turn in turns)
    assert moved(before, after, "teamster_tokens_total", kind="input") == reported("total_input_tokens") > 0
    assert moved(before, after, "teamster_tokens_total", kind="output") == reported("total_output_tokens") > 0
    assert moved(before, after, "teamster_store_duration_seconds_count", operation="write_events") > 0

    # Labels carry no session, turn or message content.
    page = api.get("/metrics").text
    for secret in (sid, tools.turn_id, "two calls", "cancel me"):
        assert secret not in page


def test_the_reference_parser_keeps_every_familys_type(server_factory):
    """Counters are counters to Prometheus's own parser: each family's `# TYPE` line names the
    samples it has (a counter's `_total` ones), so no sample falls into an untyped family."""
    api = server_factory().require_api()
    api.run_turn(api.create_session("demo")["id"], "[tool:get_current_datetime {}] a tool")
    response = api.get("/metrics")
    families = {family.name: family for family in text_string_to_metric_families(response.text)}
    assert not [name for name, family in families.items() if family.type == "unknown"], sorted(families)
    for counter in ("teamster_turns", "teamster_tokens", "teamster_tool_calls", "teamster_provider_retries"):
        assert families[counter].type == "counter", (counter, families[counter].type)
    assert all(sample.name == "teamster_turns_total" for sample in families["teamster_turns"].samples)
    assert families["teamster_turns"].samples, "the turn is counted under its family"
    assert families["teamster_turn_duration_seconds"].type == "histogram"
    assert families["teamster_running_turns"].type == "gauge"


def test_an_open_stream_is_counted_until_it_closes(server_factory):
    server = server_factory()
    api = server.require_api()
    session = api.create_session("demo")
    running = api.start_turn(session["id"], "[tokens:40][delay:100] slow")
    with api.http.stream("GET", f"/api/v1/sessions/{session['id']}/turns/{running['id']}/subscribe") as stream:
        # Kept: a dropped byte iterator closes the response, and with it the stream.
        chunks = stream.iter_bytes()
        next(chunks)
        assert value(scrape(api), "teamster_active_streams") == 1
        assert value(scrape(api), "teamster_running_turns") == 1
    api.ok(api.post(f"/api/v1/sessions/{session['id']}/cancel", json={}))
    api.wait_terminal(session["id"], running["id"])
    wire.wait_until(lambda: value(scrape(api), "teamster_active_streams") == 0, what="the stream closed")


def test_readyz_follows_the_postgres_store(server_factory, postgres_database):
    server = server_factory(database=postgres_database)
    api = server.require_api()
    assert api.get("/healthz").status_code == 200
    ready = api.get("/readyz")
    assert ready.status_code == 200 and ready.json() == {"status": "ready"}
    name = urllib.parse.urlsplit(postgres_database).path.lstrip("/")
    admin = postgres_server_url()
    # No new connection is let in and every open one is ended: the store cannot answer.
    psql(admin, f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
    try:
        psql(admin, f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'")
        down = api.get("/readyz")
        assert down.status_code == 503, down.text
        assert down.json()["error"]["code"] == "unavailable"
        assert "store" in down.json()["error"]["message"]
        assert api.get("/healthz").status_code == 200
    finally:
        psql(admin, f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
    wire.wait_until(lambda: api.get("/readyz").status_code == 200, what="ready again")
    samples = scrape(api)
    assert value(samples, "teamster_store_duration_seconds_count", operation="ready_check") >= 3
