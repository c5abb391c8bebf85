"""The bounds of sandboxed commands through the server, attacked: with --sandbox-memory-mib and
--sandbox-shm-mib small, three processes that each fit the address-space limit cannot hold more
memory together than the command's cgroup allows, a gigabyte written into the sandbox's tmpfs
mounts (its root, /dev, /dev/shm) never lands in the host's memory, and the server keeps serving
and says at start-up what bounds its commands. (The Rust tests in
crates/teamster-sandbox/tests/confinement.rs attack the provider further: memfd, CPU, fork bombs,
the seccomp filter.)"""

from __future__ import annotations

import subprocess

import httpx

import conftest
import wire
from test_sandbox import exec_call, sandbox_spec, server_log, tool_results


def test_memory_and_tmpfs_bombs_are_contained_and_the_server_keeps_serving(server_factory):
    server = server_factory(extra_args=["--sandbox-memory-mib", "256", "--sandbox-shm-mib", "1",
                                        "--sandbox-cgroups", "required"])
    api = server.require_api()
    log = server_log(server)
    assert "sandbox commands run in control groups of their own" in log and "256 MiB memory" in log, log[-3000:]
    session = api.create_session(spec=sandbox_spec())

    def run(command: str) -> dict:
        (result,) = tool_results(api.run_turn(session["id"], exec_call(command) + " " + wire.unique("bound")))
        return result

    # Three processes of 160 MiB, each under RLIMIT_AS: before cgroups they held 480 MiB.
    bomb = run("for i in 1 2 3; do python3 -c \"a = b'x' * (160 << 20); print('allocated', flush=True)\" & done; wait")
    assert bomb["stdout"].count("allocated") <= 1, bomb
    assert "used more than 256 MiB of memory" in bomb["stderr"], bomb

    # A gigabyte into each tmpfs: refused (read-only) or stopped at /dev/shm's size.
    for target in ("/big", "/dev/big", "/dev/shm/big"):
        landed = run(f"head -c 1000000000 /dev/zero > {target}; stat -c %s {target} 2>/dev/null || echo 0")
        assert int(landed["stdout"].split()[-1]) <= 1 << 20, (target, landed)

    assert httpx.get(f"{server.url}/healthz", timeout=5).status_code == 200
    assert run("echo alive")["stdout"] == "alive\n"


def test_without_cgroups_the_log_says_what_still_bounds_commands(server_factory):
    server = server_factory(extra_args=["--sandbox-cgroups", "off"])
    api = server.require_api()
    assert "sandbox commands run without control groups (turned off)" in server_log(server)
    # The tmpfs mounts are bounded all the same.
    session = api.create_session(spec=sandbox_spec())
    (result,) = tool_results(api.run_turn(session["id"], exec_call("echo x > /big") + " " + wire.unique("bound")))
    assert result["exit_code"] != 0 and "Read-only file system" in result["stderr"], result


def test_bad_bounds_are_refused_at_start_up(tmp_path):
    for flag, value in (("--sandbox-cpus", "0"), ("--sandbox-memory-mib", "1"), ("--sandbox-cgroups", "sometimes")):
        started = subprocess.run([str(conftest.binary("TEAMSTER_BIN", "target/debug/teamster")), "serve",
                                  "--data-dir", str(tmp_path), flag, value],
                                 capture_output=True, text=True, timeout=30)
        assert started.returncode == 2 and f"invalid value '{value}' for '{flag}" in started.stderr, started


def test_a_users_sessions_share_one_disk_quota(server_factory):
    """Each sandbox holds less than its own quota, but a user's sessions together pass
    --sandbox-disk-per-subject-mib: the command that takes them past it is stopped, and the
    result says which quota and how to make room.

    The server gets a sandbox root of its own: the shared one holds other tests' sandboxes of
    the same caller, which a server counts towards the owner's total (as it would another
    replica's)."""
    root = f"{conftest.SANDBOX_ROOT}-{wire.unique('quota')}"
    server = server_factory(extra_args=["--sandbox-disk-per-subject-mib", "12", "--sandbox-root", root])
    api = server.require_api()
    write = "i=0; while [ $i -lt 10 ]; do head -c 1048576 /dev/zero > f$i || exit 1; i=$((i+1)); sleep 0.2; done; echo done"
    first = api.create_session(spec=sandbox_spec())
    (wrote,) = tool_results(api.run_turn(first["id"], exec_call(write) + " " + wire.unique("disk")))
    assert wrote["stdout"] == "done\n", wrote
    second = api.create_session(spec=sandbox_spec())
    (stopped,) = tool_results(api.run_turn(second["id"], exec_call(write) + " " + wire.unique("disk")))
    assert stopped.get("over_quota") is True and "done" not in stopped["stdout"], stopped
    assert "sandboxes of this session's owner are together" in stopped["error"], stopped
    assert "disk quota of 12 MiB" in stopped["error"] and "sessions no longer needed" in stopped["error"], stopped
    # Deleting the first session makes room for the second.
    assert api.delete(f"/api/v1/sessions/{first['id']}").status_code == 204
    (room,) = tool_results(api.run_turn(second["id"], exec_call("head -c 1000 /dev/zero > more && echo ok") + " " + wire.unique("disk")))
    assert room["stdout"] == "ok\n", room
