"""The SQLite expiry sweep runs beside requests, never inside them.

A post is answered once its commit is durable; nothing that happens to the
sweep afterwards (an error, a long delete) may turn that answer into a
failure or hold it back.
"""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from queuey.errors import ConfigurationError, StorageUnavailable
from queuey.model import NewMessage, QueueMeta, ReadQuery
from queuey.storage.sqlite import SQLiteStorage, load_from_config
from tests.support import wait_until

#: Generous: the machine running the tests is shared and slow.
DEADLINE = 20.0


def _row_count(store: SQLiteStorage) -> int:
    with sqlite3.connect(store.path) as conn:
        return conn.execute("SELECT count(*) FROM messages").fetchone()[0]


@pytest.fixture
def store(tmp_path, clock):
    storage = SQLiteStorage(tmp_path / "db.sqlite3", clock, sweep_interval=0.01)
    yield storage
    storage.close()


@pytest.fixture
def queue(store):
    return store.create_queue(QueueMeta(application="a", name="q"))


def _post_until(store, queue, clock, done: threading.Event) -> list:
    """Post one message at a time until ``done`` is set (or the deadline passes);
    every post must succeed. Returns what was stored."""
    stored: list = []
    deadline = time.monotonic() + DEADLINE
    while not done.is_set() and time.monotonic() < deadline:
        stored += store.put_messages(queue, [NewMessage('{"n": %d}' % len(stored), 1, 60)])
        clock.advance(0.001)
    return stored


def test_a_failing_sweep_does_not_fail_the_post(store, queue, clock, monkeypatch):
    swept = threading.Event()

    def broken_sweep() -> int:
        swept.set()
        raise StorageUnavailable("sqlite: disk I/O error (injected into the sweep)")

    monkeypatch.setattr(store, "sweep_expired", broken_sweep)
    stored = _post_until(store, queue, clock, swept)
    stored += store.put_messages(queue, [NewMessage("{}", 1, 60)])
    assert swept.is_set(), "the sweep never ran"
    read = store.read_messages(queue, ReadQuery(partitions=[1], now_micros=clock.now_micros()))
    assert sorted(m.id for m in read) == sorted(m.id for m in stored)


def test_a_blocked_sweep_does_not_hold_the_post_back(store, queue, clock, monkeypatch):
    release = threading.Event()
    sweeping = threading.Event()

    def stuck_sweep() -> int:
        sweeping.set()
        release.wait(DEADLINE * 2)
        return 0

    monkeypatch.setattr(store, "sweep_expired", stuck_sweep)
    results: list = []

    def post() -> None:
        results.extend(_post_until(store, queue, clock, sweeping))
        for n in range(3):  # while the sweep is stuck
            results.extend(store.put_messages(queue, [NewMessage('{"n": %d}' % n, 1, 60)]))

    poster = threading.Thread(target=post)
    try:
        poster.start()
        poster.join(DEADLINE * 1.5)
        assert not poster.is_alive(), "a post waited for the expiry sweep"
        assert sweeping.is_set() and len(results) >= 3
    finally:
        release.set()
        poster.join(DEADLINE)


def test_expired_rows_are_removed_in_the_background(store, queue, clock):
    store.put_messages(queue, [NewMessage("{}", 1, 1), NewMessage("{}", 1, 100)])
    assert _row_count(store) == 2
    clock.advance(2)
    # No request comes in: the sweeper alone must remove the expired row.
    wait_until(lambda: _row_count(store) == 1, DEADLINE, "the expired row to be swept")


def test_close_stops_the_sweeper(tmp_path, clock):
    store = SQLiteStorage(tmp_path / "db.sqlite3", clock, sweep_interval=0.01)
    queue = store.create_queue(QueueMeta(application="a", name="q"))
    store.put_messages(queue, [NewMessage("{}", 1, 60)])
    # This store's own thread: other tests in this process may have sweepers of their own.
    thread = store._sweeper._thread
    assert thread is not None and thread.is_alive()
    store.close()
    wait_until(lambda: not thread.is_alive(), DEADLINE, "the sweeper thread to end")


@pytest.mark.parametrize(
    "key, value",
    [
        ("queuey.sqlite.sweep_interval", "often"),
        ("queuey.sqlite.busy_timeout", "long"),
        ("queuey.sqlite.busy_timeout", "-1"),
        ("queuey.sqlite.sweep_interval", "inf"),
    ],
)
def test_a_bad_sqlite_setting_names_its_own_key(tmp_path, clock, key, value):
    settings = {"queuey.sqlite.path": str(tmp_path / "db.sqlite3"), key: value}
    with pytest.raises(ConfigurationError) as info:
        load_from_config(settings, clock)
    assert info.value.key == key


def test_the_sweep_works_in_batches_and_keeps_live_rows(tmp_path, clock, monkeypatch):
    """Each batch is its own short transaction; together they remove every expired row."""
    from queuey.storage.sqlite import backend

    monkeypatch.setattr(backend, "SWEEP_BATCH", 10)
    store = SQLiteStorage(tmp_path / "db.sqlite3", clock, sweep_interval=0)  # no background
    queue = store.create_queue(QueueMeta(application="a", name="q"))
    store.put_messages(queue, [NewMessage('{"short": %d}' % n, 1, 1) for n in range(35)])
    live = store.put_messages(queue, [NewMessage('{"long": %d}' % n, 1, 600) for n in range(5)])
    clock.advance(2)
    assert store.sweep_expired() == 35
    read = store.read_messages(queue, ReadQuery(partitions=[1], now_micros=clock.now_micros()))
    assert sorted(m.id for m in read) == sorted(m.id for m in live)
    assert _row_count(store) == 5
    store.close()
