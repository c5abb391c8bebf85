"""Test servers written in Python (tests/mcp_servers/), run as child processes: each prints
`LISTENING <port>` once it accepts connections, and dies with the test run."""

from __future__ import annotations

import os
import pathlib
import queue
import subprocess
import sys
import threading

import conftest
import wire

SERVERS = conftest.REPO_ROOT / "tests" / "mcp_servers"
PYTHON = os.environ.get("TEAMSTER_TEST_PYTHON") or sys.executable


class PythonServer:
    """`tests/mcp_servers/<script>` with `args`, on a free loopback port (`--port 0`)."""

    def __init__(self, workdir: pathlib.Path, script: str, *args: str) -> None:
        self.log_path = workdir / f"{script.removesuffix('.py')}-{wire.unique('srv')}.log"
        self.popen = subprocess.Popen(
            [PYTHON, str(SERVERS / script), *args, "--port", "0"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=open(self.log_path, "wb"),
            preexec_fn=conftest._die_with_parent)
        lines: "queue.Queue[bytes]" = queue.Queue()
        assert self.popen.stdout is not None
        stdout = self.popen.stdout
        threading.Thread(target=lambda: [lines.put(line) for line in iter(stdout.readline, b"")],
                         daemon=True).start()
        try:
            first = lines.get(timeout=conftest.READY_TIMEOUT).decode()
        except queue.Empty:
            self.close()
            raise AssertionError(f"{script} did not start: {self.log_path.read_text()}") from None
        assert first.startswith("LISTENING "), first
        self.base = f"http://127.0.0.1:{int(first.split()[1])}"

    def close(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(timeout=10)
