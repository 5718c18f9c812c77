"""Isolation between applications: each application's share of the service.

Limits per application, defaults in the settings (``queuey.limits.*``)
and overrides per application in the applications file
(:mod:`queuey.applications`); 0 turns a limit off:

* **requests per second** (``max_requests_per_second``, ``max_burst``): a token
  bucket holding up to ``max_burst`` tokens, refilled at
  ``max_requests_per_second``. Every *authenticated* request takes one token
  (a caller that gave no valid key or signature costs its application
  nothing, so knowing a public name is not enough to throttle it); a request
  that finds none is refused with :class:`Throttled` before it reads its body
  or touches storage, and refused requests take no token. A refusal is held
  up to ``queuey.limits.throttle_hold`` seconds first, on one of the
  application's waiting slots (below): refusals cost CPU too, and a client
  looping on them would otherwise take the server's CPU from everyone.
* **waiting long polls** (``max_waiting_polls``): most ``reserve`` /
  ``ReceiveMessage`` calls of one application long-polling at once in one
  server process (:class:`queuey.core.longpoll.LongPolls` asks
  :meth:`Quotas.max_waiting_polls`). One more answers at once, as when the
  process-wide ``queuey.reserve.max_waiting`` is reached, so another
  application's long poll still finds a free slot.
* **queues** (``max_queues``): creating a queue past the limit raises
  :class:`TooManyQueues`. Dead-letter queues the service makes on its own are
  not refused (a message must not loop because its application is full); at
  most one per queue, they are bounded by the limit too.
* **posts and what is stored** (``max_posts_per_second``, ``max_messages``,
  ``max_bytes``): :class:`Quotas.limits` carries them; flow control checks
  them on every post (:mod:`queuey.core.flow`), against the stored messages
  and bytes the operators' overview measured plus the posts counted since
  (:meth:`queuey.core.overview.Overview.usage`, :mod:`queuey.core.lengths`).

Across the server's worker processes (:mod:`queuey.server`), the request
buckets live in one shared-memory file in the server's own directory
(:class:`SharedBuckets`), so an application's rate is its rate for the whole
server, whichever worker each connection lands on. Long-poll slots are per
process, like ``queuey.reserve.max_waiting``: the scarce thing they guard is
each process's threads. Without a shared directory (one process: waitress,
tests) the buckets live in memory (:class:`LocalBuckets`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import math
import mmap
import os
import struct
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from queuey.applications import Application
from queuey.clock import Clock
from queuey.ids import MICROS
from queuey.settings import Settings

#: Tokens lost to floating point (seconds since the epoch times a rate).
_EPSILON = 1e-6
#: Queues counted per storage call when checking ``max_queues``.
_COUNT_PAGE = 1000


@dataclass(frozen=True)
class Limits:
    """One application's limits (0: no limit)."""

    requests_per_second: float
    burst: int
    waiting_polls: int
    queues: int
    #: Messages posted per second, messages and bytes stored (0: no limit).
    posts_per_second: float = 0.0
    messages: int = 0
    bytes: int = 0


class Throttled(Exception):
    """The application has used its requests per second; retry after ``retry_after`` s."""

    def __init__(self, application: str, limit: float, retry_after: int) -> None:
        super().__init__(
            f"application {application} is over its limit of {limit:g} requests per "
            f"second; retry after {retry_after} s"
        )
        self.application = application
        self.retry_after = retry_after


class TooManyQueues(Exception):
    """The application has ``limit`` queues already."""

    def __init__(self, application: str, limit: int) -> None:
        super().__init__(
            f"application {application} has reached its limit of {limit} queues; delete one first"
        )
        self.application = application
        self.limit = limit


def take_token(
    tokens: float, last: float, now: float, rate: float, burst: int
) -> tuple[float, float, float]:
    """One request against a token bucket: ``(tokens, last, wait)`` after it.

    ``wait`` is 0 when the request took a token, else the seconds until one
    is there (the request took nothing). Time going backwards (a wall clock
    stepped back) refills nothing and restarts the count from ``now``.
    """
    tokens, last, _, wait = take_tokens(tokens, last, now, rate, burst, 1, True)
    return tokens, last, wait


def take_tokens(
    tokens: float, last: float, now: float, rate: float, burst: int, want: int, whole: bool
) -> tuple[float, float, int, float]:
    """Up to ``want`` tokens of a bucket: ``(tokens, last, taken, wait)``.

    ``whole``: all ``want`` tokens or none (at most ``burst``: a larger ask
    needs a full bucket and empties it); else as many as there are. ``wait``
    is the seconds until the next token when none was taken, else 0.
    """
    if now > last:
        tokens = min(float(burst), tokens + (now - last) * rate)
    else:
        tokens = min(float(burst), tokens)
    need = min(want, burst)
    have = int(tokens + _EPSILON)
    taken = (need if have >= need else 0) if whole else min(want, have)
    if taken:
        return max(0.0, tokens - taken), now, taken, 0.0
    missing = (need if whole else 1) - tokens
    return tokens, now, 0, max(missing, 0.0) / rate


