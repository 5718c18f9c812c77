"""Peer calls between API processes (:mod:`queuey.storage.cassandra.peers`):
answers reach the caller that asked, strangers and replayed frames are shut
out before the handler runs, and every failure the caller can meet is a
:class:`PeerUnavailable` within the time it allowed. No Cassandra needed.
What strangers may cost the server: ``test_cassandra_peer_limits.py``."""

from __future__ import annotations

import logging
import os
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from queuey.errors import StorageUnavailable
from queuey.storage.cassandra import peerchannel, peerserver
from queuey.storage.cassandra.peerchannel import OutcomeUnknown
from queuey.storage.cassandra.peers import PeerClient, PeerNoAnswer, PeerServer, PeerUnavailable
from tests.support import wait_until

SECRET = b"peer-secret-for-tests-0123456789"


class Handler:
    """Counts calls; ``echo`` answers its arguments, the other ops misbehave."""

    def __init__(self) -> None:
        self.calls = 0
        self.lock = threading.Lock()
        self.release = threading.Event()

    def __call__(self, op: str, args: dict[str, Any]) -> Any:
        with self.lock:
            self.calls += 1
        if op == "slow":
            self.release.wait(30)
        if op == "moving":
            raise StorageUnavailable("cassandra: partition ownership moved, retry", retry_after=3)
        if op == "unsure":
            raise OutcomeUnknown("cassandra: ownership term ended during a write, retry")
        if op == "boom":
            raise RuntimeError("the internal detail nobody outside may see")
        if op == "not-a-dict":
            return ["a", "list"]
        if op == "large":
            return {"body": "x" * args["size"]}
        return {"op": op, "args": args}


@pytest.fixture
def handler() -> Iterator[Handler]:
    h = Handler()
    yield h
    h.release.set()


@pytest.fixture
def server(handler) -> Iterator[PeerServer]:
    s = PeerServer(handler, "127.0.0.1", SECRET)
    s.start()
    yield s
    s.close()


@pytest.fixture
def client() -> Iterator[PeerClient]:
    c = PeerClient(SECRET, connect_timeout=2.0)
    yield c
    c.close()


def _endpoint(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def _hello(address: str) -> socket.socket:
    """A raw connection that has read the server's nonce (a stranger)."""
    sock = socket.create_connection(_endpoint(address), timeout=5)
    nonce = b""
    while len(nonce) < peerchannel.NONCE_BYTES:
        chunk = sock.recv(peerchannel.NONCE_BYTES - len(nonce))
        assert chunk, "the server closed before its nonce"
        nonce += chunk
    return sock


def _authenticated(address: str) -> peerchannel.Channel:
    """A raw connection on which both ends proved the secret."""
    sock = socket.create_connection(_endpoint(address), timeout=5)
    return peerchannel.open_client(sock, SECRET, time.monotonic() + 5)


def _closed_by_server(sock: socket.socket) -> bool:
    """The server ended the connection (end of stream or reset) without answering."""
    sock.settimeout(5)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


class Proxy:
    """A TCP relay in front of a server that records what clients send, so
    tests can replay captured frames."""

    def __init__(self, upstream: str) -> None:
        self.upstream = _endpoint(upstream)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.1)
        self.address = "127.0.0.1:%d" % self.listener.getsockname()[1]
        self.sent: list[bytearray] = []  # client-to-server bytes, per connection
        self.upstreams: list[socket.socket] = []
        self.relays_done = 0  # connections relayed to their end, both sides closed
        self.stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                down, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed
            try:
                up = socket.create_connection(self.upstream)
            except OSError:
                down.close()
                continue
            record = bytearray()
            self.sent.append(record)
            self.upstreams.append(up)
            threading.Thread(target=self._relay, args=(down, up, record), daemon=True).start()

    def _relay(self, down: socket.socket, up: socket.socket, record: bytearray) -> None:
        back = threading.Thread(target=self._pump, args=(up, down, None), daemon=True)
        back.start()
        self._pump(down, up, record)
        back.join()
        down.close()
        up.close()
        self.relays_done += 1

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, record: bytearray | None) -> None:
        """Copy until either side ends, then end both (so the other pump stops too)."""
        try:
            while data := src.recv(65536):
                if record is not None:
                    record += data
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.stopped.set()
        self.listener.close()
        for sock in self.upstreams:
            try:  # its relay closes it
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@pytest.fixture
def proxy(server) -> Iterator[Proxy]:
    p = Proxy(server.address)
    yield p
    p.close()


