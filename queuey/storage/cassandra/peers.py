"""Calls between the API processes of one deployment, on ports of their own.

A partition's leases live in its owner process's memory; other processes
forward calls there, to the owner's own address (:class:`PeerServer`).

The port may be reachable from other machines. Per TCP connection the server
first sends a 16-byte random nonce; then each frame is a 4-byte big-endian
length and ``MAC || payload``, ``MAC = HMAC-SHA256(secret, label || nonce ||
seq || payload)``: ``seq`` (8 bytes) numbers one direction's frames, so a
captured frame is refused on another connection or out of order, and ``label``
differs by direction, so a request cannot come back as an answer. Payloads are
JSON, ``{"op": str, "args": {...}}`` answered by ``{"ok": {...}}`` or ``{"error":
{"kind": "unavailable" | "internal", "message", "retry_after"}}``. A frame over
``max_frame`` (by its length), a wrong MAC (checked before any JSON is parsed)
or a malformed request closes the connection.

Calls are not idempotent: a request is never sent twice; only a pooled
connection found dead before sending is replaced, once.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

from queuey import jsonio
from queuey.errors import ServiceError, StorageUnavailable

log = logging.getLogger(__name__)

NONCE_BYTES, MAC_BYTES = 16, 32
MAX_FRAME, _CHUNK = 64 * 1024 * 1024, 1 << 20  # default frame bound (MAC and payload); read size
#: Idle connections: the server closes them, the client drops them well before.
SERVER_IDLE_SECONDS, CLIENT_IDLE_SECONDS = 300.0, 60.0
#: A first frame comes this soon (a stranger cannot sit on a slot), a body this soon.
HELLO_SECONDS, FRAME_SECONDS = 10.0, 30.0
_REQUEST, _ANSWER = b"queuey-peer/request\n", b"queuey-peer/answer\n"
_LENGTH, _SEQ = struct.Struct(">I"), struct.Struct(">Q")

Handler = Callable[[str, dict[str, Any]], dict[str, Any]]


class PeerUnavailable(StorageUnavailable):
    """The peer could not answer: unreachable, too slow, its handler failed."""


class PeerNoAnswer(PeerUnavailable):
    """Sent (maybe in part) and not answered: it may have taken effect there."""


class _ProtocolError(Exception):
    """The other end closed the connection or broke the protocol: close it."""


def _check_secret(secret: bytes) -> bytes:
    if isinstance(secret, bytes) and len(secret) >= 16:
        return secret
    raise ValueError("the peer secret must be at least 16 bytes")


def _shutdown(sock: socket.socket) -> None:
    """End the connection, waking a thread blocked on it (which then closes it)."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # not connected any more: closing is all that is left


def _close(sock: socket.socket) -> None:
    _shutdown(sock)
    sock.close()


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("timed out")
    return left


def _read(sock: socket.socket, size: int, deadline: float, mac: Any = None) -> bytes:
    """Exactly ``size`` bytes (fed to ``mac`` too), read as they come: memory
    grows with what the other end sent, not with the length it announced."""
    chunks = []
    while size:
        sock.settimeout(_remaining(deadline))
        chunk = sock.recv(min(size, _CHUNK))
        if not chunk:
            raise _ProtocolError("connection closed by the other end")
        if mac is not None:
            mac.update(chunk)
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


class _Channel:
    """One end of an authenticated connection: frames out and in, each MACed
    with the connection's nonce, its direction's label and its number."""

    def __init__(self, sock: socket.socket, secret: bytes, nonce: bytes, client: bool) -> None:
        self.sock = sock
        out, into = (_REQUEST, _ANSWER) if client else (_ANSWER, _REQUEST)
        self._out = hmac.new(secret, out + nonce, hashlib.sha256)
        self._in = hmac.new(secret, into + nonce, hashlib.sha256)
        self._sent = self._received = 0
        self.last_used = 0.0

    def send(self, payload: bytes, deadline: float) -> None:
        mac = self._out.copy()
        mac.update(_SEQ.pack(self._sent))
        mac.update(payload)
        self._sent += 1
        self.sock.settimeout(_remaining(deadline))
        self.sock.sendall(_LENGTH.pack(MAC_BYTES + len(payload)) + mac.digest() + payload)

    def receive(self, max_frame: int, deadline: float, body_seconds: float | None = None) -> bytes:
        """The next frame's payload, authenticated, by ``deadline`` (with
        ``body_seconds``: its length by then, the rest that long after)."""
        (length,) = _LENGTH.unpack(_read(self.sock, _LENGTH.size, deadline))
        if not MAC_BYTES <= length <= max_frame:
            raise _ProtocolError(f"a frame of {length} bytes was refused")
        if body_seconds is not None:
            deadline = time.monotonic() + body_seconds
        expected = _read(self.sock, MAC_BYTES, deadline)
        mac = self._in.copy()
        mac.update(_SEQ.pack(self._received))
        payload = _read(self.sock, length - MAC_BYTES, deadline, mac)
        if not hmac.compare_digest(mac.digest(), expected):
            raise _ProtocolError("a frame with a wrong MAC was refused")
        self._received += 1
        return payload


