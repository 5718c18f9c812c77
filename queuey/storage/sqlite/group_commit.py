"""The SQLite write path: concurrent writers share one durable commit.

Every post, reservation and receipt call (ack, release, extend, reopen) is a
*job*: a piece of work run inside a write transaction. Callers waiting for
the write lock at the same time are served by whichever of them gets it
first, in one transaction and one commit (:class:`GroupCommit`), each job
under a savepoint of its own, so one caller's failure never touches
another's; every caller returns only after the commit holding its work is
durable. (A process groups only its own callers; the other processes
sharing the file wait on its lock file.)

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
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from queuey import ids
from queuey.clock import Clock
from queuey.errors import Catalogued, StorageUnavailable
from queuey.model import Message, NewMessage, QueueMeta
from queuey.storage.sqlite.database import Database, WriteLockTimeout, unavailable
from queuey.storage.sqlite.minting import DedupIds, delayed_id
from queuey.storage.sqlite.schema import dump_attributes, last_ts, tiebreak

log = logging.getLogger(__name__)

T = TypeVar("T")

INSERT_MESSAGE = (
    "INSERT INTO messages (incarnation, partition, ts, tiebreak, id, expires, body, "
    "priority, attributes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


class Transaction:
    """The write transaction a group of jobs shares: the writer connection,
    and the file's ``last_ts`` as it stands in the transaction (read once,
    written once, before the commit, if a job raised it)."""

    __slots__ = ("conn", "_last", "_stored")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self._last: int | None = None
        self._stored: int | None = None

    def last_ts(self) -> int:
        """``last_ts`` as the jobs so far left it (see :func:`.schema.last_ts`)."""
        if self._last is None:
            self._last = self._stored = last_ts(self.conn)
        return self._last

    def raise_last_ts(self, value: int) -> None:
        """Move ``last_ts`` up to ``value`` (never down)."""
        if value > self.last_ts():
            self._last = value

    def savepoint(self) -> int | None:
        """What :meth:`rollback_to` restores when a job's savepoint is rolled back."""
        return self._last

    def rollback_to(self, saved: int | None) -> None:
        self._last = saved if saved is not None else self._stored

    def flush(self) -> None:
        """Write ``last_ts`` if a job raised it."""
        if self._last != self._stored:
            self.conn.execute("UPDATE state SET value = ? WHERE key = 'last_ts'", (self._last,))
            self._stored = self._last


class Job(Generic[T]):
    """One caller's work waiting for the next group commit."""

    __slots__ = ("work", "result", "error", "done")

    def __init__(self, work: Callable[[Transaction], T]) -> None:
        self.work = work
        self.result: T | None = None
        self.error: Exception | None = None
        #: A commit resolved the job (result or error).
        self.done = False

    def fail(self, error: Exception) -> None:
        self.error = error
        self.result = None

    def outcome(self) -> T:
        """The caller's answer: its work's result once durable, or an exception."""
        if self.error is not None:
            raise self.error
        if not self.done:
            raise StorageUnavailable("sqlite: the write was not completed", retry_after=1)
        return self.result  # type: ignore[return-value]


def failed(exc: BaseException) -> Exception:
    """The error one caller sees for work that did not commit (one per caller):
    the service's own errors as raised, SQLite's and anything else as
    ``StorageUnavailable``."""
    if isinstance(exc, Catalogued):
        return exc
    if isinstance(exc, sqlite3.Error):
        return unavailable(exc)
    error = StorageUnavailable(f"sqlite: write failed ({type(exc).__name__})", retry_after=1)
    error.__cause__ = exc
    return error


class GroupCommit:
    """Runs the work of every caller waiting on the write lock in one commit."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._pending_lock = threading.Lock()
        self._pending: list[Job] = []
        #: Callers whose job a commit took while they gave up on the write
        #: lock wait here for its outcome (rare: no event per job is made).
        self._resolved = threading.Condition(self._pending_lock)
        self._awaiting = 0

    def run(self, work: Callable[[Transaction], T]) -> T:
        """``work``'s result, once the commit holding it is durable; concurrent
        callers share one commit (group commit).

        Each caller's work runs under a savepoint of its own, so one caller's
        failure never touches another's. Every caller gets its result or an
        exception: if the group's commit fails, for whatever reason, every
        caller of the group gets that failure.

        A caller waits for the write lock at most ``busy_timeout``; if the lock
        stays busy that long it gets ``StorageUnavailable`` and its job is
        withdrawn, so nothing is written for a caller answered with an error
        (unless a commit had already taken the job: then its outcome is awaited).
        """
        job: Job[T] = Job(work)
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

    def _commit_jobs(self, jobs: list[Job]) -> None:
        """Run every pending job in one transaction (caller holds the write lock).

        Resolves every job (result or error) before returning, even when
        something other than SQLite fails: a job left unresolved would be
        answered as an empty success, and a transaction left open would hold
        SQLite's write lock for good.
        """
        conn = self.db.writer
        try:
            conn.execute("BEGIN IMMEDIATE")
            txn = Transaction(conn)
            if len(jobs) == 1:
                # Alone in the commit: the transaction is the job's savepoint
                # (a failure rolls back exactly its work).
                jobs[0].result = jobs[0].work(txn)
            else:
                for job in jobs:
                    self._run_job(txn, job)
            txn.flush()
            conn.execute("COMMIT")
        except BaseException as exc:
            if not isinstance(exc, sqlite3.Error | Catalogued):
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

    def _run_job(self, txn: Transaction, job: Job) -> None:
        """One caller's work under its own savepoint; a failure fails that caller only."""
        conn = txn.conn
        conn.execute("SAVEPOINT job")
        saved = txn.savepoint()
        try:
            job.result = job.work(txn)
            conn.execute("RELEASE job")
        except Exception as exc:
            if not isinstance(exc, sqlite3.Error | Catalogued):
                log.error("sqlite: a write failed", exc_info=exc)
            conn.execute("ROLLBACK TO job")
            conn.execute("RELEASE job")
            txn.rollback_to(saved)
            job.fail(failed(exc))


class MessageWriter:
    """Posts: mints ids and inserts messages as jobs of a :class:`GroupCommit`."""

    def __init__(self, commits: GroupCommit, clock: Clock, dedup_window: int = 300) -> None:
        self.commits = commits
        self.clock = clock
        self._ids = ids.IdGenerator()
        self._dedup = DedupIds(dedup_window)

    def put(self, queue: QueueMeta, messages: Sequence[NewMessage]) -> list[Message]:
        """Store messages (see :meth:`GroupCommit.run`): all of them with ids,
        or an exception; never an empty or partial success."""
        stored = self.commits.run(lambda txn: self._insert(txn, queue, messages))
        if len(stored) != len(messages):
            raise StorageUnavailable("sqlite: the write was not completed", retry_after=1)
        return stored

    def _insert(
        self, txn: Transaction, queue: QueueMeta, messages: Sequence[NewMessage]
    ) -> list[Message]:
        """Mint ids after ``last_ts`` and insert the messages; ``last_ts`` moves
        to the newest ordinary id.

        A message with a ``dedup_id`` seen in this queue incarnation within the
        window is answered with the first message and stores nothing.
        """
        conn = txn.conn
        last = txn.last_ts()
        now = self.clock.now_micros()
        rows = []
        stored = []
        for message in messages:
            if message.dedup_id is not None:
                first = self._dedup.find(conn, queue, message, now)
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
                    queue.incarnation,
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
                self._dedup.remember(conn, queue, message.dedup_id, stored_message, now)
        conn.executemany(INSERT_MESSAGE, rows)
        txn.raise_last_ts(last)
        return stored
