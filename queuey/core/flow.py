"""Flow control: the rules every post and every reserve passes, whatever the door.

The settings are the queue's (:mod:`queuey.model.flow`, kept in its
attributes, changed through :class:`queuey.core.queues.Queues`) and the
application's (:mod:`queuey.core.quotas`). :class:`FlowControl` is called by
:class:`queuey.core.workqueues.WorkQueues`, the one way every post and every
reserve takes, so the REST API, the SQS endpoint, the admin page, the command
line, Spark and the schedules all meet the same rules.

**A post** is refused, in this order, when

1. the queue is paused (:class:`QueuePaused`, 503 with ``Retry-After``);
2. the queue is at its ``max_length`` with ``overflow = reject``
   (:class:`QueueFull`, 507); with ``drop_head`` it is taken and the oldest
   messages are deleted by the background refresher (:func:`trim`);
3. the application stores its ``max_messages`` or ``max_bytes``
   (:class:`QuotaExceeded`, 507, naming the quota);
4. the queue's ``post_rate`` or the application's ``max_posts_per_second``
   has no tokens for the batch (:class:`RateLimited`, 429 with
   ``Retry-After``, naming the limit). A batch takes one token per message,
   all or none; one larger than the burst needs a full bucket.

Posts the service makes itself (dead letters, redrives) pass: a message on
its way to a dead-letter queue must not be lost to a limit. On a fair queue
the post's messages are given their lane (:mod:`queuey.core.fairness`).

**A reserve** gets a :class:`Grant`: how many messages it may lease now. A
paused subscription gets none (a long poll waits, asking again every poll
interval); a capped one gets ``max_in_flight`` minus what is in flight (the
count and the reserve are one step per process, and SQLite checks the cap
again inside its write, so there it is exact); a rate-limited one gets the
tokens its bucket has. Tokens a reserve took and did not use go back.

**Across processes and nodes.** Token buckets are shared by the processes of
one server (:class:`queuey.core.quotas.SharedBuckets`), or by every process
of one host when the store says where (SQLite's file beside its database).
Otherwise (Cassandra, several servers) each server enforces its part of the
rate, split by the live processes the store counts
(:meth:`queuey.storage.Storage.live_processes`). Settings reach every
process through the queue metadata cache (``queuey.metadata_cache_seconds``).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from queuey.clock import Clock
from queuey.core.fairness import GroupTracker
from queuey.core.quotas import Buckets, LocalBuckets
from queuey.ids import MICROS
from queuey.model import MessageRef, NewMessage, QueueMeta, ReadQuery
from queuey.model.flow import message_group, queue_flow, subscription_flow

#: Seconds a producer is told to wait before posting to a paused queue again.
PAUSED_RETRY = 5
#: Longest Retry-After a rate refusal names (a tiny rate's wait is longer).
MAX_RETRY_AFTER = 3600
#: Seconds a producer is told to wait when a queue or application is full.
FULL_RETRY = 5


class FlowRefused(Exception):
    """A post refused by flow control: ``field`` names the setting or quota,
    ``status`` is the HTTP status, ``retry_after`` the seconds to wait."""

    status = 429

    def __init__(self, field: str, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.retry_after = retry_after


class QueuePaused(FlowRefused):
    status = 503


class RateLimited(FlowRefused):
    status = 429


class QueueFull(FlowRefused):
    status = 507


class QuotaExceeded(FlowRefused):
    status = 507


class PriorityOnFairQueue(FlowRefused):
    status = 400


@dataclass
class Grant:
    """What one reserve may lease: ``count`` messages (fewer than asked
    because of ``reason``: ``paused``, ``max_in_flight`` or ``rate``)."""

    count: int
    reason: str | None = None
    #: The subscription's ``max_in_flight`` (0: none), for the store to check too.
    cap: int = 0
    _finish: Callable[[int], None] | None = None

    def done(self, used: int) -> None:
        """The reserve leased ``used`` messages: return the rest, free the turn."""
        finish, self._finish = self._finish, None
        if finish is not None:
            finish(used)


@dataclass(frozen=True)
class AppLimits:
    """An application's post limits (0: none): what :class:`FlowControl` asks."""

    posts_per_second: float = 0.0
    messages: int = 0
    bytes: int = 0


def _bucket_key(*parts: str) -> str:
    return "\x1f".join(parts)


