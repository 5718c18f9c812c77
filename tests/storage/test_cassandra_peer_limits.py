"""What strangers may do to a process's peer port
(:mod:`queuey.storage.cassandra.peerserver`): no frame byte read before the
hello checks out, slots of their own that peers never share, at most a few
per address, a short deadline; and what peers may: frames within their bound
and a bound on the bytes of frames being read. Memory and CPU are measured in
``test_cassandra_peer_costs.py``. No Cassandra needed."""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from queuey import jsonio
from queuey.model import QueueMeta
from queuey.storage.asks import ExtendAsk, ReleaseAsk, ReserveAsk
from queuey.storage.cassandra import wire
from queuey.storage.cassandra.peerchannel import (
    HELLO_BYTES,
    MAC_BYTES,
    MAX_ANSWER,
    MAX_REQUEST,
    NONCE_BYTES,
    hello,
    is_answer,
    open_client,
    parse,
)
from queuey.storage.cassandra.peers import PeerClient, PeerNoAnswer, PeerServer, PeerUnavailable
from queuey.storage.cassandra.peerserver import source_of
from tests.storage.peer_support import (
    SECRET,
    closed_by_server,
    endpoint,
    is_open,
    nonce,
    stranger,
)
from tests.support import wait_until

MIB = 1024 * 1024


def _echo(op: str, args: dict) -> dict:
    return {"op": op, "args": args}


class Calls:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self, op: str, args: dict) -> dict:
        self.count += 1
        return _echo(op, args)


@pytest.fixture
def server() -> Iterator[PeerServer]:
    s = PeerServer(_echo, "127.0.0.1", SECRET)
    s.start()
    yield s
    s.close()


# -- slots ----------------------------------------------------------------------------
@pytest.mark.parametrize("sources", [1, 100], ids=["the-peers-address", "100-addresses"])
def test_hundreds_of_idle_strangers_do_not_stop_a_peers_call(server, sources):
    net = "127.0.1" if sources > 1 else "127.0.0"
    strangers = [stranger(server.address, f"{net}.{1 + i % sources}") for i in range(300)]
    try:
        for sock in strangers:
            nonce(sock)  # the server took it in (or shut it out)
        client = PeerClient(SECRET)
        try:
            assert client.call(server.address, "echo", {}, timeout=5)["op"] == "echo"
        finally:
            client.close()
        assert server.strangers <= server.max_strangers
    finally:
        for sock in strangers:
            sock.close()


def test_one_address_holds_at_most_its_share_of_stranger_slots(server):
    other = stranger(server.address, "127.0.0.4")
    flood = [stranger(server.address, "127.0.0.3") for _ in range(40)]
    try:
        assert nonce(other) and all(nonce(sock) for sock in flood)
        share = server.max_strangers_per_source
        assert [is_open(sock) for sock in flood[-share:]] == [True] * share  # the newest stay
        assert all(closed_by_server(sock, 1) for sock in flood[:-share]), "the oldest go"
        assert is_open(other), "another address keeps its stranger"
    finally:
        for sock in [other, *flood]:
            sock.close()


# -- the hello ------------------------------------------------------------------------
def test_a_wrong_hello_is_closed_before_any_frame_is_read():
    calls = Calls()
    server = PeerServer(calls, "127.0.0.1", SECRET)
    server.start()
    try:
        # Bytes that announce a 64 MiB frame to a server that reads frames first.
        sock = stranger(server.address)
        nonce(sock)
        try:
            sock.sendall(struct.pack(">I", 64 * MIB) + os.urandom(HELLO_BYTES - 4) + bytes(MIB))
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server hung up before the rest was sent: what is asserted next
        started = time.monotonic()
        assert closed_by_server(sock, 5)
        assert time.monotonic() - started < 1  # not at a deadline: at once
        sock.close()
        # A hello of the right shape with another secret, and one replayed.
        client_nonce = os.urandom(NONCE_BYTES)
        sock = stranger(server.address)
        first = nonce(sock)
        sock.sendall(hello(b"another-secret-just-as-long-0123", first, client_nonce))
        assert closed_by_server(sock)
        sock.close()
        sock = stranger(server.address)
        nonce(sock)
        sock.sendall(hello(SECRET, first, client_nonce))  # good for the first nonce only
        assert closed_by_server(sock)
        sock.close()
        assert calls.count == 0
        assert server.buffered.peak == 0  # not one frame byte held for a stranger
        assert server.connections == 0
    finally:
        server.close()


def test_the_client_sends_nothing_to_a_server_that_does_not_prove_the_secret():
    impostor = socket.create_server(("127.0.0.1", 0))
    address = "127.0.0.1:%d" % impostor.getsockname()[1]
    heard: list[bytes] = []

    def serve() -> None:
        conn, _ = impostor.accept()
        with conn:
            conn.sendall(os.urandom(NONCE_BYTES))
            conn.settimeout(5)
            got = b""
            while len(got) < HELLO_BYTES and (chunk := conn.recv(HELLO_BYTES)):
                got += chunk
            try:
                conn.sendall(os.urandom(MAC_BYTES) + struct.pack(">I", 200 * MIB) + bytes(MIB))
                while chunk := conn.recv(65536):  # until the client closes
                    got += chunk
            except (BrokenPipeError, ConnectionResetError):
                pass  # it hung up on the false proof before taking it all: as it should
            heard.append(got)

    thread = threading.Thread(target=serve)
    thread.start()
    client = PeerClient(SECRET)
    try:
        with pytest.raises(PeerUnavailable, match="did not prove the secret"):
            client.call(address, "echo", {"secret-ish": "request"}, timeout=5)
    finally:
        client.close()
        thread.join(10)
        impostor.close()
    assert heard and len(heard[0]) == HELLO_BYTES, "nothing after the hello, no request"


