"""The peer protocol: both ends prove the secret, then MACed frames.

Per TCP connection (protocol version 2; both ends must run it, see
docs/storage.rst):

1. The server sends a 16-byte random nonce ``ns``.
2. The client answers with a fixed 48-byte *hello*: its own random nonce
   ``nc`` and ``HMAC-SHA256(secret, "queuey-peer/2 hello\\n" || ns || nc)``.
   The server reads exactly these 48 bytes and checks them before it reads
   anything else; a wrong hello closes the connection. Until then the
   connection is a *stranger*'s and costs the server no thread and no buffer
   beyond these 48 bytes (:mod:`.peerserver`).
3. The server proves the secret back: ``HMAC-SHA256(secret, "queuey-peer/2
   proof\\n" || ns || nc)`` (32 bytes). The client sends no request, and reads
   no frame, before this proof checks out, so an impostor at a peer's address
   learns nothing and can make the client buffer nothing.
4. Frames follow, each a 4-byte big-endian length and ``MAC || payload`` with
   ``MAC = HMAC-SHA256(secret, label || ns || nc || seq || payload)``: ``seq``
   (8 bytes) numbers one direction's frames, so a captured frame is refused on
   another connection (other nonces) or out of order, and ``label`` differs by
   direction (``queuey-peer/2 request\\n`` or ``answer\\n``), so a request
   cannot come back as an answer. The length is checked against the bound of
   its direction (:data:`MAX_REQUEST`, :data:`MAX_ANSWER`) before a byte of
   the frame is read, and the MAC before any JSON is parsed.

Payloads are JSON, ``{"op": str, "args": {...}}`` answered by ``{"ok": {...}}``
or ``{"error": {"kind": "unavailable" | "unknown" | "internal", "message",
"retry_after"}}``; anything else closes the connection. ``unavailable``: the
call did nothing; ``unknown`` (:class:`OutcomeUnknown`) and ``internal``: it
may have taken effect.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

from queuey import jsonio
from queuey.errors import ServiceError, StorageUnavailable

NONCE_BYTES, MAC_BYTES = 16, 32
#: The client's hello: its nonce and its MAC. The only bytes a server reads
#: from a connection that has not proved the secret.
HELLO_BYTES = NONCE_BYTES + MAC_BYTES
#: Largest request frame (MAC and payload) a server reads. The largest
#: request is a forwarded call: the queue's metadata (its attributes: SQS
#: policies and key ids of up to 20,480 characters each and 50 tags, ~350 KB
#: JSON at most), up to 100 receipts (~80 bytes each), a release's error text
#: (1,024 characters), a reserve's partition list (receipts name at most
#: 99,999 partitions: ~700 KB), or an announcement of 1,000 queue names.
#: ``tests/storage/test_cassandra_peer_limits.py`` builds the largest and
#: checks it fits.
MAX_REQUEST = 2 * 1024 * 1024
#: Largest answer frame a client reads, only ever from a server that proved
#: the secret: a reserve answers with up to 100 deliveries whose bodies may
#: each be ``queuey.max_message_size`` (1 MiB by default), JSON-escaped.
MAX_ANSWER = 256 * 1024 * 1024
_HELLO, _PROOF = b"queuey-peer/2 hello\n", b"queuey-peer/2 proof\n"
_REQUEST, _ANSWER = b"queuey-peer/2 request\n", b"queuey-peer/2 answer\n"
_LENGTH, _SEQ = struct.Struct(">I"), struct.Struct(">Q")


class ProtocolError(Exception):
    """The other end broke the protocol (or closed the connection): close it."""


class Closed(ProtocolError):
    """The other end closed the connection."""


def check_secret(secret: bytes) -> bytes:
    if isinstance(secret, bytes) and len(secret) >= 16:
        return secret
    raise ValueError("the peer secret must be at least 16 bytes")


def shutdown(sock: socket.socket) -> None:
    """End the connection, waking a thread blocked on it (which then closes it)."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # not connected any more: closing is all that is left


def close(sock: socket.socket) -> None:
    shutdown(sock)
    sock.close()


def remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("timed out")
    return left


def read_exactly(sock: socket.socket, size: int, deadline: float) -> bytearray:
    """Exactly ``size`` bytes, by ``deadline``, into one buffer of that size."""
    buffer = bytearray(size)
    view, got = memoryview(buffer), 0
    while got < size:
        sock.settimeout(remaining(deadline))
        n = sock.recv_into(view[got:], size - got)
        if not n:
            raise Closed("connection closed by the other end")
        got += n
    return buffer


def _mac(secret: bytes, label: bytes, server_nonce: bytes, client_nonce: bytes) -> Any:
    return hmac.new(secret, label + server_nonce + client_nonce, hashlib.sha256)


def hello(secret: bytes, server_nonce: bytes, client_nonce: bytes) -> bytes:
    """The client's hello for the server's nonce."""
    return client_nonce + _mac(secret, _HELLO, server_nonce, client_nonce).digest()