# -- answers ----------------------------------------------------------------------
def test_a_call_returns_the_handlers_answer(server, client, handler):
    args = {"queue": {"name": "q", "partitions": [1, 2]}, "text": "héllo ✓", "n": 2**40}
    assert client.call(server.address, "echo", args, timeout=5) == {"op": "echo", "args": args}
    assert client.call(server.address, "again", {}, timeout=5) == {"op": "again", "args": {}}
    assert handler.calls == 2
    assert server.connections == 1  # the second call reused the pooled connection


def test_large_payloads_arrive_whole(server, client):
    body = "x" * (peerchannel.MAX_REQUEST - 1000)  # a request near its bound
    answer = client.call(server.address, "echo", {"body": body}, timeout=30)
    assert answer["args"]["body"] == body
    size = 20 * 1024 * 1024 + 17  # answers may be larger: reserves carry message bodies
    assert client.call(server.address, "large", {"size": size}, timeout=30)["body"] == "x" * size


def test_concurrent_calls_get_their_own_answers(server, client, handler):
    failures: list[str] = []

    def worker(t: int) -> None:
        for i in range(200):
            args = {"thread": t, "i": i, "pad": "p" * (i % 7) * 100}
            answer = client.call(server.address, f"op-{t}", args, timeout=10)
            if answer != {"op": f"op-{t}", "args": args}:
                failures.append(f"thread {t} call {i} got {answer!r:.200}")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert handler.calls == 8 * 200
    assert server.connections <= 8  # connections were pooled, not one per call


# -- strangers and replays --------------------------------------------------------
def test_a_client_with_the_wrong_secret_is_shut_out(server, handler):
    stranger = PeerClient(b"not-the-secret-but-just-as-long!", connect_timeout=2.0)
    try:
        with pytest.raises(PeerUnavailable):
            stranger.call(server.address, "echo", {}, timeout=5)
    finally:
        stranger.close()
    assert handler.calls == 0
    wait_until(lambda: server.connections == 0, what="the server to close the connection")


def test_a_captured_frame_replayed_on_a_new_connection_is_refused(server, client, handler, proxy):
    assert client.call(proxy.address, "echo", {"n": 1}, timeout=5)["args"] == {"n": 1}
    captured = bytes(proxy.sent[0])
    sock = _hello(server.address)
    try:
        sock.sendall(captured)
        assert _closed_by_server(sock)
    finally:
        sock.close()
    assert handler.calls == 1


def test_a_frame_replayed_on_its_own_connection_is_refused(server, client, handler, proxy):
    assert client.call(proxy.address, "echo", {"n": 1}, timeout=5)["args"] == {"n": 1}
    frame = bytes(proxy.sent[0][peerchannel.HELLO_BYTES :])
    proxy.upstreams[0].sendall(frame)  # the same frame again, out of order
    wait_until(lambda: server.connections == 0, what="the server to close the connection")
    wait_until(lambda: proxy.relays_done == 1, what="the proxy to pass the close on")
    assert handler.calls == 1
    # The client finds its pooled connection dead before sending, and replaces it.
    assert client.call(proxy.address, "echo", {"n": 2}, timeout=5)["args"] == {"n": 2}
    assert handler.calls == 2


