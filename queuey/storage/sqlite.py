"""The embedded storage backend: one SQLite file, WAL mode, durable commits.

Why ids are minted inside the write transaction: SQLite serialises writers, so a
message id taken while holding the write lock is larger than every id committed
before it. A reader that has seen id X therefore sees every message with an id
below X that will ever commit, and invariant 2 (no reader skips) holds with no
read delay. The last minted timestamp lives in the file, so several processes
sharing one file keep the property too.

Reads use one connection per thread (WAL lets them run beside the writer);
writes go through a single connection under a lock.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from queuey import ids
from queuey.clock import Clock
from queuey.errors import (
    ConfigurationError,
    InvalidUpdate,
    QueueExists,
    QueueNotFound,
    StorageUnavailable,
)
from queuey.storage import (
    Message,
    MessageRef,
    NewMessage,
    QueueMeta,
    ReadQuery,
    Storage,
    merge_partitions,
)

SCHEMA_VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS queues (
    application TEXT NOT NULL,
    name TEXT NOT NULL,
    partitions INTEGER NOT NULL,
    ttl INTEGER NOT NULL,
    type TEXT NOT NULL,
    consistency TEXT NOT NULL,
    created INTEGER NOT NULL,
    incarnation TEXT NOT NULL,
    PRIMARY KEY (application, name)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS messages (
    incarnation TEXT NOT NULL,
    partition INTEGER NOT NULL,
    ts INTEGER NOT NULL,
    tiebreak BLOB NOT NULL,
    id BLOB NOT NULL,
    expires INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (incarnation, partition, ts, tiebreak)
) WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS messages_by_expiry ON messages (expires);

CREATE TABLE IF NOT EXISTS checkpoints (
    application TEXT NOT NULL,
    queue TEXT NOT NULL,
    consumer TEXT NOT NULL,
    partition INTEGER NOT NULL,
    id BLOB NOT NULL,
    PRIMARY KEY (application, queue, consumer, partition)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS state (
    key TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
"""

T = TypeVar("T")
_COLUMNS = "id, ts, partition, body, expires"


def _tiebreak(message_id: uuid.UUID) -> bytes:
    return ids.order_key(message_id)[1]


def _row_to_message(row: tuple) -> Message:
    return Message(
        id=uuid.UUID(bytes=row[0]),
        timestamp=row[1],
        partition=row[2],
        body=row[3],
        expires=row[4],
    )


def _row_to_queue(row: tuple) -> QueueMeta:
    return QueueMeta(
        application=row[0],
        name=row[1],
        partitions=row[2],
        ttl=row[3],
        type=row[4],
        consistency=row[5],
        created=row[6],
        incarnation=row[7],
    )


class _WriteJob:
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


