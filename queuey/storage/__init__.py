"""The storage interface every backend implements.

A backend stores queue metadata, messages and consumer checkpoints. The web
layer, the consumer library and the Spark source only ever talk to this
interface; the concrete backend is chosen by a dotted name in the ini
(``queuey.storage.backend``) and built by that module's ``load_from_config``.

Contract (the same test suite, ``tests/storage/contract.py``, runs against
every backend):

* Message ids are version-1 UUIDs minted by the backend when it accepts a
  write (``queuey.ids``); their time field is the message timestamp.
* Within a partition messages are ordered by id order: timestamp first, then the
  remaining id bytes compared as *signed* bytes (Cassandra's timeuuid order).
  :func:`queuey.ids.order_key` gives the same order in Python; reads across
  partitions merge by it.
* A read never returns a message whose expiry time is at or before
  ``ReadQuery.now_micros``; expiry is decided by the caller's clock, not the
  store's, so it is exact and testable.
* Every driver exception is wrapped into :class:`queuey.errors.StorageUnavailable`
  at the backend boundary.
"""

from __future__ import annotations

import abc
import heapq
import importlib
import itertools
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from queuey import ids

Order = Literal["ascending", "descending"]
QueueType = Literal["public", "private"]
Consistency = Literal["weak", "strong", "very_strong"]


@dataclass(frozen=True)
class QueueMeta:
    """A queue's registration.

    ``incarnation`` changes when the queue is purged or re-created, so that old
    messages become unreachable in O(1) and are left to expire.
    """

    application: str
    name: str
    partitions: int = 1
    ttl: int = 259200
    type: QueueType = "public"
    consistency: Consistency = "strong"
    created: int = 0  # microseconds since the epoch
    incarnation: str = field(default_factory=lambda: uuid.uuid4().hex)


@dataclass(frozen=True)
class NewMessage:
    """A message to store. ``body`` is its JSON text (an object), kept verbatim."""

    body: str
    partition: int
    ttl: int


@dataclass(frozen=True)
class Message:
    """A stored message. ``body`` is the JSON text it was posted with."""

    id: uuid.UUID
    timestamp: int  # microseconds since the epoch; equals ids.micros_of(id)
    partition: int
    body: str
    expires: int  # microseconds since the epoch; gone from reads at this instant


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


class Storage(abc.ABC):
    """A message store. Implementations must be safe to share between threads."""

    #: Longest time a write may take between minting its id and becoming
    #: visible to readers. The service refuses a read delay shorter than this
    #: plus the allowed clock skew. Zero for a store whose commit order is id
    #: order.
    write_timeout_seconds: float = 0.0

    #: Longest message TTL, in seconds, the store can keep (its expiry must be
    #: representable there). The service refuses to start with a
    #: ``queuey.max_ttl`` above it, so no accepted ttl can fail in the store.
    #: A backend that can keep longer says so; 20 years is Cassandra's limit.
    max_ttl: int = 630_720_000

    # -- queues ---------------------------------------------------------------
    @abc.abstractmethod
    def create_queue(self, meta: QueueMeta) -> QueueMeta:
        """Register a queue. Raises ``QueueExists`` if the application has one of that name."""

    @abc.abstractmethod
    def get_queue(self, application: str, name: str) -> QueueMeta:
        """The queue's metadata, or ``QueueNotFound``."""

    @abc.abstractmethod
    def list_queues(
        self, application: str, limit: int = 100, after: str | None = None
    ) -> list[QueueMeta]:
        """The application's queues ordered by name, starting after ``after``."""

    @abc.abstractmethod
    def update_queue(self, application: str, name: str, **changes: Any) -> QueueMeta:
        """Change ``partitions`` (only upwards), ``ttl``, ``type`` or ``consistency``.

        A change given as ``None`` leaves that field as it is.

        Raises ``QueueNotFound``, or ``InvalidUpdate`` when partitions would shrink.
        """

    @abc.abstractmethod
    def delete_queue(self, application: str, name: str) -> None:
        """Unregister the queue and make its messages unreachable (O(1) for the caller)."""

    @abc.abstractmethod
    def purge_queue(self, application: str, name: str) -> QueueMeta:
        """Make every message unreachable but keep the queue (new incarnation)."""

    # -- messages -------------------------------------------------------------
    @abc.abstractmethod
    def put_messages(self, queue: QueueMeta, messages: Sequence[NewMessage]) -> list[Message]:
        """Store messages, all or nothing; returns them with ids, in input order.

        Ids are minted here so that the backend can keep invariant 2 (no reader
        skips): a backend either makes commit order equal id order (SQLite) or
        relies on the caller's read delay being longer than its write timeout
        (Cassandra). Partitions must already be valid for the queue, and ttls
        at most :attr:`max_ttl`.

        Returns only once the messages are durable. ``StorageUnavailable``
        means the outcome is unknown (a write that timed out may still be
        applied), never "certainly not stored": callers must not answer it as
        a refusal or post the same messages again on their own. A backend
        raises nothing once its write is applied (no work that can fail
        follows the write on the caller's path).
        """

    @abc.abstractmethod
    def read_messages(self, queue: QueueMeta, query: ReadQuery) -> list[Message]:
        """Messages of the given partitions matching ``query``, merged by id order."""

    @abc.abstractmethod
    def get_messages(
        self, queue: QueueMeta, refs: Sequence[MessageRef], now_micros: int
    ) -> list[Message]:
        """The live messages among ``refs`` (missing or expired ones are left out)."""

    @abc.abstractmethod
    def delete_messages(self, queue: QueueMeta, refs: Sequence[MessageRef]) -> None:
        """Remove these messages; unknown ids are ignored."""

    # -- checkpoints ----------------------------------------------------------
    @abc.abstractmethod
    def get_checkpoints(self, application: str, queue: str, consumer: str) -> dict[int, uuid.UUID]:
        """How far ``consumer`` has processed each partition (absent: nothing yet)."""

    @abc.abstractmethod
    def set_checkpoints(
        self, application: str, queue: str, consumer: str, checkpoints: Mapping[int, uuid.UUID]
    ) -> None:
        """Record checkpoints for the given partitions; others are left as they were."""

    # -- operations -----------------------------------------------------------
    @abc.abstractmethod
    def ping(self) -> None:
        """Return if the store answers; raise ``StorageUnavailable`` otherwise."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""


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


def load_backend(dotted: str, settings: Mapping[str, Any], clock: Any) -> Storage:
    """Build the backend named by ``dotted`` (a module with ``load_from_config``)."""
    module = importlib.import_module(dotted)
    return module.load_from_config(settings, clock)