# -- frames of peers ------------------------------------------------------------------
def test_frames_being_read_hold_at_most_max_buffered_bytes():
    server = PeerServer(_echo, "127.0.0.1", SECRET, max_request=4096, max_buffered=4096)
    server.start()
    sock = socket.create_connection(endpoint(server.address), timeout=5)
    slow = open_client(sock, SECRET, time.monotonic() + 5)
    client = PeerClient(SECRET)
    try:
        frame = slow.frame(jsonio.dumps_bytes({"op": "echo", "args": {"pad": "p" * 4000}}))
        sock.sendall(frame[:2000])  # half a frame: the server holds room for all of it
        wait_until(lambda: server.buffered.held == len(frame) - 4, what="the frame to be held")
        with pytest.raises(PeerNoAnswer):  # no room for another frame meanwhile
            client.call(server.address, "echo", {}, timeout=0.5)
        sock.sendall(frame[2000:])
        answer = parse(slow.receive(MAX_ANSWER, time.monotonic() + 5), is_answer)
        assert answer["ok"]["args"]["pad"] == "p" * 4000
        assert client.call(server.address, "echo", {}, timeout=5)["op"] == "echo"
        assert server.buffered.peak <= 4096
    finally:
        client.close()
        sock.close()
        server.close()
    with pytest.raises(ValueError, match="max_buffered"):
        PeerServer(_echo, "127.0.0.1", SECRET, max_request=4097, max_buffered=4096)


def test_the_largest_requests_fit_the_request_bound():
    """Each forwarded call at its largest (owned.py builds them the same way)."""
    wide = "\U0001f600"  # four bytes of UTF-8 per character, the most JSON keeps
    attributes = {f"sqs.{name}": wide * 20480 for name in ("Policy", "RedriveAllowPolicy")}
    attributes |= {"sqs.KmsMasterKeyId": wide * 20480}
    attributes |= {f"sqs.tag.{i:02d}{wide * 125}": wide * 256 for i in range(50)}
    queue = wire.encode_queue(
        QueueMeta(application="a" * 100, name="q" * 80, partitions=99999, attributes=attributes)
    )
    receipts = [f"99999-{'f' * 32}-{'z' * 40}" for _ in range(100)]
    sub, now = "s" * 50, 2**62
    requests = {
        "reserve": {
            "ask": wire.encode_reserve_ask(ReserveAsk(range(1, 100000), 100, 43200, now, now, 100))
        },
        "release": {
            "ask": wire.encode_release_ask(ReleaseAsk(receipts, now, 43200, "\x01" * 1024))
        },
        "extend": {"ask": wire.encode_extend_ask(ExtendAsk(receipts, now, 43200))},
        "ack": {"receipts": receipts, "now": now},
        "reopen": {"refs": [{"partition": 99999, "id": "f" * 32}], "now": now},
    }
    sizes = {}
    for op, args in requests.items():
        payload = jsonio.dumps_bytes({"op": op, "args": args | {"queue": queue, "sub": sub}})
        sizes[op] = MAC_BYTES + len(payload)
    available = {"queues": [["a" * 100, "q" * 80] for _ in range(1000)]}
    sizes["available"] = MAC_BYTES + len(jsonio.dumps_bytes({"op": "available", "args": available}))
    print("\nlargest requests (bytes):", sizes)
    assert max(sizes.values()) <= MAX_REQUEST // 2  # twice the room any needs now


def test_an_ipv6_host_counts_as_one_source():
    """One host usually holds a whole /64: its addresses share one budget."""
    assert source_of(("2001:db8::1", 1, 0, 0)) == source_of(("2001:db8::ffff:2", 2, 0, 0))
    assert source_of(("2001:db8::1", 1, 0, 0)) != source_of(("2001:db8:0:1::1", 1, 0, 0))
    assert source_of(("::ffff:10.0.0.1", 1, 0, 0)) == source_of(("10.0.0.1", 1)) == "10.0.0.1"


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (src, dst):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def test_a_connection_shut_before_the_proof_is_retried_and_the_call_runs_once():
    """A server that closes a new connection before proving the secret (a
    stranger evicted it, its slots were full) has read no request: the call
    tries a new connection, and the handler runs once."""
    calls = Calls()
    server = PeerServer(calls, "127.0.0.1", SECRET)
    server.start()
    front = socket.create_server(("127.0.0.1", 0))
    relayed: list[socket.socket] = []

    def serve() -> None:
        first, _ = front.accept()
        first.close()  # before the nonce
        second, _ = front.accept()
        up = socket.create_connection(endpoint(server.address))
        relayed.extend((second, up))
        back = threading.Thread(target=_pump, args=(up, second))
        back.start()
        _pump(second, up)
        back.join()

    thread = threading.Thread(target=serve)
    thread.start()
    client = PeerClient(SECRET)
    try:
        address = "127.0.0.1:%d" % front.getsockname()[1]
        assert client.call(address, "echo", {"n": 1}, timeout=5)["args"] == {"n": 1}
        assert calls.count == 1
    finally:
        client.close()
        thread.join(10)
        for sock in [front, *relayed]:
            sock.close()
        server.close()
