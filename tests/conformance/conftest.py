"""Fixtures of the conformance suite: real processes on loopback ports, the real gateway SDK.

One `fake-model` and one `teamster serve` (fresh SQLite file) are started per test session and
shared by every test that does not need a server of its own; `server_factory` starts extra
servers (other flags, restarts on the same database, SIGKILL, a PostgreSQL database of the
module's own from `postgres_database`, which needs TEAMSTER_TEST_POSTGRES_URL). Binaries come
from `TEAMSTER_BIN` and `FAKE_MODEL_BIN`, by default `target/debug/{teamster,fake-model}` under
the repository root (`scripts/test` builds them first).

`TEAMSTER_TEST_BACKEND=postgres` runs every server on a PostgreSQL database of its own (created
on TEAMSTER_TEST_POSTGRES_URL, dropped afterwards) instead of a SQLite file; tests that read
the SQLite file itself are marked `sqlite_only`.

Every wait is bounded: reading the `listening on` line, the health check, each HTTP call
(`wire.TIMEOUT`), process exits, plus pytest-timeout's ceiling per test (pytest.ini).
"""

from __future__ import annotations

import ctypes
import glob
import os
import pathlib
import queue
import re
import shutil
import signal
import subprocess
import threading
import time
import typing
import urllib.parse
import uuid

import httpx
import pytest

import wire
from truefoundry_gateway_sdk import TrueFoundryGateway
from truefoundry_gateway_sdk.agents import AgentSessionClient, PrivateAgentSessionClient

# Every server of the run keeps its sandboxes here (outside pytest's private directory).
SANDBOX_ROOT = f"/tmp/teamster-conformance-sandboxes-{os.getpid()}"



def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The run's sandboxes go with it (their servers have stopped by now), with the roots of
    tests that needed one of their own (named `SANDBOX_ROOT-…`)."""
    # Exactly this process's roots: another worker's pid may start with this one's digits.
    for root in [SANDBOX_ROOT, *glob.glob(f"{SANDBOX_ROOT}-*")]:
        shutil.rmtree(root, ignore_errors=True)


REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
# The storage backend every server of the run uses unless a test names a database.
BACKEND = os.environ.get("TEAMSTER_TEST_BACKEND", "sqlite")
assert BACKEND in ("sqlite", "postgres"), f"TEAMSTER_TEST_BACKEND must be sqlite or postgres, not {BACKEND!r}"
# For tests that read or write the SQLite database file directly.
sqlite_only = pytest.mark.skipif(BACKEND != "sqlite", reason="reads the SQLite database file itself")
READY_TIMEOUT = 30.0
DEMO_AGENT = "demo"
DEMO_INSTRUCTIONS = "You are a test agent."
LISTENING = re.compile(r"listening on (http://\S+)")


def binary(env_name: str, default: str) -> pathlib.Path:
    path = pathlib.Path(os.environ.get(env_name) or REPO_ROOT / default)
    if not path.is_absolute():
        path = REPO_ROOT / path
    if not path.is_file():
        pytest.fail(f"{path} does not exist: build it with `cargo build --workspace --bins` "
                    f"(or point {env_name} at it)", pytrace=False)
    return path


def teamster(*args: str) -> subprocess.CompletedProcess:
    """The `teamster` CLI run with `args` (no input, a minute at most), its output as text."""
    program = str(binary("TEAMSTER_BIN", "target/debug/teamster"))
    return subprocess.run([program, *args], stdin=subprocess.DEVNULL, capture_output=True, timeout=60, text=True)


def cli_key(server: "TeamsterServer", subject: str, tenant: str, role: str) -> str:
    """A key `teamster keys create` made on `server`'s database (started or not): its secret."""
    made = teamster("keys", "create", "--subject", subject, "--tenant", tenant, "--role", role,
                    "--database", server.database, "--data-dir", str(server.workdir))
    assert made.returncode == 0, made.stderr
    return made.stdout.strip()


try:
    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):
    _PRCTL = None


