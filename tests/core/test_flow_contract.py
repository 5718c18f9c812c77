"""Flow control as a producer and a consumer notice it, on both backends.

Every post and reserve passes :class:`queuey.core.flow.FlowControl` inside
:class:`queuey.core.workqueues.WorkQueues`; the settings are changed the way
every door changes them (:class:`queuey.core.flowsettings.FlowSettings`).
Each test runs on SQLite and on the real Cassandra node (the ``storage``
fixture, a fresh application per test) with a ``ManualClock``: refills and
lapsing leases come from moving the clock, never from sleeping.
"""

from __future__ import annotations

import uuid

import pytest

from queuey.core.fairness import GroupTracker
from queuey.core.flow import (
    PAUSED_RETRY,
    BatchOverBurst,
    FlowControl,
    PriorityOnFairQueue,
    QueuePaused,
    RateLimited,
)
from queuey.core.flowsettings import FlowSettings
from queuey.core.messages import MessageRules
from queuey.core.queues import Queues
from queuey.core.workqueues import WorkQueues
from queuey.ids import MICROS
from queuey.model import NewMessage, QueueMeta, ReadQuery
from queuey.model.flow import GROUP_KEY
from queuey.storage import Storage

RULES = MessageRules(max_ttl=3600, max_message_size=65536)
#: The queues' visibility timeout (seconds).
VT = 30
#: Posts a group makes before it may count as busy (the shipped default of
#: ``queuey.flow.fair_threshold``).
THRESHOLD = 100


class Flow:
    """One test's service: the work queues, the settings door, a queue maker."""

    def __init__(self, storage: Storage, clock) -> None:
        self.storage = storage
        self.clock = clock
        self.app = "app-" + uuid.uuid4().hex[:12]
        self.queues = Queues(storage)
        self.flow = FlowControl(
            clock,
            in_flight=storage.in_flight,
            tracker=GroupTracker(lambda: clock.now_micros() / MICROS, threshold=THRESHOLD),
        )
        self.work = WorkQueues(storage, clock, rules=RULES, queues=self.queues, flow=self.flow)
        self.settings = FlowSettings(self.queues)

    def queue(self, name: str = "q", partitions: int = 2, **fields) -> QueueMeta:
        return self.queues.create(
            QueueMeta(
                application=self.app,
                name=name,
                partitions=partitions,
                ttl=3600,
                visibility_timeout=VT,
                **fields,
            )
        )

    def current(self, queue: QueueMeta) -> QueueMeta:
        """The queue as a door finds it for the next call."""
        return self.queues.get(queue.application, queue.name)

    def post(self, queue: QueueMeta, count: int, group: str | None = None, **kw) -> list:
        messages = [
            NewMessage(
                '{"group": "%s", "n": %d}' % (group or "", n),
                n % queue.partitions + 1,
                3600,
                attributes={GROUP_KEY: group} if group else None,
                **kw,
            )
            for n in range(count)
        ]
        return self.work.post(self.current(queue), messages)

    def reserve(self, queue: QueueMeta, limit: int, sub: str = "s"):
        return self.work.reserve(queue, sub, limit=limit)

    def stored(self, queue: QueueMeta) -> int:
        return len(
            self.storage.read_messages(
                queue,
                ReadQuery(
                    partitions=queue.partition_numbers,
                    now_micros=self.clock.now_micros(),
                    limit=1000,
                ),
            )
        )


@pytest.fixture
def flow(storage, clock) -> Flow:
    return Flow(storage, clock)


def test_a_paused_queue_refuses_posts_but_takes_dead_letters(flow: Flow) -> None:
    source = flow.queue(max_attempts=1, dead_letter_queue="q-dead")
    dead = flow.queue("q-dead", partitions=1)
    flow.settings.pause(dead)
    with pytest.raises(QueuePaused) as refused:
        flow.post(dead, 1)
    assert refused.value.field == "paused"
    assert refused.value.status == 503
    assert refused.value.retry_after == PAUSED_RETRY
    assert flow.stored(dead) == 0

    # The service's own posts pass: a message out of attempts reaches the
    # paused dead-letter queue rather than being lost.
    flow.post(source, 1)
    assert len(flow.reserve(source, 1).deliveries) == 1
    flow.clock.advance(VT + 1)
    assert flow.reserve(source, 1).dead_lettered == 1
    assert flow.stored(dead) == 1

    flow.settings.resume(flow.current(dead))
    flow.post(dead, 2)
    assert flow.stored(dead) == 3


def test_a_paused_subscription_hands_out_nothing_until_resumed(flow: Flow) -> None:
    queue = flow.queue()
    flow.post(queue, 4)
    before = flow.reserve(queue, 2).deliveries
    assert len(before) == 2
    flow.settings.pause(flow.current(queue), "s")
    # Posts still land, and another subscription is not paused.
    flow.post(queue, 3)
    held = flow.reserve(queue, 10)
    assert (held.deliveries, held.held) == ([], "paused")
    assert len(flow.reserve(queue, 10, sub="other").deliveries) == 7
    # Leases taken before the pause stay good.
    receipts = [d.receipt for d in before]
    assert set(flow.work.ack(queue, "s", receipts).values()) == {"acked"}

    flow.settings.resume(flow.current(queue), "s")
    after = flow.reserve(queue, 10)
    assert (len(after.deliveries), after.held) == (5, None)


