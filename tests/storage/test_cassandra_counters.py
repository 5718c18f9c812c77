"""The Cassandra backend counts the CQL requests it sends, by kind (read,
write, lwt, ddl), and ``/metrics`` shows them as
``queuey_cassandra_requests_total``: what an operator reads to know what each
delivered message costs Cassandra.

Every request is counted once, under the kind Cassandra treats it as: a
conditional statement or batch and a read at serial consistency are Paxos
rounds (``lwt``) whatever their verb.
"""

from __future__ import annotations

import re
import uuid

import pytest
import requests
from cassandra import ConsistencyLevel
from cassandra.query import BatchStatement, BatchType, SimpleStatement

from queuey.model import QueueMeta, ReadQuery
from tests.faults.conftest import ApiNode
from tests.storage.cassandra_support import KEYSPACE, put
from tests.support import KEY, server_settings
from tests.web.calls import create, post

KINDS = {"read", "write", "lwt", "ddl"}


def sent_since(store, before: dict[str, int]) -> dict[str, int]:
    """Requests of each kind sent since ``before`` (kinds with none left out)."""
    now = store.request_counts()
    return {kind: n - before[kind] for kind, n in now.items() if n != before[kind]}


@pytest.mark.cassandra
def test_a_post_is_counted_as_writes_and_nothing_else(store, queue, recorder):
    before = store.request_counts()
    assert set(before) == KINDS
    put(store, queue, 1)
    sent = sent_since(store, before)
    assert set(sent) == {"write"}
    assert sent["write"] == len(recorder.sent) >= 1  # each request once


@pytest.mark.cassandra
def test_a_read_is_counted_as_reads(store, queue, clock, recorder):
    put(store, queue, 1)
    recorder.clear()
    before = store.request_counts()
    found = store.read_messages(queue, ReadQuery(partitions=[1], now_micros=clock.now_micros()))
    assert len(found) == 1
    sent = sent_since(store, before)
    assert set(sent) == {"read"}
    assert sent["read"] == len(recorder.sent)


@pytest.mark.cassandra
def test_creating_a_queue_is_one_lightweight_transaction(store):
    before = store.request_counts()
    app = "app-" + uuid.uuid4().hex[:12]
    store.create_queue(QueueMeta(application=app, name="q", partitions=1, ttl=600))
    assert sent_since(store, before) == {"lwt": 1}


@pytest.mark.cassandra
def test_serial_reads_and_conditional_batches_are_lightweight_transactions(store, queue):
    """Every request the backend's session sends counts, whoever sends it."""
    session = store.session
    where = "WHERE application = %s AND name = %s"
    key = (queue.application, queue.name)
    before = store.request_counts()
    serial = SimpleStatement(
        f"SELECT name FROM {KEYSPACE}.queues {where}", consistency_level=ConsistencyLevel.SERIAL
    )
    session.execute(serial, key)
    session.execute(f"SELECT name FROM {KEYSPACE}.queues {where}", key)
    # A batch names its prepared statements by id only; this one never ran alone.
    conditional = session.prepare(
        f"UPDATE {KEYSPACE}.queues SET delay = ? WHERE application = ? AND name = ? IF EXISTS"
    )
    batch = BatchStatement(batch_type=BatchType.UNLOGGED)
    batch.add(conditional, (0, *key))
    session.execute(batch)
    plain = BatchStatement(batch_type=BatchType.UNLOGGED)
    plain.add(f"UPDATE {KEYSPACE}.queues SET delay = 0 {where}", key)
    session.execute(plain)
    session.execute(f"CREATE TABLE IF NOT EXISTS {KEYSPACE}.queues (a int PRIMARY KEY)")
    assert sent_since(store, before) == {"lwt": 2, "read": 1, "write": 1, "ddl": 1}


def metric_values(text: str) -> dict[str, float]:
    """``queuey_cassandra_requests_total`` by kind, from an exposition."""
    pattern = r'^queuey_cassandra_requests_total\{kind="(\w+)"\} ([\d.e+]+)$'
    return {kind: float(value) for kind, value in re.findall(pattern, text, re.MULTILINE)}


@pytest.mark.cassandra
def test_metrics_show_the_requests_by_kind(make_app, cassandra_storage, wrap_app):
    app = wrap_app(make_app(cassandra_storage))
    create(app, "counted")
    first = metric_values(app.get("/metrics").text)
    assert set(first) == KINDS and first["lwt"] >= 1
    post(app, "counted", {"n": 1})
    then = metric_values(app.get("/metrics").text)
    assert then["write"] > first["write"]


def test_a_store_that_does_not_count_shows_no_requests_series(make_app, sqlite_storage, wrap_app):
    app = wrap_app(make_app(sqlite_storage))
    assert "queuey_cassandra_requests" not in app.get("/metrics").text


@pytest.mark.cassandra
@pytest.mark.slow
def test_every_worker_of_the_server_shows_the_requests_of_all(
    request, tmp_path, applications_file, test_apps
):
    """Under granian each worker is a process with its own session; whichever
    answers ``/metrics`` shows every worker's requests."""
    settings = server_settings(request, applications_file, "cassandra", tmp_path / "unused")
    node = ApiNode("counters", tmp_path, settings, server="granian")
    try:
        node.wait_ready()
        auth = {"X-Application-Name": test_apps.app, "ApplicationKey": KEY}
        queue = f"counted{uuid.uuid4().hex[:8]}"
        res = requests.post(f"{node.url}/queue", json={"queue_name": queue}, headers=auth)
        assert res.status_code == 201, res.text
        posts = 40
        for n in range(posts):  # a connection each: the kernel spreads them over the workers
            res = requests.post(f"{node.url}/queue/{queue}", json={"n": n}, headers=auth)
            assert res.status_code == 201, res.text
        for _ in range(10):
            shown = metric_values(requests.get(f"{node.url}/metrics", timeout=10).text)
            assert set(shown) == KINDS
            assert shown["write"] >= posts, shown
    finally:
        node.stop()
