"""The SQLite tables, created on open, and how their rows map to values.

Messages are keyed by ``(incarnation, partition, ts, tiebreak)``, so an index
scan returns them in id order (:func:`queuey.ids.order_key`); the ``state``
table keeps the schema version and the last minted timestamp, shared by every
process that opens the file.
"""

from __future__ import annotations

import sqlite3
import uuid

from queuey import ids
from queuey.storage import Message, QueueMeta

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

#: The message columns :func:`row_to_message` reads, in its order.
COLUMNS = "id, ts, partition, body, expires"


def create_schema(conn: sqlite3.Connection) -> None:
    """Create whatever is missing (inside the caller's write transaction)."""
    for statement in SCHEMA.split(";"):
        if statement.strip():
            conn.execute(statement)
    conn.execute(
        "INSERT OR IGNORE INTO state (key, value) VALUES ('schema_version', ?)",
        (SCHEMA_VERSION,),
    )
    conn.execute("INSERT OR IGNORE INTO state (key, value) VALUES ('last_ts', 0)")


def tiebreak(message_id: uuid.UUID) -> bytes:
    """The id bytes that order messages of the same timestamp."""
    return ids.order_key(message_id)[1]


def row_to_message(row: tuple) -> Message:
    return Message(
        id=uuid.UUID(bytes=row[0]),
        timestamp=row[1],
        partition=row[2],
        body=row[3],
        expires=row[4],
    )


def row_to_queue(row: tuple) -> QueueMeta:
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
