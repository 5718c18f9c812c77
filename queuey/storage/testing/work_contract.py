"""The work-queue contract: queue settings, message fields, delays, dedup ids,
reserve and leases (on :class:`~queuey.storage.testing.workbase.WorkQueueBase`)."""

from __future__ import annotations

import uuid

from queuey import ids
from queuey.core.workqueues import WorkQueues, dead_letter_dedup_id
from queuey.errors import StorageUnavailable
from queuey.model import MessageRef, NewMessage, QueueMeta, parse_receipt
from queuey.storage import Storage
from queuey.storage.testing.workbase import SLACK, S, WorkQueueBase, body


class WorkQueueContract(WorkQueueBase):
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


class _AckLost:
    """A storage whose acks fail: a dead-lettering posts, then loses its claim's ack."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage

    def __getattr__(self, name: str):
        return getattr(self._storage, name)

    def ack(self, *args, **kwargs):
        raise StorageUnavailable("ack lost")
