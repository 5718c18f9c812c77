"""A post whose outcome is unknown, against the real app: stored once, never twice.

The service stores the message, then the client gets no usable answer: a 503
(as when a Cassandra write timed out yet was applied) or a reset after the
request was sent. The client must not post it again, and must say the outcome
is unknown.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading

import pytest

from queuey.client import QueueyClient, Unavailable
from tests.support import wait_until


def test_a_post_stored_but_answered_503_is_stored_once(client, faulty_server):
    """Against the real app: the message is stored, then the answer is a 503."""
    client.create_queue("once", partitions=1)
    faulty_server.injector.fail("POST", "/queue/once", after=True)
    poster = QueueyClient(
        faulty_server.url, faulty_server.application, faulty_server.key, retries=4, backoff=0.01
    )
    with poster, pytest.raises(Unavailable) as info:
        poster.post("once", {"crash_id": "c1"})
    stored = client.read("once", order="ascending")
    figures = (
        f"sent 1, answered 503 {faulty_server.injector.hits} time(s), stored {len(stored)}, "
        f"duplicates {max(0, len(stored) - 1)}"
    )
    print(figures)
    assert len(stored) == 1 and faulty_server.injector.hits == 1, figures
    assert getattr(info.value, "outcome_unknown", None) is True, figures


def test_a_post_whose_answer_is_cut_off_is_stored_once(client, live_server):
    """Against the real app: a proxy forwards the request, then resets the connection."""
    client.create_queue("cut", partitions=1)
    proxy = CuttingProxy(live_server.url)
    try:
        poster = QueueyClient(proxy.url, live_server.application, live_server.key, retries=4)
        with poster, pytest.raises(Unavailable) as info:
            poster.post("cut", {"crash_id": "c1"})
        wait_until(lambda: client.read("cut"), 10, "the message to be stored")
        stored = client.read("cut")
        figures = f"sent 1, forwarded {proxy.forwarded}, stored {len(stored)}"
        print(figures)
        assert len(stored) == 1 and proxy.forwarded == 1, figures
        assert getattr(info.value, "outcome_unknown", None) is True, figures
    finally:
        proxy.close()


class CuttingProxy:
    """Forwards each request to the real server, then closes the client's
    connection without an answer (a reset after sending)."""

    def __init__(self, target: str) -> None:
        host, port = target.removeprefix("http://").rsplit(":", 1)
        self.target = (host, int(port))
        self.forwarded = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            while len(body) < length:
                body += conn.recv(65536)
            with socket.create_connection(self.target) as upstream:
                upstream.sendall(head + b"\r\n\r\n" + body)
                upstream.recv(65536)  # the server answered: the request took effect
            self.forwarded += 1
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.close()
