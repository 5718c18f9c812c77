"""Flow control: the rules every post and every reserve passes, whatever the door.

The settings are the queue's (:mod:`queuey.model.flow`, kept in its
attributes, changed through :class:`queuey.core.queues.Queues`) and the
application's (:mod:`queuey.core.quotas`). :class:`FlowControl` is called by
:class:`queuey.core.workqueues.WorkQueues`, the one way every post and every
reserve takes, so the REST API, the SQS endpoint, the admin page, the command
line, Spark and the schedules all meet the same rules.

**A post** is refused, in this order, when

1. the queue is paused (:class:`QueuePaused`, 503 with ``Retry-After``);
2. it is a batch larger than the queue's ``post_burst`` or the application's
   burst (one second of ``max_posts_per_second``): it could never pass
   (:class:`BatchOverBurst`, 413, naming the setting);
3. it names a priority on a fair queue (:class:`PriorityOnFairQueue`, 400);
4. the queue is at its ``max_length`` with ``overflow = reject``
   (:class:`QueueFull`, 507); with ``drop_head`` it is taken and the oldest
   messages are deleted by the background refresher (:func:`trim`);
5. the application stores its ``max_messages`` or ``max_bytes``
   (:class:`QuotaExceeded`, 507, naming the quota);
6. the queue's ``post_rate`` or the application's ``max_posts_per_second``
   has no tokens for the batch (:class:`RateLimited`, 429 with
   ``Retry-After``, naming the limit). A batch takes one token per message,
   all or none.

Checks 4 and 5 count the post in the same step (:meth:`Lengths.admit
<queuey.core.lengths.Lengths.admit>`), so concurrent posts cannot each take the
last free place. Posts the service makes itself for an application (dead
letters, redrives, SQS moves) pass 1 to 4 and 6 (a message on its way to a
dead-letter queue is not held by a pause or a rate) but count toward, and are
held by, the application's stored quotas (5): a dead-letter post refused stays
a claim that is tried again when it lapses, so nothing is lost.

**Bounds.** Over any window of ``T`` seconds a rate limit accepts at most
``rate * T + burst`` messages through one server (every process of one host
on SQLite). On a fair queue the post's messages are given their lane
(:mod:`queuey.core.fairness`). Posts to a queue with no limit configured take
no lock and touch no table.

**A reserve** gets a :class:`Grant`: how many messages it may lease now. A
paused subscription gets none (a long poll waits, asking again every poll
interval); a capped one gets ``max_in_flight`` minus what is in flight (the
count and the reserve are one step per process, and SQLite checks the cap
again inside its write, so there it is exact); a rate-limited one gets the
tokens its bucket has. Tokens a reserve took and did not use go back.

**Across processes and nodes.** Token buckets and counts are shared by the
processes of one server (:class:`queuey.core.buckets.Buckets`), or by every
process of one host when the store says where (SQLite's directory beside
its database). Otherwise (Cassandra, several servers) each server enforces
its part of the rate, split by the live processes the store counts
(:meth:`queuey.storage.Storage.live_processes`). Settings reach every
process through the queue metadata cache (``queuey.metadata_cache_seconds``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from queuey.clock import Clock
from queuey.core.buckets import Buckets, rate_wait
from queuey.core.fairness import GroupTracker
from queuey.core.grants import Grant, Grants
from queuey.core.lengths import Lengths, Refusal
from queuey.core.refusals import (
    BatchOverBurst,
    FlowRefused,
    PriorityOnFairQueue,
    QueueFull,
    QueuePaused,
    QuotaExceeded,
    RateLimited,
    TooManySubscriptions,
)
from queuey.ids import MICROS
from queuey.model import MessageRef, NewMessage, QueueMeta, ReadQuery
from queuey.model.flow import QueueFlow, message_group, queue_flow

__all__ = [
    "BatchOverBurst",
    "FlowRefused",
    "PriorityOnFairQueue",
    "QueueFull",
    "QueuePaused",
    "QuotaExceeded",
    "RateLimited",
    "TooManySubscriptions",
    "FlowControl",
    "AppLimits",
    "Admission",
    "Grant",
]

#: Seconds a producer is told to wait before posting to a paused queue again.
PAUSED_RETRY = 5
#: Longest Retry-After a rate refusal names (a tiny rate's wait is longer).
MAX_RETRY_AFTER = 3600
#: Seconds a producer is told to wait when a queue or application is full.
FULL_RETRY = 5


@dataclass
class Admission:
    """A post flow control let pass: its ``messages`` as they may be stored
    (a fair queue's with their lanes). Call :meth:`stored` once they are
    written, :meth:`undo` if they were not."""

    messages: list[NewMessage]
    _settle: Callable[[bool], None] | None = field(default=None, repr=False)

    def stored(self) -> None:
        self._end(True)

    def undo(self) -> None:
        self._end(False)

    def _end(self, stored: bool) -> None:
        settle, self._settle = self._settle, None
        if settle is not None:
            settle(stored)


@dataclass(frozen=True)
class AppLimits:
    """An application's post limits (0: none): what :class:`FlowControl` asks."""

    posts_per_second: float = 0.0
    messages: int = 0
    bytes: int = 0

    @property
    def stored(self) -> bool:
        return bool(self.messages or self.bytes)

    @property
    def burst(self) -> int:
        """The application's post bucket: one second of its rate."""
        return max(1, math.ceil(self.posts_per_second))


#: Bucket keys in an application's table.
def _post_key(queue: QueueMeta) -> str:
    return f"post\x1f{queue.name}"


APP_POSTS = "app-posts"


def body_bytes(messages: Sequence[NewMessage]) -> int:
    """The posted bodies' size, as quotas count it (UTF-8 bytes)."""
    return sum(len(m.body.encode("utf-8")) for m in messages)


class FlowControl:
    """The flow rules of one process (see the module docstring).

    ``buckets``: the rate buckets; ``lengths``: the queue lengths and
    application usage (:mod:`queuey.core.lengths`). ``share()``: the part of
    a rate this process's buckets enforce (1 when the buckets are shared by
    every process using the store). ``in_flight(queue, subscription,
    now_micros)``: the store's count. ``app_limits(application)``: its
    :class:`AppLimits`. ``on_throttled(queue, kind)`` counts each refusal and
    each reserve answered short (``kind``: the setting's name).
    """

    def __init__(
        self,
        clock: Clock,
        *,
        buckets: Buckets | None = None,
        lengths: Lengths | None = None,
        share: Callable[[], float] = lambda: 1.0,
        in_flight: Callable[[QueueMeta, str, int], int] | None = None,
        app_limits: Callable[[str], AppLimits] = lambda application: AppLimits(),
        tracker: GroupTracker | None = None,
        on_throttled: Callable[[QueueMeta, str], None] = lambda queue, kind: None,
    ) -> None:
        self.clock = clock
        self.buckets = buckets if buckets is not None else Buckets()
        self.lengths = lengths if lengths is not None else Lengths()
        self.share = share
        self.in_flight = in_flight
        self.app_limits = app_limits
        self.tracker = tracker or GroupTracker(self._now)
        self.on_throttled = on_throttled
        self.grants = Grants(clock, self.buckets, self._scaled, in_flight, on_throttled)

    def _now(self) -> float:
        return self.clock.now_micros() / MICROS

    def _part(self) -> float:
        return min(1.0, max(self.share(), 1e-6))

    def _scaled(self, rate: float, burst: int) -> tuple[float, int]:
        share = self._part()
        return rate * share, max(1, math.ceil(burst * share))

    def _refuse(self, queue: QueueMeta, error: FlowRefused) -> FlowRefused:
        self.on_throttled(queue, error.field)
        return error

    # -- posts --------------------------------------------------------------------
    def counted(self, queue: QueueMeta, flow: QueueFlow, limits: AppLimits) -> bool:
        """Whether posts to ``queue`` are counted (a length or a stored quota depends on them)."""
        return bool(flow.max_length) or limits.stored

    def admit_post(
        self, queue: QueueMeta, messages: Sequence[NewMessage], *, internal: bool = False
    ) -> Admission:
        """Let a post pass, or :class:`FlowRefused` (see the module
        docstring). ``internal``: a post the service makes itself for the
        application (held by its stored quotas only)."""
        flow = queue_flow(queue)
        limits = self.app_limits(queue.application)
        count = len(messages)
        if not internal:
            static = self._static_refusal(queue, flow, limits, messages)
            if static is not None:
                raise self._refuse(queue, static)
        settle = None
        if self.counted(queue, flow, limits):
            counted = self.lengths.admit(
                queue,
                count,
                body_bytes(messages),
                max_length=0 if internal or flow.overflow != "reject" else flow.max_length,
                max_messages=limits.messages,
                max_bytes=limits.bytes,
                share=self._part(),
            )
            if isinstance(counted, Refusal):
                raise self._refuse(queue, self._full(queue, counted))

            def settle(stored: bool) -> None:
                (self.lengths.settle if stored else self.lengths.unpost)(queue, counted)

        if not internal:
            try:
                self._take_rates(queue, flow, limits, count)
            except FlowRefused:
                if settle is not None:
                    settle(False)
                raise
            if flow.fair and not queue.fifo:
                return Admission(self._laned(queue, messages), settle)
        return Admission(list(messages), settle)

    def refusal(self, queue: QueueMeta, count: int, size: int) -> FlowRefused | None:
        """The refusal a post of ``count`` messages of ``size`` body bytes
        would get now (no priority named), taking and counting nothing."""
        flow = queue_flow(queue)
        limits = self.app_limits(queue.application)
        static = self._static_refusal(queue, flow, limits, (), count)
        if static is not None:
            return static
        if self.counted(queue, flow, limits):
            refusal = self.lengths.check(
                queue,
                count,
                size,
                max_length=flow.max_length if flow.overflow == "reject" else 0,
                max_messages=limits.messages,
                max_bytes=limits.bytes,
                share=self._part(),
            )
            if refusal is not None:
                return self._full(queue, refusal)
        for key, name, who, rate, burst in self._rates(queue, flow, limits):
            rate_here, capacity = self._scaled(rate, burst)
            wait = self.buckets.peek(queue.application, key, self._now, rate_here, capacity, count)
            if wait > 0:
                return self._limited(name, who, rate, wait)
        return None

    def _static_refusal(
        self,
        queue: QueueMeta,
        flow: QueueFlow,
        limits: AppLimits,
        messages: Sequence[NewMessage],
        count: int | None = None,
    ) -> FlowRefused | None:
        """What refuses a post whatever is stored or counted (1 to 3)."""
        if flow.paused:
            return QueuePaused(
                "paused", f"queue {queue.name} is paused: it takes no posts", PAUSED_RETRY
            )
        count = len(messages) if count is None else count
        for _, name, who, _, burst in self._rates(queue, flow, limits):
            if count > burst:
                return BatchOverBurst(
                    name,
                    f"a batch of {count} messages is larger than the burst of {burst} "
                    f"{who} may post at once ({name}): send at most {burst} per request",
                )
        if flow.fair and not queue.fifo and any(m.priority for m in messages):
            return PriorityOnFairQueue(
                "priority",
                f"queue {queue.name} is fair: its messages' order is set by their groups, "
                "a post may not name a priority",
            )
        return None

    @staticmethod
    def _rates(
        queue: QueueMeta, flow: QueueFlow, limits: AppLimits
    ) -> list[tuple[str, str, str, float, int]]:
        """The post rates in force: bucket key, setting, whose, rate, burst."""
        rates = []
        if flow.post_rate:
            burst_name = "post_burst" if flow.post_burst else "post_rate"
            rates.append(
                (_post_key(queue), burst_name, f"queue {queue.name}", flow.post_rate, flow.burst)
            )
        if limits.posts_per_second:
            rates.append(
                (
                    APP_POSTS,
                    "max_posts_per_second",
                    f"application {queue.application}",
                    limits.posts_per_second,
                    limits.burst,
                )
            )
        return rates

    def _take_rates(self, queue: QueueMeta, flow: QueueFlow, limits: AppLimits, count: int) -> None:
        """One token per message from every post rate in force, all or none."""
        taken: list[tuple[str, int]] = []
        for key, name, who, rate, burst in self._rates(queue, flow, limits):
            rate_here, capacity = self._scaled(rate, burst)
            got, wait = self.buckets.take(
                queue.application, key, self._now, rate_here, capacity, count, True
            )
            if not got:
                for given_key, given_capacity in taken:
                    self.buckets.give_back(queue.application, given_key, count, given_capacity)
                field = "post_rate" if name == "post_burst" else name
                raise self._refuse(queue, self._limited(field, who, rate, wait))
            taken.append((key, capacity))

    @staticmethod
    def _full(queue: QueueMeta, refusal: Refusal) -> FlowRefused:
        if refusal.field == "max_length":
            return QueueFull(
                "max_length",
                f"queue {queue.name} is full: it keeps at most {refusal.limit} "
                "messages (overflow reject)",
                FULL_RETRY,
            )
        unit = "messages" if refusal.field == "max_messages" else "bytes"
        return QuotaExceeded(
            refusal.field,
            f"application {queue.application} stores {refusal.stored} of its {refusal.limit} "
            f"{unit} ({refusal.field}); messages count until they expire or are deleted: "
            "delete or purge messages, or wait for their ttl",
            FULL_RETRY,
        )

    @staticmethod
    def _limited(field: str, who: str, rate: float, wait: float) -> RateLimited:
        retry = rate_wait(wait, MAX_RETRY_AFTER)
        return RateLimited(
            field,
            f"{who} is over its limit of {rate:g} posts per second ({field}); "
            f"retry after {retry} s",
            retry,
        )

    def _laned(self, queue: QueueMeta, messages: Sequence[NewMessage]) -> list[NewMessage]:
        groups = [message_group(m.attributes) for m in messages]
        lanes = self.tracker.lanes((queue.application, queue.name), groups)
        return [replace(m, priority=lane) for m, lane in zip(messages, lanes, strict=True)]

    # -- reserves -----------------------------------------------------------------
    def grant(self, queue: QueueMeta, subscription: str, limit: int) -> Grant:
        """How many messages a reserve of ``limit`` may lease now (call
        :meth:`Grant.done` with what it leased, also on failure)."""
        return self.grants.grant(queue, subscription, limit)


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
