"""A process that posts without serving (what a Spark executor runs when it
writes to the store itself, queuey.spark.sources.StorageSource) meets the
flow rules a server does: a pause, a queue's length, the application's
quotas and rates from the applications file, counted on SQLite in the same
tables as the host's servers (docs/flow.rst, "Spark")."""

from __future__ import annotations

import uuid

import pytest

from queuey.applications import load_applications
from queuey.clock import SYSTEM_CLOCK
from queuey.core.flow import QueueFull, QueuePaused, QuotaExceeded, RateLimited
from queuey.core.services import build_services
from queuey.model import NewMessage, QueueMeta
from queuey.settings import load_settings
from queuey.spark.connections import StorageConnection
from queuey.spark.sources import StorageSource
from tests.support import KEY


@pytest.fixture
def host(tmp_path):
    """A SQLite file, an applications file, and the settings both read."""
    app = "spark-" + uuid.uuid4().hex[:8]
    apps = tmp_path / "apps.ini"
    apps.write_text(
        f"[application:{app}]\nkeys = plain:{KEY}\nmax_messages = 8\n"
        f"max_posts_per_second = 1000\n"
        f"[application:{app}-slow]\nkeys = plain:{KEY}\nmax_posts_per_second = 2\n",
        encoding="utf-8",
    )
    settings = {
        "queuey.storage.backend": "queuey.storage.sqlite",
        "queuey.sqlite.path": str(tmp_path / "host.sqlite3"),
        "queuey.applications": str(apps),
    }
    return app, settings


def messages(count: int) -> list[NewMessage]:
    return [NewMessage('{"n": 1}', 1, 3600) for _ in range(count)]


def test_a_direct_writer_meets_pause_length_quota_and_rate(host):
    app, settings = host
    source = StorageSource(StorageConnection.from_settings(settings))
    try:
        storage = source.storage
        paused = storage.create_queue(QueueMeta(app, "paused", attributes={"flow.paused": "1"}))
        with pytest.raises(QueuePaused):
            source.put(paused, messages(1))
        short = storage.create_queue(QueueMeta(app, "short", attributes={"flow.max_length": "3"}))
        assert len(source.put(short, messages(3))) == 3
        with pytest.raises(QueueFull):
            source.put(short, messages(1))
        other = storage.create_queue(QueueMeta(app, "other"))
        assert len(source.put(other, messages(5))) == 5  # 8 stored in all
        with pytest.raises(QuotaExceeded) as over:
            source.put(other, messages(1))
        assert over.value.field == "max_messages"
        slow = storage.create_queue(QueueMeta(f"{app}-slow", "q"))
        source.put(slow, messages(2))
        with pytest.raises(RateLimited):
            source.put(slow, messages(1))
    finally:
        source.close()


def test_a_direct_writer_and_a_server_count_in_one_table(host):
    """On SQLite the tables are the host's: what the server's posts took is
    gone for the executor's, and the other way round."""
    app, settings = host
    parsed = load_settings(settings, environ={})
    storage_source = StorageSource(StorageConnection.from_settings(settings))
    server = build_services(
        parsed,
        load_applications(parsed.applications_file),
        storage_source.storage,
        SYSTEM_CLOCK,
    )
    try:
        meta = storage_source.storage.create_queue(QueueMeta(app, "shared"))
        server.workqueues.post(meta, messages(6))
        with pytest.raises(QuotaExceeded):
            storage_source.put(meta, messages(3))
        assert len(storage_source.put(meta, messages(2))) == 2
        with pytest.raises(QuotaExceeded):
            server.workqueues.post(meta, messages(1))
    finally:
        server.overview.close()
        storage_source.close()
