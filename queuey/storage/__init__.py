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
* A delayed message is stored with its id minted at its due time and is
  invisible to every reader (stream or work queue) until ``now_micros``
  reaches that time; it then appears in id order. Ordinary ids may be minted
  slightly ahead of ``now_micros`` (a store keeps ids increasing when the
  clock steps back) and are visible as soon as they are written.

Work queues (subscriptions) are described at :class:`Storage.reserve`.
"""

from __future__ import annotations

import abc
import heapq
import importlib
import itertools
import re
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

from queuey import ids
from queuey.errors import InvalidUpdate

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
    #: Work-queue settings: seconds a reservation lasts unless extended.
    visibility_timeout: int = 30
    #: Deliveries after which an unacknowledged message is dead-lettered (0: never).
    max_attempts: int = 0
    #: The queue dead letters go to; ``None`` means ``<name>-dead``.
    dead_letter_queue: str | None = None
    #: Default delivery delay, seconds, for messages posted without one.
    delay: int = 0
    #: First in, first out: a subscription gets a partition's messages strictly
    #: in order, one batch in flight at a time (see :meth:`Storage.reserve`).
    #: Set at creation, never changed.
    fifo: bool = False
    #: Free-form string settings kept with the queue and returned as given
    #: (the SQS endpoint keeps its queue attributes and tags here, under
    #: ``sqs.`` keys). ``update_queue(attributes=...)`` replaces the whole map;
    #: ``attributes_set`` / ``attributes_removed`` change only the named keys.
    attributes: Mapping[str, str] = field(default_factory=dict)

    @property
    def dead_letter_name(self) -> str:
        return self.dead_letter_queue or self.name + "-dead"

    @property
    def partition_numbers(self) -> list[int]:
        """Every partition of the queue, 1 to ``partitions``."""
        return list(range(1, self.partitions + 1))


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
UPDATABLE_QUEUE_FIELDS = (
    "partitions",
    "ttl",
    "type",
    "consistency",
    "visibility_timeout",
    "max_attempts",
    "dead_letter_queue",
    "delay",
    "attributes",
)


class AttributesChanged(InvalidUpdate):
    """An ``update_queue(attributes_if=...)`` whose condition no longer held:
    nothing was changed."""


def merge_attributes(
    current: Mapping[str, str],
    replaced: Mapping[str, str] | None,
    attributes_set: Mapping[str, str] | None,
    attributes_removed: Iterable[str],
    attributes_if: Mapping[str, str | None] | None,
) -> dict[str, str]:
    """The attribute map ``update_queue`` stores: ``replaced`` (or ``current``)
    with ``attributes_set`` put and ``attributes_removed`` dropped.

    ``attributes_if`` is checked against ``current`` (what is stored now): each
    key must hold exactly that value (``None``: be absent), or
    :class:`AttributesChanged` is raised. Backends call this inside their atomic
    write, so concurrent changes of different keys all survive.
    """
    for key, expected in (attributes_if or {}).items():
        if current.get(key) != expected:
            raise AttributesChanged(f"queue attribute {key} changed")
    merged = dict(current if replaced is None else replaced)
    merged.update(attributes_set or {})
    for key in attributes_removed:
        merged.pop(key, None)
    return merged


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


ReceiptStatus = Literal["acked", "expired", "unknown"]


@dataclass(frozen=True)
class Delivery:
    """A message handed to one consumer of a subscription.

    ``attempts`` counts deliveries in this subscription including this one.
    ``receipt`` names this lease; see :func:`make_receipt`.
    """

    message: Message
    attempts: int
    receipt: str
    #: When the message was first delivered in this subscription (microseconds;
    #: this delivery's time on a first delivery). A redrive starts it afresh.
    first_delivered: int = 0


@dataclass(frozen=True)
class DeadLetter:
    """A message whose last allowed delivery ended without an ack.

    The backend has claimed it for dead-lettering (no consumer will get it
    again); the caller posts it to the dead-letter queue and then calls
    :meth:`Storage.ack` with ``claim``. If the caller dies in between, the
    claim lapses after the queue's visibility timeout and a later
    :meth:`Storage.reserve` returns the same message as a dead letter again,
    with a new claim (the caller posts with a deterministic ``dedup_id`` so the
    dead-letter queue still holds it once).

    ``generation`` names the message's current round of deliveries in the
    subscription: empty until :meth:`Storage.reopen` first reopens it, and a
    new value drawn by every reopen; a lapsed claim taken again keeps it. The
    caller puts it in the ``dedup_id``, so a dead-lettering retried is stored
    once while one after a redrive is a new dead letter.
    """

    message: Message
    attempts: int
    last_error: str
    claim: str
    generation: str = ""


@dataclass(frozen=True)
class Reserved:
    deliveries: list[Delivery]
    dead_letters: list[DeadLetter]


@dataclass(frozen=True)
class SubscriptionStats:
    subscription: str
    available: int
    in_flight: int
    delayed: int
    dead_lettered: int
    oldest_available_timestamp: int | None  # microseconds


@dataclass(frozen=True)
class PartitionStats:
    partition: int
    messages: int
    oldest_timestamp: int | None  # microseconds


@dataclass(frozen=True)
class QueueStats:
    messages: int
    oldest_timestamp: int | None
    partitions: list[PartitionStats]
    subscriptions: list[SubscriptionStats]


def make_receipt(partition: int, message_id: uuid.UUID, token: str) -> str:
    """A receipt: ``<partition>-<message id hex>-<token>``; the token is the
    backend's (``[0-9a-z]{1,40}``) and differs for every lease of a message."""
    return "%d-%s-%s" % (partition, message_id.hex, token)


