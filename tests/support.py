"""Test helpers shared by several test packages (no fixtures here)."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from waitress.server import create_server

KEY = "test-key-1"
ROTATED_KEY = "test-key-2"  # stored as its sha256 digest
REMOTE_KEY = "remote-key"  # valid only from 10.0.0.0/8

APPLICATIONS_INI = """
[application:{app}]
keys =
    plain:{key}
    sha256:{rotated_sha}
allow = 127.0.0.0/8, ::1/128

[application:{remote_app}]
keys = plain:{remote_key}
allow = 10.0.0.0/8
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


def write_applications(path: Path, apps: TestApps) -> Path:
    sha = hashlib.sha256(ROTATED_KEY.encode()).hexdigest()
    text = APPLICATIONS_INI.format(
        app=apps.app, key=KEY, rotated_sha=sha, remote_app=apps.remote_app, remote_key=REMOTE_KEY
    )
    path.write_text(text, encoding="utf-8")
    return path


def wait_until(
    predicate: Callable[[], Any],
    timeout: float = 10.0,
    interval: float = 0.05,
    what: str = "condition",
) -> Any:
    """Poll ``predicate`` until it returns a truthy value or the deadline passes."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


@dataclass
class LiveServer:
    """A waitress server on an ephemeral loopback port, in a thread."""

    url: str
    application: str
    key: str
    app: Any
    _server: Any
    _thread: threading.Thread

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.close()
            self._thread.join(timeout=10)


def start_live_server(wsgi_app: Any, application: str, threads: int = 8) -> LiveServer:
    server = create_server(wsgi_app, host="127.0.0.1", port=0, threads=threads)
    thread = threading.Thread(target=server.run, name="waitress", daemon=True)
    thread.start()
    port = server.effective_port
    return LiveServer(
        url=f"http://127.0.0.1:{port}",
        application=application,
        key=KEY,
        app=wsgi_app,
        _server=server,
        _thread=thread,
    )
