"""The storage interface every backend implements.

A backend stores queue metadata, messages and consumer checkpoints. The web
layer, the consumer library and the Spark source only ever talk to this
interface; the concrete backend is chosen by a dotted name in the ini
(``queuey.storage.backend``) and built by that module's ``load_from_config``.

Contract (the same test suite, :mod:`queuey.storage.testing`, runs against
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

Work queues (subscriptions) are described at
:meth:`queuey.storage.workstore.WorkQueueStore.reserve`, the half of the
interface that :class:`Storage` inherits.
"""

from __future__ import annotations

import abc
import importlib
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from queuey.model import (
    Message,
    MessagePage,
    MessageRef,
    NewMessage,
    QueueMeta,
    ReadQuery,
)
from queuey.model.schedules import Schedule
from queuey.storage.asks import QueueChange
from queuey.storage.workstore import WorkQueueStore


class MetadataChanges(Protocol):
    """What :meth:`Storage.metadata_changes` gives."""

    def value(self) -> int:
        """The count now; it changes whenever a queue's metadata changes."""

    def bump(self) -> None:
        """Count a change (a queue updated, purged or deleted)."""


class Storage(WorkQueueStore):
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
        change = QueueChange(changes, attributes_set, attributes_removed, attributes_if)
        return self.update_queue_ask(application, name, change)

    @abc.abstractmethod
    def update_queue_ask(self, application: str, name: str, change: QueueChange) -> QueueMeta:
        """:meth:`update_queue`, its arguments after the name in one value:
        ``change.apply`` to the row read inside the backend's atomic write."""

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

    # -- checkpoints ----------------------------------------------------------
    @abc.abstractmethod
    def get_checkpoints(self, application: str, queue: str, consumer: str) -> dict[int, uuid.UUID]:
        """How far ``consumer`` has processed each partition (absent: nothing yet)."""

    @abc.abstractmethod
    def set_checkpoints(
        self, application: str, queue: str, consumer: str, checkpoints: Mapping[int, uuid.UUID]
    ) -> None:
        """Record checkpoints for the given partitions; others are left as they were."""

    # -- schedules ------------------------------------------------------------
    @abc.abstractmethod
    def create_schedule(self, schedule: Schedule) -> Schedule:
        """Store a new schedule as given, at ``version`` 1; raises
        ``ScheduleExists`` if its application has one of that name."""

    @abc.abstractmethod
    def get_schedule(self, application: str, name: str) -> Schedule:
        """The schedule, or ``ScheduleNotFound``."""

    @abc.abstractmethod
    def list_schedules(self, application: str) -> list[Schedule]:
        """Every schedule of the application, ordered by name."""

    @abc.abstractmethod
    def update_schedule(self, schedule: Schedule) -> Schedule | None:
        """Compare-and-set: store ``schedule``'s fields (all but its
        application, name and creation time) at ``schedule.version + 1``, only
        if the stored version is still ``schedule.version``. Returns what was
        stored, or ``None`` when another change (from any process or API node)
        came first or the schedule is gone. Of two callers holding the same
        version, exactly one wins."""

    @abc.abstractmethod
    def delete_schedule(self, application: str, name: str) -> None:
        """Remove the schedule (a later :meth:`update_schedule` of it fails);
        ``ScheduleNotFound`` if there is none."""

    # -- operations -----------------------------------------------------------
    @abc.abstractmethod
    def ping(self) -> None:
        """Return if the store answers; raise ``StorageUnavailable`` otherwise."""

    def metadata_changes(self) -> MetadataChanges | None:
        """A counter of queue changes that every server process sharing this
        store on this host reads at once, or ``None`` (changes through other
        processes are then seen when the metadata cache's entries expire)."""
        return None

    def announce_available(self, application: str, queue: str) -> None:  # noqa: B027
        """Tell the other API processes that messages became available on
        ``queue`` here (posted, released, redriven), so their long polls wake
        at once instead of at their next poll; a store with no way to reach
        them does nothing. Never raises."""

    def watch_available(self, callback: Callable[[str, str], None]) -> None:  # noqa: B027
        """Have ``callback(application, queue)`` called when another process
        announces available messages (:meth:`announce_available`)."""

    def request_counts(self) -> dict[str, int]:
        """Requests this backend has sent to its store, by kind, so operators
        can see what each delivered message costs the store (Cassandra:
        ``read``, ``write``, ``lwt``, ``ddl``); ``{}`` for a store that does
        not count (then nothing is exported)."""
        return {}

    def live_processes(self) -> int | None:
        """How many API processes share this store now, this one included (at
        least 1), so flow control can split a rate limit between them; ``None``
        when the store cannot tell (then :meth:`flow_state_path` may offer
        tables every process on the host shares instead). Never raises."""
        return None

    def subscriptions(self, queue: QueueMeta) -> list[str]:
        """The names of the subscriptions used on the queue's incarnation (a
        reserve names a subscription into being), by name: what
        ``max_subscriptions`` counts. The default reads :meth:`stats`; a
        backend answers from its own list, without a scan."""
        return sorted(s.subscription for s in self.stats(queue, 0).subscriptions)

    def flow_state_path(self) -> str | None:
        """A directory every process using this store on this host can reach,
        where flow control keeps the tables it maps into memory (token
        buckets, post counts: :mod:`queuey.core.slots`), or ``None`` when the
        processes sharing the store are not all on one host (or the store is
        private to this process). The store only names the directory; flow
        control creates it (0700) and lays its files out."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""


def load_backend(dotted: str, settings: Mapping[str, Any], clock: Any) -> Storage:
    """Build the backend named by ``dotted`` (a module with ``load_from_config``)."""
    module = importlib.import_module(dotted)
    return module.load_from_config(settings, clock)
