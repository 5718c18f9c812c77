"""Queue metadata on SQLite: create, look up, list and update queues, and the
one short transaction that purges or deletes one.

Purge and delete only switch the queue to a new incarnation (or remove it) and
record the old incarnation as retired (:func:`.batches.retire`); they return
that incarnation, whose rows the storage then removes in batches.
"""

from __future__ import annotations

import sqlite3
import uuid
from dataclasses import replace

from queuey.clock import Clock
from queuey.errors import QueueExists, QueueNotFound
from queuey.model import QueueMeta
from queuey.storage.asks import QueueChange
from queuey.storage.sqlite.batches import retire
from queuey.storage.sqlite.database import Database
from queuey.storage.sqlite.schema import QUEUE_COLUMNS, queue_row, row_to_queue


def fetch_queue(conn: sqlite3.Connection, application: str, name: str) -> QueueMeta:
    """The queue's metadata as ``conn`` sees it; :class:`QueueNotFound` if there is none."""
    row = conn.execute(
        f"SELECT {QUEUE_COLUMNS} FROM queues WHERE application = ? AND name = ?",
        (application, name),
    ).fetchone()
    if row is None:
        raise QueueNotFound(name)
    return row_to_queue(row)


class QueueCatalog:
    """The ``queues`` table of one file (``clock`` stamps creations and retirements)."""

    def __init__(self, db: Database, clock: Clock) -> None:
        self._db = db
        self._clock = clock

    def create(self, meta: QueueMeta) -> QueueMeta:
        if not meta.created:
            meta = replace(meta, created=self._clock.now_micros())
        with self._db.write() as conn:
            try:
                conn.execute(
                    f"INSERT INTO queues ({QUEUE_COLUMNS}) VALUES ({', '.join('?' * 14)})",
                    queue_row(meta),
                )
            except sqlite3.IntegrityError as exc:
                raise QueueExists(meta.name) from exc
        return meta

    def get(self, application: str, name: str) -> QueueMeta:
        return self._db.run(lambda: fetch_queue(self._db.reader(), application, name))

    def list(self, application: str, limit: int, after: str | None) -> list[QueueMeta]:
        def query() -> list[QueueMeta]:
            rows = self._db.reader().execute(
                f"SELECT {QUEUE_COLUMNS} FROM queues WHERE application = ? AND name > ? "
                "ORDER BY name LIMIT ?",
                (application, after or "", limit),
            )
            return [row_to_queue(row) for row in rows]

        return self._db.run(query)

    def update(self, application: str, name: str, change: QueueChange) -> QueueMeta:
        """See :meth:`Storage.update_queue`: one transaction reads, checks and writes."""
        with self._db.write() as conn:
            meta = change.apply(fetch_queue(conn, application, name))
            conn.execute(
                "UPDATE queues SET partitions = ?, ttl = ?, type = ?, consistency = ?, "
                "visibility_timeout = ?, max_attempts = ?, dead_letter_queue = ?, delay = ?, "
                "attributes = ? WHERE application = ? AND name = ?",
                (
                    *queue_row(meta)[2:6],
                    *queue_row(meta)[8:12],
                    queue_row(meta)[13],
                    application,
                    name,
                ),
            )
        return meta

    def delete(self, application: str, name: str) -> str:
        """Remove the queue and its checkpoints; returns the retired incarnation."""
        with self._db.write() as conn:
            meta = fetch_queue(conn, application, name)
            conn.execute(
                "DELETE FROM queues WHERE application = ? AND name = ?", (application, name)
            )
            conn.execute(
                "DELETE FROM checkpoints WHERE application = ? AND queue = ?", (application, name)
            )
            retire(conn, meta.incarnation, self._clock.now_micros())
        return meta.incarnation

    def purge(self, application: str, name: str) -> tuple[QueueMeta, str]:
        """Switch the queue to a new incarnation: the fresh metadata and the retired one."""
        with self._db.write() as conn:
            meta = fetch_queue(conn, application, name)
            fresh = replace(meta, incarnation=uuid.uuid4().hex)
            conn.execute(
                "UPDATE queues SET incarnation = ? WHERE application = ? AND name = ?",
                (fresh.incarnation, application, name),
            )
            retire(conn, meta.incarnation, self._clock.now_micros())
        return fresh, meta.incarnation
