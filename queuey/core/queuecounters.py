"""Per-queue counters for the metrics: shared by a server's processes, bounded
per application, forgotten with their queue.

Flow control's refusals (``queuey_flow_throttled_total``) and the messages
trimmed from ``drop_head`` queues (``queuey_flow_dropped_total``) are counted
per queue, a label whose values applications choose. A labelled
prometheus_client ``Counter`` keeps a child per queue for the life of every
process, and under the production server each process's multiprocess file
keeps it after the queue is gone; so these counts live in one small SQLite
table instead: a file in the server's directory, shared by its worker and
refresher processes (in memory for a process serving alone), read at each
scrape (:class:`queuey.core.metrics.QueueCountsCollector`).

* **A deleted queue** loses its rows at once (:meth:`QueueCounters.forget`,
  called by :meth:`queuey.core.queues.Queues.delete`); counts still on their
  way from another process for it, first counted before the delete, are
  discarded (a tombstone of the queue's creation time and of the delete's,
  kept :data:`GONE_SECONDS`). A queue created again under the
  same name starts from zero: a count for a later creation time replaces the
  rows of the earlier one. Queues deleted through another API node are
  found by :meth:`QueueCounters.prune` (the refresher, every
  :data:`PRUNE_SECONDS`).
* **Bounded per application**: at most :data:`PER_APPLICATION` queues per
  metric, and :data:`MAX_QUEUES` over all applications. A queue past either
  is counted in its application's :data:`OTHER` row; a queue not counted for
  :data:`IDLE` seconds gives its place up to a new one, its counts added to
  :data:`OTHER` (so the sum of an application's series never goes down).

Each process adds its counts in memory and writes them at most every
:data:`WRITE_SECONDS` (a timer writes the last ones), and before it answers a
scrape: whichever process answers shows every process's counts, but for
another's last second.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from queuey.core.queues import every_queue
from queuey.model import QueueMeta

log = logging.getLogger(__name__)

#: The ``queue`` label of an application's counts past its caps (not a valid queue name).
OTHER = "~other"
#: Queues with series of their own per application and metric.
PER_APPLICATION = 100
#: Queues with series of their own per metric, over all applications.
MAX_QUEUES = 1000
#: Seconds without a count after which a queue gives its place up to a new one.
IDLE = 3600.0
#: Least seconds between two writes of one process's counts.
WRITE_SECONDS = 1.0
#: Seconds a deleted queue's tombstone is kept (longer than any write's delay).
GONE_SECONDS = 300.0
#: Least seconds between two checks for queues deleted through other nodes.
PRUNE_SECONDS = 60.0
#: Counts one process holds before it writes them at once.
MAX_PENDING = 10_000
#: Microseconds a queue's creation time may be ahead of this node's clock
#: (another node's) and still be spared by a prune that listed before it.
SKEW_MICROS = 60_000_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS counts (
    metric TEXT NOT NULL, application TEXT NOT NULL, queue TEXT NOT NULL,
    kind TEXT NOT NULL, created INTEGER NOT NULL, value REAL NOT NULL,
    updated REAL NOT NULL,
    PRIMARY KEY (metric, application, queue, kind)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS counts_by_queue ON counts (application, queue);
CREATE TABLE IF NOT EXISTS places (
    metric TEXT NOT NULL, application TEXT NOT NULL, queue TEXT NOT NULL,
    PRIMARY KEY (metric, application, queue)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS places_by_queue ON places (application, queue);
CREATE TABLE IF NOT EXISTS gone (
    application TEXT NOT NULL, queue TEXT NOT NULL, created INTEGER NOT NULL,
    at REAL NOT NULL,
    PRIMARY KEY (application, queue, created)
) WITHOUT ROWID;
"""

#: metric, application, queue, the queue's creation time, kind
_Key = tuple[str, str, str, int, str]


@dataclass(frozen=True)
class Count:
    """One series: ``queue`` is :data:`OTHER` for an application's counts past its caps."""

    metric: str
    application: str
    queue: str
    kind: str
    value: float


