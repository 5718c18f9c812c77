"""Consumers' checkpoints on SQLite: how far each named consumer has processed
each partition of a queue, one row per (queue, consumer, partition).

The rows belong to the queue's name, not its incarnation: a purge keeps them,
and deleting the queue removes them (:meth:`.queues.SqliteQueues._remove_queue`).
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Mapping

from queuey.storage.sqlite.database import Database


class SqliteCheckpoints:
    """The :class:`~queuey.storage.Storage` checkpoint methods of
    :class:`~queuey.storage.sqlite.SQLiteStorage` (mixed in; it provides
    ``_db``, its :class:`~queuey.storage.sqlite.database.Database`)."""

    _db: Database

    def get_checkpoints(self, application: str, queue: str, consumer: str) -> dict[int, uuid.UUID]:
        def run(conn: sqlite3.Connection) -> dict[int, uuid.UUID]:
            rows = conn.execute(
                "SELECT partition, id FROM checkpoints "
                "WHERE application = ? AND queue = ? AND consumer = ?",
                (application, queue, consumer),
            )
            return {partition: uuid.UUID(bytes=raw) for partition, raw in rows}

        return self._db.read(run)

    def set_checkpoints(
        self, application: str, queue: str, consumer: str, checkpoints: Mapping[int, uuid.UUID]
    ) -> None:
        with self._db.write() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO checkpoints VALUES (?, ?, ?, ?, ?)",
                [
                    (application, queue, consumer, partition, message_id.bytes)
                    for partition, message_id in checkpoints.items()
                ],
            )
