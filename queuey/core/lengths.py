"""How full each queue and application is, as flow control asks on every post.

Counting a queue is a storage scan (:meth:`queuey.storage.Storage.stats`), so
no post pays for one: the operators' refresher (:mod:`queuey.core.overview`)
measures the queues that have a ``max_length``, or whose application has a
``max_messages`` or ``max_bytes``, on every pass. Between two measurements the
posts are *counted*, with their bytes: a post to such a queue is admitted and
counted in one step (:meth:`Lengths.admit`, under the table's lock, so
concurrent posts cannot each take the last free place), and a measurement
notes the queue's count (its ``mark``) before it scans. So

* a queue's length is its depth as measured plus its posts since the mark;
* an application's usage is the sum of its queues' lengths (kept as a running
  sum in its table, so a post's check costs the same however many queues it has);
* a queue never measured counts its posts alone, and an application whose
  usage is unknown counts as empty plus the post being checked: a post larger
  than a quota is always refused.

Everything lives in one :class:`~queuey.core.slots.SlotTable` per application,
shared by every process of the server (its workers and refresher) or, where
the store says so (SQLite), by every process of the host; measurements are
written there by the process that measures, so a purge, a measurement taken
when a ``max_length`` is set, or a refresher pass is seen by every process at
once.

What the figure may get wrong, and which way (over: a refusal may come
early; under: the queue may hold more than its limit):

* A post counted while a measurement scans may be in the scan too: over.
* A post counted but not yet written when a measurement marks may be missing
  from its scan: so it stays *pending* (:class:`Counted`) until its writer
  settles it, and a mark leaves the pending posts out: they count as posts
  since, written or not (over, never under). A writer that died before
  settling leaves its post pending for one to two :data:`PENDING_SECONDS`.
* Messages deleted, expired, or deduplicated since the measurement still count
  until the next one: over.
* Posts of processes that do not share the table (other API nodes on
  Cassandra, Spark executors there) are seen at the next measurement: under,
  by what they accepted in one refresher interval. On Cassandra the posts since
  a measurement are scaled by this server's ``share`` of the live processes
  (as rate limits are split, :mod:`queuey.core.flow`), reckoning the other
  nodes take posts alike.
* Bytes measured on Cassandra are estimated (:func:`queuey.core.figures.measure`);
  the bytes of posts since are the posts' own.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from queuey.core.buckets import DEFAULT_KEYS
from queuey.core.slots import SlotTable, TableSet, digest
from queuey.model import QueueMeta

# A queue's slot: posted, posted bytes, measured depth, measured bytes, the
# mark (posted when measured), its bytes, the measured incarnation's tag, when
# measured (micros), when last touched (seconds), then the posts pending
# (counted, not yet written): two (epoch, count, bytes) triples, one per
# parity of the epoch they were counted in.
_POSTED, _POSTED_BYTES, _DEPTH, _SIZE, _MARK, _MARK_BYTES, _TAG, _AT, _TOUCHED = range(9)
_PENDING = 9
_FIELDS = 15
#: A pending post's epoch: one not settled within one to two of them (its
#: writer died) stops being pending. Far longer than any store write takes.
PENDING_SECONDS = 60.0
# The application's slot: the sums of its queues' depths, bytes, posts since
# their marks and those posts' bytes.
_USAGE = "\x00usage"


def _tag(incarnation: str) -> float:
    """A queue incarnation's 48-bit tag (exact in a double; 0: none)."""
    value = int.from_bytes(hashlib.blake2b(incarnation.encode(), digest_size=6).digest(), "big")
    return float(value or 1)


def _queue(name: str) -> str:
    return f"q\x1f{name}"


def _contribution(values: tuple[float, ...]) -> tuple[float, float, float, float]:
    """What a queue's slot adds to its application's sums."""
    return (
        values[_DEPTH],
        values[_SIZE],
        values[_POSTED] - values[_MARK],
        values[_POSTED_BYTES] - values[_MARK_BYTES],
    )


@dataclass(frozen=True)
class Counted:
    """A post :meth:`Lengths.admit` counted: pending until settled (or unposted)."""

    count: int
    size: int
    epoch: int


@dataclass(frozen=True)
class Refusal:
    """Which limit a post would pass (``field``), and the figure it met."""

    field: str
    stored: int
    limit: int


