"""Message ids of the SQLite write path: delayed ids and dedup ids.

Both run inside the group commit's write transaction (the caller holds the
file's write lock), so what they read and write is exact across processes.
"""

from __future__ import annotations

import os
import sqlite3
import uuid

from queuey import ids
from queuey.model import Message, NewMessage, QueueMeta
from queuey.storage.sqlite.schema import COLUMNS, MESSAGE_KEY, row_to_message, tiebreak


def delayed_id(due: int, last: int) -> uuid.UUID:
    """A delayed message's id: at ``due``, but never at or below ``last``
    (the file's last ordinary timestamp: readers may have passed it).

    A delayed timestamp must not move the process's id generator's monotonic
    state (later posts would get ids in the future), so a delayed id is made
    outside it, with a random node and clock sequence (62 random bits, as RFC
    4122 allows for nodes without an address): it cannot repeat an ordinary id
    of this or any process short of a 1-in-2^62 coincidence at the same
    microsecond, and nothing needs remembering between posts.
    """
    bits = int.from_bytes(os.urandom(8), "big")
    node = (bits & 0xFFFFFFFFFFFF) | 0x010000000000
    return ids.make_uuid(max(due, last + 1), node, (bits >> 48) & 0x3FFF)


class DedupIds:
    """The ``dedup`` table: the first message of each dedup id, within the window.

    The window counts from the first post; a repeat inside it does not extend it.
    """

    def __init__(self, window: int) -> None:
        self.window_micros = window * ids.MICROS

    def find(
        self, conn: sqlite3.Connection, queue: QueueMeta, message: NewMessage, now: int
    ) -> Message | None:
        """The first message posted with ``message.dedup_id`` in the window, if any.

        If that message is gone already (deleted, or expired and swept), the
        answer still names it (id, partition, timestamp) with this repeat's body
        and fields, and an expiry at its timestamp (it is no longer readable).
        """
        row = conn.execute(
            "SELECT partition, ts, tiebreak, id FROM dedup "
            "WHERE incarnation = ? AND dedup_id = ? AND until > ?",
            (queue.incarnation, message.dedup_id, now),
        ).fetchone()
        if row is None:
            return None
        partition, ts, tb, raw = row
        found = conn.execute(
            f"SELECT {COLUMNS} FROM messages WHERE {MESSAGE_KEY}",
            (queue.incarnation, partition, ts, tb),
        ).fetchone()
        if found is not None:
            return row_to_message(found)
        attributes = dict(message.attributes) if message.attributes else None
        return Message(
            uuid.UUID(bytes=raw), ts, partition, message.body, ts, message.priority, attributes
        )

    def remember(
        self, conn: sqlite3.Connection, queue: QueueMeta, dedup_id: str, message: Message, now: int
    ) -> None:
        conn.execute(
            "INSERT OR REPLACE INTO dedup VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                queue.incarnation,
                dedup_id,
                now + self.window_micros,
                message.partition,
                message.timestamp,
                tiebreak(message.id),
                message.id.bytes,
            ),
        )
