"""The work-queue half of the storage interface (:class:`queuey.storage.Storage`
inherits it): leases per subscription, their end (ack, release, extend),
redrive and the counts. The other half (queues, messages, checkpoints,
schedules, operations) is in :mod:`queuey.storage`.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

from queuey.model import (
    DeadLetter,
    Message,
    MessageRef,
    MessageState,
    QueueMeta,
    QueueStats,
    ReceiptStatus,
    Reserved,
)
from queuey.storage.asks import ExtendAsk, ReleaseAsk, ReserveAsk


class WorkQueueStore(abc.ABC):
    """Work queues: what a backend does for :mod:`queuey.core.workqueues`."""

    # -- work queues ----------------------------------------------------------
    # reserve, release and extend state their arguments here only: each bundles
    # them (queuey.storage.asks) and calls the backend's *_ask method.
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
        max_in_flight: int = 0,
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

        ``max_in_flight`` (0: no cap) caps the subscription's
        :meth:`in_flight` count: the call leases at most ``max_in_flight``
        less the messages in flight when it runs (dead-letter claims it makes
        on the way are not counted: they never reach a consumer). A backend
        that can check this inside its atomic write (SQLite) enforces it
        exactly, whatever the number of concurrent callers; one that cannot
        (Cassandra, whose partitions change independently) accepts and
        ignores it, and the core bounds the count per process instead.
        """
        ask = ReserveAsk(
            partitions, limit, visibility_timeout, now_micros, settled_micros, max_in_flight
        )
        return self.reserve_ask(queue, subscription, ask)

    @abc.abstractmethod
    def reserve_ask(self, queue: QueueMeta, subscription: str, ask: ReserveAsk) -> Reserved:
        """:meth:`reserve`, its arguments after the subscription in one value."""

    def in_flight(self, queue: QueueMeta, subscription: str, now_micros: int) -> int:
        """How many of the subscription's messages are leased (or claimed for
        dead-lettering) and not yet finished, their lease not lapsed at
        ``now_micros``: the ``in_flight`` figure of the subscription's
        :class:`~queuey.model.SubscriptionStats`.

        Called before every reserve of a subscription with a concurrency cap,
        so a backend computes it cheaply; this default takes it from
        :meth:`stats` (correct but slow). A backend documents where its
        figure may differ from the stats' and by how much.
        """
        for sub in self.stats(queue, now_micros).subscriptions:
            if sub.subscription == subscription:
                return sub.in_flight
        return 0

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
        return self.release_ask(queue, subscription, ReleaseAsk(receipts, now_micros, delay, error))

    @abc.abstractmethod
    def release_ask(
        self, queue: QueueMeta, subscription: str, ask: ReleaseAsk
    ) -> tuple[dict[str, ReceiptStatus], list[DeadLetter]]:
        """:meth:`release`, its arguments after the subscription in one value."""

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
        ask = ExtendAsk(receipts, now_micros, visibility_timeout)
        return self.extend_ask(queue, subscription, ask)

    @abc.abstractmethod
    def extend_ask(
        self, queue: QueueMeta, subscription: str, ask: ExtendAsk
    ) -> dict[str, ReceiptStatus]:
        """:meth:`extend`, its arguments after the subscription in one value."""

    @abc.abstractmethod
    def reopen(
        self, queue: QueueMeta, subscription: str, refs: Sequence[MessageRef], now_micros: int
    ) -> int:
        """Make finished (acked or dead-lettered) live messages available again in
        ``subscription`` with an attempt count of 0 (redrive), each with a new
        :attr:`DeadLetter.generation`. Messages that are gone, not finished or
        unknown are skipped. Idempotent; returns how many were reopened."""

    @abc.abstractmethod
    def message_state(
        self, queue: QueueMeta, subscription: str, message: Message, now_micros: int
    ) -> MessageState:
        """The live ``message``'s state in ``subscription`` as stored (its
        lease, release, claim or end, else whether the subscription has come
        to it): what ``explain`` starts from. One read; changes nothing."""

    @abc.abstractmethod
    def stats(self, queue: QueueMeta, now_micros: int) -> QueueStats:
        """Message counts per partition and per subscription (every subscription
        used on this incarnation). Counts may be approximate: a backend says in
        its docs how, and is never off by more than the messages that changed
        state during the call. ``bytes`` (the bodies' UTF-8 size) is given by a
        backend that reads it in the same scan, else None."""
