"""Test helpers shared by several test packages (no fixtures here)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from waitress.server import create_server

APP = "testapp"
KEY = "test-key-1"
ROTATED_KEY = "test-key-2"
REMOTE_APP = "remoteapp"  # its key is only valid from 10.0.0.0/8
REMOTE_KEY = "remote-key"

APPLICATIONS_INI = f"""
[application:{APP}]
keys =
    plain:{KEY}
    sha256:{{rotated_sha}}
allow = 127.0.0.0/8, ::1/128

[application:{REMOTE_APP}]
keys = plain:{REMOTE_KEY}
allow = 10.0.0.0/8
"""


def write_applications(path: Path) -> Path:
    import hashlib

    sha = hashlib.sha256(ROTATED_KEY.encode()).hexdigest()
    path.write_text(APPLICATIONS_INI.replace("{rotated_sha}", sha), encoding="utf-8")
    return path


class ClockProxy:
    """A clock that forwards to whichever clock the current test set."""

    def __init__(self, target: Any) -> None:
        self.target = target

    def now_micros(self) -> int:
        return self.target.now_micros()


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05,
               what: str = "condition") -> Any:
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


def start_live_server(wsgi_app: Any, threads: int = 8) -> LiveServer:
    server = create_server(wsgi_app, host="127.0.0.1", port=0, threads=threads)
    thread = threading.Thread(target=server.run, name="waitress", daemon=True)
    thread.start()
    port = server.effective_port
    return LiveServer(
        url=f"http://127.0.0.1:{port}",
        application=APP,
        key=KEY,
        app=wsgi_app,
        _server=server,
        _thread=thread,
    )