def test_a_subscription_rate_hands_out_its_burst_then_its_rate(flow: Flow) -> None:
    queue = flow.queue()
    flow.settings.change_subscription(queue, "s", {"rate": 5, "burst": 5})
    flow.post(queue, 10)
    first = flow.reserve(queue, 10)
    assert (len(first.deliveries), first.held) == (5, "rate")
    empty = flow.reserve(queue, 10)
    assert (len(empty.deliveries), empty.held) == (0, "rate")
    flow.clock.advance(1)
    second = flow.reserve(queue, 10)
    assert (len(second.deliveries), second.held) == (5, "rate")

    # The queue is empty now: reserves that find nothing spend nothing.
    flow.clock.advance(1)
    for _ in range(3):
        idle = flow.reserve(queue, 5)
        assert (idle.deliveries, idle.held) == ([], None)
    flow.post(queue, 5)
    full = flow.reserve(queue, 5)
    assert (len(full.deliveries), full.held) == (5, None)


def test_max_in_flight_caps_leases_until_they_end(flow: Flow) -> None:
    queue = flow.queue()
    flow.settings.change_subscription(queue, "s", {"max_in_flight": 3})
    flow.post(queue, 10)
    first = flow.reserve(queue, 10)
    assert (len(first.deliveries), first.held) == (3, "max_in_flight")
    assert flow.reserve(queue, 10).held == "max_in_flight"
    assert flow.reserve(queue, 10).deliveries == []

    flow.work.ack(queue, "s", [first.deliveries[0].receipt])
    assert len(flow.reserve(queue, 10).deliveries) == 1
    assert flow.reserve(queue, 10).deliveries == []

    # Leases that lapse no longer count.
    flow.clock.advance(VT + 1)
    assert flow.storage.in_flight(queue, "s", flow.clock.now_micros()) == 0
    again = flow.reserve(queue, 10)
    assert (len(again.deliveries), again.held) == (3, "max_in_flight")
    assert flow.storage.in_flight(queue, "s", flow.clock.now_micros()) == 3


def test_post_rate_takes_whole_batches_or_refuses_them(flow: Flow) -> None:
    """``post_rate`` 2, ``post_burst`` 2: a batch takes one token a message,
    all or none; one larger than the burst could never pass whole and is
    refused naming the burst, whatever the bucket holds."""
    queue = flow.queue()
    flow.settings.change_queue(queue, {"post_rate": 2, "post_burst": 2})
    with pytest.raises(BatchOverBurst) as over:
        flow.post(queue, 3)
    assert (over.value.field, over.value.status) == ("post_burst", 413)
    assert "at most 2 per request" in str(over.value)
    flow.post(queue, 2)
    with pytest.raises(RateLimited) as refused:
        flow.post(queue, 1)
    assert refused.value.field == "post_rate"
    assert refused.value.status == 429
    assert refused.value.retry_after >= 1

    flow.clock.advance(0.5)  # one token: a batch of 2 waits for the second
    with pytest.raises(RateLimited) as refused:
        flow.post(queue, 2)
    assert refused.value.retry_after >= 1
    flow.clock.advance(0.5)
    flow.post(queue, 2)
    flow.clock.advance(1)
    flow.post(queue, 1)
    flow.post(queue, 1)
    with pytest.raises(RateLimited):
        flow.post(queue, 1)
    # Refused batches stored nothing.
    assert flow.stored(queue) == 6


def test_a_fair_queue_serves_quiet_groups_before_a_flood(flow: Flow) -> None:
    """500 messages of group A, then 5 of each of B to E. A flood's first
    ``THRESHOLD`` messages go to the quiet lane before it counts as busy; the
    other groups' messages come right after them, ahead of the rest of the
    flood. The same posts to a plain queue wait behind all of A."""
    fair = flow.queue("fair")
    flow.settings.change_queue(fair, {"fair": True})
    plain = flow.queue("plain")
    others = ("B", "C", "D", "E")
    for queue in (fair, plain):
        for _ in range(5):
            flow.post(queue, 100, "A")
        for group in others:
            flow.post(queue, 5, group)

    def groups(reservation) -> list[str]:
        return [d.message.attributes[GROUP_KEY] for d in reservation.deliveries]

    first = groups(flow.reserve(fair, THRESHOLD + 20))
    print(
        f"fair: first reserve of {THRESHOLD + 20}: {first.count('A')} of A, "
        f"{len(first) - first.count('A')} of B-E"
    )
    assert sorted(g for g in first if g != "A") == sorted(others * 5)
    assert first.count("A") == THRESHOLD
    rest = groups(flow.reserve(fair, 500))
    assert rest == ["A"] * (500 - THRESHOLD)

    in_order = groups(flow.reserve(plain, THRESHOLD + 20))
    assert in_order == ["A"] * (THRESHOLD + 20)

    with pytest.raises(PriorityOnFairQueue) as refused:
        flow.post(fair, 1, "B", priority=5)
    assert (refused.value.field, refused.value.status) == ("priority", 400)
    flow.post(plain, 1, "B", priority=5)
