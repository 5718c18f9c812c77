"""Small helpers the benchmarks share."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request


def free_port() -> int:
    """A free TCP port on loopback (the kernel's choice)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_http(url: str, timeout: float = 60.0) -> None:
    """Poll ``url`` until it answers 200, or raise after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} did not answer within {timeout}s")
        time.sleep(0.1)
