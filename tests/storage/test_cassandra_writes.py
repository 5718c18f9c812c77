"""Cassandra writes: USING TTL, atomic batches, the bucket index written once."""

from __future__ import annotations

from dataclasses import replace

import pytest
from cassandra.query import BatchType

from queuey.errors import StorageUnavailable
from queuey.model import NewMessage, ReadQuery
from queuey.storage.cassandra import CassandraStorage, load_from_config, parse_settings
from queuey.storage.cassandra.settings import CASSANDRA_MAX_TTL
from tests.storage.cassandra_support import KEYSPACE, MICROS, put, raw


@pytest.mark.cassandra
def test_messages_are_written_using_ttl(store, queue, clock):
    m = put(store, queue, 1, partition=2, ttl=600)
    bucket = m.timestamp // store.bucket_micros
    rows = raw(
        store,
        f"SELECT TTL(body), expires FROM {KEYSPACE}.messages "
        "WHERE incarnation = %s AND partition = %s AND bucket = %s AND id = %s",
        (queue.incarnation, 2, bucket, m.id),
    )
    assert len(rows) == 1
    ttl, expires = rows[0]
    assert 590 <= ttl <= 601
    assert expires == m.timestamp + 600 * MICROS


@pytest.mark.cassandra
def test_batches_are_atomic_by_the_cheapest_means(store, queue, recorder):
    put(store, queue, 0)
    recorder.clear()
    store.put_messages(queue, [NewMessage("{}", 1, 600) for _ in range(5)])
    assert [s.batch_type for s in recorder.sent] == [BatchType.UNLOGGED]
    recorder.clear()
    store.put_messages(queue, [NewMessage("{}", p, 600) for p in (1, 2, 3, 1)])
    batches = [s for s in recorder.sent if s.cql.startswith("BATCH")]
    assert [s.batch_type for s in batches] == [BatchType.LOGGED]
    recorder.clear()
    put(store, queue, 1)
    assert [s.cql.split(" (")[0] for s in recorder.sent] == [f"INSERT INTO {KEYSPACE}.messages"]


@pytest.mark.cassandra
def test_a_batch_cassandra_refuses_stores_nothing(settings, queue, clock):
    """One bad row makes Cassandra refuse the whole logged batch: no partial write."""
    lax = replace(parse_settings(settings), max_ttl=CASSANDRA_MAX_TTL)
    storage = CassandraStorage(lax, clock)
    try:
        good = [NewMessage('{"ok": %d}' % p, p, 600) for p in (1, 2, 3)]
        with pytest.raises(StorageUnavailable):
            storage.put_messages(queue, [*good, NewMessage("{}", 1, CASSANDRA_MAX_TTL)])
        got = storage.read_messages(
            queue, ReadQuery(partitions=[1, 2, 3], now_micros=clock.now_micros())
        )
        assert got == []
        assert len(storage.put_messages(queue, good)) == 3
    finally:
        storage.close()


@pytest.mark.cassandra
def test_bucket_index_is_written_once_per_bucket(store, queue, recorder, clock):
    put(store, queue, 0)
    recorder.clear()
    for n in range(5):
        put(store, queue, n)
    assert recorder.on("message_buckets") == []
    # A longer TTL than the index row covers rewrites it.
    put(store, queue, 9, ttl=3000)
    assert len(recorder.on("message_buckets", "INSERT")) == 1


@pytest.mark.cassandra
def test_a_short_ttl_never_shortens_the_index_of_longer_lived_messages(
    settings, store, queue, clock
):
    width = store.bucket_micros
    clock.set((clock.now_micros() // width) * width + MICROS)  # early in a bucket
    long = put(store, queue, 1, ttl=3000)
    other = load_from_config(settings, clock)  # another API process: its own cache
    try:
        put(other, queue, 2, ttl=5)
    finally:
        other.close()
    rows = raw(
        store,
        f"SELECT bucket, message_ttl FROM {KEYSPACE}.message_buckets "
        "WHERE incarnation = %s AND partition = 1",
        (queue.incarnation,),
    )
    bucket = long.timestamp // width
    assert sorted(rows) == [(bucket, 5), (bucket, 3000)]
    clock.advance(10)
    got = store.read_messages(queue, ReadQuery(partitions=[1], now_micros=clock.now_micros()))
    assert [m.id for m in got] == [long.id]