def _error(kind: str, message: str, retry: int = 5) -> bytes:
    short = message[:500].encode("utf-8", "replace").decode("utf-8")  # no lone surrogate
    return jsonio.dumps_bytes({"error": {"kind": kind, "message": short, "retry_after": retry}})


def _parse(payload: bytes, ok: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The JSON object if ``ok`` accepts it; otherwise the other end is broken
    or out of step and the connection is closed."""
    try:
        value = jsonio.loads(payload)
    except ServiceError as exc:
        raise _ProtocolError(f"a malformed payload was refused: {exc}") from None
    if not isinstance(value, dict) or not ok(value):
        raise _ProtocolError("a payload of the wrong shape was refused")
    return value


def _is_request(r: dict[str, Any]) -> bool:
    return r.keys() == {"op", "args"} and isinstance(r["op"], str) and isinstance(r["args"], dict)


def _is_answer(a: dict[str, Any]) -> bool:
    return len(a) == 1 and isinstance(a.get("ok", a.get("error")), dict)


class PeerServer:
    """Answers peer calls with ``handler(op, args) -> dict``.

    One daemon thread accepts; each connection gets a daemon thread of its own
    that runs its requests one after the other, so ``handler`` is called from
    several threads at once. A :class:`StorageUnavailable` it raises is
    answered as ``unavailable`` with its message; anything else is logged here
    with its traceback and answered as ``internal`` with a short message.
    """

    def __init__(
        self,
        handler: Handler,
        host: str,
        secret: bytes,
        port: int = 0,
        max_frame: int = MAX_FRAME,
        max_connections: int = 256,
        *,
        idle_seconds: float = SERVER_IDLE_SECONDS,
    ) -> None:
        self._handler = handler
        self.host = host
        self._secret = _check_secret(secret)
        self._port = port
        self.max_frame = max_frame
        self.max_connections = max_connections
        self.idle_seconds = idle_seconds
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._closed = False
        self._listener: socket.socket | None = None
        self._wake_r, self._wake_w = socket.socketpair()
        self._acceptor: threading.Thread | None = None

    def start(self) -> None:
        """Bind and start accepting (``OSError`` if the address is taken)."""
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        self._listener = socket.create_server((self.host, self._port), family=family, backlog=128)
        self._listener.setblocking(False)
        self._port = self._listener.getsockname()[1]
        self._acceptor = threading.Thread(target=self._accept_loop, name="peer-accept", daemon=True)
        self._acceptor.start()

    @property
    def address(self) -> str:
        """``host:port`` as peers dial it, with the port actually bound."""
        if self._listener is None:
            raise RuntimeError("the peer server is not started")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self._port}"

    @property
    def connections(self) -> int:
        """Connections open now."""
        return len(self._connections)

    def close(self) -> None:
        """Stop accepting and close every connection (a handler still running
        finishes, but its answer is not sent). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            connections = list(self._connections)
        self._wake_w.send(b"x")
        if self._acceptor is not None and self._listener is not None:
            self._acceptor.join()
            self._listener.close()
        self._wake_r.close()
        self._wake_w.close()
        for sock in connections:
            _shutdown(sock)

    def _accept_loop(self) -> None:
        assert self._listener is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self._listener, selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            while True:
                for key, _ in selector.select():
                    if key.fileobj is self._wake_r:
                        return
                    try:
                        sock, _ = self._listener.accept()
                    except OSError:
                        continue  # the dialler gave up, or no descriptor free: next one
                    self._admit(sock)

    def _admit(self, sock: socket.socket) -> None:
        with self._lock:
            admitted = not self._closed and len(self._connections) < self.max_connections
            if admitted:
                self._connections.add(sock)
        try:
            if admitted:
                threading.Thread(target=self._serve, args=(sock,), daemon=True).start()
                return
            log.warning("peer connection refused: %d open already", self.max_connections)
        except RuntimeError:  # no thread to be had: refuse this one, keep accepting
            log.exception("peer connection refused")
            with self._lock:
                self._connections.discard(sock)
        _close(sock)

    def _serve(self, sock: socket.socket) -> None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            nonce = os.urandom(NONCE_BYTES)
            sock.settimeout(HELLO_SECONDS)
            sock.sendall(nonce)
            channel = _Channel(sock, self._secret, nonce, client=False)
            wait = HELLO_SECONDS
            while True:
                deadline = time.monotonic() + wait
                payload = channel.receive(self.max_frame, deadline, FRAME_SECONDS)
                wait = self.idle_seconds
                request = _parse(payload, _is_request)
                answer = self._answer(request["op"], request["args"])
                channel.send(answer, time.monotonic() + FRAME_SECONDS)
        except (OSError, _ProtocolError) as exc:
            log.debug("peer connection closed: %s", exc)
        finally:
            _close(sock)  # before it stops counting: closed means closed for the client too
            with self._lock:
                self._connections.discard(sock)

    def _answer(self, op: str, args: dict[str, Any]) -> bytes:
        try:
            result = self._handler(op, args)
            if not isinstance(result, dict):
                raise TypeError(f"the handler answered {type(result).__name__}, not a dict")
            return jsonio.dumps_bytes({"ok": result})
        except StorageUnavailable as exc:
            return _error("unavailable", str(exc), exc.retry_after)
        except Exception:
            log.exception("peer call %r failed", op[:100])
            return _error("internal", f"the peer failed on {op[:100]!r}")


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
        max_frame: int = MAX_FRAME,
        max_idle: int = 8,
        idle_seconds: float = CLIENT_IDLE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._secret = _check_secret(secret)
        self.connect_timeout = connect_timeout
        self.max_frame = max_frame
        self.max_idle = max_idle
        self.idle_seconds = idle_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._idle: dict[str, list[_Channel]] = {}
        self._pruned = clock()
        self._closed = False

    def call(self, address: str, op: str, args: dict[str, Any], timeout: float) -> dict[str, Any]:
        """``op`` on the peer at ``address``: the handler's answer, or
        :class:`PeerUnavailable` once ``timeout`` seconds have passed, or the
        peer cannot be reached, or its handler failed."""
        deadline = time.monotonic() + timeout
        payload = jsonio.dumps_bytes({"op": op, "args": args})
        channel, pooled = self._checkout(address, deadline)
        sent = False
        try:
            try:
                channel.send(payload, deadline)
            except ConnectionError:
                if not pooled:
                    raise
                # The server had closed it: the request never reached it whole.
                _close(channel.sock)
                channel = self._connect(address, deadline)
                channel.send(payload, deadline)
            sent = True
            answer = _parse(channel.receive(self.max_frame, deadline), _is_answer)
        except (OSError, _ProtocolError) as exc:
            _close(channel.sock)
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
        if error.get("kind") == "unavailable":
            raise PeerUnavailable(message, retry_after)
        raise PeerUnavailable(f"peer {address} failed: {message}", retry_after)

    def close(self) -> None:
        """Close the pooled connections; later calls connect afresh and keep nothing."""
        with self._lock:
            self._closed = True
            channels = [c for idle in self._idle.values() for c in idle]
            self._idle.clear()
        for channel in channels:
            _close(channel.sock)

    def _checkout(self, address: str, deadline: float) -> tuple[_Channel, bool]:
        """A pooled connection known alive (freshest first), else a new one."""
        while True:
            with self._lock:
                idle = self._idle.get(address)
                channel = idle.pop() if idle else None
            if channel is None:
                return self._connect(address, deadline), False
            if self._clock() - channel.last_used <= self.idle_seconds and _alive(channel.sock):
                return channel, True
            _close(channel.sock)

    def _checkin(self, address: str, channel: _Channel) -> None:
        now = channel.last_used = self._clock()
        dropped: list[_Channel] = []
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
                for idle in self._idle.values():
                    while idle and now - idle[0].last_used > self.idle_seconds:
                        dropped.append(idle.pop(0))
        for old in dropped:
            _close(old.sock)

    def _connect(self, address: str, deadline: float) -> _Channel:
        host, port = _split(address)
        wait = max(0.001, min(self.connect_timeout, deadline - time.monotonic()))
        hello_deadline = time.monotonic() + wait
        try:
            sock = socket.create_connection((host, port), timeout=wait)
        except OSError as exc:
            raise PeerUnavailable(f"peer {address}: cannot connect ({exc})") from None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            nonce = _read(sock, NONCE_BYTES, hello_deadline)
        except (OSError, _ProtocolError) as exc:
            _close(sock)
            raise PeerUnavailable(f"peer {address}: no hello ({exc})") from None
        return _Channel(sock, self._secret, nonce, client=True)
