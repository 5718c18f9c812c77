"""Bodies over their route's limit on the production server as shipped (granian,
2 workers), from a client that sends a few bytes and then stalls, or streams
a chunked body without end: answered 413 at once, before the body arrives,
without credentials. (Every route, in process: ``tests/web/test_body_limits.py``.)
"""

from __future__ import annotations

import socket
import time

import pytest
import requests

pytestmark = pytest.mark.slow

LIMITS = {
    "queuey.max_message_size": "2048",
    "queuey.max_batch_size": "4096",
    "queuey.max_form_size": "2048",
}
#: Path, content type, the route's limit.
ROUTES = [
    ("/admin/signin", "application/x-www-form-urlencoded", 2048),
    ("/queue/somequeue", "application/json", 2048),
    ("/queue/somequeue/batch", "application/json", 4096),
    ("/", "application/x-www-form-urlencoded", 3 * 2048 + 65536),  # SQS
]
#: Seconds within which a refusal must come (the client waits no longer).
DEADLINE = 2.0


def status_of(sock: socket.socket) -> int:
    head = b""
    while b"\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            break
        head += chunk
    return int(head.split(b" ", 2)[1])


def stalled(port: int, path: str, content_type: str, length: int) -> tuple[int, float]:
    """Declare ``length`` bytes, send 100, wait for the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as sock:
        started = time.monotonic()
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {length}\r\n\r\n".encode()
            + b"x" * 100
        )
        return status_of(sock), time.monotonic() - started


def endless(port: int, path: str, content_type: str, limit: int) -> tuple[int, float, int]:
    """A chunked body sent 1 KiB at a time until the server answers (or 16x the limit)."""
    with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as sock:
        started = time.monotonic()
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\n"
            "Transfer-Encoding: chunked\r\n\r\n".encode()
        )
        sent = 0
        sock.setblocking(False)
        while sent < 16 * limit:
            try:
                if sock.recv(1, socket.MSG_PEEK):
                    break
            except BlockingIOError:
                pass
            try:
                sock.sendall(b"400\r\n" + b"x" * 1024 + b"\r\n")
            except (BlockingIOError, BrokenPipeError, ConnectionResetError):
                break
            sent += 1024
        sock.setblocking(True)
        sock.settimeout(DEADLINE)
        return status_of(sock), time.monotonic() - started, sent


def once_more_on_reset(probe, *args):
    """``probe(*args)``, again if the connection was reset: the server closes
    after its 413 with body bytes unread, and the kernel's reset may then
    beat the answer to the client (a race of TCP, not of the service)."""
    try:
        return probe(*args)
    except ConnectionResetError:
        return probe(*args)


def test_oversized_bodies_are_refused_before_they_arrive(make_api_node):
    node = make_api_node("bodies", server="granian", **LIMITS)
    worst = 0.0
    for path, content_type, limit in ROUTES:
        status, elapsed = once_more_on_reset(stalled, node.port, path, content_type, 16 * limit)
        assert status == 413, (path, status)
        worst = max(worst, elapsed)
        status, elapsed, sent = once_more_on_reset(endless, node.port, path, content_type, limit)
        # (What was sent says little: loopback's socket buffers take megabytes.)
        assert status == 413, (path, status, sent)
        worst = max(worst, elapsed)
    # A body within its limit that stalls holds its connection, not the server.
    with socket.create_connection(("127.0.0.1", node.port), timeout=1) as sock:
        sock.sendall(
            b"POST /admin/signin HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 2000\r\n\r\nkey="
        )
        started = time.monotonic()
        assert requests.get(node.url + "/__lbheartbeat__", timeout=DEADLINE).status_code == 200
        answered_in = time.monotonic() - started
    print(
        f"\n[granian, 2 workers, limits of 2-70 KiB] slowest 413 for a stalled or endless "
        f"body: {worst * 1000:.0f} ms; heartbeat beside a stalled body: {answered_in * 1000:.0f} ms"
    )
    assert worst < DEADLINE
