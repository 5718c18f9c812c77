"""Calls between the API processes of one deployment, on ports of their own.

A partition's leases live in its owner process's memory; other processes
forward calls there, to the owner's own address. :class:`PeerClient` (here)
calls, :class:`~queuey.storage.cassandra.peerserver.PeerServer` answers, and
:mod:`.peerchannel` is the protocol between them: on each connection both
ends prove the shared secret before a request is sent or a frame is read.

Calls are not idempotent: a request is never sent twice. A new connection
that fails before the server proved the secret carried no request, so the
call tries another (:data:`CONNECT_ATTEMPTS` in all); a pooled connection
found dead while sending is replaced, once.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from queuey import jsonio
from queuey.errors import StorageUnavailable
from queuey.storage.cassandra.peerchannel import (
    MAC_BYTES,
    MAX_ANSWER,
    MAX_REQUEST,
    Channel,
    Closed,
    ProtocolError,
    check_secret,
    close,
    is_answer,
    open_client,
    parse,
)
from queuey.storage.cassandra.peerserver import PeerServer

__all__ = ["PeerClient", "PeerNoAnswer", "PeerServer", "PeerUnavailable"]

#: Idle connections: the server closes them after 5 minutes, the client drops them well before.
CLIENT_IDLE_SECONDS = 60.0
#: New connections one call may open when the server closes them before its proof.
CONNECT_ATTEMPTS = 3
#: Connections one client opens at once to one address: a burst of calls
#: stays well within a server's slots for strangers from one address.
CONNECTING = 4


class PeerUnavailable(StorageUnavailable):
    """The peer could not answer: unreachable, too slow, its handler failed."""


class PeerNoAnswer(PeerUnavailable):
    """Sent (maybe in part) and not answered: it may have taken effect there."""


class _Refused(Exception):
    """The server closed a new connection before proving the secret."""


def _split(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"not a peer address (host:port): {address!r}")
    return host.strip("[]"), int(port)


def _alive(sock: socket.socket) -> bool:
    """Nothing to read: no end of stream (the server closed it), no error, and
    no byte sent unasked (the conversation would be off)."""
    try:
        sock.setblocking(False)
        sock.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return True
    except OSError:
        return False
    return False


class PeerClient:
    """Calls peers; thread-safe, with a few idle connections kept per address.

    ``clock`` (monotonic seconds) only decides when a pooled connection is too
    old to reuse; tests move it instead of waiting a minute.
    """

    def __init__(
        self,
        secret: bytes,
        connect_timeout: float = 1.0,
        *,
        max_answer: int = MAX_ANSWER,
        max_idle: int = 8,
        idle_seconds: float = CLIENT_IDLE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._secret = check_secret(secret)
        self.connect_timeout = connect_timeout
        self.max_answer = max_answer
        self.max_idle = max_idle
        self.idle_seconds = idle_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._opened = threading.Condition(self._lock)
        self._opening: dict[str, int] = {}
        self._idle: dict[str, list[Channel]] = {}
        self._pruned = clock()
        self._closed = False

    def call(self, address: str, op: str, args: dict[str, Any], timeout: float) -> dict[str, Any]:
        """``op`` on the peer at ``address``: the handler's answer, or
        :class:`PeerUnavailable` once ``timeout`` seconds have passed, or the
        peer cannot be reached, or its handler failed."""
        deadline = time.monotonic() + timeout
        payload = jsonio.dumps_bytes({"op": op, "args": args})
        if MAC_BYTES + len(payload) > MAX_REQUEST:
            raise PeerUnavailable(f"peer {address}: a request of {len(payload)} bytes is too large")
        channel, pooled = self._checkout(address, deadline)
        sent = False
        try:
            try:
                channel.send(payload, deadline)
            except ConnectionError:
                if not pooled:
                    raise
                # The server had closed it: the request never reached it whole.
                close(channel.sock)
                channel = self._connect(address, deadline)
                channel.send(payload, deadline)
            sent = True
            answer = parse(channel.receive(self.max_answer, deadline), is_answer)
        except (OSError, ProtocolError) as exc:
            close(channel.sock)
            failure = PeerNoAnswer if sent else PeerUnavailable
            raise failure(f"peer {address}: {exc}") from None
        self._checkin(address, channel)
        return self._result(address, answer)

    @staticmethod
    def _result(address: str, answer: dict[str, Any]) -> dict[str, Any]:
        if "ok" in answer:
            return answer["ok"]
        error = answer["error"]
        message = str(error.get("message", ""))[:500]
        retry_after = error.get("retry_after")
        retry_after = retry_after if type(retry_after) is int and retry_after > 0 else 5
        if error.get("kind") == "unavailable":  # it did nothing
            raise PeerUnavailable(message, retry_after)
        # "unknown" (a write it cannot vouch for) or "internal": maybe done.
        raise PeerNoAnswer(f"peer {address} failed: {message}", retry_after)

    def close(self) -> None:
        """Close the pooled connections; later calls connect afresh and keep nothing."""
        with self._lock:
            self._closed = True
            channels = [c for idle in self._idle.values() for c in idle]
            self._idle.clear()
        for channel in channels:
            close(channel.sock)

    def _checkout(self, address: str, deadline: float) -> tuple[Channel, bool]:
        """A pooled connection known alive (freshest first), else a new one."""
        while True:
            with self._lock:
                idle = self._idle.get(address)
                channel = idle.pop() if idle else None
            if channel is None:
                return self._connect(address, deadline), False
            if self._clock() - channel.last_used <= self.idle_seconds and _alive(channel.sock):
                return channel, True
            close(channel.sock)

    def _checkin(self, address: str, channel: Channel) -> None:
        now = channel.last_used = self._clock()
        dropped: list[Channel] = []
        with self._lock:
            if self._closed:
                dropped.append(channel)
            else:
                idle = self._idle.setdefault(address, [])
                idle.append(channel)
                if len(idle) > self.max_idle:
                    dropped.append(idle.pop(0))
            if now - self._pruned > self.idle_seconds:  # addresses no longer called, too
                self._pruned = now
                for key, idle in list(self._idle.items()):
                    while idle and now - idle[0].last_used > self.idle_seconds:
                        dropped.append(idle.pop(0))
                    if not idle:
                        del self._idle[key]
        for old in dropped:
            close(old.sock)

    def _connect(self, address: str, deadline: float) -> Channel:
        """A new connection on which the server proved the secret, opened
        when fewer than :data:`CONNECTING` are being opened to ``address``
        (waiting for that no longer than a connection may take)."""
        host, port = _split(address)
        wait = min(self.connect_timeout, deadline - time.monotonic())
        with self._opened:
            if not self._opened.wait_for(
                lambda: self._opening.get(address, 0) < CONNECTING, max(0.0, wait)
            ):
                raise PeerUnavailable(f"peer {address}: cannot connect (others still connecting)")
            self._opening[address] = self._opening.get(address, 0) + 1
        refused: _Refused | None = None
        try:
            for _ in range(CONNECT_ATTEMPTS):
                try:
                    return self._open(address, host, port, deadline)
                except _Refused as exc:
                    refused = exc
            raise PeerUnavailable(f"peer {address}: no hello ({refused})")
        finally:
            with self._opened:
                self._opening[address] -= 1
                if not self._opening[address]:
                    del self._opening[address]
                self._opened.notify()

    def _open(self, address: str, host: str, port: int, deadline: float) -> Channel:
        wait = max(0.001, min(self.connect_timeout, deadline - time.monotonic()))
        hello_deadline = time.monotonic() + wait
        try:
            sock = socket.create_connection((host, port), timeout=wait)
        except OSError as exc:
            raise PeerUnavailable(f"peer {address}: cannot connect ({exc})") from None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return open_client(sock, self._secret, hello_deadline)
        except (ConnectionError, Closed) as exc:
            close(sock)
            raise _Refused(str(exc)) from None
        except (OSError, ProtocolError) as exc:
            close(sock)
            raise PeerUnavailable(f"peer {address}: no hello ({exc})") from None