def give_tokens(tokens: float, count: int, burst: int) -> float:
    """A bucket after ``count`` unused tokens came back."""
    return min(float(burst), tokens + count)


class Buckets(Protocol):
    """Where the token buckets live (this process, or shared by the server's workers)."""

    def take(self, application: str, now: Callable[[], float], rate: float, burst: int) -> float:
        """Take a token of ``application``'s bucket (full on first use); the
        seconds to wait for one, 0 when taken. ``now`` is read under the lock."""

    def take_many(
        self, key: str, now: Callable[[], float], rate: float, burst: int, want: int, whole: bool
    ) -> tuple[int, float]:
        """Up to ``want`` tokens of bucket ``key`` (:func:`take_tokens`):
        ``(taken, wait)``."""

    def give_back(self, key: str, count: int, burst: int) -> None:
        """Return ``count`` tokens taken and not used."""


class LocalBuckets:
    """Buckets in this process's memory."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state: dict[str, tuple[float, float]] = {}

    def take(self, application: str, now: Callable[[], float], rate: float, burst: int) -> float:
        taken, wait = self.take_many(application, now, rate, burst, 1, True)
        return wait

    def take_many(
        self, key: str, now: Callable[[], float], rate: float, burst: int, want: int, whole: bool
    ) -> tuple[int, float]:
        with self._lock:
            at = now()
            tokens, last = self._state.get(key, (float(burst), at))
            tokens, last, taken, wait = take_tokens(tokens, last, at, rate, burst, want, whole)
            self._state[key] = (tokens, last)
            return taken, wait

    def give_back(self, key: str, count: int, burst: int) -> None:
        with self._lock:
            if key in self._state:
                tokens, last = self._state[key]
                self._state[key] = (give_tokens(tokens, count, burst), last)


class SharedBuckets:
    """Buckets in a file mapped by every worker process, under an exclusive
    ``flock`` (held for a few microseconds per request).

    The file is a table of :data:`SLOTS` slots (16-byte digest of the
    application's name, tokens, time of the last take), found by linear
    probing and never freed: applications are few. A process that dies
    holding the lock releases it with its file descriptor.
    """

    SLOTS = 4096
    _SLOT = struct.Struct("<16sdd")

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        size = self.SLOTS * self._SLOT.size
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        with self._flocked():
            if os.fstat(self._fd).st_size < size:
                os.ftruncate(self._fd, size)
        self._map = mmap.mmap(self._fd, size)
        # flock belongs to the open file, shared by this process's threads.
        self._lock = threading.Lock()
        self._offsets: dict[str, int] = {}
        self._overflow = LocalBuckets()

    @contextlib.contextmanager
    def _flocked(self) -> Iterator[None]:
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _offset(self, key: bytes) -> int | None:
        """The slot of ``key``, claimed when new (under the file lock); None when full."""
        start = int.from_bytes(key[:8], "big") % self.SLOTS
        for probe in range(self.SLOTS):
            offset = ((start + probe) % self.SLOTS) * self._SLOT.size
            found = self._map[offset : offset + 16]
            if found == key:
                return offset
            if found == bytes(16):
                self._SLOT.pack_into(self._map, offset, key, math.nan, 0.0)
                return offset
        return None

    def _slot(self, name: str) -> int | None:
        """The offset of ``name``'s slot (caller holds both locks)."""
        offset = self._offsets.get(name)
        if offset is None:
            key = hashlib.blake2b(name.encode("utf-8"), digest_size=16).digest()
            offset = self._offset(key)
            if offset is not None:
                self._offsets[name] = offset
        return offset

    def take(self, application: str, now: Callable[[], float], rate: float, burst: int) -> float:
        taken, wait = self.take_many(application, now, rate, burst, 1, True)
        return wait

    def take_many(
        self, key: str, now: Callable[[], float], rate: float, burst: int, want: int, whole: bool
    ) -> tuple[int, float]:
        with self._lock, self._flocked():
            offset = self._slot(key)
            if offset is None:
                return self._overflow.take_many(key, now, rate, burst, want, whole)
            digest, tokens, last = self._SLOT.unpack_from(self._map, offset)
            at = now()
            if math.isnan(tokens):  # first use of this slot
                tokens, last = float(burst), at
            tokens, last, taken, wait = take_tokens(tokens, last, at, rate, burst, want, whole)
            self._SLOT.pack_into(self._map, offset, digest, tokens, last)
            return taken, wait

    def give_back(self, key: str, count: int, burst: int) -> None:
        with self._lock, self._flocked():
            offset = self._slot(key)
            if offset is None:
                self._overflow.give_back(key, count, burst)
                return
            digest, tokens, last = self._SLOT.unpack_from(self._map, offset)
            if not math.isnan(tokens):
                self._SLOT.pack_into(
                    self._map, offset, digest, give_tokens(tokens, count, burst), last
                )

    def close(self) -> None:
        self._map.close()
        os.close(self._fd)


class Quotas:
    """Every application's limits, and the checks each door calls."""

    def __init__(
        self,
        defaults: Limits,
        applications: Callable[[], Mapping[str, Application]],
        clock: Clock,
        buckets: Buckets | None = None,
        hold_seconds: float = 0.0,
    ) -> None:
        self.defaults = defaults
        #: Longest pause before a refusal (``queuey.limits.throttle_hold``), and
        #: where a refused request waits it out: ``hold(application, seconds)``,
        #: False without a free slot (:meth:`queuey.core.longpoll.LongPolls.hold`).
        self.hold_seconds = hold_seconds
        self.hold: Callable[[str, float], bool] = lambda application, seconds: False
        #: The configured applications as they are now (asked on every call).
        self.applications = applications
        self.clock = clock
        self.buckets = buckets if buckets is not None else LocalBuckets()
        self._limits: dict[str, tuple[Application, Limits]] = {}

    def limits(self, application: str) -> Limits:
        """``application``'s limits (the defaults for a name not configured)."""
        app = self.applications().get(application)
        if app is None:
            return self.defaults
        cached = self._limits.get(application)
        if cached is None or cached[0] is not app:
            cached = self._limits[application] = (app, limits_of(app, self.defaults))
        return cached[1]

    def _now(self) -> float:
        return self.clock.now_micros() / MICROS

    def admit(self, application: str) -> None:
        """Charge one request to ``application`` (an authenticated caller);
        :class:`Throttled` when its bucket is empty."""
        limits = self.limits(application)
        rate = limits.requests_per_second
        if not rate:
            return
        wait = self.buckets.take(application, self._now, rate, limits.burst)
        if wait > 0:
            retry_after = max(1, math.ceil(wait))
            self.hold(application, min(self.hold_seconds, retry_after))
            raise Throttled(application, rate, retry_after)

    def max_waiting_polls(self, application: str) -> int:
        """Most long polls of ``application`` waiting at once in this process (0: no own cap)."""
        return self.limits(application).waiting_polls

    def check_new_queue(self, storage, application: str) -> None:
        """Before creating a queue of ``application``: :class:`TooManyQueues`
        when it has its ``max_queues`` already. Concurrent creates may each
        pass at ``max_queues - 1``; the limit bounds an application, it is not
        an exact count."""
        limit = self.limits(application).queues
        if not limit:
            return
        counted, after = 0, None
        while True:
            want = min(_COUNT_PAGE, limit - counted)
            page = storage.list_queues(application, want, after)
            counted += len(page)
            if counted >= limit:
                raise TooManyQueues(application, limit)
            if len(page) < want:
                return
            after = page[-1].name

    def close(self) -> None:
        close = getattr(self.buckets, "close", None)
        if close is not None:
            close()


def limits_of(app: Application, defaults: Limits) -> Limits:
    """``app``'s limits: its own where the applications file gives them, else the defaults."""
    return Limits(
        requests_per_second=_given(app.max_requests_per_second, defaults.requests_per_second),
        burst=_given(app.max_burst, defaults.burst),
        waiting_polls=_given(app.max_waiting_polls, defaults.waiting_polls),
        queues=_given(app.max_queues, defaults.queues),
        posts_per_second=_given(app.max_posts_per_second, defaults.posts_per_second),
        messages=_given(app.max_messages, defaults.messages),
        bytes=_given(app.max_bytes, defaults.bytes),
    )


def _given(value, default):
    return default if value is None else value


def default_limits(settings: Settings) -> Limits:
    return Limits(
        requests_per_second=settings.limits_max_requests_per_second,
        burst=settings.limits_max_burst,
        waiting_polls=settings.limits_max_waiting_polls,
        queues=settings.limits_max_queues,
        posts_per_second=settings.limits_max_posts_per_second,
        messages=settings.limits_max_messages,
        bytes=settings.limits_max_bytes,
    )


#: The shared buckets' file in the server's directory (``QUEUEY_SHARED_DIR``).
SHARED_FILE = "quotas.buckets"


def load_quotas(
    settings: Settings,
    applications: Callable[[], Mapping[str, Application]],
    clock: Clock,
    shared_dir: str | Path | None = None,
) -> Quotas:
    """The quotas of this process; the buckets are shared through
    ``shared_dir`` when the server runs several processes."""
    buckets = SharedBuckets(Path(shared_dir) / SHARED_FILE) if shared_dir else LocalBuckets()
    return Quotas(
        default_limits(settings),
        applications,
        clock,
        buckets,
        hold_seconds=settings.limits_throttle_hold,
    )
