"""Test helpers shared by several test packages (no fixtures here)."""

from __future__ import annotations

import hashlib
import itertools
import os
import random
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from webtest.http import StopableWSGIServer

KEY = "test-key-1"
ROTATED_KEY = "test-key-2"  # stored as its sha256 digest
REMOTE_KEY = "remote-key"  # valid only from 10.0.0.0/8
SQS_SECRET = "test-sqs-secret"  # the test application's SigV4 secret for the SQS endpoint
REMOTE_SQS_SECRET = "remote-sqs-secret"  # the remote application's (secrets are never shared)

#: The pytest-xdist worker this process is ("gw0", "gw1"...), "" without ``-n``.
#: xdist sets it before any conftest is imported, so module constants may use it.
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
WORKER_INDEX = int(XDIST_WORKER[2:]) if XDIST_WORKER[2:].isdigit() else 0

#: Runs that share one Cassandra node at once (parallel checkouts) each set their own;
#: under xdist each worker has its own (``queuey_test_gw0``...), dropped when it starts.
CASSANDRA_KEYSPACE = os.environ.get("QUEUEY_TEST_KEYSPACE", "queuey_test") + (
    f"_{XDIST_WORKER}" if XDIST_WORKER else ""
)

APPLICATIONS_INI = """
[application:{app}]
keys =
    plain:{key}
    sha256:{rotated_sha}
allow = 127.0.0.0/8, ::1/128
sqs_secret = {sqs_secret}

[application:{remote_app}]
keys = plain:{remote_key}
allow = 10.0.0.0/8
sqs_secret = {remote_sqs_secret}
"""


@dataclass(frozen=True)
class TestApps:
    """The applications one test may use; names are unique per test, so tests
    can share a Cassandra keyspace without seeing each other's queues."""

    app: str
    remote_app: str

    @property
    def auth(self) -> dict[str, str]:
        return {"X-Application-Name": self.app, "ApplicationKey": KEY}

    @property
    def reader(self) -> dict[str, str]:
        return {"X-Application-Name": self.app}

    @property
    def remote_auth(self) -> dict[str, str]:
        return {"X-Application-Name": self.remote_app, "ApplicationKey": REMOTE_KEY}


def write_applications(path: Path, apps: TestApps, remote_on_loopback: bool = False) -> Path:
    """The applications file; ``remote_on_loopback``: the remote application
    may call from loopback too (tests of a queue it shares with the other)."""
    sha = hashlib.sha256(ROTATED_KEY.encode()).hexdigest()
    text = APPLICATIONS_INI.format(
        app=apps.app,
        key=KEY,
        rotated_sha=sha,
        remote_app=apps.remote_app,
        remote_key=REMOTE_KEY,
        sqs_secret=SQS_SECRET,
        remote_sqs_secret=REMOTE_SQS_SECRET,
    )
    if remote_on_loopback:
        text = text.replace("allow = 10.0.0.0/8", "allow = 127.0.0.0/8, ::1/128")
    path.write_text(text, encoding="utf-8")
    return path


def wait_until(
    predicate: Callable[[], Any],
    timeout: float = 10.0,
    what: str | Callable[[], str] = "condition",
    interval: float = 0.05,
) -> Any:
    """Poll ``predicate`` until it returns a truthy value or the deadline passes.

    ``what`` names the condition in the timeout's message; a callable is asked
    only then, so the message can tell the state at the deadline.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            described = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout}s waiting for {described}")
        time.sleep(interval)


@dataclass
class LiveServer:
    """A waitress server on a free loopback port, in a thread (webtest's
    StopableWSGIServer, which shuts its channels down cleanly)."""

    url: str
    application: str
    key: str
    app: Any
    _server: Any

    def stop(self) -> None:
        if not self._server.was_shutdown:
            self._server.shutdown()
            self._server.runner.join(timeout=10)


def start_live_server(wsgi_app: Any, application: str, threads: int = 8) -> LiveServer:
    server = StopableWSGIServer.create(
        wsgi_app, host="127.0.0.1", threads=threads, expose_tracebacks=False
    )
    return LiveServer(
        url=f"http://127.0.0.1:{server.effective_port}",
        application=application,
        key=KEY,
        app=wsgi_app,
        _server=server,
    )


def cassandra_settings_for(contact_points: list[str], port: int) -> dict[str, str]:
    """Settings for the test keyspace on the Cassandra node(s) at ``contact_points``."""
    return {
        "queuey.storage.backend": "queuey.storage.cassandra",
        "queuey.cassandra.contact_points": ",".join(contact_points),
        "queuey.cassandra.port": str(port),
        "queuey.cassandra.keyspace": CASSANDRA_KEYSPACE,
        "queuey.cassandra.create_schema": "true",
        "queuey.cassandra.request_timeout": "5",
    }


#: Tests run without the operators' refresher thread (queuey.core.overview) and
#: the schedule ticker (queuey.core.schedules): they would outlive the test's
#: storage and read it while it closes. Tests of them call
#: ``Overview.refresh_pass`` / ``Schedules.tick`` or set the interval themselves.
NO_REFRESHER = {"queuey.stats.interval": "0", "queuey.schedules.interval": "0"}


def server_settings(request, applications_file, backend: str, sqlite_path) -> dict[str, str]:
    """The settings of a server process or thread on ``backend``: the test
    applications, and on Cassandra the session's keyspace and a read delay
    longer than its write timeout."""
    base = {
        "queuey.applications": str(applications_file),
        "queuey.read_delay": "0",
        **NO_REFRESHER,
    }
    if backend == "sqlite":
        base["queuey.storage.backend"] = "queuey.storage.sqlite"
        base["queuey.sqlite.path"] = str(sqlite_path)
    elif backend == "cassandra":
        base.update(request.getfixturevalue("cassandra_settings"))
        base["queuey.read_delay"] = "6"
    else:
        raise ValueError(backend)
    return base


#: Under xdist, worker ``n`` hands out ports from a block of its own below the
#: kernel's ephemeral range (32768 and up): two workers never pick the same
#: port, and no client connection's local port takes one between the pick and
#: the server's bind. The blocks stay clear of the harness's fixed ports (12181,
#: 12381+, 17000-17699, 19042-19642).
WORKER_PORTS_START = 20000
WORKER_PORTS_SPAN = 800
_worker_ports = itertools.count(random.randrange(WORKER_PORTS_SPAN))


def free_port() -> int:
    """A loopback port nothing listens on right now (from this worker's block under xdist)."""
    if not XDIST_WORKER:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]
    first = WORKER_PORTS_START + (WORKER_INDEX % 15) * WORKER_PORTS_SPAN
    for _ in range(WORKER_PORTS_SPAN):
        port = first + next(_worker_ports) % WORKER_PORTS_SPAN
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))  # no SO_REUSEADDR: skips TIME_WAIT too
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {first}..{first + WORKER_PORTS_SPAN - 1}")
