"""The work-queue service: what takes more than one storage call.

Storage leases messages and *claims* the ones due for dead-lettering; this
layer does what involves a second queue. It posts each claimed message to the
queue's dead-letter queue (creating that queue when missing) and then acks the
claim; it moves dead letters back to where they came from (redrive). The web
views and the command line use it alike; it knows nothing of HTTP.

Every step is safe to repeat after a crash: a dead letter is posted with a
``dedup_id`` derived from its subscription, message id and generation (a
claim that lapses and is taken again stores it once within the dedup window;
a redrive starts a new generation, so dead-lettering the message again stores
a new dead letter), and a redrive deletes a dead letter only after its message
is back in the source.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from queuey.clock import Clock
from queuey.core.flow import FlowControl, FlowRefused
from queuey.core.messages import MessageRules
from queuey.core.queues import Queues
from queuey.core.subscriptionlimit import SubscriptionLimit
from queuey.errors import QueueExists, QueueNotFound, StorageUnavailable
from queuey.model import (
    DeadLetter,
    Delivery,
    Message,
    MessageRef,
    NewMessage,
    QueueMeta,
    QueueStats,
    ReadQuery,
    ReceiptStatus,
)
from queuey.model.work import dead_letter_source, own_attributes
from queuey.placement import partition_for_key
from queuey.settings import DEFAULTS
from queuey.storage import Storage

log = logging.getLogger(__name__)

#: Partitions of a dead-letter queue this service creates: dead letters are
#: few, and one partition keeps a redrive's "oldest first" a single read.
DEAD_LETTER_PARTITIONS = 1
#: The largest message when no rules are given (``queuey.max_message_size``'s default).
DEFAULT_MAX_MESSAGE_SIZE = int(DEFAULTS["queuey.max_message_size"])
#: Longest ``last_error`` kept on a dead letter (an attribute value's limit).
MAX_ERROR_TEXT = 1024


@dataclass(frozen=True)
class Reservation:
    deliveries: list[Delivery]
    #: Messages this call moved to the dead-letter queue.
    dead_lettered: int
    #: Why flow control let this call lease fewer than asked (``paused``,
    #: ``max_in_flight``, ``rate``), or None.
    held: str | None = None


@dataclass(frozen=True)
class Release:
    statuses: dict[str, ReceiptStatus]
    #: Released messages that had no attempt left and went to the dead-letter queue.
    dead_lettered: int


@dataclass
class Redrive:
    """What a redrive did: ``skipped`` maps a dead letter's id to the reason it stayed."""

    moved: int = 0
    reposted: int = 0
    skipped: dict[str, str] = field(default_factory=dict)


def _derived_id(kind: str, *parts: str) -> str:
    """A ``dedup_id`` the same on every retry and every API node."""
    digest = hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:40]
    return f"{kind}-{digest}"


def dead_letter_dedup_id(
    queue: QueueMeta, subscription: str, message: Message, generation: str = ""
) -> str:
    """One dead letter per generation of ``message`` in ``subscription``
    (:attr:`DeadLetter.generation`; the first, empty, keeps the id it always had)."""
    parts = [queue.name, queue.incarnation, subscription, message.id.hex]
    return _derived_id("dead", *parts, *([generation] if generation else []))


def redrive_dedup_id(source_queue: str, message_id: str) -> str:
    """One repost per source message, however many subscriptions dead-lettered it."""
    return _derived_id("redrive", source_queue, message_id)


