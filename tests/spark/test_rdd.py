"""The RDD source on local Spark, against SQLite and the real Cassandra node."""

from __future__ import annotations

import collections
import io
import os
import pickle

import pytest

from queuey import ids
from queuey.spark import queue_rdd, sources
from queuey.spark.rdd import plan

pytestmark = pytest.mark.spark


def test_count_equals_messages_posted(sc, target):
    meta = target.queue(partitions=5)
    posted = target.post_many(meta, 1234)
    rdd = queue_rdd(sc, target.connection, target.application, meta.name, slices_per_partition=3)
    assert rdd.getNumPartitions() == 15
    rows = rdd.collect()
    assert len(rows) == 1234
    assert {r.message_id for r in rows} == {m.id.hex for m in posted}
    by_id = {m.id.hex: m for m in posted}
    for row in rows[:50]:
        stored = by_id[row.message_id]
        assert row.partition == stored.partition
        assert row.body == stored.body
        assert row.timestamp_micros == stored.timestamp
        assert ids.seconds_to_micros(repr(row.timestamp)) == stored.timestamp
        assert row.queue == meta.name


def test_rows_within_a_spark_partition_are_in_id_order(sc, target):
    meta = target.queue(partitions=2)
    target.post_many(meta, 300)
    rdd = queue_rdd(sc, target.connection, target.application, meta.name, slices_per_partition=2)
    for chunk in rdd.glom().collect():
        keys = [ids.order_key(ids.parse_id(r.message_id)) for r in chunk]
        assert keys == sorted(keys)
        assert len({r.partition for r in chunk}) <= 1


def test_time_range_is_exact_across_slices(sc, target):
    meta = target.queue(partitions=3)
    posted = []
    for i in range(60):
        target.clock.advance(1.0)
        posted += target.post(meta, [{"i": i}], partition=i % 3 + 1)
    # since is exclusive and until inclusive, both at a message's exact timestamp.
    since = ids.micros_to_seconds(posted[10].timestamp)
    until = ids.micros_to_seconds(posted[40].timestamp)
    for per_partition in (1, 4, 7):
        rows = queue_rdd(
            sc,
            target.connection,
            target.application,
            meta.name,
            since=since,
            until=until,
            slices_per_partition=per_partition,
        ).collect()
        assert sorted(r.message_id for r in rows) == sorted(m.id.hex for m in posted[11:41])
    # Consecutive ranges tile time: nothing lost or doubled at the boundaries.
    bounds = [None, posted[5].timestamp, posted[33].timestamp, posted[34].timestamp, None]
    seen = []
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        seen += (
            queue_rdd(
                sc,
                target.connection,
                target.application,
                meta.name,
                since=None if lo is None else ids.micros_to_seconds(lo),
                until=None if hi is None else ids.micros_to_seconds(hi),
                slices_per_partition=3,
            )
            .map(lambda r: r.message_id)
            .collect()
        )
    assert sorted(seen) == sorted(m.id.hex for m in posted)


def test_partition_selection_is_exact(sc, target):
    meta = target.queue(partitions=4)
    posted = target.post_many(meta, 400)
    rows = queue_rdd(
        sc, target.connection, target.application, meta.name, partitions=[2, 4]
    ).collect()
    expected = {m.id.hex for m in posted if m.partition in (2, 4)}
    assert {r.message_id for r in rows} == expected
    assert len(rows) == len(expected) == 200


def test_several_queues_in_one_rdd(sc, target):
    first, second = target.queue(partitions=2), target.queue(partitions=3)
    target.post_many(first, 70)
    target.post_many(second, 45)
    counts = (
        queue_rdd(sc, target.connection, target.application, [first.name, second.name])
        .map(lambda r: (r.queue, 1))
        .reduceByKey(lambda a, b: a + b)
        .collectAsMap()
    )
    assert counts == {first.name: 70, second.name: 45}


