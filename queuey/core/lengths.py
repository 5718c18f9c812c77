"""How full each queue and application is, as flow control asks on every post.

Counting a queue is a storage scan (:meth:`queuey.storage.Storage.stats`), so
no post pays for one: the operators' refresher (:mod:`queuey.core.overview`)
measures the queues that have a ``max_length``, or whose application has a
``max_messages`` or ``max_bytes``, on every pass. Between two measurements the
posts are *counted*: every post to such a queue adds to a counter of the
queue and one of its application, and a measurement notes the queue's counter
(its ``mark``) before it scans. So

* a queue's length is its depth as measured plus its counter less its mark;
* an application's usage is its counter, plus the depth less the mark of each
  of its measured queues (a queue not measured yet counts by its posts).

The counters are shared by every process of one server (the production
server's workers and refresher: a memory-mapped file in its own directory,
:class:`SharedCounters`), so the figures hold for the whole server, however
its posts are spread over the workers. Other servers' posts (other API nodes
on Cassandra) are not counted here: the posts since a measurement are scaled
by this server's ``share`` of the live processes (as rate limits are split,
:mod:`queuey.core.flow`), reckoning the other nodes take posts alike.

What the figure may get wrong, and which way (over: a refusal may come
early; under: the queue may hold more than its limit):

* A post counted while a measurement scans may be in the scan too: over.
* Messages deleted or expired since the measurement still count until the
  next one (a purge does empty a queue's length at once): over.
* Posts of processes not counted nor covered by the share (another server on
  the same SQLite file, the command line, Spark; Cassandra nodes without
  partition owners, ``queuey.cassandra.work_queue = lwt``, whose share is
  unknown) are seen at the next measurement: under, by at most what they
  accepted in one refresher interval. So are those of a process the store
  does not count live yet (Cassandra sees one within a quarter
  ``owner_term`` of its first asking).
* The check and the write are two steps: posts in flight at once may each
  take the last free place (under by one post or batch per poster).
* Bytes posted since a measurement are estimated at the application's mean
  message size as last measured: the posts' own sizes do not reach here.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from queuey.core.quotas import SharedBuckets
from queuey.model import QueueMeta


class Counters(Protocol):
    """Post counters by key (shared by a server's processes, or this process's)."""

    def add(self, keys: Sequence[str], count: int) -> None:
        """Add ``count`` to each of ``keys``, at once."""

    def read(self, key: str) -> int:
        """The key's count (0 when never added to)."""


