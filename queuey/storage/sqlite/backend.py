"""The SQLite backend: :class:`SQLiteStorage` and ``load_from_config``.

Queues, reads, deletes, checkpoints and the expiry sweep; writes of messages
go through :mod:`.group_commit`, connections through :mod:`.database`, and
the sweep runs in the background (:mod:`.sweeper`), never on a request.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import astuple, replace
from pathlib import Path
from typing import Any

from queuey import ids
from queuey.clock import Clock
from queuey.errors import ConfigurationError, InvalidUpdate, QueueExists, QueueNotFound
from queuey.storage import (
    Message,
    MessageRef,
    NewMessage,
    QueueMeta,
    ReadQuery,
    Storage,
    merge_partitions,
)
from queuey.storage.sqlite.database import Database
from queuey.storage.sqlite.group_commit import GroupCommit
from queuey.storage.sqlite.schema import (
    COLUMNS,
    create_schema,
    row_to_message,
    row_to_queue,
    tiebreak,
)
from queuey.storage.sqlite.sweeper import Sweeper

#: Largest TTL whose expiry (microseconds since the epoch) still fits SQLite's
#: 64-bit INTEGER for every timestamp an id can carry.
MAX_TTL = (2**63 - 1 - ids.MAX_MICROS) // ids.MICROS
#: Expired rows deleted per transaction: the sweep releases the write lock
#: between batches, so posts never wait long behind it.
SWEEP_BATCH = 5000


class SQLiteStorage(Storage):
    """Queues, messages and checkpoints in one SQLite file.

    Expired rows are deleted by a background thread every ``sweep_interval``
    seconds (0 turns it off), started on the first write and stopped by
    :meth:`close`; which rows have expired is decided by ``clock``.
    """

    write_timeout_seconds = 0.0
    max_ttl = MAX_TTL

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
        self._db = Database(self.path, busy_timeout)
        self._commits = GroupCommit(self._db, clock)
        # A lambda, not the bound method: the sweep is looked up at each run.
        self._sweeper = Sweeper(
            lambda: self.sweep_expired(), sweep_interval, f"queuey-sqlite-sweeper {self.path}"
        )
        with self._db.write() as conn:
            create_schema(conn)

    # -- connections ------------------------------------------------------------
    def _reader(self) -> sqlite3.Connection:
        return self._db.reader()

    # -- queues -------------------------------------------------------------------
    def create_queue(self, meta: QueueMeta) -> QueueMeta:
        if not meta.created:
            meta = replace(meta, created=self.clock.now_micros())
        with self._db.write() as conn:
            try:
                conn.execute(
                    "INSERT INTO queues VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    astuple(meta)[:8],  # TEMP until schema v2: the first 8 columns in field order
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
        return row_to_queue(row)

    def get_queue(self, application: str, name: str) -> QueueMeta:
        return self._db.run(lambda: self._get_queue(self._reader(), application, name))

    def list_queues(
        self, application: str, limit: int = 100, after: str | None = None
    ) -> list[QueueMeta]:
        def query() -> list[QueueMeta]:
            rows = self._reader().execute(
                "SELECT * FROM queues WHERE application = ? AND name > ? ORDER BY name LIMIT ?",
                (application, after or "", limit),
            )
            return [row_to_queue(row) for row in rows]

        return self._db.run(query)

    def update_queue(self, application: str, name: str, **changes: Any) -> QueueMeta:
        allowed = {"partitions", "ttl", "type", "consistency"}
        unknown = set(changes) - allowed
        if unknown:
            raise InvalidUpdate(f"cannot change {', '.join(sorted(unknown))}")
        with self._db.write() as conn:
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
        with self._db.write() as conn:
            meta = self._get_queue(conn, application, name)
            conn.execute(
                "DELETE FROM queues WHERE application = ? AND name = ?", (application, name)
            )
            conn.execute("DELETE FROM messages WHERE incarnation = ?", (meta.incarnation,))
            conn.execute(
                "DELETE FROM checkpoints WHERE application = ? AND queue = ?", (application, name)
            )

    def purge_queue(self, application: str, name: str) -> QueueMeta:
        with self._db.write() as conn:
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
        """Store messages; concurrent callers share one commit (see :mod:`.group_commit`)."""
        self._sweeper.start()
        return self._commits.put(queue, messages)

    def read_messages(self, queue: QueueMeta, query: ReadQuery) -> list[Message]:
        descending = query.order == "descending"
        where = ["incarnation = ?", "partition = ?", "expires > ?"]
        params: list[Any] = [query.now_micros]
        if query.after_id is not None:
            where.append("(ts, tiebreak) > (?, ?)")
            params += [ids.micros_of(query.after_id), tiebreak(query.after_id)]
        if query.after_micros is not None:
            where.append("ts > ?")
            params.append(query.after_micros)
        if query.until_micros is not None:
            where.append("ts < ?")
            params.append(query.until_micros)
        direction = "DESC" if descending else "ASC"
        sql = (
            f"SELECT {COLUMNS} FROM messages WHERE {' AND '.join(where)} "
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
                        row_to_message,
                        conn.execute(sql, (queue.incarnation, p, *params, query.limit)),
                    )
                    for p in query.partitions
                ]
                return merge_partitions(cursors, query.limit, descending)
            finally:
                conn.execute("COMMIT")

        return self._db.run(run)

    def get_messages(
        self, queue: QueueMeta, refs: Sequence[MessageRef], now_micros: int
    ) -> list[Message]:
        def run() -> list[Message]:
            conn = self._reader()
            found = []
            for ref in refs:
                row = conn.execute(
                    f"SELECT {COLUMNS} FROM messages WHERE incarnation = ? AND partition = ? "
                    "AND ts = ? AND tiebreak = ? AND expires > ?",
                    (
                        queue.incarnation,
                        ref.partition,
                        ids.micros_of(ref.id),
                        tiebreak(ref.id),
                        now_micros,
                    ),
                ).fetchone()
                if row is not None and row[0] == ref.id.bytes:
                    found.append(row_to_message(row))
            return found

        return self._db.run(run)

    def delete_messages(self, queue: QueueMeta, refs: Sequence[MessageRef]) -> None:
        with self._db.write() as conn:
            conn.executemany(
                "DELETE FROM messages WHERE incarnation = ? AND partition = ? AND ts = ? "
                "AND tiebreak = ? AND id = ?",
                [
                    (
                        queue.incarnation,
                        ref.partition,
                        ids.micros_of(ref.id),
                        tiebreak(ref.id),
                        ref.id.bytes,
                    )
                    for ref in refs
                ],
            )

    def sweep_expired(self) -> int:
        """Delete every message expired by now (``clock``); returns how many went.

        Works in batches of :data:`SWEEP_BATCH`, one transaction each, and ends
        early once the storage is closing.
        """
        now = self.clock.now_micros()
        removed = 0
        while True:
            with self._db.write() as conn:
                count = conn.execute(
                    "DELETE FROM messages WHERE (incarnation, partition, ts, tiebreak) IN "
                    "(SELECT incarnation, partition, ts, tiebreak FROM messages "
                    "WHERE expires <= ? LIMIT ?)",
                    (now, SWEEP_BATCH),
                ).rowcount
            removed += count
            if count < SWEEP_BATCH or self._sweeper.stopping:
                return removed

    # -- checkpoints --------------------------------------------------------------
    def get_checkpoints(self, application: str, queue: str, consumer: str) -> dict[int, uuid.UUID]:
        def run() -> dict[int, uuid.UUID]:
            rows = self._reader().execute(
                "SELECT partition, id FROM checkpoints "
                "WHERE application = ? AND queue = ? AND consumer = ?",
                (application, queue, consumer),
            )
            return {partition: uuid.UUID(bytes=raw) for partition, raw in rows}

        return self._db.run(run)

    def set_checkpoints(
        self,
        application: str,
        queue: str,
        consumer: str,
        checkpoints: Mapping[int, uuid.UUID],
    ) -> None:
        with self._db.write() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO checkpoints VALUES (?, ?, ?, ?, ?)",
                [
                    (application, queue, consumer, partition, message_id.bytes)
                    for partition, message_id in checkpoints.items()
                ],
            )

    # -- operations ---------------------------------------------------------------
    def ping(self) -> None:
        self._db.run(lambda: self._reader().execute("SELECT 1").fetchone())

    def close(self) -> None:
        self._sweeper.stop()
        self._db.close()


def _number(settings: Mapping[str, Any], key: str, default: float) -> float:
    value = settings.get(key, default)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigurationError(key, f"not a number: {value!r}") from None
    if not 0 <= number < float("inf"):
        raise ConfigurationError(key, f"must be a number of seconds, 0 or more: {value!r}")
    return number


def load_from_config(settings: Mapping[str, Any], clock: Clock) -> SQLiteStorage:
    """Build the backend from ini settings (``queuey.sqlite.*``).

    ``queuey.sqlite.sweep_interval`` (seconds, default 60; 0 turns the
    background sweep off) and ``queuey.sqlite.busy_timeout`` (seconds a write
    waits for another process holding the file's write lock, default 10).
    """
    path = settings.get("queuey.sqlite.path", "var/queuey.sqlite3")
    busy = _number(settings, "queuey.sqlite.busy_timeout", 10.0)
    sweep = _number(settings, "queuey.sqlite.sweep_interval", 60.0)
    return SQLiteStorage(path, clock, busy_timeout=busy, sweep_interval=sweep)
