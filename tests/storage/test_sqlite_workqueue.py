"""SQLite-only work-queue behaviour the shared contract cannot reach: the
fence that keeps a stream reader from passing a write still in flight behind a
due delayed message, delayed ids that never collide, the priority-0 walk, the
sweep of leases and dedup ids, and reservations through two storages (two
processes) sharing one file."""

from __future__ import annotations

import threading

import pytest

from queuey import ids
from queuey.clock import ManualClock
from queuey.model import NewMessage, QueueMeta, ReadQuery
from queuey.storage.sqlite import SQLiteStorage, load_from_config
from queuey.storage.sqlite import reservation as workqueue
from tests.support import wait_until

DEADLINE = 30.0
S = ids.MICROS


@pytest.fixture
def path(tmp_path):
    return tmp_path / "queuey.sqlite3"


@pytest.fixture
def store(path, clock):
    storage = SQLiteStorage(path, clock, sweep_interval=0)
    yield storage
    storage.close()


def reserve(storage, queue, now, sub="default", limit=10, vt=60):
    return storage.reserve(
        queue,
        sub,
        partitions=list(range(1, queue.partitions + 1)),
        limit=limit,
        visibility_timeout=vt,
        now_micros=now,
        settled_micros=now,
    )


class StallingClock:
    """Tells ``at`` and, once armed, stalls the caller (a write that has taken
    the file's write lock and minted its ids) until released."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.armed = False
        self.stalled = threading.Event()
        self.release = threading.Event()

    def now_micros(self) -> int:
        if self.armed:
            self.armed = False
            self.stalled.set()
            assert self.release.wait(DEADLINE)
        return self.at


def test_reader_waits_for_a_write_in_flight_behind_a_due_delayed_message(path, store, clock):
    """Process B starts a post at t0+0.5 s and is still committing at t0+1 s,
    when a reader sees A's delayed message (due at t0+1 s, an id above B's).
    Returning only the delayed message would let that reader page past B's."""
    queue = store.create_queue(QueueMeta(application="a", name="q", partitions=2))
    t0 = clock.now_micros()
    delayed = store.put_messages(queue, [NewMessage('{"d": 1}', 1, 600, delay=1)])[0]
    slow_clock = StallingClock(t0 + S // 2)
    other = SQLiteStorage(path, slow_clock, sweep_interval=0)
    fenced = threading.Event()
    real_fence = store._fence

    def fence(now_micros: int) -> None:
        fenced.set()
        real_fence(now_micros)

    store._fence = fence
    results: dict[str, list] = {}
    slow_clock.armed = True
    writer = threading.Thread(
        target=lambda: results.setdefault(
            "posted", other.put_messages(queue, [NewMessage('{"b": 1}', 2, 600)])
        )
    )
    writer.start()
    assert slow_clock.stalled.wait(DEADLINE)
    clock.set(delayed.timestamp)
    query = ReadQuery(partitions=[1, 2], now_micros=clock.now_micros(), order="ascending")
    reader = threading.Thread(
        target=lambda: results.setdefault("read", store.read_messages(queue, query))
    )
    reader.start()
    assert fenced.wait(DEADLINE), "the reader returned without fencing"
    assert "read" not in results
    slow_clock.release.set()
    writer.join(DEADLINE)
    reader.join(DEADLINE)
    other.close()
    (posted,) = results["posted"]
    assert posted.timestamp < delayed.timestamp
    assert [m.id for m in results["read"]] == [posted.id, delayed.id]


def test_no_fence_without_due_delayed_messages(store, clock):
    queue = store.create_queue(QueueMeta(application="a", name="q"))
    store.put_messages(queue, [NewMessage("{}", 1, 600), NewMessage("{}", 1, 600, delay=5)])
    calls = []
    store._fence = calls.append
    query = ReadQuery(partitions=[1], now_micros=clock.now_micros())
    assert len(store.read_messages(queue, query)) == 1
    assert calls == []


def test_delayed_ids_never_collide(store, clock):
    """Same due microsecond from one id generator, and an ordinary post landing
    on a delayed timestamp: every message is stored with its own id."""
    queue = store.create_queue(QueueMeta(application="a", name="q"))
    first = store.put_messages(queue, [NewMessage('{"n": 1}', 1, 600, delay=10)])[0]
    clock.advance(1)
    second, third = store.put_messages(
        queue, [NewMessage('{"n": 2}', 1, 600, delay=9), NewMessage('{"n": 3}', 1, 600, delay=9)]
    )
    clock.set(first.timestamp)
    ordinary = store.put_messages(queue, [NewMessage('{"n": 4}', 1, 600)])[0]
    stamps = [m.timestamp for m in (first, second, third, ordinary)]
    assert len({m.id for m in (first, second, third, ordinary)}) == 4
    assert max(stamps) - min(stamps) < 1000, stamps
    clock.advance(1)
    got = store.read_messages(queue, ReadQuery(partitions=[1], now_micros=clock.now_micros()))
    assert sorted(m.body for m in got) == ['{"n": 1}', '{"n": 2}', '{"n": 3}', '{"n": 4}']


def test_priority_zero_walk_goes_on_where_it_stopped(store, clock, monkeypatch):
    """Rows of other priorities are walked over once; a walk cut short by the
    row limit never skips a message, the next reservation goes on."""
    monkeypatch.setattr(workqueue, "SCAN_LIMIT", 4)
    queue = store.create_queue(QueueMeta(application="a", name="q"))
    high = [NewMessage('{"high": %d}' % n, 1, 600, priority=3) for n in range(10)]
    store.put_messages(queue, high)
    low = store.put_messages(queue, [NewMessage('{"low": 1}', 1, 600)])[0]
    now = clock.now_micros()
    assert len(reserve(store, queue, now, limit=10).deliveries) == 10
    got = []
    for _ in range(4):
        got += reserve(store, queue, now).deliveries
    assert [d.message.id for d in got] == [low.id]
    (stats,) = store.stats(queue, now).subscriptions
    assert (stats.available, stats.in_flight) == (0, 11)


def test_sweep_clears_leases_and_dedup_ids(store, clock):
    queue = store.create_queue(QueueMeta(application="a", name="q"))
    store.put_messages(queue, [NewMessage("{}", 1, 5, dedup_id="x"), NewMessage("{}", 1, 500)])
    reserve(store, queue, clock.now_micros())
    clock.advance(6)
    assert store.sweep_expired() == 1
    conn = store._db.reader()
    assert conn.execute("SELECT COUNT(*) FROM leases").fetchone()[0] == 1
    assert conn.execute("SELECT COUNT(*) FROM dedup").fetchone()[0] == 1
    clock.advance(store.dedup_window)
    store.sweep_expired()
    assert conn.execute("SELECT COUNT(*) FROM dedup").fetchone()[0] == 0


def test_two_storages_on_one_file_never_share_a_lease(path, clock):
    """Reservations through two storage objects (two API processes) on one
    file: each message is handed out once within its lease."""
    first = SQLiteStorage(path, clock, sweep_interval=0)
    second = SQLiteStorage(path, clock, sweep_interval=0)
    queue = first.create_queue(QueueMeta(application="a", name="q", partitions=2))
    total = 300
    first.put_messages(queue, [NewMessage('{"n": %d}' % n, n % 2 + 1, 600) for n in range(total)])
    delivered: list[str] = []
    errors: list[Exception] = []
    lock = threading.Lock()

    def consume(storage) -> None:
        try:
            while True:
                got = reserve(storage, queue, clock.now_micros(), limit=7)
                if not got.deliveries:
                    return
                with lock:
                    delivered.extend(d.message.body for d in got.deliveries)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=consume, args=(s,)) for s in (first, second) * 3]
    for thread in threads:
        thread.start()
    wait_until(lambda: not any(t.is_alive() for t in threads), DEADLINE, "consumers to finish")
    first.close()
    second.close()
    duplicates = len(delivered) - len(set(delivered))
    figures = f"sent={total} delivered={len(delivered)} duplicates={duplicates}"
    print(figures)
    assert errors == [], figures
    assert duplicates == 0 and len(set(delivered)) == total, figures


def test_dedup_window_comes_from_the_settings(path):
    store = load_from_config(
        {"queuey.sqlite.path": str(path), "queuey.dedup_window": "7"}, ManualClock()
    )
    assert store.dedup_window == 7
    store.close()