def test_an_oversized_length_is_refused_before_its_body(handler):
    server = PeerServer(handler, "127.0.0.1", SECRET, max_request=1024)
    server.start()
    try:
        for length in (1025, 2**32 - 1):
            sock = _authenticated(server.address).sock
            try:  # only the length is sent: the server must not wait for 4 GiB
                sock.sendall(struct.pack(">I", length))
                assert _closed_by_server(sock)
            finally:
                sock.close()
        client = PeerClient(SECRET)
        try:
            with pytest.raises(PeerUnavailable):
                client.call(server.address, "echo", {"body": "x" * 2000}, timeout=5)
            assert client.call(server.address, "echo", {"body": "x"}, timeout=5)
        finally:
            client.close()
        assert handler.calls == 1
    finally:
        server.close()


def test_a_connection_that_never_speaks_is_closed(handler):
    server = PeerServer(handler, "127.0.0.1", SECRET, hello_seconds=0.2)
    server.start()
    sock = _hello(server.address)
    try:
        started = time.monotonic()
        assert _closed_by_server(sock)
        assert time.monotonic() - started < 2
        assert server.strangers == 0
    finally:
        sock.close()
        server.close()


def test_a_half_hello_is_closed_at_the_hello_deadline(handler):
    server = PeerServer(handler, "127.0.0.1", SECRET, hello_seconds=0.3)
    server.start()
    sock = _hello(server.address)
    try:
        sock.sendall(os.urandom(peerchannel.HELLO_BYTES - 1))  # one byte short, then silence
        assert _closed_by_server(sock)
        assert handler.calls == 0
    finally:
        sock.close()
        server.close()


def test_peer_connections_beyond_the_limit_are_refused(handler):
    server = PeerServer(handler, "127.0.0.1", SECRET, max_connections=1)
    server.start()
    holder, client = PeerClient(SECRET), PeerClient(SECRET)
    try:
        assert holder.call(server.address, "echo", {}, timeout=5)["op"] == "echo"  # pooled
        with pytest.raises(PeerUnavailable, match="no hello"):
            client.call(server.address, "echo", {}, timeout=5)
        holder.close()
        wait_until(lambda: server.connections == 0, what="the slot to free up")
        assert client.call(server.address, "echo", {}, timeout=5)["op"] == "echo"
    finally:
        holder.close()
        client.close()
        server.close()


# -- failures the caller sees -----------------------------------------------------
def test_a_server_that_went_away_fails_fast(handler):
    server = PeerServer(handler, "127.0.0.1", SECRET)
    server.start()
    address = server.address
    server.close()
    client = PeerClient(SECRET, connect_timeout=0.5)
    try:
        started = time.monotonic()
        with pytest.raises(PeerUnavailable, match="cannot connect"):
            client.call(address, "echo", {}, timeout=30)
        assert time.monotonic() - started < 5  # the connect timeout, not the call's
    finally:
        client.close()


def test_a_peer_that_accepts_but_never_greets_fails_within_the_connect_timeout():
    mute = socket.create_server(("127.0.0.1", 0))  # the kernel accepts; no one answers
    client = PeerClient(SECRET, connect_timeout=0.3)
    try:
        started = time.monotonic()
        with pytest.raises(PeerUnavailable, match="no hello"):
            client.call("127.0.0.1:%d" % mute.getsockname()[1], "echo", {}, timeout=30)
        assert time.monotonic() - started < 5
    finally:
        client.close()
        mute.close()


def test_a_slow_handler_fails_at_the_calls_timeout_and_is_not_called_again(server, client, handler):
    started = time.monotonic()
    with pytest.raises(PeerUnavailable, match="timed out"):
        client.call(server.address, "slow", {}, timeout=0.3)
    assert time.monotonic() - started < 5
    handler.release.set()
    assert client.call(server.address, "echo", {}, timeout=5)["op"] == "echo"
    assert handler.calls == 2  # the slow call was sent once, never re-sent


def test_storage_unavailable_in_the_handler_reaches_the_caller(server, client):
    with pytest.raises(PeerUnavailable) as raised:
        client.call(server.address, "moving", {}, timeout=5)
    assert str(raised.value) == "cassandra: partition ownership moved, retry"
    assert raised.value.retry_after == 3
    assert isinstance(raised.value, StorageUnavailable)
    # An error answer leaves the connection usable.
    assert client.call(server.address, "echo", {}, timeout=5)["op"] == "echo"
    assert server.connections == 1