def _die_with_parent() -> None:
    """Runs in the child before exec: the kernel kills it if the test runner dies, so no server
    outlives a crashed or timed-out pytest (PR_SET_PDEATHSIG = 1). Resolved before forking."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGKILL)


# Every process started in this run, so a failing test's report can show their latest output.
STARTED: list["Process"] = []


class Process:
    """A child process whose combined output goes to a log file; `start` returns the URL from
    its `listening on http://ADDR` line, waiting at most READY_TIMEOUT. `env` adds variables to
    the environment it inherits."""

    def __init__(self, name: str, argv: list[str], log_path: pathlib.Path,
                 env: typing.Optional[typing.Mapping[str, str]] = None) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.env = {**os.environ, **env} if env else None
        STARTED.append(self)
        self.popen: typing.Optional[subprocess.Popen[bytes]] = None
        self._pump: typing.Optional[threading.Thread] = None

    def start(self) -> str:
        ready: "queue.Queue[typing.Optional[str]]" = queue.Queue()
        log = open(self.log_path, "ab")
        log.write(f"\n$ {' '.join(self.argv)}\n".encode())
        log.flush()
        self.popen = subprocess.Popen(
            self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            cwd=self.log_path.parent, env=self.env, preexec_fn=_die_with_parent)
        stdout = self.popen.stdout
        assert stdout is not None

        def pump() -> None:
            announced = False
            with log:
                for line in iter(stdout.readline, b""):
                    log.write(line)
                    log.flush()
                    if not announced:
                        match = LISTENING.search(line.decode(errors="replace"))
                        if match:
                            announced = True
                            ready.put(match.group(1))
            ready.put(None)

        self._pump = threading.Thread(target=pump, name=f"{self.name}-output", daemon=True)
        self._pump.start()
        try:
            url = ready.get(timeout=READY_TIMEOUT)
        except queue.Empty:
            self.kill()
            raise AssertionError(f"{self.name} printed no `listening on` line within "
                                 f"{READY_TIMEOUT:.0f}s\n{self.log_tail()}") from None
        if url is None:
            self.kill()
            raise AssertionError(f"{self.name} exited before listening "
                                 f"(code {self.popen.poll()})\n{self.log_tail()}")
        return url.rstrip("/")

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill(self) -> None:
        """SIGKILL, then reap."""
        if self.popen is None:
            return
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(timeout=10)
        if self._pump is not None:
            self._pump.join(timeout=5)

    def stop(self) -> None:
        """SIGTERM (graceful shutdown), SIGKILL if it is still running after 10 s."""
        if self.popen is None or self.popen.poll() is not None:
            self.kill()
            return
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self.kill()

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return f"--- last lines of {self.log_path} ---\n" + "\n".join(text.splitlines()[-lines:])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> typing.Iterator[None]:
    """On a failure, attach the last lines of each server log written to during that phase."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and report.when in ("call", "setup", "teardown"):
        seen: set[pathlib.Path] = set()
        for process in reversed(STARTED):
            if process.log_path in seen or process.name != "teamster":
                continue
            seen.add(process.log_path)
            try:
                if process.log_path.stat().st_mtime < call.start:
                    continue
            except OSError:
                continue
            report.sections.append((f"{process.log_path.name} (tail)", process.log_tail(25)))
            if len(seen) >= 2:
                break


