"""What strangers cost a peer server in a process of its own
(:mod:`tests.storage.peer_support`): its resident memory and CPU time, read
from ``/proc``, while strangers announce huge frames or flood it, and whether
a peer's calls still get through. ``-s`` prints the figures quoted in
docs/security.rst ("The peer port"). No Cassandra needed."""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from queuey.storage.cassandra.peerchannel import HELLO_BYTES
from queuey.storage.cassandra.peers import PeerClient
from tests.storage.peer_support import SECRET, PeerProcess, nonce, stranger

MIB = 1024 * 1024
#: A server process may grow this much, at most, under any of these attacks.
GROWTH_BOUND_MIB = 16


@pytest.fixture
def peer_process() -> Iterator[PeerProcess]:
    p = PeerProcess()
    yield p
    p.close()


# -- memory ---------------------------------------------------------------------------
def _announce_huge_frame(address: str) -> socket.socket:
    """Read the nonce, announce a 64 MiB frame and send all of it but its last
    byte (the connection stays open)."""
    sock = stranger(address)
    nonce(sock)
    chunk = bytes(MIB)
    try:
        sock.sendall(struct.pack(">I", 64 * MIB))
        left = 64 * MIB - 1
        while left:
            sock.sendall(chunk[: min(left, MIB)])
            left -= min(left, MIB)
    except OSError:
        pass  # shut out
    return sock


def test_strangers_announcing_huge_frames_do_not_grow_the_process(peer_process):
    peer_process.reset_peak()
    before = peer_process.mib("VmRSS")
    with ThreadPoolExecutor(6) as pool:
        socks = list(pool.map(_announce_huge_frame, [peer_process.address] * 6))
    try:
        grown = peer_process.mib("VmHWM") - before
        print(f"\n6 strangers x 64 MiB frames: the server grew {grown:.1f} MiB at its peak")
        assert grown < GROWTH_BOUND_MIB
    finally:
        for sock in socks:
            sock.close()


def test_a_flood_of_strangers_costs_little_and_peers_still_get_through(peer_process):
    """300 idle strangers from 100 addresses, then strangers connecting and
    sending wrong hellos as fast as four threads can, while a peer opens a new
    connection for each of its calls."""
    peer_process.reset_peak()
    rss, cpu = peer_process.mib("VmRSS"), peer_process.cpu_seconds()
    idle = [stranger(peer_process.address, f"127.0.1.{1 + i % 100}") for i in range(300)]
    for sock in idle:
        nonce(sock)
    stop, flooded = threading.Event(), [0] * 4

    def flood(n: int) -> None:
        while not stop.is_set():
            sock = stranger(peer_process.address, f"127.0.2.{1 + n}")
            if nonce(sock):
                try:
                    sock.sendall(os.urandom(HELLO_BYTES))
                except OSError:
                    pass
            sock.close()
            flooded[n] += 1

    threads = [threading.Thread(target=flood, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    latencies = []
    try:
        for i in range(20):
            client = PeerClient(SECRET, connect_timeout=2.0)
            started = time.monotonic()
            try:
                answer = client.call(peer_process.address, "echo", {"i": i}, timeout=5)
                assert answer == {"op": "echo"}
            finally:
                client.close()
            latencies.append(time.monotonic() - started)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        for sock in idle:
            sock.close()
    grown = peer_process.mib("VmHWM") - rss
    per_stranger = (peer_process.cpu_seconds() - cpu) / (sum(flooded) + len(idle))
    print(
        f"\n{len(idle)} idle strangers and {sum(flooded)} more: the server grew {grown:.1f} MiB,"
        f" {per_stranger * 1e6:.0f} us of CPU per stranger; 20 peer calls on new"
        f" connections, slowest {max(latencies) * 1000:.0f} ms"
    )
    assert grown < GROWTH_BOUND_MIB
