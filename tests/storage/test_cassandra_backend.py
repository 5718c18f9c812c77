"""The Cassandra backend's consistency levels, O(1) purge and delete, and failures."""

from __future__ import annotations

import uuid

import pytest
from cassandra import ConsistencyLevel

from queuey.errors import StorageUnavailable
from queuey.model import MessageRef, NewMessage, QueueMeta, ReadQuery
from queuey.storage.cassandra import load_from_config, upgrade_schema
from tests.storage.cassandra_support import KEYSPACE, put, raw
from tests.support import free_port

# -- consistency ------------------------------------------------------------------------------


@pytest.mark.cassandra
@pytest.mark.parametrize(
    "consistency, level",
    [
        ("weak", ConsistencyLevel.ONE),
        ("strong", ConsistencyLevel.LOCAL_QUORUM),
        ("very_strong", ConsistencyLevel.EACH_QUORUM),
    ],
)
def test_queue_consistency_is_applied_to_statements(store, recorder, clock, consistency, level):
    app = "app-" + uuid.uuid4().hex[:12]
    recorder.clear()
    queue = store.create_queue(
        QueueMeta(application=app, name="q", partitions=2, consistency=consistency)
    )
    (create,) = recorder.sent
    assert "IF NOT EXISTS" in create.cql
    assert (create.consistency, create.serial) == (
        ConsistencyLevel.LOCAL_QUORUM,
        ConsistencyLevel.SERIAL,
    )
    recorder.clear()
    one = put(store, queue, 1)
    store.put_messages(queue, [NewMessage("{}", p, 600) for p in (1, 2)])
    store.read_messages(queue, ReadQuery(partitions=[1, 2], now_micros=clock.now_micros()))
    refs = [MessageRef(1, one.id)]
    assert store.get_messages(queue, refs, clock.now_micros())
    store.delete_messages(queue, refs)
    data = [s for s in recorder.sent if ".message" in s.cql or s.cql.startswith("BATCH")]
    assert len(data) >= 8
    assert {s.consistency for s in data} == {level}
    recorder.clear()
    store.get_queue(app, "q")
    store.set_checkpoints(app, "q", "c", {1: one.id})
    store.get_checkpoints(app, "q", "c")
    assert {s.consistency for s in recorder.sent} == {ConsistencyLevel.LOCAL_QUORUM}


# -- O(1) purge and delete ------------------------------------------------------------------


@pytest.mark.cassandra
@pytest.mark.parametrize("operation", ["purge", "delete"])
def test_purge_and_delete_do_not_touch_message_rows(store, queue, clock, recorder, operation):
    posted = store.put_messages(queue, [NewMessage("{}", 1 + n % 3, 600) for n in range(30)])
    recorder.clear()
    if operation == "purge":
        fresh = store.purge_queue(queue.application, queue.name)
        assert fresh.incarnation != queue.incarnation
    else:
        store.delete_queue(queue.application, queue.name)
        fresh = store.create_queue(
            QueueMeta(application=queue.application, name=queue.name, partitions=3)
        )
    statements = [s.cql for s in recorder.sent]
    assert not any(".messages " in s or ".message_buckets " in s for s in statements)
    assert len(statements) <= 3
    # The old rows are still there, only unreachable through the API.
    first = posted[0]
    still = raw(
        store,
        f"SELECT id FROM {KEYSPACE}.messages "
        "WHERE incarnation = %s AND partition = %s AND bucket = %s AND id = %s",
        (queue.incarnation, first.partition, first.timestamp // store.bucket_micros, first.id),
    )
    assert [row[0] for row in still] == [first.id]
    assert (
        store.read_messages(fresh, ReadQuery(partitions=[1, 2, 3], now_micros=clock.now_micros()))
        == []
    )
    assert (
        store.get_messages(fresh, [MessageRef(first.partition, first.id)], clock.now_micros()) == []
    )


# -- failures ---------------------------------------------------------------------------------


@pytest.mark.cassandra
def test_nothing_listening_is_storage_unavailable(settings, clock):
    dead = {
        **settings,
        "queuey.cassandra.port": str(free_port()),
        "queuey.cassandra.create_schema": "false",
        "queuey.cassandra.connect_timeout": "2",
    }
    storage = load_from_config(dead, clock)  # starts anyway; connects on first use
    try:
        with pytest.raises(StorageUnavailable):
            storage.ping()
        with pytest.raises(StorageUnavailable):
            storage.get_queue("app", "q")
        with pytest.raises(StorageUnavailable):
            storage.put_messages(QueueMeta(application="app", name="q"), [NewMessage("{}", 1, 60)])
    finally:
        storage.close()
    with pytest.raises(StorageUnavailable):
        upgrade_schema(dead)


@pytest.mark.cassandra
def test_a_shut_down_cluster_is_storage_unavailable(store, queue, clock):
    put(store, queue, 1)
    store.session.cluster.shutdown()
    with pytest.raises(StorageUnavailable):
        store.ping()
    with pytest.raises(StorageUnavailable):
        put(store, queue, 2)
    with pytest.raises(StorageUnavailable):
        store.read_messages(queue, ReadQuery(partitions=[1], now_micros=clock.now_micros()))
    store.close()
    with pytest.raises(StorageUnavailable):
        store.get_queue(queue.application, queue.name)


@pytest.mark.cassandra
def test_missing_schema_is_reported_not_created(settings, clock):
    absent = {
        **settings,
        "queuey.cassandra.keyspace": "queuey_absent_" + uuid.uuid4().hex[:8],
        "queuey.cassandra.create_schema": "false",
    }
    storage = load_from_config(absent, clock)
    try:
        with pytest.raises(StorageUnavailable, match="schema upgrade"):
            storage.ping()
    finally:
        storage.close()


@pytest.mark.cassandra
def test_create_schema_waits_for_a_node_that_is_down(settings, clock):
    """``create_schema = true`` with Cassandra down must not stop the service
    from starting: the schema is created on the first connection instead."""
    dead = {
        **settings,
        "queuey.cassandra.port": str(free_port()),
        "queuey.cassandra.create_schema": "true",
        "queuey.cassandra.connect_timeout": "2",
    }
    storage = load_from_config(dead, clock)  # used to raise StorageUnavailable here
    try:
        with pytest.raises(StorageUnavailable):
            storage.ping()
    finally:
        storage.close()


@pytest.mark.cassandra
def test_create_schema_creates_it_on_first_connection(settings, clock):
    fresh = {**settings, "queuey.cassandra.keyspace": "queuey_fresh_" + uuid.uuid4().hex[:8]}
    storage = load_from_config(fresh, clock)
    try:
        queue = storage.create_queue(QueueMeta(application="app", name="q"))
        put(storage, queue, 1)
        read = storage.read_messages(
            queue, ReadQuery(partitions=[1], now_micros=clock.now_micros())
        )
        assert len(read) == 1
        storage.session.execute(f"DROP KEYSPACE {fresh['queuey.cassandra.keyspace']}", timeout=60)
    finally:
        storage.close()
