"""Fixtures for the Spark tests: one local SparkSession for the whole session,
and a "target" store (SQLite, or the real Cassandra node) to fill and read.

Spark's Python workers are separate processes started by the JVM; they find
``queuey`` through ``PYTHONPATH`` (set by :func:`queuey.spark.local_session`
before the JVM starts) and run the same interpreter as the tests
(``PYSPARK_PYTHON``).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from queuey.clock import ManualClock
from queuey.model import Message, NewMessage, QueueMeta
from queuey.storage import Storage

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

# PySpark leaves sockets to the garbage collector (the result sockets of
# collect() and py4j's callback connections), which Python reports as
# ResourceWarning when they are finalised. Only that warning is ignored, and
# only for the tests in this directory.
PYSPARK_SOCKET_WARNING = "ignore:unclosed <socket.socket:ResourceWarning"

#: Tests that drive a stream through several bounded micro-batches with
#: ``trigger(availableNow=True)``: PySpark 4.0/4.1 run one batch there.
needs_available_now = pytest.mark.skipif(
    importlib.util.find_spec("pyspark.sql.streaming.datasource") is None,
    reason="bounded availableNow batches need PySpark 4.2 or later",
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if Path(str(item.fspath)).resolve().is_relative_to(HERE):
            item.add_marker(pytest.mark.filterwarnings(PYSPARK_SOCKET_WARNING))


@pytest.fixture(autouse=True)
def _close_test_process_sources():
    """Close the sources a test opened in this process (tests that call the data
    source's reader or sink directly, as an executor would), so no store and no
    sweeper thread outlives its test."""
    yield
    from queuey.spark.sources import close_sources

    close_sources()


@pytest.fixture(scope="session")
def spark():
    """A local[2] SparkSession with the ``queuey`` data source registered."""
    from queuey.spark import local_session

    session = local_session(
        "queuey-tests",
        "local[2]",
        python=sys.executable,
        conf={
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "4",
            "spark.default.parallelism": "2",
            "spark.sql.session.timeZone": "UTC",
            "spark.driver.memory": "1g",
            "spark.sql.execution.pyspark.udf.faulthandler.enabled": "true",
            "spark.python.worker.faulthandler.enabled": "true",
            "spark.sql.streaming.stopTimeout": "60s",
        },
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def sc(spark):
    return spark.sparkContext


# -- targets: a store the test fills, and the connection Spark reads it with ----------


@dataclass
class Target:
    """A store to fill from the test process and the connection executors use."""

    kind: str
    storage: Storage
    clock: ManualClock
    application: str
    settings: dict[str, str]

    @property
    def connection(self):
        from queuey.spark import StorageConnection

        return StorageConnection.from_settings(self.settings)

    def options(self) -> dict[str, str]:
        """Data source options reaching this store."""
        return {"application": self.application, **self.settings}

    def queue(self, name: str | None = None, partitions: int = 1, ttl: int = 3600) -> QueueMeta:
        name = name or f"q{uuid.uuid4().hex[:10]}"
        return self.storage.create_queue(
            QueueMeta(self.application, name, partitions=partitions, ttl=ttl)
        )

    def post(
        self,
        meta: QueueMeta,
        bodies: Iterable[dict[str, Any]],
        partition: int | Sequence[int] | None = None,
        ttl: int | None = None,
    ) -> list[Message]:
        """Store messages (round robin over partitions unless one is given)."""
        out = []
        for i, body in enumerate(bodies):
            if partition is None:
                p = i % meta.partitions + 1
            elif isinstance(partition, int):
                p = partition
            else:
                p = partition[i % len(partition)]
            out += self.storage.put_messages(
                meta, [NewMessage(json.dumps(body), p, ttl or meta.ttl)]
            )
        return out

    def post_many(self, meta: QueueMeta, count: int, batch: int = 500, **fields) -> list[Message]:
        """Store ``count`` messages ``{"n": i, **fields}`` in batches, round robin."""
        out: list[Message] = []
        for start in range(0, count, batch):
            out += self.storage.put_messages(
                meta,
                [
                    NewMessage(json.dumps({"n": i, **fields}), i % meta.partitions + 1, meta.ttl)
                    for i in range(start, min(count, start + batch))
                ],
            )
        return out


def _past_clock() -> ManualClock:
    """Messages are written ten minutes in the past, so they are final for readers
    whatever the store's read delay, and expiry can be tested without sleeping."""
    clock = ManualClock()
    clock.advance(-600)
    return clock


@pytest.fixture
def sqlite_target(tmp_path):
    from queuey.storage.sqlite import SQLiteStorage

    path = tmp_path / "queuey.sqlite3"
    clock = _past_clock()
    storage = SQLiteStorage(path, clock)
    settings = {"queuey.storage.backend": "queuey.storage.sqlite", "queuey.sqlite.path": str(path)}
    yield Target("sqlite", storage, clock, "sparkapp", settings)
    storage.close()


@pytest.fixture
def cassandra_target(cassandra_settings):
    """The real Cassandra node; each test has its own application name and its own
    backend instance (so its id generator follows this test's clock)."""
    from queuey.storage.cassandra import load_from_config

    clock = _past_clock()
    storage = load_from_config(cassandra_settings, clock)
    # Executors find the schema in place; they need not try to create it.
    settings = {**cassandra_settings, "queuey.cassandra.create_schema": "false"}
    yield Target("cassandra", storage, clock, f"spark{uuid.uuid4().hex[:10]}", settings)
    storage.close()


@pytest.fixture(params=["sqlite", pytest.param("cassandra", marks=pytest.mark.cassandra)])
def target(request) -> Target:
    """Each store in turn."""
    return request.getfixturevalue(f"{request.param}_target")
