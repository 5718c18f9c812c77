"""What one measurement of a queue gives: its counts, and its bytes.

Counting is a storage scan (:meth:`queuey.storage.Storage.stats`): the
operators' refresher (:mod:`queuey.core.overview`) does it in the background
and flow control reads the result (:mod:`queuey.core.lengths`).
"""

from __future__ import annotations

from dataclasses import dataclass

from queuey.ids import MICROS
from queuey.model import PartitionStats, QueueMeta, ReadQuery, SubscriptionStats
from queuey.storage import Storage

#: Newest messages read to estimate a queue's bytes where the store does not count them.
BYTES_SAMPLE = 100


@dataclass(frozen=True)
class QueueFigures:
    """A queue's counts as of ``measured`` (microseconds since the epoch).

    ``in_flight``, ``delayed`` and ``dead_lettered`` are summed over the
    queue's subscriptions (a delayed message counts once per subscription).
    ``oldest_age``: seconds since the oldest live message was posted (or
    ``None`` when the queue is empty), as of ``measured``. ``bytes``: the
    bodies' size, counted by the store or estimated (:func:`measure`); None
    when not wanted. ``mark``: the queue's post count and bytes read before the scan
    (:mod:`queuey.core.lengths`).
    """

    meta: QueueMeta
    depth: int
    in_flight: int
    delayed: int
    dead_lettered: int
    oldest_age: float | None
    partitions: tuple[PartitionStats, ...]
    subscriptions: tuple[SubscriptionStats, ...]
    measured: int
    bytes: int | None = None
    mark: tuple[int, int] = (0, 0)

    @property
    def application(self) -> str:
        return self.meta.application

    @property
    def name(self) -> str:
        return self.meta.name


def measure(
    storage: Storage,
    meta: QueueMeta,
    now_micros: int,
    *,
    sized: bool = False,
    mark: tuple[int, int] = (0, 0),
) -> QueueFigures:
    """Count a queue now (a storage scan: see :meth:`Storage.stats`).

    ``sized``: give ``bytes`` even where the store does not count them. A
    store whose scan does not read bodies (Cassandra) gets an estimate: the
    depth times the mean size of the :data:`BYTES_SAMPLE` newest messages of
    the fullest partition, one more read. It is exact when a queue's messages
    are alike in size, else off by the depth times the sample mean's error
    (newer messages larger or smaller than the older ones skew it)."""
    stats = storage.stats(meta, now_micros)
    subs = stats.subscriptions
    oldest = stats.oldest_timestamp
    size = stats.bytes
    if size is None and sized:
        size = 0
        fullest = max(stats.partitions, key=lambda p: p.messages, default=None)
        if fullest is not None and fullest.messages:
            sample = storage.read_messages(
                meta,
                ReadQuery([fullest.partition], now_micros, BYTES_SAMPLE, "descending"),
            )
            if sample:
                mean = sum(len(m.body.encode("utf-8")) for m in sample) / len(sample)
                size = round(stats.messages * mean)
    return QueueFigures(
        meta=meta,
        depth=stats.messages,
        in_flight=sum(s.in_flight for s in subs),
        delayed=sum(s.delayed for s in subs),
        dead_lettered=sum(s.dead_lettered for s in subs),
        oldest_age=None if oldest is None else max(0.0, (now_micros - oldest) / MICROS),
        partitions=tuple(stats.partitions),
        subscriptions=tuple(subs),
        measured=now_micros,
        bytes=size,
        mark=mark,
    )
