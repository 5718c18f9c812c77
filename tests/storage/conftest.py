"""Fixtures of the Cassandra-specific storage tests: their own keyspace on the
real node, a storage per test, a queue in a fresh application, and a recorder
of the statements sent."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from queuey.model import QueueMeta
from queuey.storage.cassandra import CassandraStorage, load_from_config
from tests.storage.cassandra_support import KEYSPACE, Recorder

# The shipped contract suite's asserts explain their failures as a test's do.
pytest.register_assert_rewrite("queuey.storage.testing")


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


@pytest.fixture
def recorder(store) -> Iterator[Recorder]:
    rec = Recorder(store)
    yield rec
    rec.close()
