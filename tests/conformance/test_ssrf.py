"""Server-side request forgery through URLs members write: an agent's inline MCP servers and
its git skills. By default they reach public addresses only: this host (by any spelling: an IP
literal, `localhost`, `[::1]`, `0x7f000001`, an IPv4-mapped address), its private network and
the cloud metadata address are refused at connect time, a redirect from an allowed host to a
forbidden one is refused, and an upstream error's body never reaches the member's events
(status and a short reason only). The operator's `--allow-egress` lets chosen networks and
names through. Each trap below is a real listener that records whether it was reached."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import typing

import pytest

import wire
from test_skills import git_skill, skill_repo, skills_spec  # noqa: F401 (skill_repo is a fixture)

# What an internal service would answer: it must never reach a member.
SECRET = "internal-admin-token-" + wire.unique("s")
SECRET_BODY = (SECRET + " ") * (4096 // (len(SECRET) + 1))
REFUSED = "may not reach"
# MCP servers need no sandbox; git skills do.
NO_SANDBOX = ["--no-sandbox"]


class Trap:
    """An HTTP listener on `host` that counts connections, records requests, and answers each
    with `status`, `headers` and `body`."""

    def __init__(self, host: str = "127.0.0.1", status: int = 500, body: str = SECRET_BODY,
                 headers: typing.Optional[dict] = None) -> None:
        trap = self
        self.requests: list[str] = []
        self.connections = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            def answer(self) -> None:
                trap.requests.append(f"{self.command} {self.path}")
                payload = body.encode()
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_DELETE = answer

            def log_message(self, *args: typing.Any) -> None:
                pass

        family = socket.AF_INET6 if ":" in host else socket.AF_INET

        class Server(http.server.ThreadingHTTPServer):
            address_family = family
            daemon_threads = True

            def verify_request(self, request: typing.Any, client_address: typing.Any) -> bool:
                trap.connections += 1
                return True

        self.server = Server((host, 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def reached(self) -> bool:
        return self.connections > 0 or bool(self.requests)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def traps() -> typing.Iterator[typing.Callable[..., Trap]]:
    made: list[Trap] = []

    def make(*args: typing.Any, **kwargs: typing.Any) -> Trap:
        made.append(Trap(*args, **kwargs))
        return made[-1]

    yield make
    for trap in made:
        trap.close()


def inline(name: str, url: str) -> dict:
    return {"type": "inline", "name": name, "url": url}


def initialize_entries(api: wire.Api, *servers: dict) -> tuple[dict, str]:
    """Runs one turn of a session with `servers`; answers its `mcp.initialize` entries by name
    and everything the member could read of the turn (its stream and its stored events)."""
    session = api.create_session(spec={"model": {"name": "fake/fake-model"}, "mcp_servers": list(servers)})["id"]
    run = api.run_turn(session, f"hello {wire.unique('ssrf')}")
    assert run.done["state"]["status"] == "done", run.done
    (init,) = [event for event in wire.fold_stream(run.stream.payloads) if event["type"] == "mcp.initialize"]
    stored = api.ok(api.get(f"/api/v1/sessions/{session}/events"))
    readable = json.dumps(run.stream.payloads) + json.dumps(stored)
    return {entry["name"]: entry for entry in init["mcp_servers"]}, readable


def test_inline_mcp_urls_to_this_host_and_its_network_are_refused(server_factory, traps):
    own = server_factory(extra_args=NO_SANDBOX)
    trap, trap6 = traps("127.0.0.1"), traps("::1")
    urls = {
        "literal": f"http://127.0.0.1:{trap.port}/mcp",
        # A DNS name that resolves to 127.0.0.1: refused on the address, not the spelling.
        "localhost": f"http://localhost:{trap.port}/mcp",
        "ipv6": f"http://[::1]:{trap6.port}/mcp",
        "hex": f"http://0x7f000001:{trap.port}/mcp",
        "decimal": f"http://2130706433:{trap.port}/mcp",
        "mapped": f"http://[::ffff:127.0.0.1]:{trap.port}/mcp",
        "private": f"http://10.255.255.1:{trap.port}/mcp",
        "metadata": "http://169.254.169.254/latest/meta-data/",
    }
    entries, readable = initialize_entries(own.require_api(), *(inline(name, url) for name, url in urls.items()))
    for name in urls:
        assert REFUSED in entries[name].get("error", ""), (name, entries[name])
    assert not trap.reached and not trap6.reached, (trap.requests, trap6.requests)
    assert SECRET not in readable


def test_an_allowed_servers_error_body_never_reaches_the_member(server_factory, traps):
    trap = traps("127.0.0.1", status=500)
    own = server_factory(extra_args=[*NO_SANDBOX, "--allow-egress", "127.0.0.1"])
    entries, readable = initialize_entries(own.require_api(), inline("internal", f"http://127.0.0.1:{trap.port}/mcp"))
    assert trap.requests, "the allow-listed server was not reached"
    error = entries["internal"]["error"]
    assert "500" in error and REFUSED not in error, error
    assert SECRET not in readable


def test_a_redirect_from_an_allowed_host_to_loopback_is_refused(server_factory, traps):
    target = traps("127.0.0.1", status=200, body=SECRET_BODY)
    # The operator allows the name `localhost`; its answer redirects to a loopback literal.
    first = traps("127.0.0.1", status=307, body="", headers={"Location": f"http://127.0.0.1:{target.port}/mcp"})
    own = server_factory(extra_args=[*NO_SANDBOX, "--allow-egress", "localhost"])
    entries, readable = initialize_entries(own.require_api(), inline("hop", f"http://localhost:{first.port}/mcp"))
    assert first.requests, "the allowed first hop was not reached"
    assert entries["hop"].get("error"), entries["hop"]
    assert not target.reached, target.requests
    assert SECRET not in readable


def skill_turn(api: wire.Api, url: str) -> dict:
    session = api.create_session(spec=skills_spec([git_skill(url, "csv", "csv")]))
    run = api.run_turn(session["id"], f"hello {wire.unique('skill-ssrf')}")
    return run.done["state"]


def test_git_skill_urls_to_this_host_are_refused(server_factory, traps):
    own = server_factory()
    api = own.require_api()
    trap = traps("127.0.0.1")
    for url in (f"git://127.0.0.1:{trap.port}/skills.git", f"http://127.0.0.1:{trap.port}/skills.git",
                f"http://localhost:{trap.port}/skills.git", f"git://localhost:{trap.port}/skills.git",
                f"http://[::ffff:127.0.0.1]:{trap.port}/skills.git", "http://169.254.169.254/skills.git"):
        state = skill_turn(api, url)
        assert state["status"] == "error" and REFUSED in state["message"], (url, state)
    assert not trap.reached, trap.requests


def test_git_skill_redirects_are_not_followed(server_factory, traps):
    target = traps("127.0.0.1", status=200)
    first = traps("127.0.0.1", status=302, body="",
                  headers={"Location": f"http://127.0.0.1:{target.port}/skills.git/info/refs?service=git-upload-pack"})
    own = server_factory(extra_args=["--allow-egress", "localhost"])
    state = skill_turn(own.require_api(), f"http://localhost:{first.port}/skills.git")
    assert state["status"] == "error", state
    assert first.requests, "the allowed first hop was not reached"
    assert not target.reached, target.requests


def test_an_allowed_git_host_is_fetched_from_its_checked_address(server_factory, skill_repo):  # noqa: F811
    # `git://localhost:PORT/...`: allowed by name, resolved once, and git pinned to the address.
    url = skill_repo.replace("127.0.0.1", "localhost")
    refused = skill_turn(server_factory().require_api(), url)
    assert refused["status"] == "error" and REFUSED in refused["message"], refused
    allowed = skill_turn(server_factory(extra_args=["--allow-egress", "localhost"]).require_api(), url)
    assert allowed["status"] == "done", allowed