RECEIPT_PATTERN = r"^[0-9]{1,5}-[0-9a-f]{32}-[0-9a-z]{1,40}$"
_RECEIPT = re.compile(RECEIPT_PATTERN)


def parse_receipt(receipt: str) -> tuple[int, uuid.UUID, str] | None:
    """``(partition, message id, token)``, or ``None`` when malformed."""
    if not isinstance(receipt, str) or not _RECEIPT.match(receipt):
        return None
    partition, hexid, token = receipt.split("-")
    try:
        message_id = uuid.UUID(hex=hexid)
    except ValueError:
        return None
    if message_id.version != 1:
        return None
    return int(partition), message_id, token


class MetadataChanges(Protocol):
    """What :meth:`Storage.metadata_changes` gives."""

    def value(self) -> int:
        """The count now; it changes whenever a queue's metadata changes."""

    def bump(self) -> None:
        """Count a change (a queue updated, purged or deleted)."""


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

    #: Seconds within which a second put of the same ``dedup_id`` to a queue
    #: stores nothing (``queuey.dedup_window``, set by ``load_from_config``).
    dedup_window: int = 300

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
    def update_queue(
        self,
        application: str,
        name: str,
        *,
        attributes_set: Mapping[str, str] | None = None,
        attributes_removed: Sequence[str] = (),
        attributes_if: Mapping[str, str | None] | None = None,
        **changes: Any,
    ) -> QueueMeta:
        """Change ``partitions`` (only upwards), ``ttl``, ``type``, ``consistency``,
        ``visibility_timeout``, ``max_attempts``, ``dead_letter_queue``, ``delay``
        or ``attributes`` (the whole map).

        A change given as ``None`` leaves that field as it is. Every field not
        named keeps its value, ``fifo`` included (it cannot change).

        ``attributes_set`` and ``attributes_removed`` change only the keys they
        name, merged into the stored map inside the backend's atomic write (see
        :func:`merge_attributes`): two calls changing different keys at the
        same time both take effect, from any thread, process or API node.
        ``attributes_if`` makes the whole update conditional on the stored
        values of some keys (a compare-and-set), raising
        :class:`AttributesChanged` when one differs.

        Raises ``QueueNotFound``, or ``InvalidUpdate`` when partitions would
        shrink or another field is named.
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

    def scan_messages(
        self, queue: QueueMeta, query: ReadQuery, page_size: int
    ) -> Iterator[MessagePage]:
        """Every message of ``query``'s one partition, in id order, as column pages.

        For bulk readers (Spark) that want columns, not :class:`Message`
        objects. ``query.partitions`` holds exactly one partition;
        ``query.limit`` and ``query.order`` are ignored (the scan is ascending
        and reads to the end of the range). Pages hold at most about
        ``page_size`` messages and are never empty. This default pages through
        :meth:`read_messages`; a backend may read its rows more directly.
        """
        (partition,) = query.partitions
        query = replace(query, order="ascending", limit=page_size)
        while True:
            page = self.read_messages(queue, query)
            if page:
                yield MessagePage.of(partition, page)
            if len(page) < page_size:
                return
            query = replace(query, after_id=page[-1].id)

    @abc.abstractmethod
    def get_messages(
        self, queue: QueueMeta, refs: Sequence[MessageRef], now_micros: int
    ) -> list[Message]:
        """The live messages among ``refs`` (missing or expired ones are left out)."""

    @abc.abstractmethod
    def delete_messages(self, queue: QueueMeta, refs: Sequence[MessageRef]) -> None:
        """Remove these messages; unknown ids are ignored."""

    # -- work queues ----------------------------------------------------------
    @abc.abstractmethod
    def reserve(
        self,
        queue: QueueMeta,
        subscription: str,
        *,
        partitions: Sequence[int],
        limit: int,
        visibility_timeout: int,
        now_micros: int,
        settled_micros: int,
    ) -> Reserved:
        """Lease up to ``limit`` available messages of ``partitions`` to one consumer.

        A subscription is a named, independent work-queue consumer of the queue
        (created on first use, starting at the oldest live message). Each live
        message is, per subscription, in one of these states: *new* (never
        delivered), *leased* (until its lease ends), *available again* (lease
        ended, or released, and its release delay passed), *acked* or
        *dead-lettered* (final). A message is available when it is new and its
        timestamp is at or before ``now_micros``, or available again.

        Order: higher ``priority`` first; within a priority, messages available
        again before new ones, each oldest first (by timestamp).

        Every returned delivery's lease lasts ``visibility_timeout`` seconds
        from ``now_micros``; its attempt count is one more than before. Within
        a lease no other call (from any process or API node) gets the message,
        unless it is released. An available message whose attempt count has
        reached ``queue.max_attempts`` (when not 0) is not delivered: it is
        returned in ``dead_letters`` (not counted in ``limit``), claimed for
        ``queue.visibility_timeout`` seconds.

        FIFO queues (``queue.fifo``): while any message of a queue partition is
        leased (lease not ended), claimed for dead-lettering (claim not
        lapsed) or released with a delay not yet passed in this subscription,
        the call hands out nothing else of that partition; otherwise it hands
        out the partition's available messages strictly in order (available
        again first: they are older), several at once when ``limit`` allows.
        The order is kept within each priority (messages through the SQS
        endpoint all have priority 0). This holds across threads,
        processes and API nodes, like "no early redelivery".

        ``settled_micros`` (at or before ``now_micros``): every message with a
        timestamp at or before it is visible to this call; newer messages may
        still be in flight (Cassandra's write timeout). A backend must not
        record a subscription as past a message it could not have seen; it may
        deliver newer visible messages early as long as it remembers them.
        """

    @abc.abstractmethod
    def ack(
        self, queue: QueueMeta, subscription: str, receipts: Sequence[str], now_micros: int
    ) -> dict[str, ReceiptStatus]:
        """Finish the leased messages: they are never delivered again in this subscription.

        Per receipt: ``acked`` when it is the message's current lease (even if
        the lease ended, as long as no one reserved the message again) or when
        this receipt acked the message already; ``expired`` when the message
        has been leased again, released or dead-lettered since;
        ``unknown`` when the receipt is malformed or names a partition or
        message this subscription never delivered. Also acks dead-letter claims.
        """

    @abc.abstractmethod
    def release(
        self,
        queue: QueueMeta,
        subscription: str,
        receipts: Sequence[str],
        now_micros: int,
        delay: int = 0,
        error: str | None = None,
    ) -> tuple[dict[str, ReceiptStatus], list[DeadLetter]]:
        """End the leases now: the messages are available again after ``delay``
        seconds, their attempt counts unchanged; ``error`` is kept as the
        message's last error. A message whose attempt count reached
        ``queue.max_attempts`` is claimed for dead-lettering instead and
        returned. Statuses as for :meth:`ack` (``acked`` meaning released)."""

    @abc.abstractmethod
    def extend(
        self,
        queue: QueueMeta,
        subscription: str,
        receipts: Sequence[str],
        now_micros: int,
        visibility_timeout: int,
    ) -> dict[str, ReceiptStatus]:
        """Make the leases end ``visibility_timeout`` seconds after ``now_micros``.
        A lease that ended but whose message was not leased again is revived.
        Statuses as for :meth:`ack` (``acked`` meaning extended)."""

    @abc.abstractmethod
    def reopen(
        self, queue: QueueMeta, subscription: str, refs: Sequence[MessageRef], now_micros: int
    ) -> int:
        """Make finished (acked or dead-lettered) live messages available again in
        ``subscription`` with an attempt count of 0 (redrive), each with a new
        :attr:`DeadLetter.generation`. Messages that are gone, not finished or
        unknown are skipped. Idempotent; returns how many were reopened."""

    @abc.abstractmethod
    def stats(self, queue: QueueMeta, now_micros: int) -> QueueStats:
        """Message counts per partition and per subscription (every subscription
        used on this incarnation). Counts may be approximate: a backend says in
        its docs how, and is never off by more than the messages that changed
        state during the call."""

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

    def metadata_changes(self) -> MetadataChanges | None:
        """A counter of queue changes that every server process sharing this
        store on this host reads at once, or ``None`` (changes through other
        processes are then seen when the metadata cache's entries expire)."""
        return None

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