def wait_healthy(url: str, process: Process) -> None:
    def healthy() -> bool:
        assert process.alive(), f"{process.name} died\n{process.log_tail()}"
        try:
            return httpx.get(f"{url}/healthz", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False
    wire.wait_until(healthy, timeout=READY_TIMEOUT, what=f"{url}/healthz")


class FakeModelServer:
    """`fake-model`; with `api_key`, it answers model requests without that key with a 401."""

    def __init__(self, workdir: pathlib.Path, api_key: typing.Optional[str] = None) -> None:
        key_args = [] if api_key is None else ["--api-key", api_key]
        log_name = "fake-model.log" if api_key is None else f"fake-model-{uuid.uuid4().hex[:8]}.log"
        self.process = Process("fake-model", [str(binary("FAKE_MODEL_BIN", "target/debug/fake-model")),
                                              "--listen", "127.0.0.1:0", *key_args], workdir / log_name)
        self.url = self.process.start()
        self.client = wire.FakeModel(self.url)

    def provider_manifest(self, api_key: str = wire.API_KEY_SECRET) -> dict:
        return {
            "type": "custom",
            "name": "fake",
            "base_url": f"{self.url}/v1",
            "auth": {"api_key": api_key},
            "models": [{"name": "fake-model", "model_id": "fake-model", "properties": {}}],
        }

    def close(self) -> None:
        self.client.close()
        self.process.kill()


class TeamsterServer:
    """One `teamster serve` on a SQLite file (or on `database`, a `postgres://` URL), with `env`
    added to its environment; can be killed and started again on the same database."""

    def __init__(self, workdir: pathlib.Path, fake: FakeModelServer,
                 extra_args: typing.Sequence[str] = (), db_path: typing.Optional[pathlib.Path] = None,
                 database: typing.Optional[str] = None,
                 env: typing.Optional[typing.Mapping[str, str]] = None) -> None:
        self.workdir = workdir
        self.fake = fake
        self.extra_args = list(extra_args)
        self.env = env
        self.db_path = db_path or workdir / f"teamster-{uuid.uuid4().hex[:8]}.sqlite"
        # A PostgreSQL database this server created for itself, dropped on close.
        self.own_database: typing.Optional[str] = None
        if database is None and BACKEND == "postgres":
            database = self.own_database = create_postgres_database(self.db_path.stem)
        # With a database URL, db_path only names the log file.
        self.database = database or f"sqlite://{self.db_path}"
        self.process: typing.Optional[Process] = None
        self.url = ""
        self.api: typing.Optional[wire.Api] = None

    @property
    def gateway_url(self) -> str:
        return f"{self.url}{wire.GATEWAY_PREFIX}"

    def start(self) -> "TeamsterServer":
        port = free_port()
        # Sandboxes run as users of their own, who cannot enter pytest's 0700 directory (a test
        # may name another root).
        sandbox_root = [] if "--sandbox-root" in self.extra_args else ["--sandbox-root", SANDBOX_ROOT]
        argv = [str(binary("TEAMSTER_BIN", "target/debug/teamster")), "serve",
                "--listen", f"127.0.0.1:{port}", "--database", self.database,
                # The example agent only where a test asks for it (`example = True`).
                *([] if getattr(self, "example", False) else ["--no-example"]),
                # The secret key file goes here, not into the user's data directory.
                "--data-dir", str(self.workdir),
                *sandbox_root,
                # Quick retries: the suite checks how often, not how long.
                "--model-retry-base-ms", "20",
                *self.extra_args]
        self.process = Process("teamster", argv, self.db_path.with_suffix(".log"), self.env)
        self.url = self.process.start()
        wait_healthy(self.url, self.process)
        if self.api is not None:
            self.api.close()
        self.api = wire.Api(self.url)
        return self

    def configure(self) -> "TeamsterServer":
        """Registers the fake model provider and the `demo` agent (wire contract of the brief)."""
        api = self.require_api()
        api.ok(api.put("/api/v1/settings/model-providers",
                       json={"manifest": self.fake.provider_manifest()}))
        api.create_agent(DEMO_AGENT, DEMO_INSTRUCTIONS)
        return self

    def require_api(self) -> wire.Api:
        assert self.api is not None, "server not started"
        return self.api

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def restart(self) -> "TeamsterServer":
        self.stop()
        return self.start()

    def close(self) -> None:
        if self.api is not None:
            self.api.close()
        self.kill()
        if self.own_database is not None:
            drop_postgres_database(self.own_database)


def free_port() -> int:
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --------------------------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return tmp_path_factory.mktemp("conformance")


@pytest.fixture(scope="session")
def fake_model(workdir: pathlib.Path) -> typing.Iterator[FakeModelServer]:
    fake = FakeModelServer(workdir)
    try:
        yield fake
    finally:
        fake.close()


@pytest.fixture(scope="session")
def server(workdir: pathlib.Path, fake_model: FakeModelServer) -> typing.Iterator[TeamsterServer]:
    """The shared server: fresh database, fake provider and `demo` agent registered; stdio MCP
    servers allowed (test_mcp.py registers one), and agents' URLs allowed to reach 127.0.0.1
    (the test MCP servers and git daemon), as servers of a test's own do not."""
    instance = TeamsterServer(workdir, fake_model, extra_args=["--allow-stdio-mcp", "--allow-egress", "127.0.0.1"])
    try:
        instance.start().configure()
        yield instance
    finally:
        instance.close()


@pytest.fixture
def server_factory(workdir: pathlib.Path, fake_model: FakeModelServer):
    """Starts servers of a test's own: `server_factory(extra_args=(...), configure=True,
    database=None, env=None)` (a fresh SQLite file, or the `postgres://` URL given, e.g.
    `postgres_database`; `env` added to the server's environment). Each can be `.kill()`ed
    (SIGKILL) and `.start()`ed again on the same database."""
    started: list[TeamsterServer] = []

    def make(extra_args: typing.Sequence[str] = (), configure: bool = True,
             database: typing.Optional[str] = None,
             env: typing.Optional[typing.Mapping[str, str]] = None) -> TeamsterServer:
        instance = TeamsterServer(workdir, fake_model, extra_args, database=database, env=env)
        started.append(instance)
        instance.start()
        if configure:
            instance.configure()
        return instance

    try:
        yield make
    finally:
        for instance in started:
            instance.close()


def psql(server_url: str, sql: str) -> str:
    """Runs one SQL command with `psql` (on PATH, or in PG_BIN) against `server_url`; returns
    what it printed."""
    program = shutil.which("psql") or os.path.join(os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin"), "psql")
    done = subprocess.run([program, server_url, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-c", sql],
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    assert done.returncode == 0, f"psql {sql!r}: {done.stderr.decode(errors='replace')}"
    return done.stdout.decode(errors="replace")


def postgres_server_url() -> str:
    """The PostgreSQL server the tests create their databases on. Fails, never skips, without
    TEAMSTER_TEST_POSTGRES_URL: a backend left untested is broken."""
    server_url = os.environ.get("TEAMSTER_TEST_POSTGRES_URL")
    if not server_url:
        pytest.fail("TEAMSTER_TEST_POSTGRES_URL is not set: run scripts/test, or start PostgreSQL with "
                    "`bash scripts/postgres` and export the URL it prints as TEAMSTER_TEST_POSTGRES_URL",
                    pytrace=False)
    return server_url


def create_postgres_database(label: str) -> str:
    """Creates a fresh database named after `label` and returns its URL."""
    server_url = postgres_server_url()
    name = f"teamster_{re.sub(r'[^a-z0-9]', '_', label.lower())}_{uuid.uuid4().hex[:8]}"[:63]
    psql(server_url, f'CREATE DATABASE "{name}"')
    return urllib.parse.urlunsplit(urllib.parse.urlsplit(server_url)._replace(path=f"/{name}"))


def drop_postgres_database(url: str) -> None:
    name = urllib.parse.urlsplit(url).path.lstrip("/")
    psql(postgres_server_url(), f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def postgres_database(request: pytest.FixtureRequest) -> typing.Iterator[str]:
    """The URL of a PostgreSQL database of the test module's own, created on the server that
    TEAMSTER_TEST_POSTGRES_URL names (scripts/test starts one with scripts/postgres) and dropped
    afterwards."""
    url = create_postgres_database(request.module.__name__.rsplit(".", 1)[-1])
    try:
        yield url
    finally:
        drop_postgres_database(url)


@pytest.fixture
def srv(server: TeamsterServer) -> str:
    return server.url


@pytest.fixture
def api(server: TeamsterServer) -> wire.Api:
    return server.require_api()


@pytest.fixture
def fake(fake_model: FakeModelServer) -> wire.FakeModel:
    return fake_model.client


@pytest.fixture
def client(srv: str) -> AgentSessionClient:
    return AgentSessionClient(base_url=f"{srv}/t1", api_key="K", timeout=30)


@pytest.fixture
def private(srv: str) -> PrivateAgentSessionClient:
    return PrivateAgentSessionClient(base_url=f"{srv}/t1", api_key="K", timeout=30)


class Recorder:
    """SDK clients whose every exchange is recorded byte for byte (`wire.RecordingTransport`)."""

    def __init__(self, base_url: str) -> None:
        self.transport = wire.RecordingTransport()
        self.http = httpx.Client(transport=self.transport, timeout=httpx.Timeout(30.0, connect=5.0))
        self.client = AgentSessionClient(base_url=base_url, api_key="K", httpx_client=self.http)
        self.private = PrivateAgentSessionClient(base_url=base_url, api_key="K", httpx_client=self.http)
        self.gateway = TrueFoundryGateway(base_url=base_url, api_key="K", httpx_client=self.http)

    @property
    def exchanges(self) -> list[wire.Exchange]:
        return self.transport.exchanges

    def matching(self, method: str, path_suffix: str) -> list[wire.Exchange]:
        return self.transport.matching(method, path_suffix)

    def last(self, method: str, path_suffix: str) -> wire.Exchange:
        found = self.matching(method, path_suffix)
        assert found, f"no {method} …{path_suffix} was sent; sent: {[(e.method, e.path) for e in self.exchanges]}"
        return found[-1]

    def clear(self) -> None:
        self.transport.clear()

    def close(self) -> None:
        self.http.close()


@pytest.fixture
def recorder_factory():
    """`recorder_factory(base_url)`: a Recorder for a server of the test's own."""
    made: list[Recorder] = []

    def make(base_url: str) -> Recorder:
        recording = Recorder(base_url)
        made.append(recording)
        return recording

    try:
        yield make
    finally:
        for recording in made:
            recording.close()


@pytest.fixture
def recorder(srv: str, recorder_factory) -> Recorder:
    return recorder_factory(f"{srv}/t1")


@pytest.fixture(scope="module")
def module_recorder(server: TeamsterServer) -> typing.Iterator[Recorder]:
    """A Recorder on the shared server that lives for one test module (for module fixtures)."""
    recording = Recorder(server.gateway_url)
    try:
        yield recording
    finally:
        recording.close()


@pytest.fixture
def fresh_agent(api: wire.Api) -> dict:
    """A new agent on the shared server (`{"id", "name", "manifest"}`), for tests that must
    count their own sessions."""
    return api.create_agent(wire.unique("agent"))
