"""Behaviour of the Cassandra backend that only Cassandra has.

Everything here runs against the project's real Cassandra node (harness); the
driver's request-init listener shows which statements were sent, at which
consistency level, so the tests check what Cassandra was actually asked.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import pytest
from cassandra import ConsistencyLevel
from cassandra.query import BatchStatement, BatchType, BoundStatement

from queuey import ids
from queuey.clock import ManualClock
from queuey.errors import ConfigurationError, StorageUnavailable
from queuey.storage import MessageRef, NewMessage, QueueMeta, ReadQuery
from queuey.storage.cassandra import (
    CASSANDRA_MAX_TTL,
    CassandraStorage,
    load_from_config,
    parse_settings,
)
from queuey.storage.cassandra_schema import (
    LATEST_VERSION,
    MESSAGES_GC_GRACE,
    current_version,
    twcs_window,
    upgrade_schema,
)
from tests.storage.contract import StorageContract

KEYSPACE = "queuey_cassandra_specific"
MICROS = ids.MICROS


@pytest.fixture(scope="module")
def settings(cassandra_cluster) -> dict[str, str]:
    return {
        "queuey.cassandra.contact_points": ",".join(cassandra_cluster.contact_points),
        "queuey.cassandra.port": str(cassandra_cluster.port),
        "queuey.cassandra.keyspace": KEYSPACE,
        "queuey.cassandra.create_schema": "true",
        "queuey.cassandra.request_timeout": "5",
    }


@pytest.fixture
def store(settings, clock) -> Iterator[CassandraStorage]:
    storage = load_from_config(settings, clock)
    yield storage
    storage.close()


@pytest.fixture
def queue(store) -> QueueMeta:
    app = "app-" + uuid.uuid4().hex[:12]
    return store.create_queue(QueueMeta(application=app, name="q", partitions=3, ttl=600))


@dataclass
class Sent:
    cql: str  # the prepared statement's text, or "BATCH <type>"
    consistency: int
    serial: int | None
    fetch_size: int | None
    values: list[Any]
    batch_type: Any = None


class Recorder:
    """Records every request the storage's session sends."""

    def __init__(self, storage: CassandraStorage) -> None:
        self.sent: list[Sent] = []
        self.session = storage.session
        self.session.add_request_init_listener(self._on_request)

    def _on_request(self, future: Any) -> None:
        query, message = future.query, future.message
        if isinstance(query, BatchStatement):
            self.sent.append(
                Sent(
                    f"BATCH {query.batch_type}",
                    message.consistency_level,
                    message.serial_consistency_level,
                    None,
                    [],
                    query.batch_type,
                )
            )
            return
        text = (
            query.prepared_statement.query_string
            if isinstance(query, BoundStatement)
            else str(query)
        )
        self.sent.append(
            Sent(
                text,
                message.consistency_level,
                message.serial_consistency_level,
                getattr(message, "fetch_size", None),
                list(getattr(query, "values", [])),
            )
        )

    def clear(self) -> None:
        self.sent.clear()

    def on(self, table: str, verb: str = "") -> list[Sent]:
        return [
            s
            for s in self.sent
            if f".{table} " in s.cql + " " and s.cql.upper().startswith(verb.upper())
        ]

    def close(self) -> None:
        self.session.remove_request_init_listener(self._on_request)


@pytest.fixture
def recorder(store) -> Iterator[Recorder]:
    rec = Recorder(store)
    yield rec
    rec.close()


def bigint(raw: bytes) -> int:
    return int.from_bytes(raw, "big", signed=True)


def put(store, queue, n, partition=1, ttl=600):
    return store.put_messages(queue, [NewMessage('{"n": %d}' % n, partition, ttl)])[0]


def raw(store: CassandraStorage, cql: str, params: tuple = ()) -> list[tuple]:
    return list(store.session.execute(cql, params))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- the shared contract ----------------------------------------------------------------


@pytest.mark.cassandra
class TestCassandraContract(StorageContract):
    """The storage contract on the real node; a fresh storage object (and id
    generator) per test so each test's ManualClock mints its ids."""

    @pytest.fixture
    def storage(self, cassandra_settings, clock):
        store = load_from_config(cassandra_settings, clock)
        yield store
        store.close()


# -- schema ---------------------------------------------------------------------------


