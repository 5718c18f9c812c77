"""Consumers' checkpoints on SQLite: how far each named consumer has processed
each partition of a queue, one row per (queue, consumer, partition).

The rows belong to the queue's name, not its incarnation: a purge keeps them,
and deleting the queue removes them (:meth:`.queues.QueueCatalog.delete`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from queuey.storage.sqlite.database import Database


def read_checkpoints(
    db: Database, application: str, queue: str, consumer: str
) -> dict[int, uuid.UUID]:
    def run() -> dict[int, uuid.UUID]:
        rows = db.reader().execute(
            "SELECT partition, id FROM checkpoints "
            "WHERE application = ? AND queue = ? AND consumer = ?",
            (application, queue, consumer),
        )
        return {partition: uuid.UUID(bytes=raw) for partition, raw in rows}

    return db.run(run)


def write_checkpoints(
    db: Database,
    application: str,
    queue: str,
    consumer: str,
    checkpoints: Mapping[int, uuid.UUID],
) -> None:
    with db.write() as conn:
        conn.executemany(
            "INSERT OR REPLACE INTO checkpoints VALUES (?, ?, ?, ?, ?)",
            [
                (application, queue, consumer, partition, message_id.bytes)
                for partition, message_id in checkpoints.items()
            ],
        )
