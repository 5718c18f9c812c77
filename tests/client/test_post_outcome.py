"""A post whose outcome is unknown, against the real app: stored once, never twice.

The service stores the message, then the client gets no usable answer: a 503
(as when a Cassandra write timed out yet was applied) or a reset after the
request was sent. The client posts it again with the same ``dedup_id`` (made
up by the client unless the caller gave one), so the retry succeeds and the
service still holds the message once. With ``auto_dedup=False`` and no
``dedup_id`` the client must not post it again, and says the outcome is unknown.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading

import pytest

from queuey.client import OutgoingMessage, QueueyClient, Unavailable
from tests.support import wait_until


def figures(sent: int, answered: str, stored: int, posted_ids: set[str]) -> str:
    return (
        f"sent {sent}, {answered}, stored {stored}, duplicates {max(0, stored - sent)}, "
        f"answered ids match stored: {posted_ids}"
    )


@pytest.mark.parametrize("method", ["post", "post_batch"])
def test_a_post_stored_but_answered_503_is_retried_and_stored_once(client, faulty_server, method):
    """Against the real app: the message is stored, then the answer is a 503;
    the client's retry carries the same dedup_id and gets the first message's id."""
    client.create_queue("once", partitions=1)
    injector = faulty_server.injector
    injector.fail("POST", "/queue/once", after=True, times=1)
    poster = QueueyClient(
        faulty_server.url, faulty_server.application, faulty_server.key, retries=4, backoff=0.01
    )
    with poster:
        if method == "post":
            answered = [poster.post("once", {"crash_id": "c1"})]
        else:
            answered = poster.post_batch("once", [{"crash_id": "c1"}, {"crash_id": "c2"}])
    stored = client.read("once", order="ascending")
    same = {p.message_id for p in answered} == {m.message_id for m in stored}
    text = figures(len(answered), f"answered 503 {injector.hits} time(s)", len(stored), same)
    print(text)
    assert injector.hits == 1 and len(stored) == len(answered) and same, text


def test_a_post_whose_answer_is_cut_off_is_retried_and_stored_once(client, live_server):
    """Against the real app: a proxy forwards the request, then resets the
    connection (once); the retry goes through and the message is stored once."""
    client.create_queue("cut", partitions=1)
    proxy = CuttingProxy(live_server.url, cuts=1)
    try:
        poster = QueueyClient(proxy.url, live_server.application, live_server.key, retries=4)
        with poster:
            answered = poster.post("cut", {"crash_id": "c1"})
        stored = client.read("cut")
        same = [m.message_id for m in stored] == [answered.message_id]
        text = figures(1, f"forwarded {proxy.forwarded}, cut {proxy.cut}", len(stored), same)
        print(text)
        assert proxy.forwarded == 2 and proxy.cut == 1 and same, text
    finally:
        proxy.close()


def test_a_callers_dedup_id_makes_a_post_safe_to_send_again_by_hand(client):
    client.create_queue("orders", partitions=2)
    entry = OutgoingMessage({"order": 17}, dedup_id="order-17")
    first = client.post_batch("orders", [entry])
    again = client.post_batch("orders", [entry])  # e.g. after the caller's own retries ran out
    assert again == first and len(client.read("orders")) == 1


def test_without_auto_dedup_a_post_answered_503_is_sent_once(client, faulty_server):
    """The old rule: no dedup_id, no repeat; the outcome is unknown."""
    client.create_queue("once", partitions=1)
    faulty_server.injector.fail("POST", "/queue/once", after=True)
    poster = QueueyClient(
        faulty_server.url,
        faulty_server.application,
        faulty_server.key,
        retries=4,
        backoff=0.01,
        auto_dedup=False,
    )
    with poster, pytest.raises(Unavailable) as info:
        poster.post("once", {"crash_id": "c1"})
    stored = client.read("once", order="ascending")
    text = figures(1, f"answered 503 {faulty_server.injector.hits} time(s)", len(stored), True)
    print(text)
    assert len(stored) == 1 and faulty_server.injector.hits == 1, text
    assert getattr(info.value, "outcome_unknown", None) is True, text


def test_without_auto_dedup_a_post_whose_answer_is_cut_off_is_sent_once(client, live_server):
    client.create_queue("cut", partitions=1)
    proxy = CuttingProxy(live_server.url)
    try:
        poster = QueueyClient(
            proxy.url, live_server.application, live_server.key, retries=4, auto_dedup=False
        )
        with poster, pytest.raises(Unavailable) as info:
            poster.post("cut", {"crash_id": "c1"})
        wait_until(lambda: client.read("cut"), 10, "the message to be stored")
        stored = client.read("cut")
        text = f"sent 1, forwarded {proxy.forwarded}, stored {len(stored)}"
        print(text)
        assert len(stored) == 1 and proxy.forwarded == 1, text
        assert getattr(info.value, "outcome_unknown", None) is True, text
    finally:
        proxy.close()


class CuttingProxy:
    """Forwards each request to the real server, then closes the client's
    connection without an answer (a reset after sending) for the first
    ``cuts`` requests (all of them when None); later ones get the answer."""

    def __init__(self, target: str, cuts: int | None = None) -> None:
        host, port = target.removeprefix("http://").rsplit(":", 1)
        self.target = (host, int(port))
        self.forwarded = 0
        self.cut = 0
        self.cuts = cuts
        self.lock = threading.Lock()
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
            while True:
                request = _read_request(conn)
                if request is None:
                    return
                with socket.create_connection(self.target) as upstream:
                    upstream.sendall(request)
                    answer = _read_answer(upstream)  # the request took effect
                with self.lock:
                    self.forwarded += 1
                    cut = self.cuts is None or self.cut < self.cuts
                    self.cut += cut
                if cut:
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    return
                conn.sendall(answer)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.close()


def _read_message(sock: socket.socket, data: bytes = b"") -> tuple[bytes, bytes] | None:
    """One HTTP message with a Content-Length body: (head, body), or None at EOF."""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return head, body


def _read_request(conn: socket.socket) -> bytes | None:
    message = _read_message(conn)
    if message is None:
        return None
    head, body = message
    # one request per upstream connection: ask the server to close it after answering
    lines = [line for line in head.split(b"\r\n") if not line.lower().startswith(b"connection:")]
    return b"\r\n".join([*lines, b"Connection: close"]) + b"\r\n\r\n" + body


def _read_answer(upstream: socket.socket) -> bytes:
    message = _read_message(upstream)
    assert message is not None, "the server closed without answering"
    head, body = message
    return head + b"\r\n\r\n" + body
