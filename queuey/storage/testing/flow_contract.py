"""The flow-control contract of storage: a subscription's in-flight count and
the in-flight cap of reserve.

:class:`FlowContract` needs the ``storage`` fixture and the ``clock`` fixture
(a ``ManualClock`` the storage was built with); a backend says with
:attr:`FlowContract.exact_cap` whether its reserve enforces
``max_in_flight`` (SQLite) or accepts and ignores it (Cassandra, where the
core bounds it per process). Nothing sleeps: a lease
lapses by asking at a later ``now_micros`` or by moving the clock.
"""

from __future__ import annotations

import uuid

import pytest

from queuey import ids
from queuey.model import NewMessage, QueueMeta
from queuey.storage import Storage

S = ids.MICROS
VT = 30


def post(storage: Storage, queue: QueueMeta, count: int) -> None:
    storage.put_messages(
        queue,
        [NewMessage('{"n": %d}' % n, n % queue.partitions + 1, 3600) for n in range(count)],
    )


def reserve(storage, queue, clock, limit, sub="s", max_in_flight=0):
    now = clock.now_micros()
    return storage.reserve(
        queue,
        sub,
        partitions=list(queue.partition_numbers),
        limit=limit,
        visibility_timeout=VT,
        now_micros=now,
        settled_micros=now,
        max_in_flight=max_in_flight,
    )


def stats_in_flight(storage: Storage, queue: QueueMeta, sub: str, now: int) -> int:
    found = [s for s in storage.stats(queue, now).subscriptions if s.subscription == sub]
    return found[0].in_flight if found else 0


def flow_queue_in(storage: Storage) -> QueueMeta:
    """A queue of three partitions in an application of its own."""
    app = "app-" + uuid.uuid4().hex[:12]
    meta = QueueMeta(application=app, name="q", partitions=3, ttl=3600, visibility_timeout=VT)
    return storage.create_queue(meta)


class FlowContract:
    #: Whether reserve enforces ``max_in_flight`` itself.
    exact_cap = True

    @pytest.fixture
    def flow_queue(self, storage: Storage) -> QueueMeta:
        return flow_queue_in(storage)

    def counts(self, storage, queue, now, sub="s") -> tuple[int, int]:
        """(in_flight, the stats' in_flight): every check asks both."""
        return storage.in_flight(queue, sub, now), stats_in_flight(storage, queue, sub, now)

    def test_in_flight_follows_leases_through_ack_release_and_lapse(
        self, storage, flow_queue, clock
    ):
        now = clock.now_micros()
        assert self.counts(storage, flow_queue, now) == (0, 0)
        post(storage, flow_queue, 6)
        got = reserve(storage, flow_queue, clock, limit=4).deliveries
        assert len(got) == 4
        assert self.counts(storage, flow_queue, now) == (4, 4)
        assert storage.in_flight(flow_queue, "other", now) == 0
        assert storage.ack(flow_queue, "s", [got[0].receipt], now) == {got[0].receipt: "acked"}
        assert self.counts(storage, flow_queue, now) == (3, 3)
        statuses, _ = storage.release(flow_queue, "s", [got[1].receipt], now)
        assert statuses == {got[1].receipt: "acked"}
        assert self.counts(storage, flow_queue, now) == (2, 2)
        statuses, _ = storage.release(flow_queue, "s", [got[2].receipt], now, delay=60)
        assert self.counts(storage, flow_queue, now) == (1, 1)
        # The last lease lapses at now + VT: in flight just before, not at it.
        assert self.counts(storage, flow_queue, now + VT * S - 1) == (1, 1)
        assert self.counts(storage, flow_queue, now + VT * S) == (0, 0)
        # Extended, it runs again; reserved again after the lapse, it counts once.
        storage.extend(flow_queue, "s", [got[3].receipt], now, 2 * VT)
        assert self.counts(storage, flow_queue, now + VT * S) == (1, 1)
        clock.advance(2 * VT)
        again = reserve(storage, flow_queue, clock, limit=10).deliveries
        later = clock.now_micros()
        # Two never handed out, both released ones (the delay has passed)
        # and the lapsed one.
        assert len(again) == 5
        assert self.counts(storage, flow_queue, later) == (5, 5)

    def test_dead_letter_claims_count_until_acked(self, storage, clock):
        app = "app-" + uuid.uuid4().hex[:12]
        meta = QueueMeta(
            application=app, name="dq", ttl=3600, visibility_timeout=VT, max_attempts=1
        )
        flow_queue = storage.create_queue(meta)
        post(storage, flow_queue, 1)
        assert len(reserve(storage, flow_queue, clock, limit=1).deliveries) == 1
        clock.advance(VT)
        claimed = reserve(storage, flow_queue, clock, limit=1)
        assert (len(claimed.deliveries), len(claimed.dead_letters)) == (0, 1)
        now = clock.now_micros()
        assert self.counts(storage, flow_queue, now) == (1, 1)
        storage.ack(flow_queue, "s", [claimed.dead_letters[0].claim], now)
        assert self.counts(storage, flow_queue, now) == (0, 0)

    def test_max_in_flight_caps_a_reserve(self, storage, flow_queue, clock):
        post(storage, flow_queue, 12)
        first = reserve(storage, flow_queue, clock, limit=5, max_in_flight=3).deliveries
        if not self.exact_cap:
            # Accepted and not enforced: the core bounds it per process.
            assert len(first) == 5
            return
        assert len(first) == 3
        assert reserve(storage, flow_queue, clock, limit=5, max_in_flight=3).deliveries == []
        # A higher cap, or none, leaves room again.
        assert len(reserve(storage, flow_queue, clock, limit=5, max_in_flight=4).deliveries) == 1
        assert len(reserve(storage, flow_queue, clock, limit=2).deliveries) == 2
        now = clock.now_micros()
        assert storage.in_flight(flow_queue, "s", now) == 6
        assert reserve(storage, flow_queue, clock, limit=5, max_in_flight=6).deliveries == []
        storage.ack(flow_queue, "s", [d.receipt for d in first[:2]], now)
        assert len(reserve(storage, flow_queue, clock, limit=5, max_in_flight=6).deliveries) == 2
        # Other subscriptions have caps of their own.
        other = reserve(storage, flow_queue, clock, limit=5, sub="t", max_in_flight=2)
        assert len(other.deliveries) == 2
        # Once the leases lapse, the cap has room for their redelivery.
        clock.advance(VT)
        again = reserve(storage, flow_queue, clock, limit=10, max_in_flight=5).deliveries
        assert len(again) == 5
        assert storage.in_flight(flow_queue, "s", clock.now_micros()) == 5

    def test_subscriptions_are_listed_by_name_as_stats_has_them(self, storage, flow_queue, clock):
        """What ``max_subscriptions`` counts: the names reserves used, without a scan."""
        assert storage.subscriptions(flow_queue) == []
        post(storage, flow_queue, 2)
        reserve(storage, flow_queue, clock, 1, sub="t")
        reserve(storage, flow_queue, clock, 1, sub="s")
        assert storage.subscriptions(flow_queue) == ["s", "t"]
        assert Storage.subscriptions(storage, flow_queue) == ["s", "t"]