class SQLiteStorage(Storage):
    """Queues, messages and checkpoints in one SQLite file."""

    write_timeout_seconds = 0.0

    def __init__(
        self,
        path: str | Path,
        clock: Clock,
        busy_timeout: float = 10.0,
        sweep_interval: float = 60.0,
    ) -> None:
        self.path = str(path)
        self.clock = clock
        self.busy_timeout = busy_timeout
        self.sweep_interval = sweep_interval
        self._ids = ids.IdGenerator()
        self._local = threading.local()
        self._write_lock = threading.Lock()
        self._pending_lock = threading.Lock()
        self._pending: list[_WriteJob] = []
        self._last_sweep = time.monotonic()
        self._all_connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._writer = self._connect()
        self._run(self._create_schema)

    # -- connections ------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path,
            timeout=self.busy_timeout,
            isolation_level=None,  # we issue BEGIN/COMMIT ourselves
            check_same_thread=False,
        )
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout * 1000)}")
        with self._connections_lock:
            self._all_connections.append(conn)
        return conn

    def _reader(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connect()
        return conn

    def _run(self, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except sqlite3.Error as exc:
            raise StorageUnavailable(f"sqlite: {exc}", retry_after=1) from exc

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction holding SQLite's write lock from its first statement."""
        with self._write_lock:
            conn = self._writer
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield conn
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise StorageUnavailable(f"sqlite: {exc}", retry_after=1) from exc

    def _create_schema(self) -> None:
        with self._write() as conn:
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(
                "INSERT OR IGNORE INTO state (key, value) VALUES ('schema_version', ?)",
                (SCHEMA_VERSION,),
            )
            conn.execute("INSERT OR IGNORE INTO state (key, value) VALUES ('last_ts', 0)")

    # -- queues -------------------------------------------------------------------
    def create_queue(self, meta: QueueMeta) -> QueueMeta:
        if not meta.created:
            meta = replace(meta, created=self.clock.now_micros())
        with self._write() as conn:
            try:
                conn.execute(
                    "INSERT INTO queues VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        meta.application,
                        meta.name,
                        meta.partitions,
                        meta.ttl,
                        meta.type,
                        meta.consistency,
                        meta.created,
                        meta.incarnation,
                    ),
                )
            except sqlite3.IntegrityError as exc:
                raise QueueExists(meta.name) from exc
        return meta

    def _get_queue(self, conn: sqlite3.Connection, application: str, name: str) -> QueueMeta:
        row = conn.execute(
            "SELECT * FROM queues WHERE application = ? AND name = ?", (application, name)
        ).fetchone()
        if row is None:
            raise QueueNotFound(name)
        return _row_to_queue(row)

    def get_queue(self, application: str, name: str) -> QueueMeta:
        return self._run(lambda: self._get_queue(self._reader(), application, name))

    def list_queues(
        self, application: str, limit: int = 100, after: str | None = None
    ) -> list[QueueMeta]:
        def query() -> list[QueueMeta]:
            rows = self._reader().execute(
                "SELECT * FROM queues WHERE application = ? AND name > ? ORDER BY name LIMIT ?",
                (application, after or "", limit),
            )
            return [_row_to_queue(row) for row in rows]

        return self._run(query)

    def update_queue(self, application: str, name: str, **changes: Any) -> QueueMeta:
        allowed = {"partitions", "ttl", "type", "consistency"}
        unknown = set(changes) - allowed
        if unknown:
            raise InvalidUpdate(f"cannot change {', '.join(sorted(unknown))}")
        with self._write() as conn:
            meta = self._get_queue(conn, application, name)
            if changes.get("partitions") is not None and changes["partitions"] < meta.partitions:
                raise InvalidUpdate("partitions may only grow")
            meta = replace(meta, **{k: v for k, v in changes.items() if v is not None})
            conn.execute(
                "UPDATE queues SET partitions = ?, ttl = ?, type = ?, consistency = ? "
                "WHERE application = ? AND name = ?",
                (meta.partitions, meta.ttl, meta.type, meta.consistency, application, name),
            )
        return meta

    def delete_queue(self, application: str, name: str) -> None:
        with self._write() as conn:
            meta = self._get_queue(conn, application, name)
            conn.execute(
                "DELETE FROM queues WHERE application = ? AND name = ?", (application, name)
            )
            conn.execute("DELETE FROM messages WHERE incarnation = ?", (meta.incarnation,))
            conn.execute(
                "DELETE FROM checkpoints WHERE application = ? AND queue = ?", (application, name)
            )

    def purge_queue(self, application: str, name: str) -> QueueMeta:
        with self._write() as conn:
            meta = self._get_queue(conn, application, name)
            fresh = replace(meta, incarnation=uuid.uuid4().hex)
            conn.execute(
                "UPDATE queues SET incarnation = ? WHERE application = ? AND name = ?",
                (fresh.incarnation, application, name),
            )
            conn.execute("DELETE FROM messages WHERE incarnation = ?", (meta.incarnation,))
        return fresh

    # -- messages -----------------------------------------------------------------
    def put_messages(self, queue: QueueMeta, messages: Sequence[NewMessage]) -> list[Message]:
        """Store messages; concurrent callers share one commit (group commit).

        Each caller's messages go in under a savepoint of their own, so one
        caller's failure never touches another's, and a caller returns only
        after the commit holding its messages is durable.
        """
        job = _WriteJob(queue, messages)
        with self._pending_lock:
            self._pending.append(job)
        with self._write_lock:
            if not job.done:
                with self._pending_lock:
                    jobs, self._pending = self._pending, []
                self._commit_jobs(jobs)
        if job.error is not None:
            raise job.error
        self._maybe_sweep()
        return job.stored

    def _commit_jobs(self, jobs: list[_WriteJob]) -> None:
        """Write every pending job in one transaction (caller holds the write lock)."""
        conn = self._writer
        try:
            conn.execute("BEGIN IMMEDIATE")
            (last,) = conn.execute("SELECT value FROM state WHERE key = 'last_ts'").fetchone()
            for job in jobs:
                conn.execute("SAVEPOINT job")
                try:
                    last = self._insert(conn, job, last)
                    conn.execute("RELEASE job")
                except sqlite3.Error as exc:
                    conn.execute("ROLLBACK TO job")
                    conn.execute("RELEASE job")
                    job.fail(StorageUnavailable(f"sqlite: {exc}", retry_after=1))
            conn.execute("UPDATE state SET value = ? WHERE key = 'last_ts'", (last,))
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            for job in jobs:
                job.fail(StorageUnavailable(f"sqlite: {exc}", retry_after=1))
        for job in jobs:
            job.done = True

    def _insert(self, conn: sqlite3.Connection, job: _WriteJob, last: int) -> int:
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
                    _tiebreak(message_id),
                    message_id.bytes,
                    expires,
                    message.body,
                )
            )
            stored.append(Message(message_id, ts, message.partition, message.body, expires))
        conn.executemany("INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
        job.stored = stored
        return last

    def read_messages(self, queue: QueueMeta, query: ReadQuery) -> list[Message]:
        descending = query.order == "descending"
        where = ["incarnation = ?", "partition = ?", "expires > ?"]
        params: list[Any] = [query.now_micros]
        if query.after_id is not None:
            where.append("(ts, tiebreak) > (?, ?)")
            params += [ids.micros_of(query.after_id), _tiebreak(query.after_id)]
        if query.after_micros is not None:
            where.append("ts > ?")
            params.append(query.after_micros)
        if query.until_micros is not None:
            where.append("ts < ?")
            params.append(query.until_micros)
        direction = "DESC" if descending else "ASC"
        sql = (
            f"SELECT {_COLUMNS} FROM messages WHERE {' AND '.join(where)} "
            f"ORDER BY ts {direction}, tiebreak {direction} LIMIT ?"
        )

        def run() -> list[Message]:
            conn = self._reader()
            # One read transaction: every partition is read from the same
            # snapshot, or a later commit in one partition could be merged in
            # ahead of an earlier one missed in another (a skip). The cursors
            # are consumed lazily by the merge, so a read holds one page.
            conn.execute("BEGIN")
            try:
                cursors = [
                    map(
                        _row_to_message,
                        conn.execute(sql, (queue.incarnation, p, *params, query.limit)),
                    )
                    for p in query.partitions
                ]
                return merge_partitions(cursors, query.limit, descending)
            finally:
                conn.execute("COMMIT")

        return self._run(run)

    def get_messages(
        self, queue: QueueMeta, refs: Sequence[MessageRef], now_micros: int
    ) -> list[Message]:
        def run() -> list[Message]:
            conn = self._reader()
            found = []
            for ref in refs:
                row = conn.execute(
                    f"SELECT {_COLUMNS} FROM messages WHERE incarnation = ? AND partition = ? "
                    "AND ts = ? AND tiebreak = ? AND expires > ?",
                    (
                        queue.incarnation,
                        ref.partition,
                        ids.micros_of(ref.id),
                        _tiebreak(ref.id),
                        now_micros,
                    ),
                ).fetchone()
                if row is not None and row[0] == ref.id.bytes:
                    found.append(_row_to_message(row))
            return found

        return self._run(run)

    def delete_messages(self, queue: QueueMeta, refs: Sequence[MessageRef]) -> None:
        with self._write() as conn:
            conn.executemany(
                "DELETE FROM messages WHERE incarnation = ? AND partition = ? AND ts = ? "
                "AND tiebreak = ? AND id = ?",
                [
                    (
                        queue.incarnation,
                        ref.partition,
                        ids.micros_of(ref.id),
                        _tiebreak(ref.id),
                        ref.id.bytes,
                    )
                    for ref in refs
                ],
            )

    def _maybe_sweep(self) -> None:
        """Delete expired rows now and then, off the read path."""
        if time.monotonic() - self._last_sweep < self.sweep_interval:
            return
        self._last_sweep = time.monotonic()
        self.sweep_expired()

    def sweep_expired(self) -> int:
        """Delete every expired message; returns how many went."""
        with self._write() as conn:
            cursor = conn.execute(
                "DELETE FROM messages WHERE expires <= ?", (self.clock.now_micros(),)
            )
            return cursor.rowcount

    # -- checkpoints --------------------------------------------------------------
    def get_checkpoints(self, application: str, queue: str, consumer: str) -> dict[int, uuid.UUID]:
        def run() -> dict[int, uuid.UUID]:
            rows = self._reader().execute(
                "SELECT partition, id FROM checkpoints "
                "WHERE application = ? AND queue = ? AND consumer = ?",
                (application, queue, consumer),
            )
            return {partition: uuid.UUID(bytes=raw) for partition, raw in rows}

        return self._run(run)

    def set_checkpoints(
        self,
        application: str,
        queue: str,
        consumer: str,
        checkpoints: Mapping[int, uuid.UUID],
    ) -> None:
        with self._write() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO checkpoints VALUES (?, ?, ?, ?, ?)",
                [
                    (application, queue, consumer, partition, message_id.bytes)
                    for partition, message_id in checkpoints.items()
                ],
            )

    # -- operations ---------------------------------------------------------------
    def ping(self) -> None:
        self._run(lambda: self._reader().execute("SELECT 1").fetchone())

    def close(self) -> None:
        with self._connections_lock:
            for conn in self._all_connections:
                conn.close()
            self._all_connections.clear()
        self._local = threading.local()


def load_from_config(settings: Mapping[str, Any], clock: Clock) -> SQLiteStorage:
    """Build the backend from ini settings (``queuey.sqlite.*``)."""
    path = settings.get("queuey.sqlite.path", "var/queuey.sqlite3")
    try:
        busy = float(settings.get("queuey.sqlite.busy_timeout", 10))
        sweep = float(settings.get("queuey.sqlite.sweep_interval", 60))
    except ValueError as exc:
        raise ConfigurationError("queuey.sqlite.busy_timeout", str(exc)) from exc
    return SQLiteStorage(path, clock, busy_timeout=busy, sweep_interval=sweep)