def test_expired_messages_are_absent(sc, target):
    meta = target.queue(partitions=2, ttl=3600)
    short = target.post(meta, [{"short": i} for i in range(20)], ttl=120)
    target.clock.advance(1)
    long = target.post(meta, [{"long": i} for i in range(30)])
    # Written ten minutes ago: the short-lived ones expired eight minutes ago.
    rows = queue_rdd(sc, target.connection, target.application, meta.name).collect()
    assert {r.message_id for r in rows} == {m.id.hex for m in long}
    # Judged at an instant when they were still alive, they are all there.
    alive_at = ids.micros_to_seconds(short[-1].timestamp + 60 * ids.MICROS)
    rows = queue_rdd(sc, target.connection, target.application, meta.name, now=alive_at).collect()
    assert {r.message_id for r in rows} == {m.id.hex for m in short + long}
    # ...and one microsecond after a message's expiry it is gone.
    gone_at = ids.micros_to_seconds(short[0].expires)
    rows = queue_rdd(sc, target.connection, target.application, meta.name, now=gone_at).collect()
    assert short[0].id.hex not in {r.message_id for r in rows}
    assert short[1].id.hex in {r.message_id for r in rows}


def test_empty_queue_gives_an_empty_rdd(sc, target):
    meta = target.queue(partitions=3)
    assert queue_rdd(sc, target.connection, target.application, meta.name).count() == 0


def test_messages_newer_than_the_read_delay_are_left_out(sc, sqlite_target):
    target = sqlite_target
    meta = target.queue(partitions=2)
    old = target.post_many(meta, 10)
    target.clock.advance(600)  # back to the present
    target.post_many(meta, 10)
    settings = {**target.settings, "queuey.read_delay": "120"}
    from queuey.spark import StorageConnection

    connection = StorageConnection.from_settings(settings)
    rows = queue_rdd(sc, connection, target.application, meta.name).collect()
    assert {r.message_id for r in rows} == {m.id.hex for m in old}


def test_descriptors_are_plain_values(sc, target):
    meta = target.queue(partitions=2)
    target.post_many(meta, 10)
    pieces = plan(sc, target.connection, target.application, meta.name, slices_per_partition=2)
    assert len(pieces) == 4
    for piece in pieces:
        data = pickle.dumps(piece)
        # Only Queuey's own value classes travel, never a driver or connection object.
        assert _pickled_classes(data) <= {
            ("queuey.spark.slices", "Slice"),
            ("queuey.spark.connections", "StorageConnection"),
            ("queuey.model.queues", "QueueMeta"),
        }
        assert pickle.loads(data) == piece


def _pickled_classes(data: bytes) -> set[tuple[str, str]]:
    """The (module, name) of every global a pickle refers to."""
    found = set()

    class Recorder(pickle.Unpickler):
        def find_class(self, module, name):
            found.add((module, name))
            return super().find_class(module, name)

    Recorder(io.BytesIO(data)).load()
    return found


@pytest.mark.cassandra
def test_executors_open_their_own_cassandra_session(sc, cassandra_target, monkeypatch):
    """The smoke requirement: executors read Cassandra through a driver session they
    create themselves (once per Python worker), and the driver creates none."""
    import cassandra.cluster

    target = cassandra_target
    meta = target.queue(partitions=4)
    target.post_many(meta, 2000)

    created_here = []
    real_init = cassandra.cluster.Cluster.__init__

    def spy(self, *args, **kwargs):
        created_here.append(os.getpid())
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(cassandra.cluster.Cluster, "__init__", spy)

    def report(rows):
        from queuey.spark import sources as executor_sources

        count = sum(1 for _ in rows)
        # This test's connection only: a worker reused from earlier tests has
        # opened theirs too.
        sources = [s for s in executor_sources._sources.values() if s.connection == connection]
        opened = [entry for entry in executor_sources.opened_sources if entry[1] == connection]
        sessions = [s.storage._conn is not None for s in sources]
        yield os.getpid(), count, len(opened), sessions

    connection = target.connection
    rdd = queue_rdd(sc, connection, target.application, meta.name, slices_per_partition=4)
    stats = rdd.mapPartitions(report).collect()

    assert created_here == [], "the driver process created a Cassandra Cluster"
    assert sum(count for _, count, _, _ in stats) == 2000
    assert len(stats) == 16
    driver = os.getpid()
    per_worker = collections.defaultdict(set)
    for pid, _, opened, sessions in stats:
        assert pid != driver
        assert sessions == [True]  # a live session made in this very process
        per_worker[pid].add(opened)
    # 16 tasks ran on a few Python workers, each of which connected exactly once.
    assert len(per_worker) < 16
    assert all(opened == {1} for opened in per_worker.values())
    assert sources._sources == {} or all(
        s.connection.describe() != "queuey.storage.cassandra" for s in sources._sources.values()
    )
