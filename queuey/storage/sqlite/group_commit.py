"""The SQLite write path: concurrent writers share one durable commit.

Why ids are minted inside the write transaction: SQLite serialises writers, so a
message id taken while holding the write lock is larger than every id committed
before it. A reader that has seen id X therefore sees every message with an id
below X that will ever commit, and invariant 2 (no reader skips) holds with no
read delay. The last minted timestamp lives in the file, so several processes
sharing one file keep the property too.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Sequence

from queuey import ids
from queuey.clock import Clock
from queuey.errors import StorageUnavailable
from queuey.storage import Message, NewMessage, QueueMeta
from queuey.storage.sqlite.database import Database, unavailable
from queuey.storage.sqlite.schema import tiebreak

log = logging.getLogger(__name__)


class WriteJob:
    """One caller's messages waiting for the next group commit."""

    def __init__(self, queue: QueueMeta, messages: Sequence[NewMessage]) -> None:
        self.queue = queue
        self.messages = messages
        self.stored: list[Message] = []
        self.error: StorageUnavailable | None = None
        self.done = False

    def fail(self, error: StorageUnavailable) -> None:
        self.error = error
        self.stored = []

    def outcome(self) -> list[Message]:
        """The caller's answer: all its messages with ids, or an exception.

        Never an empty or partial success, whatever happened in the group.
        """
        if self.error is not None:
            raise self.error
        if not self.done or len(self.stored) != len(self.messages):
            raise StorageUnavailable("sqlite: the write was not completed", retry_after=1)
        return self.stored


def failed(exc: BaseException) -> StorageUnavailable:
    """The error one caller sees for a write that did not commit (one per caller)."""
    if isinstance(exc, sqlite3.Error):
        return unavailable(exc)
    error = StorageUnavailable(f"sqlite: write failed ({type(exc).__name__})", retry_after=1)
    error.__cause__ = exc
    return error


class GroupCommit:
    """Writes messages for every caller waiting on the write lock in one commit."""

    def __init__(self, db: Database, clock: Clock) -> None:
        self.db = db
        self.clock = clock
        self._ids = ids.IdGenerator()
        self._pending_lock = threading.Lock()
        self._pending: list[WriteJob] = []

    def put(self, queue: QueueMeta, messages: Sequence[NewMessage]) -> list[Message]:
        """Store messages; concurrent callers share one commit (group commit).

        Each caller's messages go in under a savepoint of their own, so one
        caller's failure never touches another's, and a caller returns only
        after the commit holding its messages is durable. Every caller gets
        its ids or an exception: if the group's commit fails, for whatever
        reason, every caller of the group gets that failure.
        """
        job = WriteJob(queue, messages)
        with self._pending_lock:
            self._pending.append(job)
        with self.db.write_lock:
            if not job.done:
                with self._pending_lock:
                    jobs, self._pending = self._pending, []
                self._commit_jobs(jobs)
        return job.outcome()

    def _commit_jobs(self, jobs: list[WriteJob]) -> None:
        """Write every pending job in one transaction (caller holds the write lock).

        Resolves every job (ids or error) before returning, even when something
        other than SQLite fails: a job left unresolved would be answered as an
        empty success, and a transaction left open would hold SQLite's write
        lock for good.
        """
        conn = self.db.writer
        try:
            conn.execute("BEGIN IMMEDIATE")
            (last,) = conn.execute("SELECT value FROM state WHERE key = 'last_ts'").fetchone()
            for job in jobs:
                last = self._write_job(conn, job, last)
            conn.execute("UPDATE state SET value = ? WHERE key = 'last_ts'", (last,))
            conn.execute("COMMIT")
        except BaseException as exc:
            if not isinstance(exc, sqlite3.Error):
                log.error("sqlite: group commit of %d writes failed", len(jobs), exc_info=exc)
            self.db.rollback()
            for job in jobs:
                job.fail(failed(exc))
            if not isinstance(exc, Exception):
                raise
        finally:
            for job in jobs:
                job.done = True

    def _write_job(self, conn: sqlite3.Connection, job: WriteJob, last: int) -> int:
        """One caller's messages under its own savepoint; a failure fails that caller only."""
        conn.execute("SAVEPOINT job")
        try:
            last = self._insert(conn, job, last)
            conn.execute("RELEASE job")
        except Exception as exc:
            if not isinstance(exc, sqlite3.Error):
                log.error("sqlite: a write of %d messages failed", len(job.messages), exc_info=exc)
            conn.execute("ROLLBACK TO job")
            conn.execute("RELEASE job")
            job.fail(failed(exc))
        return last

    def _insert(self, conn: sqlite3.Connection, job: WriteJob, last: int) -> int:
        """Mint ids after ``last`` and insert the job's messages; returns the new last."""
        now = self.clock.now_micros()
        rows = []
        stored = []
        for message in job.messages:
            ts = self._ids.next_micros(max(now, last + 1))
            last = ts
            message_id = self._ids.make(ts)
            expires = ts + message.ttl * ids.MICROS
            rows.append(
                (
                    job.queue.incarnation,
                    message.partition,
                    ts,
                    tiebreak(message_id),
                    message_id.bytes,
                    expires,
                    message.body,
                )
            )
            stored.append(Message(message_id, ts, message.partition, message.body, expires))
        conn.executemany("INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
        job.stored = stored
        return last
