"""SQLite group commit: every caller of a group gets its answer or an error.

Several posts, reservations and receipt calls waiting on the write lock are
written by one leader in one commit. Whatever goes wrong in the leader's
commit, no caller may be told "stored" (201) without ids, nor with ids of
messages that never committed.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

import pytest

from queuey.errors import StorageUnavailable
from queuey.model import NewMessage, QueueMeta, ReadQuery
from queuey.storage.asks import ReleaseAsk, ReserveAsk
from queuey.storage.sqlite import SQLiteStorage, reservation
from queuey.storage.sqlite.database import Database
from queuey.storage.sqlite.group_commit import GroupCommit, MessageWriter
from queuey.storage.sqlite.schema import migrate
from tests.support import wait_until

DEADLINE = 20.0


class CommitFails:
    """The writer connection with an injected non-SQLite failure on COMMIT
    (an in-process stand-in for a bug in the leader's commit path)."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def execute(self, sql: str, *args: Any) -> Any:
        if sql == "COMMIT":
            raise RuntimeError("injected failure in the leader's commit")
        return self._conn.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class FailsOnce:
    """A clock that raises the first time it is read (then tells the time)."""

    def __init__(self, clock: Any) -> None:
        self.clock = clock
        self.failed = False

    def now_micros(self) -> int:
        if not self.failed:
            self.failed = True
            raise RuntimeError("injected failure while minting ids")
        return self.clock.now_micros()


def _in_one_group(write_lock: threading.Lock, pending: Any, calls: list) -> list:
    """Run ``calls`` concurrently so that they share one group commit.

    Holds the write lock until every call is queued, so the first to get the
    lock writes them all. Returns each call's outcome: its result or its error.
    """
    outcomes: list = [None] * len(calls)

    def run(i: int) -> None:
        try:
            outcomes[i] = calls[i]()
        except Exception as exc:  # noqa: BLE001 - the outcome is what we check
            outcomes[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    with write_lock:
        for t in threads:
            t.start()
        wait_until(lambda: len(pending()) == len(calls), DEADLINE, "every call to be queued")
    for t in threads:
        t.join(DEADLINE)
        assert not t.is_alive()
    return outcomes


def _ids_or_error(outcomes: list, sizes: list[int]) -> None:
    for outcome, size in zip(outcomes, sizes, strict=True):
        if isinstance(outcome, Exception):
            continue
        assert len(outcome) == size, f"a caller was answered 'stored' with {outcome!r}"


def _combiner(tmp_path, clock, busy_timeout: float) -> tuple:
    """The combiner alone on a real SQLite file: ``(database, GroupCommit, MessageWriter)``."""
    db = Database(str(tmp_path / "db.sqlite3"), busy_timeout=busy_timeout)
    with db.write() as conn:
        migrate(conn)
    commits = GroupCommit(db)
    return db, commits, MessageWriter(commits, clock)


@pytest.mark.unit
def test_a_failed_leader_commit_fails_every_caller_of_the_group(tmp_path, clock):
    """In-process fault (the combiner alone, on a real SQLite file)."""
    db, commits, posts = _combiner(tmp_path, clock, busy_timeout=5)
    queue = QueueMeta(application="a", name="q", partitions=2)
    real = db.writer
    db.writer = CommitFails(real)
    batches = [[NewMessage("{}", 1, 60)], [NewMessage("{}", 2, 60), NewMessage("{}", 2, 60)]]
    outcomes = _in_one_group(
        db.write_lock,
        lambda: commits._pending,
        [lambda b=b: posts.put(queue, b) for b in batches],
    )
    _ids_or_error(outcomes, [len(b) for b in batches])
    assert all(isinstance(o, StorageUnavailable) for o in outcomes), outcomes
    # The failed group left nothing behind: the next write works and stands alone.
    db.writer = real
    (after,) = posts.put(queue, [NewMessage('{"after": 1}', 1, 60)])
    assert real.execute("SELECT count(*) FROM messages").fetchone() == (1,)
    assert after.body == '{"after": 1}'
    db.close()


def test_a_caller_failing_in_the_group_leaves_the_others_stored(tmp_path, clock):
    """Through the backend: one caller's write fails in the leader's hands; the
    others still get their ids, and exactly what was acknowledged is readable."""
    store = SQLiteStorage(tmp_path / "db.sqlite3", clock, sweep_interval=0)
    queue = store.create_queue(QueueMeta(application="a", name="q", partitions=3))
    store._posts.clock = FailsOnce(clock)
    batches = [[NewMessage('{"n": %d}' % n, 1 + n % 3, 60)] * (1 + n) for n in range(3)]
    outcomes = _in_one_group(
        store._db.write_lock,
        lambda: store._commits._pending,
        [lambda b=b: store.put_messages(queue, b) for b in batches],
    )
    _ids_or_error(outcomes, [len(b) for b in batches])
    failed = [o for o in outcomes if isinstance(o, Exception)]
    assert len(failed) == 1, outcomes
    acknowledged = {m.id for o in outcomes if not isinstance(o, Exception) for m in o}
    later = store.put_messages(queue, [NewMessage("{}", 1, 60)])
    acknowledged |= {m.id for m in later}
    read = store.read_messages(
        queue, ReadQuery(partitions=[1, 2, 3], now_micros=clock.now_micros(), limit=1000)
    )
    assert {m.id for m in read} == acknowledged
    store.close()


class CommitWaits:
    """The writer connection whose COMMIT waits until released (a slow disk)."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self.committing = threading.Event()
        self.release = threading.Event()

    def execute(self, sql: str, *args: Any) -> Any:
        if sql == "COMMIT":
            self.committing.set()
            assert self.release.wait(DEADLINE), "the commit was never released"
        return self._conn.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


@pytest.mark.unit
def test_a_caller_past_its_lock_deadline_gets_the_ids_a_commit_holding_its_post_stored(
    tmp_path, clock
):
    """A caller gives up waiting for the write lock while the leader's slow
    commit holds its post: it is not told 503 for messages being stored, but
    waits for that commit and gets its ids."""
    db, commits, posts = _combiner(tmp_path, clock, busy_timeout=1)
    queue = QueueMeta(application="a", name="q", partitions=2)
    slow = db.writer = CommitWaits(db.writer)
    outcomes: list = [None, None]

    def run(i: int) -> None:
        try:
            outcomes[i] = posts.put(queue, [NewMessage('{"n": %d}' % i, 1, 60)])
        except Exception as exc:  # noqa: BLE001 - the outcome is what we check
            outcomes[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    with db.write_lock:
        for t in threads:
            t.start()
        wait_until(lambda: len(commits._pending) == 2, DEADLINE, "both posts to be queued")
    assert slow.committing.wait(DEADLINE)
    # One caller leads the commit of both; the other's wait for the lock ends.
    wait_until(lambda: commits._awaiting == 1, DEADLINE, "the other caller to give up the lock")
    slow.release.set()
    for t in threads:
        t.join(DEADLINE)
        assert not t.is_alive()
    assert [[m.body for m in o] for o in outcomes] == [['{"n": 0}'], ['{"n": 1}']], outcomes
    assert slow.execute("SELECT count(*) FROM messages").fetchone() == (2,)
    db.close()


class CountsCommits:
    """The writer connection, counting the COMMITs it runs."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self.commits = 0

    def execute(self, sql: str, *args: Any) -> Any:
        if sql == "COMMIT":
            self.commits += 1
        return self._conn.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def _ask(clock, limit: int, partitions=(1, 2)) -> ReserveAsk:
    now = clock.now_micros()
    return ReserveAsk(list(partitions), limit, 30, now, now)


def test_reservations_acks_and_posts_waiting_together_share_one_commit(tmp_path, clock):
    """A reservation, an ack, a release and a post that wait on the write lock
    together are written in one transaction and one commit, and each gets
    exactly its own answer: the reservations lease different messages, the
    ack and release find their leases, the post its ids."""
    store = SQLiteStorage(tmp_path / "db.sqlite3", clock, sweep_interval=0)
    queue = store.create_queue(QueueMeta(application="a", name="q", partitions=2))
    store.put_messages(queue, [NewMessage('{"n": %d}' % n, 1 + n % 2, 60) for n in range(6)])
    first = store.reserve_ask(queue, "s", _ask(clock, 2)).deliveries
    counting = store._db.writer = CountsCommits(store._db.writer)
    outcomes = _in_one_group(
        store._db.write_lock,
        lambda: store._commits._pending,
        [
            lambda: store.reserve_ask(queue, "s", _ask(clock, 2)),
            lambda: store.reserve_ask(queue, "s", _ask(clock, 2)),
            lambda: store.ack(queue, "s", [first[0].receipt], clock.now_micros()),
            lambda: store.release_ask(
                queue, "s", ReleaseAsk([first[1].receipt], clock.now_micros())
            ),
            lambda: store.put_messages(queue, [NewMessage('{"late": 1}', 1, 60)]),
        ],
    )
    assert not [o for o in outcomes if isinstance(o, Exception)], outcomes
    assert counting.commits == 1
    one, two, acked, (released, _), posted = outcomes
    leased = [d.message.id for d in one.deliveries + two.deliveries]
    assert len(leased) == len(set(leased)) == 4
    assert not set(leased) & {d.message.id for d in first}
    assert acked == {first[0].receipt: "acked"}
    assert released == {first[1].receipt: "acked"}
    assert len(posted) == 1
    # Committed: what is left to lease is the released message, the two
    # never handed out and the late post.
    rest = store.reserve_ask(queue, "s", _ask(clock, 10)).deliveries
    read = ReadQuery(partitions=[1, 2], now_micros=clock.now_micros(), limit=100)
    every = {m.id for m in store.read_messages(queue, read)}
    assert {d.message.id for d in rest} == every - set(leased) - {first[0].message.id}
    store.close()


def test_a_reservation_failing_in_the_group_leaves_the_others_committed(
    tmp_path, clock, monkeypatch
):
    """One reservation leases a message, then fails in the leader's hands (a
    bug, injected): it is answered 503 and its lease is rolled back; an ack
    and a post of the same group stand."""
    store = SQLiteStorage(tmp_path / "db.sqlite3", clock, sweep_interval=0)
    queue = store.create_queue(QueueMeta(application="a", name="q", partitions=2))
    store.put_messages(queue, [NewMessage('{"n": %d}' % n, 1 + n % 2, 60) for n in range(4)])
    (held,) = store.reserve_ask(queue, "s", _ask(clock, 1)).deliveries
    real = reservation.reserve

    def fails_after_leasing(txn, queue, subscription, ask):
        if ask.limit != 99:
            return real(txn, queue, subscription, ask)
        assert real(txn, queue, subscription, replace(ask, limit=1))[0]
        raise RuntimeError("injected failure inside a reservation")

    monkeypatch.setattr(reservation, "reserve", fails_after_leasing)
    outcomes = _in_one_group(
        store._db.write_lock,
        lambda: store._commits._pending,
        [
            lambda: store.reserve_ask(queue, "s", _ask(clock, 99)),
            lambda: store.ack(queue, "s", [held.receipt], clock.now_micros()),
            lambda: store.put_messages(queue, [NewMessage("{}", 1, 60)]),
        ],
    )
    failed, acked, posted = outcomes
    assert isinstance(failed, StorageUnavailable), outcomes
    assert acked == {held.receipt: "acked"}
    assert len(posted) == 1
    # The failed reservation leased nothing: the three never handed out and
    # the new post are all there.
    rest = store.reserve_ask(queue, "s", _ask(clock, 10)).deliveries
    assert len(rest) == 4
    store.close()