class FlowControl:
    """The flow rules of one process (see the module docstring).

    ``share()``: the part of a rate this process's buckets enforce (1 when
    the buckets are shared by every process using the store).
    ``in_flight(queue, subscription, now_micros)``: the store's count.
    ``length(queue)``: the queue's stored messages as last measured plus the
    posts since, or None when unknown. ``usage(application)``: ``(messages,
    bytes)`` stored, or None. ``app_limits(application)``: its
    :class:`AppLimits`. ``on_throttled(queue, kind)`` counts each refusal and
    each reserve answered short (``kind``: the setting's name).
    """

    def __init__(
        self,
        clock: Clock,
        *,
        buckets: Buckets | None = None,
        share: Callable[[], float] = lambda: 1.0,
        in_flight: Callable[[QueueMeta, str, int], int] | None = None,
        length: Callable[[QueueMeta], int | None] = lambda queue: None,
        usage: Callable[[str], tuple[int, int] | None] = lambda application: None,
        app_limits: Callable[[str], AppLimits] = lambda application: AppLimits(),
        tracker: GroupTracker | None = None,
        on_throttled: Callable[[QueueMeta, str], None] = lambda queue, kind: None,
    ) -> None:
        self.clock = clock
        self.buckets = buckets if buckets is not None else LocalBuckets()
        self.share = share
        self.in_flight = in_flight
        self.length = length
        self.usage = usage
        self.app_limits = app_limits
        self.tracker = tracker or GroupTracker(self._now)
        self.on_throttled = on_throttled
        self._turns: dict[tuple[str, str, str], threading.Lock] = {}
        self._turns_lock = threading.Lock()

    def _now(self) -> float:
        return self.clock.now_micros() / MICROS

    def _scaled(self, rate: float, burst: int) -> tuple[float, int]:
        share = min(1.0, max(self.share(), 1e-6))
        return rate * share, max(1, math.ceil(burst * share))

    def _refuse(self, queue: QueueMeta, error: FlowRefused) -> FlowRefused:
        self.on_throttled(queue, error.field)
        return error

    # -- posts --------------------------------------------------------------------
    def admit_post(self, queue: QueueMeta, messages: Sequence[NewMessage]) -> list[NewMessage]:
        """``messages`` as they may be stored (a fair queue's with their
        lanes), or :class:`FlowRefused` (see the module docstring)."""
        flow = queue_flow(queue)
        count = len(messages)
        if flow.fair and not queue.fifo and any(m.priority for m in messages):
            raise PriorityOnFairQueue(
                "priority",
                f"queue {queue.name} is fair: its messages' order is set by their groups, "
                "a post may not name a priority",
            )
        if flow.paused:
            raise self._refuse(
                queue,
                QueuePaused(
                    "paused", f"queue {queue.name} is paused: it takes no posts", PAUSED_RETRY
                ),
            )
        if flow.max_length and flow.overflow == "reject":
            stored = self.length(queue)
            if stored is not None and stored + count > flow.max_length:
                raise self._refuse(
                    queue,
                    QueueFull(
                        "max_length",
                        f"queue {queue.name} is full: it keeps at most {flow.max_length} "
                        "messages (overflow reject)",
                        FULL_RETRY,
                    ),
                )
        limits = self.app_limits(queue.application)
        self._check_usage(queue, limits, messages)
        taken_queue, queue_burst = 0, 0
        if flow.post_rate:
            rate, queue_burst = self._scaled(flow.post_rate, flow.burst)
            key = _bucket_key("post", queue.application, queue.name)
            taken_queue, wait = self.buckets.take_many(
                key, self._now, rate, queue_burst, count, True
            )
            if not taken_queue:
                raise self._refuse(
                    queue, self._limited("post_rate", queue.name, flow.post_rate, wait)
                )
        if limits.posts_per_second:
            rate, burst = self._scaled(limits.posts_per_second, math.ceil(limits.posts_per_second))
            key = _bucket_key("app-posts", queue.application)
            taken, wait = self.buckets.take_many(key, self._now, rate, burst, count, True)
            if not taken:
                if taken_queue:
                    self.buckets.give_back(
                        _bucket_key("post", queue.application, queue.name),
                        taken_queue,
                        queue_burst,
                    )
                raise self._refuse(
                    queue,
                    self._limited(
                        "max_posts_per_second",
                        f"application {queue.application}",
                        limits.posts_per_second,
                        wait,
                    ),
                )
        if flow.fair and not queue.fifo:
            return self._laned(queue, messages)
        return list(messages)

    @staticmethod
    def _limited(field: str, who: str, rate: float, wait: float) -> RateLimited:
        wait = min(wait, MAX_RETRY_AFTER)
        return RateLimited(
            field,
            f"{who} is over its limit of {rate:g} posts per second ({field}); "
            f"retry after {max(1, math.ceil(wait))} s",
            max(1, math.ceil(wait)),
        )

    def _check_usage(
        self, queue: QueueMeta, limits: AppLimits, messages: Sequence[NewMessage]
    ) -> None:
        if not (limits.messages or limits.bytes):
            return
        usage = self.usage(queue.application)
        if usage is None:
            return
        stored, size = usage
        adding = sum(len(m.body.encode("utf-8")) for m in messages) if limits.bytes else 0
        for field, limit, now, more, unit in (
            ("max_messages", limits.messages, stored, len(messages), "messages"),
            ("max_bytes", limits.bytes, size, adding, "bytes"),
        ):
            if limit and now + more > limit:
                raise self._refuse(
                    queue,
                    QuotaExceeded(
                        field,
                        f"application {queue.application} stores {now} of its {limit} {unit} "
                        f"({field}); delete or consume messages first",
                        FULL_RETRY,
                    ),
                )

    def _laned(self, queue: QueueMeta, messages: Sequence[NewMessage]) -> list[NewMessage]:
        groups = [message_group(m.attributes) for m in messages]
        lanes = self.tracker.lanes((queue.application, queue.name), groups)
        return [replace(m, priority=lane) for m, lane in zip(messages, lanes, strict=True)]

    # -- reserves -----------------------------------------------------------------
    def grant(self, queue: QueueMeta, subscription: str, limit: int) -> Grant:
        """How many messages a reserve of ``limit`` may lease now (call
        :meth:`Grant.done` with what it leased, also on failure)."""
        flow = subscription_flow(queue, subscription)
        if not flow.limited:
            return Grant(limit)
        if flow.paused:
            return self._short(queue, Grant(0, "paused"))
        turn = None
        room = limit
        if flow.max_in_flight and self.in_flight is not None:
            turn = self._turn(queue, subscription)
            turn.acquire()
            try:
                busy = self.in_flight(queue, subscription, self.clock.now_micros())
            except BaseException:
                turn.release()
                raise
            room = min(limit, flow.max_in_flight - busy)
            if room <= 0:
                turn.release()
                return self._short(queue, Grant(0, "max_in_flight"))
        taken, key, burst = room, "", 0
        if flow.rate:
            rate, burst = self._scaled(flow.rate, flow.burst)
            key = _bucket_key("deliver", queue.application, queue.name, subscription)
            taken, _ = self.buckets.take_many(key, self._now, rate, burst, room, False)
            if not taken:
                if turn is not None:
                    turn.release()
                return self._short(queue, Grant(0, "rate"))

        def finish(used: int) -> None:
            try:
                if key and used < taken:
                    self.buckets.give_back(key, taken - used, burst)
            finally:
                if turn is not None:
                    turn.release()

        reason = None
        if taken < limit:
            reason = "rate" if taken < room else "max_in_flight"
        return Grant(taken, reason, flow.max_in_flight, finish)

    def _short(self, queue: QueueMeta, grant: Grant) -> Grant:
        self.on_throttled(queue, grant.reason or "")
        return grant

    def _turn(self, queue: QueueMeta, subscription: str) -> threading.Lock:
        key = (queue.application, queue.name, subscription)
        with self._turns_lock:
            turn = self._turns.get(key)
            if turn is None:
                if len(self._turns) >= 10_000:
                    self._turns = {k: v for k, v in self._turns.items() if v.locked()}
                turn = self._turns[key] = threading.Lock()
            return turn


#: Messages deleted per storage call when trimming a ``drop_head`` queue.
TRIM_PAGE = 1000


def trim(storage, queue: QueueMeta, stored: int, now_micros: int) -> int:
    """Delete the oldest messages of a ``drop_head`` queue holding ``stored``
    messages, down to its ``max_length``; the number deleted.

    Called where a queue is measured (the operators' overview refresher), not
    on the post path: a drop_head queue may hold more than its length until
    the next measurement, never fewer. Deleting a message another process
    deleted too is harmless.
    """
    flow = queue_flow(queue)
    if not flow.max_length or flow.overflow != "drop_head":
        return 0
    excess = stored - flow.max_length
    deleted = 0
    while excess > 0:
        oldest = storage.read_messages(
            queue,
            ReadQuery(
                partitions=queue.partition_numbers,
                now_micros=now_micros,
                limit=min(excess, TRIM_PAGE),
                order="ascending",
            ),
        )
        if not oldest:
            break
        storage.delete_messages(queue, [MessageRef(m.partition, m.id) for m in oldest])
        deleted += len(oldest)
        excess -= len(oldest)
    return deleted
