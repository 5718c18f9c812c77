"""Small helpers the benchmarks share."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path


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


def start_pserve(ini: Path, log_path: Path) -> subprocess.Popen:
    """``pserve ini`` from this interpreter's environment, in a session of its
    own (so :func:`stop_process_group` can reach its workers), its stderr
    appended to ``log_path``."""
    with open(log_path, "ab") as log_file:
        return subprocess.Popen(
            [str(Path(sys.executable).parent / "pserve"), str(ini)],
            stdout=subprocess.DEVNULL,
            stderr=log_file,
            start_new_session=True,
        )


def stop_process_group(proc: subprocess.Popen, timeout: float = 30) -> None:
    """Terminate ``proc``; if it has not exited within ``timeout`` seconds,
    kill its whole process group (it leads one: ``start_new_session``)."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait(timeout=timeout)
