"""Strangers and peer servers for the peer port's tests
(``test_cassandra_peer_limits.py``, ``test_cassandra_peer_costs.py``).

``python -m tests.storage.peer_support SECRET`` runs a peer server in a
process of its own (what :class:`PeerProcess` starts): it prints its address,
then serves (answering every call with its op) until its stdin closes.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from queuey.storage.cassandra.peerchannel import NONCE_BYTES
from queuey.storage.cassandra.peers import PeerServer

SECRET = b"peer-secret-for-tests-0123456789"


def endpoint(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def stranger(address: str, source: str = "127.0.0.1") -> socket.socket:
    """A connection from ``source`` (any address of 127.0.0.0/8 is this host)."""
    sock = socket.socket()
    # The port is chosen at connect, per destination, as for an unbound socket.
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_BIND_ADDRESS_NO_PORT, 1)
    sock.bind((source, 0))
    sock.settimeout(5)
    sock.connect(endpoint(address))
    return sock


def nonce(sock: socket.socket) -> bytes:
    """What came of the server's nonce: all of it, or less if it closed first."""
    got = b""
    try:
        while len(got) < NONCE_BYTES and (chunk := sock.recv(NONCE_BYTES - len(got))):
            got += chunk
    except ConnectionError:
        pass
    return got


def closed_by_server(sock: socket.socket, timeout: float = 5) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def is_open(sock: socket.socket) -> bool:
    """Not closed by the server (nothing to read, no end of stream), now."""
    try:
        sock.setblocking(False)
        return sock.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        sock.setblocking(True)


class PeerProcess:
    """A peer server in a child process, and what /proc says of it."""

    def __init__(self) -> None:
        root = Path(__file__).resolve().parents[2]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.storage.peer_support", SECRET.decode()],
            cwd=root,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.address = self.proc.stdout.readline().strip()

    def mib(self, field: str) -> float:
        """``VmRSS`` (resident now) or ``VmHWM`` (its peak), in MiB."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
        raise KeyError(field)

    def reset_peak(self) -> None:
        Path(f"/proc/{self.proc.pid}/clear_refs").write_text("5")

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        assert self.proc.stdout is not None
        self.proc.stdout.close()


def main() -> None:
    server = PeerServer(lambda op, args: {"op": op}, "127.0.0.1", sys.argv[1].encode())
    server.start()
    print(server.address, flush=True)
    sys.stdin.read()
    server.close()


if __name__ == "__main__":
    main()