class LocalCounters:
    """Counters in this process's memory (a process serving alone)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}

    def add(self, keys: Sequence[str], count: int) -> None:
        with self._lock:
            for key in keys:
                self._counts[key] = self._counts.get(key, 0) + count

    def read(self, key: str) -> int:
        return self._counts.get(key, 0)


class SharedCounters(SharedBuckets):
    """Counters in a file every process of the server maps: the slots of
    :class:`~queuey.core.quotas.SharedBuckets` (a count where a bucket keeps
    its tokens, exact to 2**53), under its ``flock``: one slot per queue
    with a limit and per application. Keys past its :data:`SLOTS` are counted
    in this process only (their figures then hold for it alone)."""

    SLOTS = 16384

    def __init__(self, path: str | Path) -> None:
        super().__init__(path)
        self._spilled = LocalCounters()

    def add(self, keys: Sequence[str], count: int) -> None:
        with self._lock, self._flocked():
            for key in keys:
                offset = self._slot(key)
                if offset is None:
                    self._spilled.add([key], count)
                    continue
                digest, value, last = self._SLOT.unpack_from(self._map, offset)
                value = 0.0 if math.isnan(value) else value
                self._SLOT.pack_into(self._map, offset, digest, value + count, last)

    def read(self, key: str) -> int:
        with self._lock, self._flocked():
            offset = self._slot(key)
            if offset is None:
                return self._spilled.read(key)
            value = self._SLOT.unpack_from(self._map, offset)[1]
        return 0 if math.isnan(value) else int(value)


def queue_key(meta: QueueMeta) -> str:
    return f"q\x1f{meta.application}\x1f{meta.name}"


def application_key(application: str) -> str:
    return f"a\x1f{application}"


@dataclass
class _Measured:
    incarnation: str
    at: int
    depth: int
    bytes: int
    mark: int


class Lengths:
    """Queue lengths and application usage as this server knows them (see the module)."""

    def __init__(self, counters: Counters | None = None) -> None:
        self.counters = counters if counters is not None else LocalCounters()
        self._lock = threading.Lock()
        self._queues: dict[tuple[str, str], _Measured] = {}
        #: Forgotten queues' counts when forgotten: their posts are no longer stored.
        self._gone: dict[tuple[str, str], int] = {}
        #: Per application: depths, bytes, marks of its measured queues, and gone counts.
        self._apps: dict[str, list[int]] = {}

    # -- feeding ------------------------------------------------------------------
    def posted(self, meta: QueueMeta, count: int) -> None:
        """``count`` messages were stored in the queue."""
        if count > 0:
            self.counters.add((queue_key(meta), application_key(meta.application)), count)

    def mark(self, meta: QueueMeta) -> int:
        """The queue's count now: read it *before* scanning the queue."""
        return self.counters.read(queue_key(meta))

    def measured(
        self, meta: QueueMeta, depth: int, size: int | None, mark: int, at_micros: int
    ) -> None:
        """The queue held ``depth`` messages of ``size`` bytes (None: not
        counted; estimated at the application's mean) when its count was
        ``mark``, at ``at_micros``. Older figures than those known are ignored."""
        key = (meta.application, meta.name)
        with self._lock:
            known = self._queues.get(key)
            if known is not None and at_micros < known.at:
                return
            totals = self._totals(meta.application)
            if size is None:
                size = math.ceil(depth * _mean(totals))
            self._unlist(key, totals)
            self._queues[key] = _Measured(meta.incarnation, at_micros, depth, size, mark)
            for n, value in enumerate((depth, size, mark)):
                totals[n] += value

    def forget(self, application: str, name: str) -> None:
        """The queue is deleted, or no longer watched: its posts stop counting."""
        key = (application, name)
        gone = self.counters.read(queue_key(QueueMeta(application, name)))
        with self._lock:
            totals = self._totals(application)
            self._unlist(key, totals)
            if gone:
                self._gone[key] = gone
                totals[3] += gone

    # -- reading ------------------------------------------------------------------
    def length(self, meta: QueueMeta, share: float = 1.0) -> int | None:
        """The queue's stored messages, the posts since its measurement taken
        for this server's ``share`` (None: never measured nor posted to)."""
        key = (meta.application, meta.name)
        count = self.counters.read(queue_key(meta))
        with self._lock:
            known = self._queues.get(key)
            if known is None:
                since = count - self._gone.get(key, 0)
                return _scaled(since, share) if since > 0 else None
            since = _scaled(count - known.mark, share)
            # A purge empties the queue: only the posts since count.
            return since if known.incarnation != meta.incarnation else known.depth + since

    def usage(self, application: str, share: float = 1.0) -> tuple[int, int] | None:
        """``(messages, bytes)`` stored over the application's queues, as for
        :meth:`length` (None: none measured nor posted to)."""
        count = self.counters.read(application_key(application))
        with self._lock:
            totals = self._apps.get(application)
            if totals is None:
                return (count, 0) if count else None
            depth, size, marks, gone = totals
            since = _scaled(count - marks - gone, share)
            return depth + since, size + math.ceil(since * _mean(totals))

    # -- inside (the lock held) ---------------------------------------------------
    def _totals(self, application: str) -> list[int]:
        return self._apps.setdefault(application, [0, 0, 0, 0])

    def _unlist(self, key: tuple[str, str], totals: list[int]) -> None:
        """Take the queue's figures (or its gone count) out of its application's sums."""
        known = self._queues.pop(key, None)
        if known is not None:
            for n, value in enumerate((known.depth, known.bytes, known.mark)):
                totals[n] -= value
        totals[3] -= self._gone.pop(key, 0)


def _mean(totals: list[int]) -> float:
    return totals[1] / totals[0] if totals[0] else 0.0


def _scaled(since: int, share: float) -> int:
    """Posts of every server, from this one's and its share of the processes."""
    since = max(0, since)
    return since if share >= 1 else math.ceil(since / max(share, 1e-6))