class Lengths:
    """Queue lengths and application usage (see the module), in tables kept in
    ``directory`` (None: this process only). ``now`` gives seconds."""

    def __init__(
        self,
        directory: str | Path | None = None,
        keys: int = DEFAULT_KEYS,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.tables = TableSet(directory, "lengths", keys, _FIELDS)
        self.now = now

    # -- inside (the table held) -------------------------------------------------
    def _slot(self, table: SlotTable, meta: QueueMeta) -> int:
        self._usage_slot(table)  # first: the application's sums always have their slot
        return table.claim(_queue(meta.name), (0.0,) * _FIELDS)

    def _usage_slot(self, table: SlotTable) -> int:
        return table.claim(_USAGE, (0.0,) * _FIELDS)

    def _change(self, table: SlotTable, index: int, values: list[float]) -> None:
        """Write a queue's slot, keeping its application's sums."""
        before = _contribution(table.read(index))
        values[_TOUCHED] = self.now()
        table.write(index, values)
        after = _contribution(tuple(values))
        usage = self._usage_slot(table)
        sums = list(table.read(usage))
        for n in range(4):
            sums[n] += after[n] - before[n]
        table.write(usage, sums)

    @staticmethod
    def _length(values: tuple[float, ...], meta: QueueMeta, share: float) -> int:
        since = _scaled(values[_POSTED] - values[_MARK], share)
        current = values[_TAG] == _tag(meta.incarnation)
        # A queue purged elsewhere (a new incarnation): only the posts since count.
        return since + (int(values[_DEPTH]) if current else 0)

    @staticmethod
    def _usage(sums: tuple[float, ...], share: float) -> tuple[int, int]:
        return (
            int(sums[0]) + _scaled(sums[2], share),
            int(sums[1]) + _scaled(sums[3], share),
        )

    # -- posts ------------------------------------------------------------------------
    def admit(
        self,
        meta: QueueMeta,
        count: int,
        size: int,
        *,
        max_length: int = 0,
        max_messages: int = 0,
        max_bytes: int = 0,
        share: float = 1.0,
    ) -> Refusal | Counted:
        """Count a post of ``count`` messages of ``size`` bytes, pending until
        :meth:`settle` (written) or :meth:`unpost` (not), unless it would take
        the queue past ``max_length`` or the application past ``max_messages``
        / ``max_bytes`` (0: no such limit): then nothing is counted and the
        :class:`Refusal` says which."""
        limits = (max_length, max_messages, max_bytes)
        epoch = self._epoch()
        with self.tables.of(meta.application).locked() as table:
            index = self._slot(table, meta)
            values = list(table.read(index))
            sums = table.read(self._usage_slot(table))
            refusal = self._refusal(tuple(values), sums, meta, count, size, limits, share)
            if refusal is not None:
                return refusal
            values[_POSTED] += count
            values[_POSTED_BYTES] += size
            base = _pending_at(epoch)
            if values[base] != epoch:  # the triple two epochs old: forgotten
                values[base : base + 3] = [float(epoch), 0.0, 0.0]
            values[base + 1] += count
            values[base + 2] += size
            self._change(table, index, values)
        return Counted(count, size, epoch)

    def check(
        self, meta: QueueMeta, count: int, size: int, *, share: float = 1.0, **limits: int
    ) -> Refusal | None:
        """What :meth:`admit` would answer now, counting nothing (``limits``
        as :meth:`admit` names them)."""
        names = ("max_length", "max_messages", "max_bytes")
        if not limits.keys() <= set(names):
            raise TypeError(f"unknown limits: {sorted(limits.keys() - set(names))}")
        limits = tuple(limits.get(name, 0) for name in names)
        with self.tables.of(meta.application).locked() as table:
            index = table.find(_queue(meta.name))
            usage = table.find(_USAGE)
            values = table.read(index) if index is not None else (0.0,) * _FIELDS
            sums = table.read(usage) if usage is not None else (0.0,) * _FIELDS
            return self._refusal(values, sums, meta, count, size, limits, share)

    def _refusal(
        self,
        values: tuple[float, ...],
        sums: tuple[float, ...],
        meta: QueueMeta,
        count: int,
        size: int,
        limits: tuple[int, int, int],
        share: float,
    ) -> Refusal | None:
        """Which limit a post would pass, from the queue's slot and its
        application's sums (0: no such limit)."""
        max_length, max_messages, max_bytes = limits
        if max_length:
            length = self._length(values, meta, share)
            if length + count > max_length:
                return Refusal("max_length", length, max_length)
        stored, stored_bytes = self._usage(sums, share)
        if max_messages and stored + count > max_messages:
            return Refusal("max_messages", stored, max_messages)
        if max_bytes and stored_bytes + size > max_bytes:
            return Refusal("max_bytes", stored_bytes, max_bytes)
        return None

    def settle(self, meta: QueueMeta, counted: Counted) -> None:
        """A post counted by :meth:`admit` is written: no longer pending."""
        self._settle(meta, counted, unpost=False)

    def unpost(self, meta: QueueMeta, counted: Counted) -> None:
        """A post counted by :meth:`admit` was not stored (its write failed)."""
        self._settle(meta, counted, unpost=True)

    def _settle(self, meta: QueueMeta, counted: Counted, unpost: bool) -> None:
        with self.tables.of(meta.application).locked() as table:
            index = table.find(_queue(meta.name))
            if index is None:
                return
            values = list(table.read(index))
            base = _pending_at(counted.epoch)
            if values[base] == counted.epoch:
                values[base + 1] = max(0.0, values[base + 1] - counted.count)
                values[base + 2] = max(0.0, values[base + 2] - counted.size)
            if not unpost:  # the application's sums do not change
                table.write(index, values)
                return
            values[_POSTED] -= counted.count
            values[_POSTED_BYTES] -= counted.size
            self._change(table, index, values)

    def _epoch(self) -> int:
        return int(self.now() // PENDING_SECONDS)

    def _pending(self, values: tuple[float, ...]) -> tuple[float, float]:
        """The queue's posts counted but not yet written (nor forgotten)."""
        epoch = self._epoch()
        count = size = 0.0
        for base in (_pending_at(epoch), _pending_at(epoch - 1)):
            if epoch - 1 <= values[base] <= epoch:
                count += values[base + 1]
                size += values[base + 2]
        return count, size

    # -- measurements ----------------------------------------------------------------
    def mark(self, meta: QueueMeta) -> tuple[int, int]:
        """The queue's posts and their bytes now, but for those pending (the
        scan may miss them): read them *before* scanning it."""
        with self.tables.of(meta.application).locked() as table:
            index = table.find(_queue(meta.name))
            if index is None:
                return 0, 0
            values = table.read(index)
            count, size = self._pending(values)
            return int(values[_POSTED] - count), int(values[_POSTED_BYTES] - size)

    def measured(
        self,
        meta: QueueMeta,
        depth: int,
        size: int,
        mark: tuple[int, int],
        at_micros: int,
    ) -> None:
        """The queue held ``depth`` messages of ``size`` bytes when its posts
        were ``mark``, at ``at_micros``. Figures older than those known are ignored."""
        with self.tables.of(meta.application).locked() as table:
            index = self._slot(table, meta)
            values = list(table.read(index))
            if at_micros < values[_AT]:
                return
            values[_DEPTH], values[_SIZE] = float(depth), float(size)
            values[_MARK], values[_MARK_BYTES] = float(mark[0]), float(mark[1])
            values[_TAG], values[_AT] = _tag(meta.incarnation), float(at_micros)
            self._change(table, index, values)

    def purged(self, meta: QueueMeta, at_micros: int) -> None:
        """The queue was purged and is now ``meta``'s (new) incarnation: empty."""
        with self.tables.of(meta.application).locked() as table:
            index = self._slot(table, meta)
            values = list(table.read(index))
            values[_DEPTH] = values[_SIZE] = 0.0
            values[_MARK], values[_MARK_BYTES] = values[_POSTED], values[_POSTED_BYTES]
            values[_TAG], values[_AT] = _tag(meta.incarnation), float(at_micros)
            self._change(table, index, values)

    def forget(self, application: str, name: str) -> None:
        """The queue is deleted: its messages and posts stop counting."""
        with self.tables.of(application).locked() as table:
            index = table.find(_queue(name))
            if index is not None:
                self._change(table, index, [0.0] * _FIELDS)
                table.free(index)

    def sweep(self, application: str, names: Iterable[str], idle_seconds: float) -> int:
        """Free the slots of queues not in ``names`` (the application's queues
        as listed) untouched for ``idle_seconds``: queues deleted by a process
        that does not share the table. The number freed."""
        table = self.tables.existing(application)
        if table is None:
            return 0
        keep = {digest(_queue(name)) for name in names} | {digest(_USAGE)}
        before = self.now() - idle_seconds
        freed = 0
        with table.locked():
            for index, key, values in list(table.used()):
                if key not in keep and values[_TOUCHED] < before:
                    self._change(table, index, [0.0] * _FIELDS)
                    table.free(index)
                    freed += 1
        return freed

    # -- reading -----------------------------------------------------------------------
    def length(self, meta: QueueMeta, share: float = 1.0) -> int | None:
        """The queue's stored messages (None: never measured nor posted to)."""
        with self.tables.of(meta.application).locked() as table:
            index = table.find(_queue(meta.name))
            return None if index is None else self._length(table.read(index), meta, share)

    def usage(self, application: str, share: float = 1.0) -> tuple[int, int] | None:
        """``(messages, bytes)`` the application stores (None: nothing known)."""
        with self.tables.of(application).locked() as table:
            index = table.find(_USAGE)
            return None if index is None else self._usage(table.read(index), share)

    def close(self) -> None:
        self.tables.close()


def _pending_at(epoch: int) -> int:
    """Where a slot keeps the posts pending from ``epoch``: its parity's triple."""
    return _PENDING + 3 * (epoch % 2)


def _scaled(since: float, share: float) -> int:
    """Posts of every server, from this one's and its share of the processes."""
    since = max(0.0, since)
    return int(since) if share >= 1 else math.ceil(since / max(share, 1e-6))
