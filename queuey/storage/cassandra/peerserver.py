"""The peer port's server: strangers cost little and never crowd peers out.

A connection is a *stranger* until its hello proves the secret
(:mod:`.peerchannel` has the protocol):

* The accept thread serves every stranger itself, with one selector: a
  stranger gets no thread, and nothing of what it sends is read beyond the
  48-byte hello, which must come within ``hello_seconds`` (2 s). A wrong hello
  closes the connection before another byte is read.
* Strangers have slots of their own (``max_strangers``, 64), at most
  ``max_strangers_per_source`` (16) from one address (an IPv6 /64 counts as
  one). A stranger arriving when its address's slots, or all of them, are
  taken closes the stranger that has waited longest there: a peer's hello
  comes one round trip after the nonce (and a client opens at most
  :data:`.peers.CONNECTING` connections at once to one address), so only a
  stranger waits long. Each turn of the accept loop reads every hello that
  came before it accepts more (:data:`ACCEPTS_PER_TURN`), so a flood of
  connections cannot close a peer whose hello is already there.
* A connection that proved the secret takes one of ``max_connections`` (256)
  peer slots, which strangers never hold, and a thread of its own that runs
  its requests one after the other. A request frame is at most
  ``max_request`` bytes, and the frames being read hold ``max_buffered``
  bytes at most together: a frame waits for room, by its deadline.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import selectors
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from queuey import jsonio
from queuey.errors import StorageUnavailable
from queuey.storage.cassandra.peerchannel import (
    HELLO_BYTES,
    MAX_REQUEST,
    NONCE_BYTES,
    Channel,
    OutcomeUnknown,
    ProtocolError,
    check_hello,
    check_secret,
    close,
    error_answer,
    is_request,
    parse,
    proof,
    remaining,
    shutdown,
)

log = logging.getLogger(__name__)

#: Seconds a peer's connection may sit idle between requests.
SERVER_IDLE_SECONDS = 300.0
#: Seconds a stranger has, from its connection, to prove the secret.
HELLO_SECONDS = 2.0
#: Seconds a frame's body, or an answer, has once its length was read.
FRAME_SECONDS = 30.0
#: Strangers held at once, and from one address.
MAX_STRANGERS, MAX_STRANGERS_PER_SOURCE = 64, 16
#: Bytes all request frames being read may hold together (16 of the largest).
MAX_BUFFERED = 16 * MAX_REQUEST
#: Connections accepted per turn of the accept loop, after the hellos that came.
ACCEPTS_PER_TURN = 16
#: Connections the kernel holds until the accept loop takes them (it may lag
#: when other threads hold the interpreter): a burst waits there, not for a
#: dropped SYN's retry a second later.
ACCEPT_BACKLOG = 1024

Handler = Callable[[str, dict[str, Any]], dict[str, Any]]


class ByteBudget:
    """Bytes held at once for frames being read; ``peak`` is the most ever held."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = self.peak = 0
        self._cond = threading.Condition()

    @contextmanager
    def hold(self, size: int, deadline: float) -> Iterator[None]:
        """``size`` bytes while the block runs, once there is room
        (``TimeoutError`` if there is none by ``deadline``)."""
        with self._cond:
            while self.held + size > self.limit:
                self._cond.wait(remaining(deadline))
            self.held += size
            self.peak = max(self.peak, self.held)
        try:
            yield
        finally:
            with self._cond:
                self.held -= size
                self._cond.notify_all()


def source_of(address: Any) -> str:
    """Where a connection came from: its address, an IPv6 address's /64 (one
    host usually holds a whole one)."""
    host = str(address[0] if isinstance(address, tuple) else address)
    try:
        ip = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


@dataclass
class _Stranger:
    source: str
    nonce: bytes
    deadline: float
    hello: bytearray = field(default_factory=bytearray)


