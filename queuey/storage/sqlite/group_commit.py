"""The SQLite write path: concurrent writers share one durable commit.

Why ids are minted inside the write transaction: SQLite serialises writers, so a
message id taken while holding the write lock is larger than every id committed
before it. A reader that has seen id X therefore sees every message with an id
below X that will ever commit, and invariant 2 (no reader skips) holds with no
read delay. The last minted timestamp lives in the file, so several processes
sharing one file keep the property too.

A delayed message is the exception: its id is minted at ``now + delay``
while ``last_ts`` moves only to ``now`` (as for an ordinary post), so later
posts keep ids near their post time and the delayed message appears in id
order when it is due. A reader that meets a
due delayed message above ``last_ts`` therefore cannot tell whether a write
still in flight holds a smaller id; the backend settles that with a fence
(``SQLiteStorage`` says how) instead of a read delay.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Sequence

from queuey import ids
from queuey.clock import Clock
from queuey.errors import StorageUnavailable
from queuey.model import Message, NewMessage, QueueMeta
from queuey.storage.sqlite.database import Database, WriteLockTimeout, unavailable
from queuey.storage.sqlite.minting import DedupIds, delayed_id
from queuey.storage.sqlite.schema import dump_attributes, last_ts, tiebreak

log = logging.getLogger(__name__)

INSERT_MESSAGE = (
    "INSERT INTO messages (incarnation, partition, ts, tiebreak, id, expires, body, "
    "priority, attributes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


class WriteJob:
    """One caller's messages waiting for the next group commit."""

    def __init__(self, queue: QueueMeta, messages: Sequence[NewMessage]) -> None:
        self.queue = queue
        self.messages = messages
        self.stored: list[Message] = []
        self.error: StorageUnavailable | None = None
        #: A commit resolved the job (ids or error).
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

    def __init__(self, db: Database, clock: Clock, dedup_window: int = 300) -> None:
        self.db = db
        self.clock = clock
        self._ids = ids.IdGenerator()
        self._dedup = DedupIds(dedup_window)
        self._pending_lock = threading.Lock()
        self._pending: list[WriteJob] = []
        #: Callers whose job a commit took while they gave up on the write
        #: lock wait here for its outcome (rare: no event per job is made).
        self._resolved = threading.Condition(self._pending_lock)
        self._awaiting = 0

    def put(self, queue: QueueMeta, messages: Sequence[NewMessage]) -> list[Message]:
        """Store messages; concurrent callers share one commit (group commit).

        Each caller's messages go in under a savepoint of their own, so one
        caller's failure never touches another's, and a caller returns only
        after the commit holding its messages is durable. Every caller gets
        its ids or an exception: if the group's commit fails, for whatever
        reason, every caller of the group gets that failure.

        A caller waits for the write lock at most ``busy_timeout``; if the lock
        stays busy that long it gets ``StorageUnavailable`` and its job is
        withdrawn, so nothing is stored for a caller answered with an error
        (unless a commit had already taken the job: then its outcome is awaited).
        """
        job = WriteJob(queue, messages)
        with self._pending_lock:
            self._pending.append(job)
        try:
            with self.db.write_lock:
                if not job.done:
                    with self._pending_lock:
                        jobs, self._pending = self._pending, []
                    self._commit_jobs(jobs)
        except WriteLockTimeout:
            with self._pending_lock:
                if job in self._pending:
                    self._pending.remove(job)
                    raise
                self._awaiting += 1
                try:
                    self._resolved.wait_for(lambda: job.done, self.db.busy_timeout)
                finally:
                    self._awaiting -= 1
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
            last = last_ts(conn)
            if len(jobs) == 1:
                # Alone in the commit: the transaction is the job's savepoint
                # (a failure rolls back exactly its messages).
                last = self._insert(conn, jobs[0], last)
            else:
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
            if self._awaiting:  # read after every done is set: a waiter sees one or the other
                with self._resolved:
                    self._resolved.notify_all()

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
        """Mint ids after ``last`` and insert the job's messages; returns the new last.

        A message with a ``dedup_id`` seen in this queue incarnation within the
        window is answered with the first message and stores nothing.
        """
        now = self.clock.now_micros()
        rows = []
        stored = []
        for message in job.messages:
            if message.dedup_id is not None:
                first = self._dedup.find(conn, job.queue, message, now)
                if first is not None:
                    stored.append(first)
                    continue
            if message.delay > 0:
                message_id = delayed_id(now + message.delay * ids.MICROS, last)
                ts = ids.micros_of(message_id)
                # Settled up to now (not up to the delayed id): readers then
                # rarely need a fence for it once it is due.
                last = max(last, now)
            else:
                ts = last = self._ids.next_micros(max(now, last + 1))
                message_id = self._ids.make(ts)
            # Expiry counts from the post, not from the (later) delayed timestamp.
            expires = (now if message.delay > 0 else ts) + message.ttl * ids.MICROS
            attributes = dict(message.attributes) if message.attributes else None
            rows.append(
                (
                    job.queue.incarnation,
                    message.partition,
                    ts,
                    tiebreak(message_id),
                    message_id.bytes,
                    expires,
                    message.body,
                    message.priority,
                    dump_attributes(attributes),
                )
            )
            stored_message = Message(
                message_id,
                ts,
                message.partition,
                message.body,
                expires,
                message.priority,
                attributes,
            )
            stored.append(stored_message)
            if message.dedup_id is not None:
                # Inserted at once: a later message of this batch (or of another
                # job in this commit) with the same id must find it.
                conn.executemany(INSERT_MESSAGE, rows)
                rows = []
                self._dedup.remember(conn, job.queue, message.dedup_id, stored_message, now)
        conn.executemany(INSERT_MESSAGE, rows)
        job.stored = stored
        return last
