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
from queuey.model import UPDATABLE_QUEUE_FIELDS, QueueMeta
from queuey.storage.asks import QueueChange
from queuey.storage.sqlite.batches import retire
from queuey.storage.sqlite.database import Database
from queuey.storage.sqlite.schema import QUEUE_COLUMNS, QUEUE_FIELDS, queue_values, row_to_queue

_INSERT = f"INSERT INTO queues ({QUEUE_COLUMNS}) VALUES ({', '.join('?' * len(QUEUE_FIELDS))})"
#: A queue's update: every column a change may set (:data:`UPDATABLE_QUEUE_FIELDS`).
_UPDATE = (
    f"UPDATE queues SET {', '.join(f'{c} = ?' for c in UPDATABLE_QUEUE_FIELDS)} "
    "WHERE application = ? AND name = ?"
)


def fetch_queue(conn: sqlite3.Connection, application: str, name: str) -> QueueMeta:
    """The queue's metadata as ``conn`` sees it; :class:`QueueNotFound` if there is none."""
    row = conn.execute(
        f"SELECT {QUEUE_COLUMNS} FROM queues WHERE application = ? AND name = ?",
        (application, name),
    ).fetchone()
    if row is None:
        raise QueueNotFound(name)
    return row_to_queue(row)


class SqliteQueues:
    """The :class:`~queuey.storage.Storage` queue methods of
    :class:`~queuey.storage.sqlite.SQLiteStorage` (mixed in; it provides
    ``_db``, its :class:`~queuey.storage.sqlite.database.Database`, and
    ``clock``, which stamps creations and retirements), on the ``queues``
    table; its purge and delete call :meth:`_remove_queue` and
    :meth:`_switch_incarnation`."""

    _db: Database
    clock: Clock

    def create_queue(self, meta: QueueMeta) -> QueueMeta:
        if not meta.created:
            meta = replace(meta, created=self.clock.now_micros())
        with self._db.write() as conn:
            try:
                conn.execute(_INSERT, tuple(queue_values(meta).values()))
            except sqlite3.IntegrityError as exc:
                raise QueueExists(meta.name) from exc
        return meta

    def get_queue(self, application: str, name: str) -> QueueMeta:
        return self._db.read(lambda conn: fetch_queue(conn, application, name))

    def list_queues(
        self, application: str, limit: int = 100, after: str | None = None
    ) -> list[QueueMeta]:
        def query(conn: sqlite3.Connection) -> list[QueueMeta]:
            rows = conn.execute(
                f"SELECT {QUEUE_COLUMNS} FROM queues WHERE application = ? AND name > ? "
                "ORDER BY name LIMIT ?",
                (application, after or "", limit),
            )
            return [row_to_queue(row) for row in rows]

        return self._db.read(query)

    def update_queue_ask(self, application: str, name: str, change: QueueChange) -> QueueMeta:
        """See :meth:`Storage.update_queue`: one transaction reads, checks and writes."""
        with self._db.write() as conn:
            meta = change.apply(fetch_queue(conn, application, name))
            values = queue_values(meta)
            conn.execute(_UPDATE, (*(values[c] for c in UPDATABLE_QUEUE_FIELDS), application, name))
        return meta

    def _remove_queue(self, application: str, name: str) -> str:
        """Remove the queue and its checkpoints; returns the retired incarnation."""
        with self._db.write() as conn:
            meta = fetch_queue(conn, application, name)
            conn.execute(
                "DELETE FROM queues WHERE application = ? AND name = ?", (application, name)
            )
            conn.execute(
                "DELETE FROM checkpoints WHERE application = ? AND queue = ?", (application, name)
            )
            retire(conn, meta.incarnation, self.clock.now_micros())
        return meta.incarnation

    def _switch_incarnation(self, application: str, name: str) -> tuple[QueueMeta, str]:
        """Switch the queue to a new incarnation: the fresh metadata and the retired one."""
        with self._db.write() as conn:
            meta = fetch_queue(conn, application, name)
            fresh = replace(meta, incarnation=uuid.uuid4().hex)
            conn.execute(
                "UPDATE queues SET incarnation = ? WHERE application = ? AND name = ?",
                (fresh.incarnation, application, name),
            )
            retire(conn, meta.incarnation, self.clock.now_micros())
        return fresh, meta.incarnation