def check_hello(secret: bytes, server_nonce: bytes, received: bytes) -> bytes | None:
    """The client's nonce if ``received`` (:data:`HELLO_BYTES`) proves the secret."""
    client_nonce, mac = bytes(received[:NONCE_BYTES]), bytes(received[NONCE_BYTES:])
    expected = _mac(secret, _HELLO, server_nonce, client_nonce).digest()
    return client_nonce if hmac.compare_digest(expected, mac) else None


def proof(secret: bytes, server_nonce: bytes, client_nonce: bytes) -> bytes:
    """The server's answer to a good hello."""
    return _mac(secret, _PROOF, server_nonce, client_nonce).digest()


class Channel:
    """One end of an authenticated connection: frames out and in, each MACed
    with the connection's nonces, its direction's label and its number."""

    def __init__(
        self,
        sock: socket.socket,
        secret: bytes,
        server_nonce: bytes,
        client_nonce: bytes,
        *,
        client: bool,
    ) -> None:
        self.sock = sock
        self.nonces = (server_nonce, client_nonce)
        out, into = (_REQUEST, _ANSWER) if client else (_ANSWER, _REQUEST)
        self._out = _mac(secret, out, server_nonce, client_nonce)
        self._in = _mac(secret, into, server_nonce, client_nonce)
        self._sent = self._received = 0
        self.last_used = 0.0

    def frame(self, payload: bytes) -> bytes:
        """The next frame out, numbered (:meth:`send` sends it)."""
        mac = self._out.copy()
        mac.update(_SEQ.pack(self._sent))
        mac.update(payload)
        self._sent += 1
        return _LENGTH.pack(MAC_BYTES + len(payload)) + mac.digest() + payload

    def send(self, payload: bytes, deadline: float) -> None:
        frame = self.frame(payload)
        self.sock.settimeout(remaining(deadline))
        self.sock.sendall(frame)

    def receive_length(self, max_frame: int, deadline: float) -> int:
        """The next frame's length, by ``deadline``; over ``max_frame``, the
        connection is refused before a byte of the frame is read."""
        (length,) = _LENGTH.unpack(read_exactly(self.sock, _LENGTH.size, deadline))
        if not MAC_BYTES <= length <= max_frame:
            raise ProtocolError(f"a frame of {length} bytes was refused")
        return length

    def receive_body(self, length: int, deadline: float) -> bytearray:
        """The frame's payload (``length`` from :meth:`receive_length`),
        authenticated, by ``deadline``."""
        expected = bytes(read_exactly(self.sock, MAC_BYTES, deadline))
        payload = read_exactly(self.sock, length - MAC_BYTES, deadline)
        mac = self._in.copy()
        mac.update(_SEQ.pack(self._received))
        mac.update(payload)
        if not hmac.compare_digest(mac.digest(), expected):
            raise ProtocolError("a frame with a wrong MAC was refused")
        self._received += 1
        return payload

    def receive(self, max_frame: int, deadline: float) -> bytearray:
        return self.receive_body(self.receive_length(max_frame, deadline), deadline)


def open_client(sock: socket.socket, secret: bytes, deadline: float) -> Channel:
    """The client's side of steps 1-3 on a new connection, by ``deadline``.

    :class:`Closed` or :class:`ProtocolError` if the server does not prove
    the secret (then it has not read a request: none was sent)."""
    server_nonce = bytes(read_exactly(sock, NONCE_BYTES, deadline))
    client_nonce = os.urandom(NONCE_BYTES)
    sock.settimeout(remaining(deadline))
    sock.sendall(hello(secret, server_nonce, client_nonce))
    received = bytes(read_exactly(sock, MAC_BYTES, deadline))
    if not hmac.compare_digest(received, proof(secret, server_nonce, client_nonce)):
        raise ProtocolError("the peer did not prove the secret")
    return Channel(sock, secret, server_nonce, client_nonce, client=True)


# -- payloads ------------------------------------------------------------------------
class OutcomeUnknown(StorageUnavailable):
    """A handler sent a write it can no longer vouch for (it failed, or this
    process's term ended meanwhile): the call may have taken effect, and is
    answered so (kind ``unknown``)."""


def error_answer(kind: str, message: str, retry: int = 5) -> bytes:
    short = message[:500].encode("utf-8", "replace").decode("utf-8")  # no lone surrogate
    return jsonio.dumps_bytes({"error": {"kind": kind, "message": short, "retry_after": retry}})


def parse(payload: bytes | bytearray, ok: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The JSON object if ``ok`` accepts it; otherwise the other end is broken
    or out of step and the connection is closed."""
    try:
        value = jsonio.loads(payload)  # a bytearray parses as bytes do
    except ServiceError as exc:
        raise ProtocolError(f"a malformed payload was refused: {exc}") from None
    if not isinstance(value, dict) or not ok(value):
        raise ProtocolError("a payload of the wrong shape was refused")
    return value


def is_request(r: dict[str, Any]) -> bool:
    return r.keys() == {"op", "args"} and isinstance(r["op"], str) and isinstance(r["args"], dict)


def is_answer(a: dict[str, Any]) -> bool:
    return len(a) == 1 and isinstance(a.get("ok", a.get("error")), dict)