class WorkQueues:
    """Post, read, reserve, ack, release, extend, stats and redrive for one storage.

    ``read_delay_micros`` is the service's read delay: a reservation never
    records its subscription as past a message younger than that (it could
    still be in flight). ``on_available(application, queue)`` is called when
    messages became available at once (a post or release without delay, a
    redrive), so long polls on this process can wake. ``on_posted(queue,
    count)`` and ``on_acked(queue, count)`` feed the metrics and the
    operators' overview. Without them (Spark's executors, the command line,
    tests) those side effects are none, and the rules are the same.

    ``queues`` is the queue lifecycle it finds and makes queues through
    (default: uncached, without a queue limit); ``rules`` the message rules
    (default: ``max_ttl`` and the default largest message); ``flow`` the
    flow control every post and reserve passes (:mod:`queuey.core.flow`;
    default: the queues' own settings, buckets in this process);
    ``subscription_limit`` bounds a queue's subscriptions
    (:mod:`queuey.core.subscriptionlimit`; default: none).
    """

    def __init__(
        self,
        storage: Storage,
        clock: Clock,
        *,
        max_ttl: int | None = None,
        rules: MessageRules | None = None,
        read_delay_micros: int = 0,
        queues: Queues | None = None,
        on_available: Callable[[str, str], None] | None = None,
        on_posted: Callable[[QueueMeta, int], None] | None = None,
        on_acked: Callable[[QueueMeta, int], None] | None = None,
        flow: FlowControl | None = None,
        subscription_limit: SubscriptionLimit | None = None,
    ) -> None:
        if rules is None:
            if max_ttl is None:
                raise TypeError("WorkQueues needs rules or max_ttl")
            rules = MessageRules(max_ttl=max_ttl, max_message_size=DEFAULT_MAX_MESSAGE_SIZE)
        self.storage = storage
        self.clock = clock
        self.rules = rules
        self.read_delay_micros = read_delay_micros
        self.queues = queues or Queues(storage)
        self.on_available = on_available or (lambda application, name: None)
        self.on_posted = on_posted or (lambda queue, count: None)
        self.on_acked = on_acked or (lambda queue, count: None)
        self.flow = flow or FlowControl(clock)
        self.subscription_limit = subscription_limit

    # -- messages ---------------------------------------------------------------
    def post(
        self, queue: QueueMeta, messages: Sequence[NewMessage], *, internal: bool = False
    ) -> list[Message]:
        """Store messages (see :meth:`Storage.put_messages`): every post's one
        way, whatever door or service step it comes from, so flow control
        (:class:`~queuey.core.flow.FlowRefused`), the metrics, the operators'
        overview and this process's long polls (woken when a message is due
        now) see them all. ``internal``: a post the service makes itself
        (a dead letter, a redrive, a move), held by the application's stored
        quotas only."""
        admitted = self.flow.admit_post(queue, messages, internal=internal)
        try:
            stored = self.storage.put_messages(queue, admitted.messages)
        except BaseException:
            admitted.undo()
            raise
        admitted.stored()
        self.on_posted(queue, len(stored))
        if any(message.delay == 0 for message in messages):
            self.on_available(queue.application, queue.name)
        return stored

    # -- leases -----------------------------------------------------------------
    def reserve(
        self,
        queue: QueueMeta,
        subscription: str,
        *,
        limit: int = 1,
        partitions: Sequence[int] | None = None,
        visibility_timeout: int | None = None,
    ) -> Reservation:
        """Lease up to ``limit`` messages; dead-letter those out of attempts on the way.

        Flow control first says how many may be leased (:meth:`FlowControl.grant`),
        by the subscription's settings as this process knows them now (a long
        poll that began before a pause stops handing out with it)."""
        current = self._current(queue)
        if self.subscription_limit is not None:
            self.subscription_limit.check(current, subscription)
        grant = self.flow.grant(current, subscription, limit)
        if not grant.count:
            return Reservation([], 0, grant.reason)
        used = 0
        try:
            now = self.clock.now_micros()
            reserved = self.storage.reserve(
                queue,
                subscription,
                partitions=list(partitions or queue.partition_numbers),
                limit=grant.count,
                visibility_timeout=(
                    queue.visibility_timeout if visibility_timeout is None else visibility_timeout
                ),
                now_micros=now,
                settled_micros=now - self.read_delay_micros,
                max_in_flight=grant.cap,
            )
            used = len(reserved.deliveries)
        finally:
            grant.done(used)
        dead = self._dead_letter(queue, subscription, reserved.dead_letters)
        return Reservation(reserved.deliveries, dead, grant.reason)

    def _current(self, queue: QueueMeta) -> QueueMeta:
        """``queue``'s metadata as this process knows it now (its flow settings
        may have changed since the caller looked it up)."""
        try:
            current = self.queues.get(queue.application, queue.name)
        except QueueNotFound:
            return queue
        return current if current.incarnation == queue.incarnation else queue

    def ack(
        self, queue: QueueMeta, subscription: str, receipts: Sequence[str]
    ) -> dict[str, ReceiptStatus]:
        statuses = self.storage.ack(queue, subscription, receipts, self.clock.now_micros())
        self.on_acked(queue, sum(1 for status in statuses.values() if status == "acked"))
        return statuses

    def release(
        self,
        queue: QueueMeta,
        subscription: str,
        receipts: Sequence[str],
        *,
        delay: int = 0,
        error: str | None = None,
    ) -> Release:
        """End leases now; a message with no attempt left goes to the dead-letter queue."""
        statuses, letters = self.storage.release(
            queue,
            subscription,
            receipts,
            self.clock.now_micros(),
            delay=delay,
            error=error[:MAX_ERROR_TEXT] if error else error,
        )
        dead = self._dead_letter(queue, subscription, letters)
        if delay == 0 and len(letters) < sum(s == "acked" for s in statuses.values()):
            self.on_available(queue.application, queue.name)
        return Release(statuses, dead)

    def extend(
        self, queue: QueueMeta, subscription: str, receipts: Sequence[str], visibility_timeout: int
    ) -> dict[str, ReceiptStatus]:
        return self.storage.extend(
            queue, subscription, receipts, self.clock.now_micros(), visibility_timeout
        )

    def stats(self, queue: QueueMeta) -> QueueStats:
        return self.storage.stats(queue, self.clock.now_micros())

    def read(self, queue: QueueMeta, until: int | None = None, **query) -> list[Message]:
        """``queue``'s messages a read asks for (``query``: :class:`ReadQuery`'s
        fields), none newer than the read delay allows (nor than ``until``)."""
        now = self.clock.now_micros()
        if self.read_delay_micros:
            settled = now - self.read_delay_micros
            until = settled if until is None else min(until, settled)
        return self.storage.read_messages(
            queue, ReadQuery(now_micros=now, until_micros=until, **query)
        )

    # -- dead letters -----------------------------------------------------------
    def dead_letter_queue(self, queue: QueueMeta) -> QueueMeta:
        """The queue's dead-letter queue, created when missing.

        A created one has :data:`DEAD_LETTER_PARTITIONS` partition, the longest
        ttl the service allows (``queuey.max_ttl``: dead letters wait for an
        operator, so they outlive the messages they came from), and the source
        queue's type and consistency (a private queue's dead letters stay private).
        """
        application, name = queue.application, queue.dead_letter_name
        try:
            return self.queues.get(application, name)
        except QueueNotFound:
            pass
        meta = QueueMeta(
            application=application,
            name=name,
            partitions=DEAD_LETTER_PARTITIONS,
            ttl=self.rules.max_ttl,
            type=queue.type,
            consistency=queue.consistency,
            created=self.clock.now_micros(),
        )
        try:
            created = self.queues.create(meta, limited=False)
        except QueueExists:  # another node or thread made it first
            return self.queues.fresh(application, name)
        log.info("created dead-letter queue %s/%s for %s", application, name, queue.name)
        return created

    def _dead_letter(
        self, queue: QueueMeta, subscription: str, letters: Sequence[DeadLetter]
    ) -> int:
        """Post ``letters`` to the dead-letter queue, then ack their claims.

        A failure is logged, not raised: the caller's deliveries are still
        good, and an unacked claim lapses after the queue's visibility timeout
        and is taken again by a later reserve (the ``dedup_id`` keeps the
        dead-letter queue from holding the message twice). An application
        over its stored quota is such a failure: its dead letters wait as
        claims until it has room.
        """
        if not letters:
            return 0
        try:
            target = self.dead_letter_queue(queue)
            ttl = self.rules.ttl_of(target)
            self.post(
                target,
                [
                    NewMessage(
                        body=letter.message.body,
                        partition=partition_for_key(letter.message.id.hex, target.partitions),
                        ttl=ttl,
                        priority=letter.message.priority,
                        dedup_id=dead_letter_dedup_id(
                            queue, subscription, letter.message, letter.generation
                        ),
                        attributes={
                            # The message's own attributes travel with it.
                            **(letter.message.attributes or {}),
                            "source_queue": queue.name,
                            "source_message_id": letter.message.id.hex,
                            "source_partition": str(letter.message.partition),
                            "source_subscription": subscription,
                            "attempts": str(letter.attempts),
                            "last_error": (letter.last_error or "")[:MAX_ERROR_TEXT],
                        },
                    )
                    for letter in letters
                ],
                internal=True,
            )
            statuses = self.storage.ack(
                queue, subscription, [letter.claim for letter in letters], self.clock.now_micros()
            )
        except (StorageUnavailable, FlowRefused) as exc:
            log.warning(
                "dead-lettering %d message(s) of %s/%s failed, retried when the claims lapse: %s",
                len(letters),
                queue.application,
                queue.name,
                exc,
            )
            return 0
        return sum(status == "acked" for status in statuses.values())

    # -- redrive ----------------------------------------------------------------
    def redrive(self, dead_queue: QueueMeta, limit: int) -> Redrive:
        """Move up to ``limit`` dead letters of ``dead_queue`` (oldest first) back.

        Each dead letter's source message is reopened in its source
        subscription; when that message is gone (expired, deleted, purged),
        its body is posted anew to the source queue (a new message to every
        subscription, without delay, with a ``dedup_id`` derived from the
        source message). Either way the dead letter is then deleted. A dead
        letter is kept, and named in ``skipped`` with the reason, when it has
        no source attributes, its source queue is gone, or its source message
        is live but not finished in the subscription (already redriven, or
        still being dead-lettered): moving it again could deliver it twice.
        """
        now = self.clock.now_micros()
        letters = self.storage.read_messages(
            dead_queue,
            ReadQuery(
                partitions=dead_queue.partition_numbers,
                now_micros=now,
                limit=limit,
                order="ascending",
                until_micros=now - self.read_delay_micros if self.read_delay_micros else None,
            ),
        )
        result = Redrive()
        done: list[MessageRef] = []
        try:
            for letter in letters:
                outcome = self._redrive_one(dead_queue.application, letter, now)
                if outcome == "moved":
                    result.moved += 1
                elif outcome == "reposted":
                    result.reposted += 1
                else:
                    result.skipped[letter.id.hex] = outcome
                    continue
                done.append(MessageRef(letter.partition, letter.id))
        finally:
            if done:
                self.storage.delete_messages(dead_queue, done)
        return result

    def _redrive_one(self, application: str, letter: Message, now: int) -> str:
        """``moved``, ``reposted``, or why the dead letter stays."""
        source = dead_letter_source(letter)
        if source is None:
            return "not a dead letter: it has no valid source_* attributes"
        try:
            queue = self.queues.get(application, source.queue)
        except QueueNotFound:
            return f"the source queue {source.queue} no longer exists"
        if source.ref.partition <= queue.partitions:
            if self.storage.reopen(queue, source.subscription, [source.ref], now):
                self.on_available(application, queue.name)
                return "moved"
            if self.storage.get_messages(queue, [source.ref], now):
                return (
                    "the source message is not finished in subscription "
                    f"{source.subscription} (already redriven, or being dead-lettered)"
                )
        self.post(  # due now: the long polls wake
            queue,
            internal=True,
            messages=[
                NewMessage(
                    body=letter.body,
                    partition=min(source.ref.partition, queue.partitions),
                    ttl=self.rules.ttl_of(queue),
                    priority=letter.priority,
                    dedup_id=redrive_dedup_id(queue.name, source.ref.id.hex),
                    attributes=own_attributes(letter),
                )
            ],
        )
        return "reposted"