class QueueCounters:
    """Counts per metric, queue and kind, in ``path`` (None: this process only)."""

    def __init__(self, path: Path | None = None, now: Callable[[], float] = time.time) -> None:
        self.path = path
        #: Wall seconds: rows' last counts are compared across processes.
        self.now = now
        self._lock = threading.Lock()  # the pending counts
        self._db_lock = threading.Lock()  # the connection
        #: Counts not written yet: the sum, and when the first was counted.
        self._pending: dict[_Key, tuple[float, float]] = {}
        self._due = False  # a write is due (now or by a timer)
        self._written = float("-inf")  # time.monotonic() of the last write
        self._pruned = float("-inf")
        self._db = sqlite3.connect(
            str(path) if path is not None else ":memory:",
            timeout=10,
            isolation_level=None,
            check_same_thread=False,
        )
        with self._db_lock:
            if path is not None:
                self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=OFF")
            with self._transaction():
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        self._db.execute(statement)

    # -- counting -----------------------------------------------------------------
    def add(self, metric: str, queue: QueueMeta, kind: str, count: float) -> None:
        """Count ``count`` for the queue; written within :data:`WRITE_SECONDS`."""
        key = (metric, queue.application, queue.name, queue.created, kind)
        with self._lock:
            value, first = self._pending.get(key, (0.0, self.now()))
            self._pending[key] = (value + count, first)
            full = len(self._pending) >= MAX_PENDING
            if self._due and not full:
                return
            self._due = True
            wait = WRITE_SECONDS - (time.monotonic() - self._written)
        if wait <= 0 or full:
            self.write()
            return
        timer = threading.Timer(wait, self.write)
        timer.daemon = True
        timer.start()

    def write(self) -> None:
        """Add this process's pending counts to the table."""
        with self._lock:
            pending, self._pending = self._pending, {}
            self._due = False
            self._written = time.monotonic()
        if not pending:
            return
        try:
            with self._db_lock, self._transaction():
                now = self.now()
                self._db.execute("DELETE FROM gone WHERE at < ?", (now - GONE_SECONDS,))
                for (metric, application, queue, created, kind), counted in pending.items():
                    self._apply(metric, application, queue, created, kind, counted, now)
        except sqlite3.Error as exc:
            log.warning("per-queue metric counts not written to %s: %s", self.path, exc)

    def _apply(
        self,
        metric: str,
        application: str,
        queue: str,
        created: int,
        kind: str,
        counted: tuple[float, float],
        now: float,
    ) -> None:
        db = self._db
        value, first = counted
        if db.execute(
            "SELECT 1 FROM gone WHERE application = ? AND queue = ? AND created = ? AND at > ?",
            (application, queue, created, first),
        ).fetchone():
            return  # counted before the queue was deleted
        (newest,) = db.execute(
            "SELECT max(created) FROM counts WHERE application = ? AND queue = ?",
            (application, queue),
        ).fetchone()
        if newest is not None and created < newest:
            return  # an earlier queue of the name, deleted since
        if newest is not None and created > newest:
            self._drop(application, queue)  # created again: start from zero
        if not self._holds(metric, application, queue):
            queue = self._place(metric, application, queue, now)
            if queue == OTHER:
                created = 0
        self._db.execute(
            "INSERT INTO counts VALUES (?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (metric, application, queue, kind) "
            "DO UPDATE SET value = value + excluded.value, updated = excluded.updated",
            (metric, application, queue, kind, created, value, now),
        )

    def _holds(self, metric: str, application: str, queue: str) -> bool:
        return bool(
            self._db.execute(
                "SELECT 1 FROM places WHERE metric = ? AND application = ? AND queue = ?",
                (metric, application, queue),
            ).fetchone()
        )

    def _place(self, metric: str, application: str, queue: str, now: float) -> str:
        """Where a queue without rows is counted: its own (within the caps,
        perhaps in the place of the application's longest idle queue) or
        :data:`OTHER`."""
        db = self._db
        (mine,) = db.execute(
            "SELECT count(*) FROM places WHERE metric = ? AND application = ?",
            (metric, application),
        ).fetchone()
        (everyone,) = db.execute(
            "SELECT count(*) FROM places WHERE metric = ?", (metric,)
        ).fetchone()
        if mine < PER_APPLICATION and everyone < MAX_QUEUES:
            db.execute("INSERT INTO places VALUES (?, ?, ?)", (metric, application, queue))
            return queue
        idle = db.execute(
            "SELECT queue, max(updated) AS last FROM counts "
            "WHERE metric = ? AND application = ? AND queue != ? "
            "GROUP BY queue ORDER BY last LIMIT 1",
            (metric, application, OTHER),
        ).fetchone()
        if idle is None or idle[1] > now - IDLE:
            return OTHER
        db.execute(
            "INSERT INTO counts SELECT metric, application, ?, kind, 0, value, updated "
            "FROM counts WHERE metric = ? AND application = ? AND queue = ? "
            "ON CONFLICT (metric, application, queue, kind) "
            "DO UPDATE SET value = value + excluded.value",
            (OTHER, metric, application, idle[0]),
        )
        for table in ("counts", "places"):
            db.execute(
                f"DELETE FROM {table} WHERE metric = ? AND application = ? AND queue = ?",
                (metric, application, idle[0]),
            )
        db.execute("INSERT INTO places VALUES (?, ?, ?)", (metric, application, queue))
        return queue

    # -- forgetting ---------------------------------------------------------------
    def forget(self, queue: QueueMeta) -> None:
        """The queue is deleted: its series go, in every process sharing the table."""
        with self._lock:
            for key in [k for k in self._pending if k[1:3] == (queue.application, queue.name)]:
                del self._pending[key]
        try:
            with self._db_lock, self._transaction():
                self._drop(queue.application, queue.name)
                self._db.execute(
                    "INSERT OR REPLACE INTO gone VALUES (?, ?, ?, ?)",
                    (queue.application, queue.name, queue.created, self.now()),
                )
        except sqlite3.Error as exc:
            log.warning("a deleted queue's metric counts not removed from %s: %s", self.path, exc)

    def _drop(self, application: str, queue: str) -> None:
        for table in ("counts", "places"):
            self._db.execute(
                f"DELETE FROM {table} WHERE application = ? AND queue = ?",
                (application, queue),
            )

    def prune(
        self,
        list_queues: Callable[[str, int, str | None], list[QueueMeta]],
        now_micros: Callable[[], int],
    ) -> None:
        """Drop the rows of queues deleted through other API nodes: each
        application's queues are listed (``Storage.list_queues``), at most
        every :data:`PRUNE_SECONDS`; a queue created after the listing began
        (give or take :data:`SKEW_MICROS`) is spared."""
        if time.monotonic() - self._pruned < PRUNE_SECONDS:
            return
        self._pruned = time.monotonic()
        self.write()
        before = now_micros() - SKEW_MICROS
        with self._db_lock:
            applications = [
                row[0] for row in self._db.execute("SELECT DISTINCT application FROM counts")
            ]
        for application in applications:
            existing = {meta.name: meta.created for meta in every_queue(list_queues, application)}
            with self._db_lock, self._transaction():
                rows = self._db.execute(
                    "SELECT DISTINCT queue, created FROM counts "
                    "WHERE application = ? AND queue != ? AND created < ?",
                    (application, OTHER, before),
                ).fetchall()
                for queue, created in rows:
                    if existing.get(queue) != created:
                        self._drop(application, queue)

    # -- reading ------------------------------------------------------------------
    def counts(self) -> list[Count]:
        """Every series, this process's pending counts written first."""
        self.write()
        with self._db_lock:
            rows = self._db.execute(
                "SELECT metric, application, queue, kind, value FROM counts "
                "ORDER BY metric, application, queue, kind"
            ).fetchall()
        return [Count(*row) for row in rows]

    def close(self) -> None:
        with self._db_lock:
            self._db.close()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """One write transaction (the caller holds the connection's lock)."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
