"""The delivery contract: dead letters, priorities, reopen, stats, threads
sharing a subscription and FIFO queues (on
:class:`~queuey.storage.testing.workbase.WorkQueueBase`)."""

from __future__ import annotations

import threading
import uuid

import pytest

from queuey.model import MessageRef, NewMessage, QueueMeta, parse_receipt
from queuey.storage import Storage
from queuey.storage.testing.workbase import WorkQueueBase, body


class DeliveryContract(WorkQueueBase):
    # -- dead letters -------------------------------------------------------------
    def test_max_attempts_turns_into_a_dead_letter(self, storage, app, clock):
        dq = self.dead_queue(storage, app, max_attempts=2, vt=30)
        first = self.post(storage, dq, 1)
        (one,) = self.reserve(storage, dq, clock, vt=10).deliveries
        self.release(storage, dq, clock, [one.receipt], error="boom")
        (two,) = self.reserve(storage, dq, clock, vt=10).deliveries
        assert two.attempts == 2
        clock.advance(1)
        self.post(storage, dq, 2)
        clock.advance(10)
        got = self.reserve(storage, dq, clock, limit=1, vt=10)
        assert self.bodies(got) == [body(2)]
        (dead,) = got.dead_letters
        assert (dead.message, dead.attempts, dead.last_error) == (first, 2, "boom")
        assert parse_receipt(dead.claim)[:2] == (1, first.id)
        receipts = [dead.claim, got.deliveries[0].receipt]
        assert self.ack(storage, dq, clock, receipts) == dict.fromkeys(receipts, "acked")
        clock.advance(3600 - 12)
        again = self.reserve(storage, dq, clock)
        assert (again.deliveries, again.dead_letters) == ([], [])
        assert self.sub_stats(storage, dq, clock)["default"].dead_lettered == 1

    def test_dead_letter_without_error_has_empty_last_error(self, storage, app, clock):
        dq = self.dead_queue(storage, app, max_attempts=1)
        self.post(storage, dq, 1)
        self.reserve(storage, dq, clock, vt=5)
        clock.advance(6)
        (dead,) = self.reserve(storage, dq, clock).dead_letters
        assert (dead.attempts, dead.last_error) == (1, "")

    def test_unacked_claim_comes_back_after_the_visibility_timeout(self, storage, app, clock):
        dq = self.dead_queue(storage, app, max_attempts=1, vt=30)
        self.post(storage, dq, 1)
        self.reserve(storage, dq, clock, vt=5)
        clock.advance(6)
        (dead,) = self.reserve(storage, dq, clock, vt=5).dead_letters
        clock.advance(29.999)
        assert self.reserve(storage, dq, clock).dead_letters == []
        clock.advance(0.002)
        got = self.reserve(storage, dq, clock)
        assert got.deliveries == []
        (again,) = got.dead_letters
        assert again.message == dead.message and again.claim != dead.claim
        assert again.attempts == 1
        assert self.ack(storage, dq, clock, [dead.claim]) == {dead.claim: "expired"}
        assert self.ack(storage, dq, clock, [again.claim]) == {again.claim: "acked"}
        assert self.sub_stats(storage, dq, clock)["default"].dead_lettered == 1

    def test_release_on_the_last_attempt_dead_letters_at_once(self, storage, app, clock):
        dq = self.dead_queue(storage, app, max_attempts=1)
        posted = self.post(storage, dq, 1)
        (delivery,) = self.reserve(storage, dq, clock).deliveries
        statuses, dead = self.release(storage, dq, clock, [delivery.receipt], error="bad input")
        assert statuses == {delivery.receipt: "acked"}
        assert [(d.message.id, d.attempts, d.last_error) for d in dead] == [
            (posted.id, 1, "bad input")
        ]
        got = self.reserve(storage, dq, clock)
        assert (got.deliveries, got.dead_letters) == ([], [])
        assert self.ack(storage, dq, clock, [dead[0].claim]) == {dead[0].claim: "acked"}

    def test_one_release_across_partitions_dead_letters_every_last_attempt(
        self, storage, app, clock
    ):
        dq = storage.create_queue(
            QueueMeta(application=app, name="dq3", partitions=3, ttl=3600, max_attempts=1)
        )
        posted = {self.post(storage, dq, n, partition=n).id for n in (1, 2, 3)}
        got = self.reserve(storage, dq, clock)
        receipts = [d.receipt for d in got.deliveries]
        statuses, dead = self.release(storage, dq, clock, receipts)
        assert statuses == dict.fromkeys(receipts, "acked")
        assert {d.message.id for d in dead} == posted and len(dead) == 3

    # -- priority -----------------------------------------------------------------
    def test_higher_priority_first(self, storage, wq, clock):
        for n, priority in enumerate([0, 5, 9, 5, 0]):
            self.post(storage, wq, n, partition=n % 3 + 1, priority=priority)
            clock.advance(0.001)
        got = self.reserve(storage, wq, clock, limit=2)
        assert self.bodies(got) == [body(2), body(1)]
        assert self.bodies(self.reserve(storage, wq, clock)) == [body(3), body(0), body(4)]

    def test_available_again_before_new_within_a_priority(self, storage, wq, clock):
        self.post(storage, wq, 0, partition=1)
        clock.advance(0.001)
        self.post(storage, wq, 1, partition=2)
        clock.advance(0.001)
        self.post(storage, wq, 2, partition=3)
        clock.advance(0.001)
        self.post(storage, wq, 3, partition=1, priority=1)
        b, c = self.reserve(storage, wq, clock, partitions=[2, 3]).deliveries
        self.release(storage, wq, clock, [c.receipt, b.receipt])
        got = self.reserve(storage, wq, clock)
        assert self.bodies(got) == [body(3), body(1), body(2), body(0)]
        assert [d.attempts for d in got.deliveries] == [1, 2, 2, 1]

    # -- reopen -------------------------------------------------------------------
    def test_reopen_makes_finished_messages_available_again(self, storage, app, clock):
        dq = self.dead_queue(storage, app, max_attempts=1)
        done = self.post(storage, dq, 1)
        dead = self.post(storage, dq, 2)
        busy = self.post(storage, dq, 3)
        a, b = self.reserve(storage, dq, clock, limit=2).deliveries
        self.ack(storage, dq, clock, [a.receipt])
        _, (claim,) = self.release(storage, dq, clock, [b.receipt])
        self.ack(storage, dq, clock, [claim.claim])
        self.reserve(storage, dq, clock, limit=1)
        refs = [MessageRef(1, m.id) for m in (done, dead, busy)] + [MessageRef(1, uuid.uuid1())]
        assert storage.reopen(dq, "default", refs, clock.now_micros()) == 2
        assert storage.reopen(dq, "default", refs, clock.now_micros()) == 0
        got = self.reserve(storage, dq, clock)
        assert [(d.message.id, d.attempts) for d in got.deliveries] == [(done.id, 1), (dead.id, 1)]
        assert storage.reopen(dq, "other", refs, clock.now_micros()) == 0

    # -- stats --------------------------------------------------------------------
    def test_stats_count_per_partition_and_subscription(self, storage, wq, clock):
        first = self.post(storage, wq, 0, partition=1)
        clock.advance(0.001)
        second = self.post(storage, wq, 1, partition=1)
        third = self.post(storage, wq, 2, partition=2)
        self.post(storage, wq, 3, partition=1, ttl=1)
        clock.advance(1.5)
        a, b = self.reserve(storage, wq, clock, sub="busy", limit=2).deliveries
        assert self.ack(storage, wq, clock, [a.receipt], sub="busy") == {a.receipt: "acked"}
        stats = storage.stats(wq, clock.now_micros())
        assert (stats.messages, stats.oldest_timestamp) == (3, first.timestamp)
        per_partition = {p.partition: (p.messages, p.oldest_timestamp) for p in stats.partitions}
        assert per_partition == {1: (2, first.timestamp), 2: (1, third.timestamp), 3: (0, None)}
        subs = {s.subscription: s for s in stats.subscriptions}
        assert set(subs) == {"busy"}
        busy = subs["busy"]
        assert (busy.available, busy.in_flight, busy.delayed, busy.dead_lettered) == (1, 1, 0, 0)
        assert busy.oldest_available_timestamp == third.timestamp
        self.release(storage, wq, clock, [b.receipt], sub="busy", delay=60)
        busy = self.sub_stats(storage, wq, clock)["busy"]
        assert (busy.available, busy.in_flight, busy.delayed) == (1, 0, 1)
        self.reserve(storage, wq, clock, sub="busy")
        busy = self.sub_stats(storage, wq, clock)["busy"]
        assert (busy.available, busy.in_flight, busy.delayed) == (0, 1, 1)
        assert busy.oldest_available_timestamp is None
        assert second.timestamp > first.timestamp

    def test_stats_count_delayed_posts(self, storage, wq, clock):
        self.post(storage, wq, 0)
        self.post(storage, wq, 1, delay=30)
        self.reserve(storage, wq, clock, sub="s", limit=1)
        stats = storage.stats(wq, clock.now_micros())
        assert stats.messages == 1
        (s,) = stats.subscriptions
        assert (s.subscription, s.available, s.in_flight, s.delayed) == ("s", 0, 1, 1)
        clock.advance(31)
        (s,) = storage.stats(wq, clock.now_micros()).subscriptions
        assert (s.available, s.in_flight, s.delayed) == (2, 0, 0)

    def test_purge_and_delete_forget_subscriptions(self, storage, wq, app, clock):
        self.post(storage, wq, 1)
        (delivery,) = self.reserve(storage, wq, clock).deliveries
        fresh = storage.purge_queue(app, "wq")
        assert storage.stats(fresh, clock.now_micros()).subscriptions == []
        assert self.ack(storage, fresh, clock, [delivery.receipt]) == {delivery.receipt: "unknown"}
        self.post(storage, fresh, 2)
        assert [d.attempts for d in self.reserve(storage, fresh, clock).deliveries] == [1]
        storage.delete_queue(app, "wq")
        again = storage.create_queue(QueueMeta(application=app, name="wq", partitions=3))
        self.post(storage, again, 3)
        assert storage.stats(again, clock.now_micros()).subscriptions == []
        assert self.bodies(self.reserve(storage, again, clock)) == [body(3)]

    # -- concurrency --------------------------------------------------------------
    def test_threads_reserving_one_subscription_never_share_a_lease(self, storage, wq, clock):
        total = 120
        storage.put_messages(wq, [NewMessage(body(n), n % 3 + 1, 3600) for n in range(total)])
        delivered: list[str] = []
        errors: list[Exception] = []
        lock = threading.Lock()

        def consume() -> None:
            try:
                while True:
                    got = self.reserve(storage, wq, clock, limit=4, vt=600)
                    if not got.deliveries:
                        return
                    with lock:
                        delivered.extend(d.message.body for d in got.deliveries)
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=consume) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        duplicates = len(delivered) - len(set(delivered))
        figures = (
            f"sent={total} delivered={len(delivered)} duplicates={duplicates} "
            f"lost={total - len(set(delivered))}"
        )
        print(figures)
        assert errors == [], figures
        assert duplicates == 0 and len(delivered) == total, figures

    # -- queue attributes and FIFO queues ------------------------------------------
    def test_queue_attributes_and_fifo_round_trip(self, storage, app):
        made = storage.create_queue(
            QueueMeta(application=app, name="f", fifo=True, attributes={"sqs.tag.a": "1"})
        )
        got = storage.get_queue(app, "f")
        assert (got.fifo, dict(got.attributes)) == (True, {"sqs.tag.a": "1"})
        assert [(q.name, dict(q.attributes)) for q in storage.list_queues(app)] == [
            ("f", {"sqs.tag.a": "1"})
        ]
        storage.update_queue(app, "f", attributes={"b": "☃"}, delay=3)
        got = storage.get_queue(app, "f")
        assert (dict(got.attributes), got.delay, got.fifo) == ({"b": "☃"}, 3, True)
        storage.update_queue(app, "f", delay=4)  # attributes untouched when not named
        assert dict(storage.get_queue(app, "f").attributes) == {"b": "☃"}
        purged = storage.purge_queue(app, "f")
        assert purged.incarnation != made.incarnation
        got = storage.get_queue(app, "f")
        assert (got.fifo, dict(got.attributes)) == (True, {"b": "☃"})
        with pytest.raises(Exception, match="fifo"):
            storage.update_queue(app, "f", fifo=False)
        plain = storage.create_queue(QueueMeta(application=app, name="plain"))
        assert (plain.fifo, dict(storage.get_queue(app, "plain").attributes)) == (False, {})

    @pytest.fixture
    def fifo(self, storage: Storage, app: str) -> QueueMeta:
        return storage.create_queue(
            QueueMeta(application=app, name="fifo", partitions=2, ttl=3600, fifo=True)
        )

    def test_fifo_partition_waits_while_anything_is_in_flight(self, storage, fifo, clock):
        for n in range(5):
            self.post(storage, fifo, n, partition=1)
        first = self.reserve(storage, fifo, clock, limit=2, vt=30)
        assert self.bodies(first) == [body(0), body(1)]
        assert self.bodies(self.reserve(storage, fifo, clock)) == []
        self.ack(storage, fifo, clock, [first.deliveries[0].receipt])
        assert self.bodies(self.reserve(storage, fifo, clock)) == []  # 1 still in flight
        clock.advance(31)  # the lease of 1 ends: it comes back first, then the rest
        again = self.reserve(storage, fifo, clock, limit=10)
        assert self.bodies(again) == [body(n) for n in range(1, 5)]
        assert [d.attempts for d in again.deliveries] == [2, 1, 1, 1]

    def test_fifo_release_with_delay_keeps_the_partition_waiting(self, storage, fifo, clock):
        for n in range(3):
            self.post(storage, fifo, n, partition=2)
        got = self.reserve(storage, fifo, clock, limit=1)
        self.release(storage, fifo, clock, [got.deliveries[0].receipt], delay=10)
        assert self.bodies(self.reserve(storage, fifo, clock)) == []
        clock.advance(10)
        assert self.bodies(self.reserve(storage, fifo, clock, limit=10)) == [
            body(0),
            body(1),
            body(2),
        ]

    def test_fifo_partitions_are_independent(self, storage, fifo, clock):
        for n in range(4):
            self.post(storage, fifo, n, partition=n % 2 + 1)
        one = self.reserve(storage, fifo, clock, limit=1, partitions=[1])
        assert self.bodies(one) == [body(0)]
        two = self.reserve(storage, fifo, clock, limit=10)
        assert self.bodies(two) == [body(1), body(3)]  # partition 2 only, in order
        self.ack(storage, fifo, clock, [d.receipt for d in one.deliveries])
        assert self.bodies(self.reserve(storage, fifo, clock, limit=10)) == [body(2)]

    def test_fifo_threads_keep_order_and_never_overlap(self, storage, app, clock):
        queue = storage.create_queue(
            QueueMeta(application=app, name="fifo4", partitions=4, ttl=3600, fifo=True)
        )
        total = 80
        storage.put_messages(queue, [NewMessage(body(n), n % 4 + 1, 3600) for n in range(total)])
        seen: dict[int, list[int]] = {p: [] for p in range(1, 5)}
        in_flight: set[int] = set()
        errors: list[str] = []
        lock = threading.Lock()

        def consume() -> None:
            try:
                for _ in range(400):
                    got = self.reserve(storage, queue, clock, limit=3, vt=600)
                    if not got.deliveries:
                        with lock:
                            if sum(map(len, seen.values())) >= total:
                                return
                        continue
                    parts = {d.message.partition for d in got.deliveries}
                    with lock:
                        if parts & in_flight:
                            errors.append(f"partitions {parts & in_flight} handed out twice")
                        in_flight.update(parts)
                        for d in got.deliveries:
                            seen[d.message.partition].append(int(d.message.body[6:-1]))
                    with lock:
                        in_flight.difference_update(parts)
                    self.ack(storage, queue, clock, [d.receipt for d in got.deliveries])
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(repr(exc))

        threads = [threading.Thread(target=consume) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        print({p: len(v) for p, v in seen.items()}, errors[:3])
        assert errors == []
        for p, numbers in seen.items():
            assert numbers == [n for n in range(total) if n % 4 + 1 == p]

    def test_first_delivery_time_is_kept(self, storage, wq, clock):
        self.post(storage, wq, 1)
        first = self.reserve(storage, wq, clock, vt=5).deliveries[0]
        assert first.first_delivered == clock.now_micros()
        start = clock.now_micros()
        clock.advance(6)
        again = self.reserve(storage, wq, clock).deliveries[0]
        assert (again.attempts, again.first_delivered) == (2, start)
