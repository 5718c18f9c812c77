"""The queue and message contract: queues, posts, reads, deletes and purges.

:class:`QueueContract` needs the ``storage`` fixture (and may use ``clock``, a
``ManualClock``). Each test works in its own application name, so backends
can share one database.
"""

from __future__ import annotations

import threading
import uuid

import pytest

from queuey import ids
from queuey.errors import InvalidUpdate, QueueExists, QueueNotFound
from queuey.model import AttributesChanged, MessageRef, NewMessage, QueueMeta, ReadQuery
from queuey.storage import Storage


def body(n: int) -> str:
    return '{"n": %d}' % n


class QueueContract:
    @pytest.fixture
    def app(self) -> str:
        return "app-" + uuid.uuid4().hex[:12]

    @pytest.fixture
    def queue(self, storage: Storage, app: str) -> QueueMeta:
        return storage.create_queue(QueueMeta(application=app, name="q", partitions=3, ttl=60))

    def put(self, storage, queue, n, partition=1, ttl=60):
        return storage.put_messages(queue, [NewMessage(body(n), partition, ttl)])[0]

    def read(self, storage, queue, clock, **kw):
        kw.setdefault("partitions", list(range(1, queue.partitions + 1)))
        return storage.read_messages(queue, ReadQuery(now_micros=clock.now_micros(), **kw))

    # -- queues -------------------------------------------------------------------
    def test_create_and_get_queue(self, storage, app, clock):
        meta = storage.create_queue(
            QueueMeta(application=app, name="orders", partitions=4, ttl=120, type="private")
        )
        assert meta.created > 0
        got = storage.get_queue(app, "orders")
        assert (got.partitions, got.ttl, got.type, got.incarnation) == (
            4,
            120,
            "private",
            meta.incarnation,
        )

    def test_duplicate_name_is_refused_and_keeps_the_first(self, storage, app):
        storage.create_queue(QueueMeta(application=app, name="dup", partitions=2))
        with pytest.raises(QueueExists):
            storage.create_queue(QueueMeta(application=app, name="dup", partitions=7))
        assert storage.get_queue(app, "dup").partitions == 2

    def test_queues_are_per_application(self, storage, app):
        storage.create_queue(QueueMeta(application=app, name="mine"))
        with pytest.raises(QueueNotFound):
            storage.get_queue(app + "-other", "mine")

    def test_list_queues_pages_by_name(self, storage, app):
        for name in ["c", "a", "b", "d"]:
            storage.create_queue(QueueMeta(application=app, name=name))
        assert [q.name for q in storage.list_queues(app)] == ["a", "b", "c", "d"]
        assert [q.name for q in storage.list_queues(app, limit=2)] == ["a", "b"]
        assert [q.name for q in storage.list_queues(app, limit=2, after="b")] == ["c", "d"]
        assert storage.list_queues(app + "-none") == []

    def test_partitions_only_grow(self, storage, queue, app):
        assert storage.update_queue(app, "q", partitions=5).partitions == 5
        with pytest.raises(InvalidUpdate):
            storage.update_queue(app, "q", partitions=2)
        assert storage.get_queue(app, "q").partitions == 5
        with pytest.raises(QueueNotFound):
            storage.update_queue(app, "nope", partitions=9)

    def test_update_ttl_and_type(self, storage, queue, app):
        meta = storage.update_queue(app, "q", ttl=30, type="private")
        assert (meta.ttl, meta.type) == (30, "private")
        assert storage.get_queue(app, "q").type == "private"

    def test_update_with_none_leaves_fields_alone(self, storage, queue, app):
        storage.update_queue(app, "q", partitions=4, ttl=None, type=None, consistency=None)
        got = storage.get_queue(app, "q")
        assert (got.partitions, got.ttl, got.type, got.consistency) == (4, 60, "public", "strong")

    def test_attribute_keys_change_alone(self, storage, queue, app):
        storage.update_queue(app, "q", attributes={"keep": "1", "drop": "2", "old": "3"})
        meta = storage.update_queue(
            app, "q", ttl=30, attributes_set={"old": "4", "new": "5"}, attributes_removed=["drop"]
        )
        assert dict(meta.attributes) == {"keep": "1", "old": "4", "new": "5"}
        assert dict(storage.get_queue(app, "q").attributes) == dict(meta.attributes)
        assert storage.get_queue(app, "q").ttl == 30
        with pytest.raises(AttributesChanged):
            storage.update_queue(app, "q", attributes_set={"x": "1"}, attributes_if={"old": "3"})
        with pytest.raises(AttributesChanged):
            storage.update_queue(app, "q", attributes_set={"x": "1"}, attributes_if={"new": None})
        assert "x" not in storage.get_queue(app, "q").attributes
        storage.update_queue(
            app, "q", attributes_set={"x": "1"}, attributes_if={"old": "4", "absent": None}
        )
        assert storage.get_queue(app, "q").attributes["x"] == "1"
        with pytest.raises(QueueNotFound):
            storage.update_queue(app, "nope", attributes_set={"x": "1"})

    def test_concurrent_changes_of_distinct_attribute_keys_all_survive(self, storage, queue, app):
        """SQS's SetQueueAttributes, TagQueue and move tasks change keys of one map
        at the same time: each change is merged in the store, none is lost."""
        storage.update_queue(app, "q", attributes={f"gone-{w}": "x" for w in range(4)})
        errors: list[Exception] = []
        start = threading.Barrier(4)

        def change(worker: int) -> None:
            try:
                start.wait(10)
                for i in range(5):
                    storage.update_queue(
                        app,
                        "q",
                        attributes_set={f"w{worker}-{i}": str(i)},
                        attributes_removed=[f"gone-{worker}"] if i == 2 else (),
                    )
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=change, args=(w,)) for w in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert errors == []
        assert dict(storage.get_queue(app, "q").attributes) == {
            f"w{w}-{i}": str(i) for w in range(4) for i in range(5)
        }

    def test_delete_queue_forgets_it_and_its_messages(self, storage, queue, app, clock):
        self.put(storage, queue, 1)
        storage.delete_queue(app, "q")
        with pytest.raises(QueueNotFound):
            storage.get_queue(app, "q")
        with pytest.raises(QueueNotFound):
            storage.delete_queue(app, "q")
        again = storage.create_queue(QueueMeta(application=app, name="q", partitions=3))
        assert self.read(storage, again, clock) == []

    def test_purge_keeps_queue_drops_messages(self, storage, queue, app, clock):
        self.put(storage, queue, 1)
        fresh = storage.purge_queue(app, "q")
        assert storage.get_queue(app, "q").incarnation == fresh.incarnation
        assert self.read(storage, fresh, clock) == []
        self.put(storage, fresh, 2)
        assert [m.body for m in self.read(storage, fresh, clock)] == [body(2)]

    # -- messages -----------------------------------------------------------------
    def test_put_mints_time_based_ids(self, storage, queue, clock):
        before = clock.now_micros()
        stored = storage.put_messages(
            queue, [NewMessage(body(i), (i % 3) + 1, 60) for i in range(5)]
        )
        assert [m.body for m in stored] == [body(i) for i in range(5)]
        assert [m.partition for m in stored] == [1, 2, 3, 1, 2]
        for m in stored:
            assert m.id.version == 1
            assert m.timestamp == ids.micros_of(m.id) >= before
            assert m.expires == m.timestamp + 60 * ids.MICROS
        assert len({m.id for m in stored}) == 5

    def test_read_newest_first_by_default_and_limit(self, storage, queue, clock):
        for n in range(5):
            self.put(storage, queue, n)
            clock.advance(0.001)
        got = self.read(storage, queue, clock, limit=3)
        assert [m.body for m in got] == [body(4), body(3), body(2)]
        got = self.read(storage, queue, clock, limit=3, order="ascending")
        assert [m.body for m in got] == [body(0), body(1), body(2)]

    def test_order_within_partition_is_post_order(self, storage, queue, clock):
        posted = [self.put(storage, queue, n, partition=2) for n in range(20)]
        got = self.read(storage, queue, clock, partitions=[2], order="ascending", limit=100)
        assert [m.id for m in got] == [m.id for m in posted]

    def test_partitions_merge_by_time(self, storage, queue, clock):
        posted = []
        for n in range(9):
            posted.append(self.put(storage, queue, n, partition=(n * 2 % 3) + 1))
            clock.advance(0.002)
        got = self.read(storage, queue, clock, order="ascending")
        assert [m.body for m in got] == [body(n) for n in range(9)]
        only = self.read(storage, queue, clock, partitions=[1, 3], order="ascending")
        assert [m.body for m in only] == [m.body for m in posted if m.partition in (1, 3)]

    def test_after_id_is_exclusive(self, storage, queue, clock):
        posted = [self.put(storage, queue, n) for n in range(6)]
        got = self.read(storage, queue, clock, after_id=posted[2].id, order="ascending")
        assert [m.id for m in got] == [m.id for m in posted[3:]]

    def test_after_micros_is_exact(self, storage, queue, clock):
        posted = []
        for n in range(4):
            posted.append(self.put(storage, queue, n))
            clock.advance(0.000001)
        stamp = ids.seconds_to_micros(repr(ids.micros_to_seconds(posted[1].timestamp)))
        got = self.read(storage, queue, clock, after_micros=stamp, order="ascending")
        assert [m.id for m in got] == [m.id for m in posted[2:]]

    def test_until_micros_hides_newer(self, storage, queue, clock):
        first = self.put(storage, queue, 1)
        clock.advance(5)
        self.put(storage, queue, 2)
        got = self.read(storage, queue, clock, until_micros=first.timestamp + 1)
        assert [m.id for m in got] == [first.id]

    def test_expired_messages_are_absent(self, storage, queue, clock):
        short = self.put(storage, queue, 1, ttl=2)
        long = self.put(storage, queue, 2, ttl=60)
        clock.advance(1.5)
        assert {m.id for m in self.read(storage, queue, clock)} == {short.id, long.id}
        clock.advance(1.0)
        assert [m.id for m in self.read(storage, queue, clock)] == [long.id]
        refs = [MessageRef(1, short.id), MessageRef(1, long.id)]
        assert [m.id for m in storage.get_messages(queue, refs, clock.now_micros())] == [long.id]

    def test_read_spans_long_gaps(self, storage, queue, clock):
        """A sparse queue: messages hours apart are all found (bucket walking)."""
        posted = []
        for n in range(3):
            posted.append(self.put(storage, queue, n, ttl=86400))
            clock.advance(3 * 3600)
        got = self.read(storage, queue, clock, order="ascending")
        assert [m.id for m in got] == [m.id for m in posted]
        newest = self.read(storage, queue, clock, limit=1)
        assert [m.id for m in newest] == [posted[-1].id]

    def test_get_and_delete_by_id(self, storage, queue, clock):
        a = self.put(storage, queue, 1, partition=2)
        b = self.put(storage, queue, 2, partition=3)
        now = clock.now_micros()
        refs = [MessageRef(2, a.id), MessageRef(3, b.id), MessageRef(1, a.id)]
        assert sorted(m.body for m in storage.get_messages(queue, refs, now)) == [body(1), body(2)]
        storage.delete_messages(queue, [MessageRef(2, a.id), MessageRef(1, uuid.uuid1())])
        assert [m.id for m in storage.get_messages(queue, refs, now)] == [b.id]
        assert [m.id for m in self.read(storage, queue, clock)] == [b.id]

    def test_body_is_kept_verbatim(self, storage, queue, clock):
        text = '{"emoji": "\\ud83d\\ude00 \u00e9", "nested": {"a": [1, 2.5, null]}}'
        self.put_text = storage.put_messages(queue, [NewMessage(text, 1, 60)])
        assert self.read(storage, queue, clock)[0].body == text

    def test_threads_share_one_storage(self, storage, queue, clock):
        """Waitress threads share one storage object: every write lands once, in order."""
        errors: list[Exception] = []

        def write(worker: int) -> None:
            try:
                for i in range(10):
                    message = NewMessage('{"w": %d}' % worker, 1 + (worker + i) % 3, 600)
                    storage.put_messages(queue, [message] * 2)
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(w,)) for w in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        got = self.read(storage, queue, clock, limit=1000)
        assert len(got) == 120 and len({m.id for m in got}) == 120
        keys = [ids.order_key(m.id) for m in got]
        assert keys == sorted(keys, reverse=True)

    # -- checkpoints --------------------------------------------------------------
    def test_checkpoints(self, storage, queue, app):
        assert storage.get_checkpoints(app, "q", "workers") == {}
        one, two, three = uuid.uuid1(), uuid.uuid1(), uuid.uuid1()
        storage.set_checkpoints(app, "q", "workers", {1: one, 2: two})
        storage.set_checkpoints(app, "q", "workers", {2: three})
        assert storage.get_checkpoints(app, "q", "workers") == {1: one, 2: three}
        assert storage.get_checkpoints(app, "q", "others") == {}

    def test_ping(self, storage):
        storage.ping()
