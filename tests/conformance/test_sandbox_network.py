"""Network sandboxes through the API, attacked: without the operator's --allow-sandbox-network
a spec asking for one is refused when it is saved; under --auth none the operator must insist;
and where they run, a sandboxed command reaches neither the server's own API on 127.0.0.1 nor a
listener on the host's loopback, by address or by a name resolving there (the Rust tests in
crates/teamster-sandbox/tests/network.rs attack the namespace further)."""

from __future__ import annotations

import json

import wire
from test_sandbox import LoopbackListener, exec_call, tool_results


def network_spec() -> dict:
    return {"model": {"name": "fake/fake-model"}, "config": {"sandbox": {"enabled": True, "network": True}}}


def refused(api: wire.Api, flag: str) -> None:
    """A spec asking for a network sandbox is refused, saying which field and which flag."""
    for response in (api.post("/api/v1/sessions", json={"agent": {"spec": network_spec()}}),
                     api.post("/api/v1/agents", json={"name": wire.unique("net"), "manifest": network_spec()})):
        error = wire.assert_error(response, 422)
        assert "config.sandbox.network" in error["message"] and flag in error["message"], error


def test_without_the_operator_flag_network_sandboxes_are_refused(api):
    refused(api, "--allow-sandbox-network")
    # A sandbox without the network is still fine.
    session = api.create_session(spec={**network_spec(), "config": {"sandbox": {"enabled": True}}})
    assert session["id"]


def test_under_auth_none_the_flag_alone_is_not_enough(server_factory):
    server = server_factory(extra_args=["--allow-sandbox-network"])
    refused(server.require_api(), "--allow-sandbox-network-without-auth")


def test_a_network_sandbox_reaches_neither_the_servers_api_nor_the_hosts_loopback(server_factory):
    server = server_factory(extra_args=["--allow-sandbox-network", "--allow-sandbox-network-without-auth"])
    api = server.require_api()
    greeting = wire.unique("hello").encode()
    listener = LoopbackListener(greeting)
    port = server.url.rsplit(":", 1)[1]
    probe = ("python3 -c \"import socket, sys\nfor target in sys.argv[1:]:\n host, port = target.rsplit(':', 1)\n"
             " try:\n  socket.create_connection((host, int(port)), timeout=3); print(target, 'CONNECTED')\n"
             " except OSError as error: print(target, type(error).__name__)\" "
             f"127.0.0.1:{port} localhost:{port} 127.0.0.1:{listener.port} localhost:{listener.port} "
             f"10.0.2.2:{port} 169.254.169.254:80")
    try:
        session = api.create_session(spec=network_spec())
        (result,) = tool_results(api.run_turn(session["id"], exec_call(probe) + " " + wire.unique("net")))
        assert result["exit_code"] == 0, result
        lines = result["stdout"].splitlines()
        assert len(lines) == 6 and not any("CONNECTED" in line for line in lines), result
        assert listener.accepted == 0
        # The namespace is set up for the public internet: a route out and public resolvers.
        (setup,) = tool_results(api.run_turn(session["id"], exec_call("cat /proc/net/route /etc/resolv.conf")
                                             + " " + wire.unique("net")))
        assert "tap0\t00000000\t0202000A" in setup["stdout"] and "nameserver 1.1.1.1" in setup["stdout"], json.dumps(setup)
    finally:
        listener.close()