def test_a_handler_that_did_nothing_and_one_that_may_have_are_told_apart(server, client):
    """``unavailable``: the call did nothing, the caller may route it again
    and trust the next answer; a write the handler cannot vouch for
    (:class:`OutcomeUnknown`) reaches the caller as :class:`PeerNoAnswer`, as
    a call sent and never answered does."""
    with pytest.raises(PeerUnavailable) as nothing:
        client.call(server.address, "moving", {}, timeout=5)
    assert not isinstance(nothing.value, PeerNoAnswer)
    with pytest.raises(PeerNoAnswer) as maybe:
        client.call(server.address, "unsure", {}, timeout=5)
    assert "ownership term ended during a write" in str(maybe.value)


@pytest.mark.parametrize("op", ["boom", "not-a-dict"])
def test_a_handler_failure_is_logged_there_and_short_here(server, client, caplog, op):
    with caplog.at_level(logging.ERROR, logger=peerserver.__name__):
        with pytest.raises(PeerNoAnswer) as raised:  # it may have done part of its work
            client.call(server.address, op, {}, timeout=5)
    message = str(raised.value)
    assert op in message and server.address in message
    assert "internal detail" not in message and "Traceback" not in message
    assert len(message) < 200
    assert any(r.exc_info for r in caplog.records), "the server logs the traceback"


# -- pooled connections -----------------------------------------------------------
def test_a_pooled_connection_to_a_restarted_server_is_replaced(handler, client):
    first = PeerServer(handler, "127.0.0.1", SECRET)
    first.start()
    address = first.address
    assert client.call(address, "echo", {"n": 1}, timeout=5)["args"] == {"n": 1}
    first.close()
    second = PeerServer(handler, "127.0.0.1", SECRET, port=_endpoint(address)[1])
    second.start()
    try:
        assert second.address == address
        assert client.call(address, "echo", {"n": 2}, timeout=5)["args"] == {"n": 2}
        assert handler.calls == 2
    finally:
        second.close()


def test_the_server_closes_idle_connections_and_the_client_reconnects(handler, client):
    server = PeerServer(handler, "127.0.0.1", SECRET, idle_seconds=0.2)
    server.start()
    try:
        assert client.call(server.address, "echo", {}, timeout=5)["op"] == "echo"
        wait_until(lambda: server.connections == 0, what="the idle connection to close")
        assert client.call(server.address, "echo", {}, timeout=5)["op"] == "echo"
        assert handler.calls == 2
    finally:
        server.close()


def test_the_client_drops_connections_idle_past_a_minute(server, proxy):
    now = [1000.0]
    client = PeerClient(SECRET, clock=lambda: now[0])
    try:
        client.call(proxy.address, "echo", {}, timeout=5)
        now[0] += 59
        client.call(proxy.address, "echo", {}, timeout=5)
        assert len(proxy.sent) == 1  # reused within the minute
        now[0] += 61
        client.call(proxy.address, "echo", {}, timeout=5)
        assert len(proxy.sent) == 2  # a new connection; the stale one is closed
        wait_until(lambda: server.connections == 1, what="the stale connection to close")
    finally:
        client.close()


def test_closing_twice_is_harmless(handler, client):
    server = PeerServer(handler, "127.0.0.1", SECRET)
    server.start()
    address = server.address
    assert client.call(address, "echo", {}, timeout=5)["op"] == "echo"
    server.close()
    server.close()
    with pytest.raises(PeerUnavailable):
        client.call(address, "echo", {}, timeout=5)
    client.close()
    client.close()


def test_a_short_secret_is_refused():
    with pytest.raises(ValueError, match="16 bytes"):
        PeerClient(b"short")
    with pytest.raises(ValueError, match="16 bytes"):
        PeerServer(lambda op, args: {}, "127.0.0.1", b"short")
