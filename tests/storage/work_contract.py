"""The work-queue contract: message fields, delays, dedup ids and subscriptions.

A backend's test module mixes :class:`WorkQueueContract` in beside
:class:`~tests.storage.contract.StorageContract`; it needs the ``storage``
fixture and the ``clock`` fixture (a ``ManualClock`` the storage was built
with). Time only moves when a test moves it, so visibility timeouts, delays and
the dedup window are exact and nothing sleeps. Each test works in its own
application. Reserve calls pass ``settled_micros = now``: every write of a test
has completed before it reads.
"""

from __future__ import annotations

import threading
import uuid

import pytest

from queuey import ids
from queuey.core.workqueues import WorkQueues, dead_letter_dedup_id
from queuey.errors import StorageUnavailable
from queuey.model import MessageRef, NewMessage, QueueMeta, ReadQuery, parse_receipt
from queuey.storage import Storage

S = ids.MICROS
#: Slack allowed between "now + delay" and a delayed message's timestamp: a
#: backend may step a microsecond or so to keep ids distinct.
SLACK = 1000


def body(n: int) -> str:
    return '{"n": %d}' % n


class WorkQueueContract:
    @pytest.fixture
    def app(self) -> str:
        return "app-" + uuid.uuid4().hex[:12]

    @pytest.fixture
    def wq(self, storage: Storage, app: str) -> QueueMeta:
        return storage.create_queue(
            QueueMeta(application=app, name="wq", partitions=3, ttl=3600, visibility_timeout=30)
        )

    # -- helpers ------------------------------------------------------------------
    def post(self, storage, queue, n, partition=1, ttl=3600, **fields):
        return storage.put_messages(queue, [NewMessage(body(n), partition, ttl, **fields)])[0]

    def reserve(self, storage, queue, clock, sub="default", limit=10, vt=30, partitions=None):
        now = clock.now_micros()
        parts = partitions or list(range(1, queue.partitions + 1))
        return storage.reserve(
            queue,
            sub,
            partitions=parts,
            limit=limit,
            visibility_timeout=vt,
            now_micros=now,
            settled_micros=now,
        )

    def bodies(self, reserved):
        return [d.message.body for d in reserved.deliveries]

    def ack(self, storage, queue, clock, receipts, sub="default"):
        return storage.ack(queue, sub, receipts, clock.now_micros())

    def release(self, storage, queue, clock, receipts, sub="default", **kw):
        return storage.release(queue, sub, receipts, clock.now_micros(), **kw)

    def read_oldest_first(self, storage, queue, clock):
        query = ReadQuery(
            partitions=list(range(1, queue.partitions + 1)),
            now_micros=clock.now_micros(),
            order="ascending",
            limit=1000,
        )
        return storage.read_messages(queue, query)

    def sub_stats(self, storage, queue, clock):
        stats = storage.stats(queue, clock.now_micros())
        return {s.subscription: s for s in stats.subscriptions}

    def dead_queue(self, storage, app, max_attempts, vt=30):
        return storage.create_queue(
            QueueMeta(
                application=app,
                name="dq",
                ttl=3600,
                visibility_timeout=vt,
                max_attempts=max_attempts,
            )
        )

    # -- queue settings -----------------------------------------------------------
    def test_work_queue_settings_are_stored_and_updated(self, storage, app):
        meta = QueueMeta(
            application=app,
            name="jobs",
            visibility_timeout=45,
            max_attempts=3,
            dead_letter_queue="graveyard",
            delay=5,
        )
        storage.create_queue(meta)
        got = storage.get_queue(app, "jobs")
        assert (got.visibility_timeout, got.max_attempts, got.dead_letter_queue, got.delay) == (
            45,
            3,
            "graveyard",
            5,
        )
        storage.update_queue(app, "jobs", visibility_timeout=60, max_attempts=0, delay=None)
        got = storage.get_queue(app, "jobs")
        assert (got.visibility_timeout, got.max_attempts, got.dead_letter_queue, got.delay) == (
            60,
            0,
            "graveyard",
            5,
        )
        storage.update_queue(app, "jobs", dead_letter_queue="other", delay=0)
        listed = storage.list_queues(app)[0]
        assert (listed.dead_letter_queue, listed.delay, listed.dead_letter_name) == (
            "other",
            0,
            "other",
        )
        plain = storage.create_queue(QueueMeta(application=app, name="plain"))
        plain = storage.get_queue(app, "plain")
        assert (plain.visibility_timeout, plain.max_attempts, plain.dead_letter_queue) == (
            30,
            0,
            None,
        )
        assert (plain.delay, plain.dead_letter_name) == (0, "plain-dead")

    # -- message fields -----------------------------------------------------------
    def test_priority_and_attributes_round_trip(self, storage, wq, clock):
        tagged = self.post(storage, wq, 1, priority=7, attributes={"kind": "a", "é": "ü"})
        plain = self.post(storage, wq, 2)
        assert (tagged.priority, dict(tagged.attributes)) == (7, {"kind": "a", "é": "ü"})
        assert (plain.priority, plain.attributes) == (0, None)
        got = {m.id: m for m in self.read_oldest_first(storage, wq, clock)}
        assert (got[tagged.id].priority, dict(got[tagged.id].attributes)) == (
            7,
            {"kind": "a", "é": "ü"},
        )
        assert (got[plain.id].priority, got[plain.id].attributes) == (0, None)
        refs = [MessageRef(1, tagged.id)]
        (fetched,) = storage.get_messages(wq, refs, clock.now_micros())
        assert fetched == tagged
        delivered = {d.message.id: d.message for d in self.reserve(storage, wq, clock).deliveries}
        assert delivered[tagged.id] == tagged and delivered[plain.id] == plain

    # -- delays -------------------------------------------------------------------
    def test_delayed_message_is_invisible_until_due(self, storage, wq, clock):
        start = clock.now_micros()
        late = self.post(storage, wq, 1, ttl=600, delay=10)
        assert start + 10 * S <= late.timestamp <= start + 10 * S + SLACK
        assert late.timestamp == ids.micros_of(late.id)
        assert start + 600 * S <= late.expires <= start + 600 * S + SLACK
        now_post = self.post(storage, wq, 2)
        assert now_post.timestamp < late.timestamp, "a delay must not push later ids forward"
        clock.set(late.timestamp - 1)
        ref = [MessageRef(1, late.id)]
        assert [m.id for m in self.read_oldest_first(storage, wq, clock)] == [now_post.id]
        assert storage.get_messages(wq, ref, clock.now_micros()) == []
        assert self.bodies(self.reserve(storage, wq, clock)) == [body(2)]
        assert self.bodies(self.reserve(storage, wq, clock)) == []
        clock.set(late.timestamp)
        assert [m.id for m in self.read_oldest_first(storage, wq, clock)] == [now_post.id, late.id]
        assert [m.id for m in storage.get_messages(wq, ref, clock.now_micros())] == [late.id]
        assert self.bodies(self.reserve(storage, wq, clock)) == [body(1)]

    def test_delayed_message_takes_its_place_in_id_order(self, storage, wq, clock):
        late = self.post(storage, wq, 1, delay=10)
        clock.advance(5)
        early = self.post(storage, wq, 2)
        clock.advance(6)
        assert [m.id for m in self.read_oldest_first(storage, wq, clock)] == [early.id, late.id]
        assert self.bodies(self.reserve(storage, wq, clock)) == [body(2), body(1)]

    def test_delayed_message_still_expires_from_its_post_time(self, storage, wq, clock):
        self.post(storage, wq, 1, ttl=10, delay=8)
        clock.advance(9)
        assert len(self.read_oldest_first(storage, wq, clock)) == 1
        clock.advance(1.001)
        assert self.read_oldest_first(storage, wq, clock) == []
        assert self.bodies(self.reserve(storage, wq, clock)) == []

    # -- dedup ids ----------------------------------------------------------------
    def test_dedup_id_answers_the_first_message_within_the_window(self, storage, wq, clock):
        window = storage.dedup_window
        first = self.post(storage, wq, 1, dedup_id="order-7")
        clock.advance(window / 2)
        again = self.post(storage, wq, 2, partition=2, dedup_id="order-7")
        assert again == first
        assert [m.body for m in self.read_oldest_first(storage, wq, clock)] == [body(1)]
        clock.set(first.timestamp + window * S + 1)
        later = self.post(storage, wq, 3, dedup_id="order-7")
        assert later.id != first.id
        assert [m.body for m in self.read_oldest_first(storage, wq, clock)] == [body(1), body(3)]

    def test_dedup_id_within_one_batch(self, storage, wq, clock):
        stored = storage.put_messages(
            wq,
            [
                NewMessage(body(1), 1, 600, dedup_id="x"),
                NewMessage(body(2), 2, 600),
                NewMessage(body(3), 3, 600, dedup_id="x"),
            ],
        )
        assert stored[2] == stored[0] and stored[1].id != stored[0].id
        got = self.read_oldest_first(storage, wq, clock)
        assert sorted(m.body for m in got) == [body(1), body(2)]

    def test_dedup_ids_are_per_queue_and_purge_starts_afresh(self, storage, wq, app, clock):
        other = storage.create_queue(QueueMeta(application=app, name="other", ttl=600))
        first = self.post(storage, wq, 1, dedup_id="d")
        elsewhere = self.post(storage, other, 2, dedup_id="d")
        assert elsewhere.id != first.id and elsewhere.body == body(2)
        fresh = storage.purge_queue(app, "wq")
        after = self.post(storage, fresh, 3, dedup_id="d")
        assert after.id != first.id
        assert [m.body for m in self.read_oldest_first(storage, fresh, clock)] == [body(3)]

    def test_dedup_repeat_after_the_first_message_was_deleted_stores_nothing(
        self, storage, wq, clock
    ):
        """A consumer took the message and it was deleted (acked and removed, as
        DELETE /queue/{name}/{id}, SQS DeleteMessage or a move does): a repeat
        post within the window answers its id and brings nothing back, both
        while the first write is recent and after the backend's write timeout."""
        first = self.post(storage, wq, 1, partition=2, dedup_id="job-9")
        (delivery,) = self.reserve(storage, wq, clock).deliveries
        assert self.ack(storage, wq, clock, [delivery.receipt]) == {delivery.receipt: "acked"}
        storage.delete_messages(wq, [MessageRef(first.partition, first.id)])
        later = storage.write_timeout_seconds + 1
        assert later < storage.dedup_window
        for wait in (0, later):
            clock.advance(wait)
            again = self.post(storage, wq, 2, partition=2, dedup_id="job-9")
            assert (again.id, again.partition) == (first.id, first.partition)
            assert self.read_oldest_first(storage, wq, clock) == []
            assert self.reserve(storage, wq, clock, sub="other").deliveries == []
            assert self.reserve(storage, wq, clock).deliveries == []

    def test_dedup_repeat_of_a_dead_letter_after_its_redrive_stores_nothing(
        self, storage, app, clock
    ):
        """A message dead-lettered, then redriven back to its queue (the dead
        letter is deleted): a retried dead-letter post of the same message (its
        claim's ack was lost) must not put a second copy in the dead-letter queue."""
        work = WorkQueues(storage, clock, max_ttl=3600)
        source = self.dead_queue(storage, app, max_attempts=1)
        posted = self.post(storage, source, 1)
        (delivery,) = work.reserve(source, "default", limit=1).deliveries
        assert work.release(source, "default", [delivery.receipt], error="boom").dead_lettered == 1
        dead = storage.get_queue(app, source.dead_letter_name)
        (stored,) = self.read_oldest_first(storage, dead, clock)
        assert work.redrive(dead, 10).moved == 1
        assert self.read_oldest_first(storage, dead, clock) == []
        clock.advance(storage.write_timeout_seconds + 1)
        dedup_id = dead_letter_dedup_id(source, "default", posted)
        retried = storage.put_messages(
            dead, [NewMessage(stored.body, stored.partition, 3600, dedup_id=dedup_id)]
        )
        assert [m.id for m in retried] == [stored.id]
        assert self.read_oldest_first(storage, dead, clock) == []
        assert self.reserve(storage, dead, clock).deliveries == []
        (back,) = self.reserve(storage, source, clock).deliveries
        assert back.message.id == posted.id

    def test_dead_lettered_again_after_a_redrive_is_stored_once(self, storage, app, clock):
        """Each dead-lettering of a message is a new dead letter, even within
        the dedup window after a redrive of the last one; a retried
        dead-lettering (its claim's ack was lost, the claim lapsed) is not."""
        work = WorkQueues(storage, clock, max_ttl=3600)
        ack_lost = WorkQueues(_AckLost(storage), clock, max_ttl=3600)
        source = self.dead_queue(storage, app, max_attempts=1, vt=30)
        posted = self.post(storage, source, 1)
        start = clock.now_micros()

        def dead_letters():
            dead = storage.get_queue(app, source.dead_letter_name)
            return [
                (m.attributes["source_message_id"], m.attributes["last_error"], m.body)
                for m in self.read_oldest_first(storage, dead, clock)
            ]

        def fail(error, service=work):
            (delivery,) = work.reserve(source, "default").deliveries
            assert delivery.message.id == posted.id and delivery.attempts == 1
            return service.release(source, "default", [delivery.receipt], error=error)

        assert fail("first").dead_lettered == 1
        dead = storage.get_queue(app, source.dead_letter_name)
        assert work.redrive(dead, 10).moved == 1
        clock.advance(1)
        assert fail("second").dead_lettered == 1
        assert dead_letters() == [(posted.id.hex, "second", body(1))]
        assert work.redrive(dead, 10).moved == 1
        clock.advance(1)
        assert fail("third", service=ack_lost).dead_lettered == 0
        clock.advance(source.visibility_timeout + 1)
        retried = work.reserve(source, "default")
        assert (retried.deliveries, retried.dead_lettered) == ([], 1)
        assert clock.now_micros() - start < storage.dedup_window * S
        assert dead_letters() == [(posted.id.hex, "third", body(1))]
        assert work.reserve(source, "default").deliveries == []

    # -- reserve basics -----------------------------------------------------------
    def test_reserve_leases_up_to_limit_oldest_first(self, storage, wq, clock):
        posted = []
        for n, partition in enumerate([3, 1, 2, 1, 3]):
            posted.append(self.post(storage, wq, n, partition=partition))
            clock.advance(0.001)
        got = self.reserve(storage, wq, clock, limit=3)
        assert [d.message.id for d in got.deliveries] == [m.id for m in posted[:3]]
        assert got.dead_letters == []
        for delivery in got.deliveries:
            assert delivery.attempts == 1
            message = delivery.message
            assert parse_receipt(delivery.receipt)[:2] == (message.partition, message.id)
        assert len({d.receipt for d in got.deliveries}) == 3
        rest = self.reserve(storage, wq, clock, limit=10)
        assert self.bodies(rest) == [body(3), body(4)]
        empty = self.reserve(storage, wq, clock)
        assert (empty.deliveries, empty.dead_letters) == ([], [])

    def test_reserve_respects_partitions(self, storage, wq, clock):
        for n in range(6):
            self.post(storage, wq, n, partition=n % 3 + 1)
        got = self.reserve(storage, wq, clock, partitions=[2, 3])
        assert sorted(d.message.partition for d in got.deliveries) == [2, 2, 3, 3]
        rest = self.reserve(storage, wq, clock)
        assert sorted(d.message.body for d in rest.deliveries) == [body(0), body(3)]

    def test_subscriptions_are_independent_and_start_at_the_oldest(self, storage, wq, clock):
        for n in range(3):
            self.post(storage, wq, n)
        assert self.bodies(self.reserve(storage, wq, clock, sub="a")) == [body(0), body(1), body(2)]
        clock.advance(100)
        late = self.reserve(storage, wq, clock, sub="late-comer")
        assert self.bodies(late) == [body(0), body(1), body(2)]
        assert [d.attempts for d in late.deliveries] == [1, 1, 1]

    def test_expired_messages_are_never_delivered(self, storage, wq, clock):
        self.post(storage, wq, 1, ttl=2)
        keep = self.post(storage, wq, 2, ttl=60)
        first = self.reserve(storage, wq, clock, sub="early", vt=1)
        assert len(first.deliveries) == 2
        clock.advance(2.5)
        assert [d.message.id for d in self.reserve(storage, wq, clock, sub="early").deliveries] == [
            keep.id
        ]
        assert [d.message.id for d in self.reserve(storage, wq, clock, sub="new").deliveries] == [
            keep.id
        ]

    # -- leases -------------------------------------------------------------------
    def test_no_redelivery_within_the_lease(self, storage, wq, clock):
        self.post(storage, wq, 1)
        (first,) = self.reserve(storage, wq, clock, vt=10).deliveries
        clock.advance(9.999)
        assert self.reserve(storage, wq, clock).deliveries == []
        clock.advance(0.002)
        (again,) = self.reserve(storage, wq, clock, vt=10).deliveries
        assert again.message == first.message
        assert again.attempts == 2 and again.receipt != first.receipt

    def test_ack_is_final(self, storage, wq, clock):
        self.post(storage, wq, 1)
        (delivery,) = self.reserve(storage, wq, clock, vt=10).deliveries
        assert self.ack(storage, wq, clock, [delivery.receipt]) == {delivery.receipt: "acked"}
        clock.advance(3600 - 1)
        assert self.reserve(storage, wq, clock).deliveries == []

    def test_ack_after_the_lease_ended_but_before_anyone_else(self, storage, wq, clock):
        self.post(storage, wq, 1)
        (delivery,) = self.reserve(storage, wq, clock, vt=10).deliveries
        clock.advance(20)
        assert self.ack(storage, wq, clock, [delivery.receipt]) == {delivery.receipt: "acked"}
        assert self.reserve(storage, wq, clock).deliveries == []

    def test_ack_statuses(self, storage, wq, clock):
        first_msg = self.post(storage, wq, 1)
        self.post(storage, wq, 2)
        old, other = self.reserve(storage, wq, clock, vt=10).deliveries
        clock.advance(11)
        (new, _) = self.reserve(storage, wq, clock, vt=10).deliveries
        assert new.message.id == first_msg.id
        stranger = "1-%s-abc" % uuid.uuid1().hex
        answer = self.ack(
            storage, wq, clock, [old.receipt, new.receipt, "junk", stranger, "9-" + old.receipt[2:]]
        )
        assert answer == {
            old.receipt: "expired",
            new.receipt: "acked",
            "junk": "unknown",
            stranger: "unknown",
            "9-" + old.receipt[2:]: "unknown",
        }
        assert self.ack(storage, wq, clock, [new.receipt]) == {new.receipt: "acked"}
        assert self.ack(storage, wq, clock, [other.receipt], sub="b") == {other.receipt: "unknown"}

    def test_release_makes_available_again_keeping_attempts(self, storage, wq, clock):
        self.post(storage, wq, 1)
        (first,) = self.reserve(storage, wq, clock).deliveries
        statuses, dead = self.release(storage, wq, clock, [first.receipt])
        assert (statuses, dead) == ({first.receipt: "acked"}, [])
        (second,) = self.reserve(storage, wq, clock).deliveries
        assert second.attempts == 2 and second.message.id == first.message.id
        assert self.ack(storage, wq, clock, [first.receipt]) == {first.receipt: "expired"}
        statuses, _ = self.release(storage, wq, clock, [second.receipt], delay=5)
        assert statuses == {second.receipt: "acked"}
        clock.advance(4.999)
        assert self.reserve(storage, wq, clock).deliveries == []
        clock.advance(0.002)
        assert [d.attempts for d in self.reserve(storage, wq, clock).deliveries] == [3]

    def test_extend_moves_the_lease(self, storage, wq, clock):
        self.post(storage, wq, 1)
        (delivery,) = self.reserve(storage, wq, clock, vt=10).deliveries
        clock.advance(8)
        answer = storage.extend(wq, "default", [delivery.receipt], clock.now_micros(), 10)
        assert answer == {delivery.receipt: "acked"}
        clock.advance(9.999)
        assert self.reserve(storage, wq, clock).deliveries == []
        clock.advance(0.002)
        (again,) = self.reserve(storage, wq, clock, vt=10).deliveries
        assert again.attempts == 2
        stale = storage.extend(wq, "default", [delivery.receipt], clock.now_micros(), 10)
        assert stale == {delivery.receipt: "expired"}

    def test_extend_revives_an_ended_lease_not_yet_retaken(self, storage, wq, clock):
        self.post(storage, wq, 1)
        (delivery,) = self.reserve(storage, wq, clock, vt=10).deliveries
        clock.advance(15)
        answer = storage.extend(wq, "default", [delivery.receipt], clock.now_micros(), 10)
        assert answer == {delivery.receipt: "acked"}
        assert self.reserve(storage, wq, clock).deliveries == []
        assert self.ack(storage, wq, clock, [delivery.receipt]) == {delivery.receipt: "acked"}

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
            except Exception as exc:  # pragma: no cover - reported below
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
            except Exception as exc:  # pragma: no cover - reported below
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


class _AckLost:
    """A storage whose acks fail: a dead-lettering posts, then loses its claim's ack."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage

    def __getattr__(self, name: str):
        return getattr(self._storage, name)

    def ack(self, *args, **kwargs):
        raise StorageUnavailable("ack lost")