class PeerServer:
    """Answers peer calls with ``handler(op, args) -> dict``.

    ``handler`` is called from several threads at once (one per peer
    connection). A :class:`StorageUnavailable` it raises is answered as
    ``unavailable`` with its message; anything else is logged here with its
    traceback and answered as ``internal`` with a short message.
    """

    def __init__(
        self,
        handler: Handler,
        host: str,
        secret: bytes,
        port: int = 0,
        max_request: int = MAX_REQUEST,
        max_connections: int = 256,
        *,
        max_strangers: int = MAX_STRANGERS,
        max_strangers_per_source: int = MAX_STRANGERS_PER_SOURCE,
        max_buffered: int = MAX_BUFFERED,
        hello_seconds: float = HELLO_SECONDS,
        idle_seconds: float = SERVER_IDLE_SECONDS,
    ) -> None:
        if max_request > max_buffered:
            raise ValueError("max_request must not exceed max_buffered: a frame would never fit")
        self._handler = handler
        self.host = host
        self._secret = check_secret(secret)
        self._port = port
        self.max_request = max_request
        self.max_connections = max_connections
        self.max_strangers = max_strangers
        self.max_strangers_per_source = max_strangers_per_source
        self.hello_seconds = hello_seconds
        self.idle_seconds = idle_seconds
        #: Bytes held for request frames being read (``held`` now, ``peak``).
        self.buffered = ByteBudget(max_buffered)
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._strangers: OrderedDict[socket.socket, _Stranger] = OrderedDict()  # oldest first
        self._closed = False
        self._listener: socket.socket | None = None
        self._wake_r, self._wake_w = socket.socketpair()
        self._acceptor: threading.Thread | None = None

    def start(self) -> None:
        """Bind and start accepting (``OSError`` if the address is taken)."""
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        self._listener = socket.create_server(
            (self.host, self._port), family=family, backlog=ACCEPT_BACKLOG
        )
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
        """Peer connections open now (those that proved the secret)."""
        return len(self._connections)

    @property
    def strangers(self) -> int:
        """Connections waiting for their hello now."""
        return len(self._strangers)

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
            shutdown(sock)

    # -- strangers, in the accept thread ------------------------------------------
    def _accept_loop(self) -> None:
        assert self._listener is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self._listener, selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            try:
                while True:
                    timeout = None
                    if self._strangers:
                        oldest = next(iter(self._strangers.values()))
                        timeout = max(0.0, oldest.deadline - time.monotonic())
                    arrived = False
                    for key, _ in selector.select(timeout):
                        if key.fileobj is self._wake_r:
                            return
                        if key.fileobj is self._listener:
                            arrived = True
                        else:
                            self._hear(selector, key.fileobj)
                    self._expire(selector)
                    for _ in range(ACCEPTS_PER_TURN if arrived else 0):
                        if not self._arrive(selector):
                            break
            finally:
                for sock in list(self._strangers):
                    self._drop(selector, sock)

    def _arrive(self, selector: selectors.BaseSelector) -> bool:
        """Accept one connection as a stranger and send it the nonce (false:
        none was waiting)."""
        assert self._listener is not None
        try:
            sock, address = self._listener.accept()
        except OSError:
            return False  # none waiting, the dialler gave up, or no descriptor free
        source = source_of(address)
        same = [s for s, stranger in self._strangers.items() if stranger.source == source]
        if len(same) >= self.max_strangers_per_source:
            self._drop(selector, same[0])
        elif len(self._strangers) >= self.max_strangers:
            self._drop(selector, next(iter(self._strangers)))
        nonce = os.urandom(NONCE_BYTES)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sent = sock.send(nonce)  # 16 bytes into an empty send buffer
        except OSError:
            sent = 0
        if sent != NONCE_BYTES:
            close(sock)
            return True
        self._strangers[sock] = _Stranger(source, nonce, time.monotonic() + self.hello_seconds)
        selector.register(sock, selectors.EVENT_READ)
        return True

    def _hear(self, selector: selectors.BaseSelector, sock: socket.socket) -> None:
        """Read what came of a stranger's hello (never more than the hello)."""
        stranger = self._strangers[sock]
        try:
            chunk = sock.recv(HELLO_BYTES - len(stranger.hello))
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._drop(selector, sock)
            return
        stranger.hello += chunk
        if len(stranger.hello) < HELLO_BYTES:
            return
        selector.unregister(sock)
        del self._strangers[sock]
        client_nonce = check_hello(self._secret, stranger.nonce, stranger.hello)
        if client_nonce is None:
            log.debug("peer connection from %s closed: a wrong hello", stranger.source)
            close(sock)
            return
        self._admit(sock, Channel(sock, self._secret, stranger.nonce, client_nonce, client=False))

    def _expire(self, selector: selectors.BaseSelector) -> None:
        now = time.monotonic()
        while self._strangers:
            sock, stranger = next(iter(self._strangers.items()))
            if stranger.deadline > now:
                return
            self._drop(selector, sock)

    def _drop(self, selector: selectors.BaseSelector, sock: socket.socket) -> None:
        del self._strangers[sock]
        selector.unregister(sock)
        close(sock)

    # -- peers, a thread each -------------------------------------------------------
    def _admit(self, sock: socket.socket, channel: Channel) -> None:
        with self._lock:
            admitted = not self._closed and len(self._connections) < self.max_connections
            if admitted:
                self._connections.add(sock)
        try:
            if admitted:
                threading.Thread(target=self._serve, args=(channel,), daemon=True).start()
                return
            log.warning("peer connection refused: %d peers connected already", self.max_connections)
        except RuntimeError:  # no thread to be had: refuse this one, keep accepting
            log.exception("peer connection refused")
            with self._lock:
                self._connections.discard(sock)
        close(sock)

    def _serve(self, channel: Channel) -> None:
        sock = channel.sock
        try:
            sock.setblocking(True)
            sock.settimeout(FRAME_SECONDS)
            sock.sendall(proof(self._secret, *channel.nonces))
            while True:
                idle = time.monotonic() + self.idle_seconds
                length = channel.receive_length(self.max_request, idle)
                deadline = time.monotonic() + FRAME_SECONDS
                with self.buffered.hold(length, deadline):
                    request = parse(channel.receive_body(length, deadline), is_request)
                answer = self._answer(request["op"], request["args"])
                channel.send(answer, time.monotonic() + FRAME_SECONDS)
        except (OSError, ProtocolError) as exc:
            log.debug("peer connection closed: %s", exc)
        finally:
            close(sock)  # before it stops counting: closed means closed for the client too
            with self._lock:
                self._connections.discard(sock)

    def _answer(self, op: str, args: dict[str, Any]) -> bytes:
        try:
            result = self._handler(op, args)
            if not isinstance(result, dict):
                raise TypeError(f"the handler answered {type(result).__name__}, not a dict")
            return jsonio.dumps_bytes({"ok": result})
        except OutcomeUnknown as exc:
            return error_answer("unknown", str(exc), exc.retry_after)
        except StorageUnavailable as exc:
            return error_answer("unavailable", str(exc), exc.retry_after)
        except Exception:
            log.exception("peer call %r failed", op[:100])
            return error_answer("internal", f"the peer failed on {op[:100]!r}")