@pytest.mark.cassandra
def test_schema_upgrade_is_idempotent_and_versioned(settings, store, clock):
    keyspace = "queuey_schema_" + uuid.uuid4().hex[:10]
    fresh = {
        **settings,
        "queuey.cassandra.keyspace": keyspace,
        "queuey.cassandra.bucket_seconds": "30",
    }
    try:
        first = upgrade_schema(fresh)
        assert first[0].startswith(f"CREATE KEYSPACE IF NOT EXISTS {keyspace}")
        assert any(".messages (" in s for s in first)
        assert upgrade_schema(fresh) == []
        assert current_version(store.session, keyspace) == LATEST_VERSION
        # The bucket width is the keyspace's: a later setting cannot strand old messages.
        for width in ("30", "60"):
            other = load_from_config({**fresh, "queuey.cassandra.bucket_seconds": width}, clock)
            try:
                assert other.bucket_micros == 30 * MICROS
            finally:
                other.close()
    finally:
        store.session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=60)


@pytest.mark.cassandra
def test_message_tables_use_time_window_compaction(store):
    rows = raw(
        store,
        "SELECT table_name, compaction, default_time_to_live, gc_grace_seconds "
        "FROM system_schema.tables WHERE keyspace_name = %s",
        (KEYSPACE,),
    )
    tables = {row[0]: row for row in rows}
    unit, size = twcs_window(60, parse_settings({}).max_ttl)
    for name in ("messages", "message_buckets"):
        _, compaction, default_ttl, gc_grace = tables[name]
        assert compaction["class"].endswith("TimeWindowCompactionStrategy")
        assert (compaction["compaction_window_unit"], compaction["compaction_window_size"]) == (
            unit,
            str(size),
        )
        assert default_ttl == 0
        assert gc_grace == MESSAGES_GC_GRACE
    assert not tables["queues"][1]["class"].endswith("TimeWindowCompactionStrategy")


@pytest.mark.unit
def test_twcs_window_is_a_whole_number_of_buckets():
    assert twcs_window(60, 30 * 86400) == ("DAYS", 1)
    assert twcs_window(60, 3 * 86400) == ("MINUTES", 144)
    unit, size = twcs_window(7, 3600)
    seconds = size * {"MINUTES": 60, "HOURS": 3600, "DAYS": 86400}[unit]
    assert seconds % 7 == 0 and seconds % 60 == 0


# -- writes -----------------------------------------------------------------------------


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


# -- settings -----------------------------------------------------------------------------------


@pytest.mark.unit
def test_settings_defaults():
    cfg = parse_settings({})
    assert cfg.contact_points == ("127.0.0.1",)
    assert (cfg.port, cfg.keyspace, cfg.local_dc) == (9042, "queuey", "datacenter1")
    assert cfg.replication == {"class": "SimpleStrategy", "replication_factor": 1}
    assert (cfg.request_timeout, cfg.bucket_seconds, cfg.create_schema) == (2.0, 60, False)
    storage = CassandraStorage(cfg, ManualClock())
    assert storage.write_timeout_seconds == 2.0


@pytest.mark.unit
def test_settings_are_parsed():
    cfg = parse_settings(
        {
            "queuey.cassandra.contact_points": " 10.0.0.1, 10.0.0.2 ",
            "queuey.cassandra.port": "19042",
            "queuey.cassandra.keyspace": "q2",
            "queuey.cassandra.replication": "{'class': 'NetworkTopologyStrategy', 'dc1': 3}",
            "queuey.cassandra.request_timeout": "1.5",
            "queuey.cassandra.create_schema": "true",
            "queuey.cassandra.username": "u",
            "queuey.cassandra.password": "p",
        }
    )
    assert cfg.contact_points == ("10.0.0.1", "10.0.0.2")
    assert cfg.replication == {"class": "NetworkTopologyStrategy", "dc1": 3}
    assert (cfg.port, cfg.keyspace, cfg.request_timeout, cfg.create_schema) == (
        19042,
        "q2",
        1.5,
        True,
    )
    assert (cfg.username, cfg.password) == ("u", "p")


@pytest.mark.unit
@pytest.mark.parametrize(
    "key, value",
    [
        ("port", "ninety"),
        ("port", "70000"),
        ("keyspace", "bad-name"),
        ("replication", "SimpleStrategy"),
        ("replication", "{'replication_factor': 1}"),
        ("request_timeout", "0"),
        ("bucket_seconds", "0"),
        ("max_ttl", "-5"),
        ("create_schema", "perhaps"),
        ("username", "only-me"),
    ],
)
def test_bad_settings_name_the_key(key, value):
    with pytest.raises(ConfigurationError) as info:
        parse_settings({f"queuey.cassandra.{key}": value})
    assert info.value.key.startswith("queuey.cassandra.")
    assert info.value.key.endswith(key if key != "username" else "password")
