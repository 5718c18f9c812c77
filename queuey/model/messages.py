"""A message: as posted, as stored, and how reads ask for them."""

from __future__ import annotations

import heapq
import itertools
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from queuey import ids
from queuey.model.queues import Order


@dataclass(frozen=True)
class NewMessage:
    """A message to store. ``body`` is its JSON text (an object), kept verbatim.

    ``delay``: seconds (0 up to ``ttl``) before the message becomes visible; the
    backend mints its id at ``now + delay`` and its expiry stays ``now + ttl``.
    ``priority``: 0-9, higher is reserved first within a subscription.
    ``dedup_id``: a second message with the same ``dedup_id`` put to the same
    queue incarnation within the backend's ``dedup_window`` seconds stores
    nothing and is answered with the first message.
    ``attributes``: at most 10 string keys to string values, returned on reads.
    """

    body: str
    partition: int
    ttl: int
    delay: int = 0
    priority: int = 0
    dedup_id: str | None = None
    attributes: Mapping[str, str] | None = None


#: The queue settings ``Storage.update_queue`` may change, in the order forms show them.


@dataclass(frozen=True)
class MessagePage:
    """Consecutive messages of one partition, in id order, as columns.

    ``ids`` is the 16-byte form of every message id, concatenated;
    ``bodies`` the JSON texts as UTF-8, in the same order. ``served_bytes``
    is what the store sent for them (ids, bodies and expiry), for read
    accounting.
    """

    partition: int
    ids: bytes
    bodies: Sequence[bytes]
    served_bytes: int

    def __len__(self) -> int:
        return len(self.bodies)

    @classmethod
    def of(cls, partition: int, messages: Sequence[Message]) -> MessagePage:
        bodies = [m.body.encode("utf-8") for m in messages]
        return cls(
            partition,
            b"".join(m.id.bytes for m in messages),
            bodies,
            sum(map(len, bodies)) + 24 * len(bodies),
        )


@dataclass(frozen=True)
class Message:
    """A stored message. ``body`` is the JSON text it was posted with."""

    id: uuid.UUID
    timestamp: int  # microseconds since the epoch; equals ids.micros_of(id)
    partition: int
    body: str
    expires: int  # microseconds since the epoch; gone from reads at this instant
    priority: int = 0
    attributes: Mapping[str, str] | None = None  # None when the message has none


@dataclass(frozen=True)
class MessageRef:
    """Where a message lives: its partition and id."""

    partition: int
    id: uuid.UUID


@dataclass(frozen=True)
class ReadQuery:
    """What a read asks for.

    ``after_id``: only messages strictly after this id in id order.
    ``after_micros``: only messages strictly newer than this timestamp.
    ``until_micros``: only messages strictly older than this timestamp (the read
    delay and time-range reads use it).
    ``now_micros``: messages that expired at or before this instant are absent.
    With ``descending`` the newest messages matching the bounds come first and
    ``limit`` keeps the newest; with ``ascending`` the oldest come first.
    """

    partitions: Sequence[int]
    now_micros: int
    limit: int = 100
    order: Order = "descending"
    after_id: uuid.UUID | None = None
    after_micros: int | None = None
    until_micros: int | None = None


def merge_partitions(
    per_partition: Sequence[Iterable[Message]], limit: int, descending: bool
) -> list[Message]:
    """Merge per-partition streams (each already in the requested order) by id order.

    The streams may be lazy (cursors): only ``limit`` messages plus one pending
    message per partition are held at a time.
    """
    if len(per_partition) == 1:
        return list(itertools.islice(per_partition[0], limit))
    merged = heapq.merge(*per_partition, key=lambda m: ids.order_key(m.id), reverse=descending)
    return list(itertools.islice(merged, limit))
