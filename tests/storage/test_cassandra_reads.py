"""Cassandra reads: time buckets found through the index, paged, partitions read concurrently."""

from __future__ import annotations

import pytest

from queuey.model import NewMessage, ReadQuery
from tests.storage.cassandra_support import KEYSPACE, MICROS, bigint, put, raw


@pytest.mark.cassandra
def test_reads_skip_buckets_whose_messages_all_expired(store, queue, clock, recorder):
    width = store.bucket_micros
    clock.set((clock.now_micros() // width) * width + MICROS)
    for n in range(3):
        put(store, queue, n, ttl=5)
    clock.advance(width / MICROS + 10)  # past the bucket's end plus the TTL
    live = put(store, queue, 9, ttl=600)
    recorder.clear()
    got = store.read_messages(
        queue, ReadQuery(partitions=[1], now_micros=clock.now_micros(), order="ascending")
    )
    assert [m.id for m in got] == [live.id]
    touched = [bigint(s.values[2]) for s in recorder.on("messages", "SELECT")]
    assert touched == [live.timestamp // width]


# -- time buckets -------------------------------------------------------------------------


@pytest.mark.cassandra
def test_a_queue_partition_spreads_over_time_buckets(store, queue, clock, recorder):
    width = store.bucket_micros
    clock.set((clock.now_micros() // width + 1) * width - 2 * MICROS)  # 2 s before a boundary
    posted = []
    for n in range(9):  # three messages in each of three buckets
        posted.append(put(store, queue, n, partition=1))
        if n % 3 == 2:
            clock.advance(width / MICROS)
    buckets = [m.timestamp // width for m in posted]
    assert len(set(buckets)) == 3
    for bucket in set(buckets):
        count = raw(
            store,
            f"SELECT COUNT(*) FROM {KEYSPACE}.messages "
            "WHERE incarnation = %s AND partition = 1 AND bucket = %s",
            (queue.incarnation, bucket),
        )[0][0]
        assert count == 3
    indexed = raw(
        store,
        f"SELECT bucket FROM {KEYSPACE}.message_buckets WHERE incarnation = %s AND partition = 1",
        (queue.incarnation,),
    )
    assert sorted(row[0] for row in indexed) == sorted(set(buckets))

    def read(**kw):
        recorder.clear()
        got = store.read_messages(
            queue, ReadQuery(partitions=[1], now_micros=clock.now_micros(), **kw)
        )
        touched = [bigint(s.values[2]) for s in recorder.on("messages", "SELECT")]
        return [m.id for m in got], touched

    newest, touched = read(limit=2)
    assert newest == [m.id for m in reversed(posted[7:])]
    assert touched == [buckets[-1]]
    newest, touched = read(limit=5)
    assert newest == [m.id for m in reversed(posted[4:])]
    assert touched == [buckets[-1], buckets[4]]
    oldest, touched = read(limit=2, order="ascending")
    assert oldest == [m.id for m in posted[:2]]
    assert touched == [buckets[0]]
    after, touched = read(limit=100, order="ascending", after_id=posted[4].id)
    assert after == [m.id for m in posted[5:]]
    assert touched == [buckets[4], buckets[-1]]
    # Every read found its buckets through the index, one request per partition.
    assert len(recorder.on("message_buckets", "SELECT")) == 1


@pytest.mark.cassandra
def test_reads_are_paged_and_partitions_read_concurrently(store, queue, clock, recorder):
    store.put_messages(queue, [NewMessage("{}", 1 + n % 3, 600) for n in range(90)])
    recorder.clear()
    got = store.read_messages(
        queue, ReadQuery(partitions=[1, 2, 3], now_micros=clock.now_micros(), limit=10)
    )
    assert len(got) == 10
    kinds = ["index" if ".message_buckets " in s.cql else "rows" for s in recorder.sent]
    # Every partition's index lookup goes out before any row query, then every
    # partition's first bucket, before the merge asks for more.
    assert kinds[:6] == ["index"] * 3 + ["rows"] * 3
    assert all(
        s.fetch_size is not None and s.fetch_size <= 21
        for s in recorder.sent
        if ".messages " in s.cql
    )
