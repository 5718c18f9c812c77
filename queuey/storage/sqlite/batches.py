"""Deleting many rows without holding the file's write lock for long.

Two jobs need it: removing the rows of a purged or deleted queue's old
incarnation (``SQLiteStorage.purge_queue`` and ``delete_queue`` switch the
queue first, in one short transaction, and record the old incarnation in the
``retired`` table), and the expiry sweep. Both delete a batch per
transaction and pause after each one as long as it took (within
:data:`BATCH_PAUSE`), so writers of this process and of other processes
sharing the file take their turns in between: a post never waits for a whole
job, only for a batch at most.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

from queuey.storage.sqlite.database import Database

#: Rows of a retired incarnation removed per transaction.
RECLAIM_BATCH = 2000
#: Bounds of the pause after each batch, in seconds (the pause is as long as the
#: batch took). Writers of other processes waiting on the file lock need it to
#: get in: the kernel wakes them when the lock is released but does not keep
#: it for them. So a long job holds the lock about half the time at most.
BATCH_PAUSE = (0.001, 0.05)
#: Every table holding rows of a queue incarnation, with its primary key.
INCARNATION_TABLES = {
    "messages": "incarnation, partition, ts, tiebreak",
    "leases": "incarnation, subscription, partition, ts, tiebreak",
    "positions": "incarnation, subscription, partition, priority",
    "subscriptions": "incarnation, subscription",
    "dedup": "incarnation, dedup_id",
}


def batch_delete(table: str, where: str) -> str:
    """A ``DELETE`` of up to ``LIMIT ?`` rows of ``table`` matching ``where``, by primary key."""
    key = INCARNATION_TABLES[table]
    return f"DELETE FROM {table} WHERE ({key}) IN (SELECT {key} FROM {table} WHERE {where} LIMIT ?)"


RECLAIM = {table: batch_delete(table, "incarnation = ?") for table in INCARNATION_TABLES}


def retire(conn: sqlite3.Connection, incarnation: str, now_micros: int) -> None:
    """Record an incarnation whose rows are to go (inside the caller's write
    transaction, the one that made them unreachable)."""
    conn.execute(
        "INSERT OR IGNORE INTO retired (incarnation, since) VALUES (?, ?)",
        (incarnation, now_micros),
    )


class BatchDeleter:
    """Runs deletions a batch per write transaction; ``stopping()`` says the
    storage is closing (a job then ends after its current batch)."""

    def __init__(self, db: Database, stopping: Callable[[], bool]) -> None:
        self.db = db
        self.stopping = stopping

    def run(self, statement: str, params: tuple, batch: int) -> int:
        """Run a ``DELETE ... LIMIT ?`` (its last parameter) until it removes
        fewer than ``batch`` rows; returns how many went."""
        removed = 0
        shortest, longest = BATCH_PAUSE
        while True:
            started = time.monotonic()
            with self.db.write() as conn:
                count = conn.execute(statement, (*params, batch)).rowcount
            removed += count
            if count < batch or self.stopping():
                return removed
            time.sleep(min(max(time.monotonic() - started, shortest), longest))

    def retired(self) -> list[str]:
        """The incarnations whose rows are still to go."""
        rows = self.db.read(lambda conn: conn.execute("SELECT incarnation FROM retired").fetchall())
        return [incarnation for (incarnation,) in rows]

    def reclaim(self, incarnation: str) -> None:
        """Delete a retired incarnation's rows, then its record."""
        for statement in RECLAIM.values():
            self.run(statement, (incarnation,), RECLAIM_BATCH)
        if not self.stopping():
            with self.db.write() as conn:
                conn.execute("DELETE FROM retired WHERE incarnation = ?", (incarnation,))
