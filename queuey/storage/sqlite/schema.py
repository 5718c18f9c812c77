"""The SQLite tables, their migrations, and how rows map to values.

Messages are keyed by ``(incarnation, partition, ts, tiebreak)``, so an index
scan returns them in id order (:func:`queuey.ids.order_key`); the ``state``
table keeps the schema version and the last minted timestamp, shared by every
process that opens the file.

Version 2 (work queues) adds the queue settings columns, message priority and
attributes, and four tables: ``subscriptions`` (which subscriptions an
incarnation has), ``positions`` (per subscription, partition and priority, the
newest message handed out), ``leases`` (one row per message a subscription has
delivered: its state, token, visible-at, attempts and last error; the
message's expiry is copied in so the sweep can drop the row with it) and
``dedup`` (dedup ids within their window). Only messages with a priority
above 0 are indexed by priority, so a default post costs no extra index entry
(reservations find priority-0 messages by the primary key, see
:mod:`queuey.storage.sqlite.workqueue`). Version 3 adds FIFO queues and queue attributes; version 4
the ``retired`` table (incarnations a purge or delete left behind, whose rows
are still being removed in batches); version 5 the leases' ``generation``
(drawn anew by each reopen, see :class:`queuey.model.DeadLetter`); version 6
the ``schedules`` table (:mod:`queuey.storage.sqlite.schedules`).

The schema is created or migrated when a storage opens the file (inside a
write transaction, so processes opening an old file at once migrate it once),
and by ``queuey schema upgrade`` (:func:`upgrade_schema`).
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from dataclasses import fields
from typing import Any

from queuey import ids
from queuey.model import Message, QueueMeta

SCHEMA_VERSION = 6

BASE = """
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

INSERT OR IGNORE INTO state (key, value) VALUES ('last_ts', 0)
"""

#: Version 1 to 2: work queues. Each step is one statement, applied in order.
V2 = """
ALTER TABLE queues ADD COLUMN visibility_timeout INTEGER NOT NULL DEFAULT 30;
ALTER TABLE queues ADD COLUMN max_attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE queues ADD COLUMN dead_letter_queue TEXT;
ALTER TABLE queues ADD COLUMN delay INTEGER NOT NULL DEFAULT 0;
ALTER TABLE messages ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE messages ADD COLUMN attributes TEXT;

CREATE INDEX IF NOT EXISTS messages_by_priority
    ON messages (incarnation, partition, priority, ts, tiebreak) WHERE priority > 0;

CREATE TABLE IF NOT EXISTS subscriptions (
    incarnation TEXT NOT NULL,
    subscription TEXT NOT NULL,
    created INTEGER NOT NULL,
    PRIMARY KEY (incarnation, subscription)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS positions (
    incarnation TEXT NOT NULL,
    subscription TEXT NOT NULL,
    partition INTEGER NOT NULL,
    priority INTEGER NOT NULL,
    ts INTEGER NOT NULL,
    tiebreak BLOB NOT NULL,
    PRIMARY KEY (incarnation, subscription, partition, priority)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS leases (
    incarnation TEXT NOT NULL,
    subscription TEXT NOT NULL,
    partition INTEGER NOT NULL,
    ts INTEGER NOT NULL,
    tiebreak BLOB NOT NULL,
    id BLOB NOT NULL,
    priority INTEGER NOT NULL,
    expires INTEGER NOT NULL,
    state TEXT NOT NULL,
    token TEXT NOT NULL,
    visible_at INTEGER NOT NULL,
    attempts INTEGER NOT NULL,
    last_error TEXT NOT NULL,
    PRIMARY KEY (incarnation, subscription, partition, ts, tiebreak)
) WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS leases_due ON leases (incarnation, subscription, state, visible_at);
CREATE INDEX IF NOT EXISTS leases_by_expiry ON leases (expires);

CREATE TABLE IF NOT EXISTS dedup (
    incarnation TEXT NOT NULL,
    dedup_id TEXT NOT NULL,
    until INTEGER NOT NULL,
    partition INTEGER NOT NULL,
    ts INTEGER NOT NULL,
    tiebreak BLOB NOT NULL,
    id BLOB NOT NULL,
    PRIMARY KEY (incarnation, dedup_id)
) WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS dedup_by_until ON dedup (until)
"""

#: Version 2 to 3: FIFO queues and free-form queue attributes (the SQS endpoint).
V3 = """
ALTER TABLE queues ADD COLUMN fifo INTEGER NOT NULL DEFAULT 0;
ALTER TABLE queues ADD COLUMN attributes TEXT;
ALTER TABLE leases ADD COLUMN first_at INTEGER NOT NULL DEFAULT 0
"""

#: Version 3 to 4: incarnations left behind by a purge or delete whose rows are
#: still being removed (in batches; see ``SQLiteStorage.purge_queue``).
V4 = """
CREATE TABLE IF NOT EXISTS retired (
    incarnation TEXT PRIMARY KEY,
    since INTEGER NOT NULL
) WITHOUT ROWID
"""

#: Version 4 to 5: a lease's generation (empty until a redrive reopens it),
#: which a dead letter's ``dedup_id`` includes.
V5 = """
ALTER TABLE leases ADD COLUMN generation TEXT NOT NULL DEFAULT ''
"""

#: Version 5 to 6: messages on a schedule, one row each, changed by
#: compare-and-set on ``version``.
V6 = """
CREATE TABLE IF NOT EXISTS schedules (
    application TEXT NOT NULL,
    name TEXT NOT NULL,
    queue TEXT NOT NULL,
    cron TEXT,
    interval_seconds INTEGER,
    timezone TEXT NOT NULL,
    start_at INTEGER,
    end_at INTEGER,
    message TEXT NOT NULL,
    missed TEXT NOT NULL,
    paused INTEGER NOT NULL,
    next_tick INTEGER,
    last_tick INTEGER,
    posted INTEGER NOT NULL,
    created INTEGER NOT NULL,
    error TEXT,
    version INTEGER NOT NULL,
    PRIMARY KEY (application, name)
) WITHOUT ROWID
"""

#: Each version's step, applied in order to a file below it: (version, its
#: statements, what it adds).
MIGRATIONS = (
    (1, BASE, "queues, messages, checkpoints, state"),
    (
        2,
        V2,
        "queue work-queue settings, message priority and attributes, "
        "subscriptions, positions, leases, dedup",
    ),
    (3, V3, "FIFO queues, queue attributes, first delivery times"),
    (4, V4, "incarnations of purged and deleted queues being removed"),
    (5, V5, "lease generations (redrives)"),
    (6, V6, "schedules"),
)

#: A message row's primary key as a condition (:func:`message_key` gives its values).
MESSAGE_KEY = "incarnation = ? AND partition = ? AND ts = ? AND tiebreak = ?"
#: The message columns :func:`row_to_message` reads, in its order.
COLUMNS = "id, ts, partition, body, expires, priority, attributes"
#: :data:`COLUMNS` of a message named ``m`` in a join.
M_COLUMNS = ", ".join("m." + c for c in COLUMNS.split(", "))
#: The queue columns, named and ordered as :class:`QueueMeta`'s fields.
QUEUE_FIELDS = tuple(field.name for field in fields(QueueMeta))
QUEUE_COLUMNS = ", ".join(QUEUE_FIELDS)


def current_version(conn: sqlite3.Connection) -> int:
    """The file's schema version: 0 for an empty file."""
    has_state = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'state'"
    ).fetchone()
    if has_state is None:
        return 0
    row = conn.execute("SELECT value FROM state WHERE key = 'schema_version'").fetchone()
    return row[0] if row else 0


def migrate(conn: sqlite3.Connection) -> list[str]:
    """Create or upgrade the schema to :data:`SCHEMA_VERSION` inside the caller's
    write transaction; returns the steps applied (none when up to date).

    Refuses a file written by a newer release rather than guess at its tables.
    """
    version = current_version(conn)
    if version > SCHEMA_VERSION:
        raise sqlite3.DatabaseError(
            f"schema version {version} is newer than this release's {SCHEMA_VERSION}"
        )
    applied: list[str] = []
    for step, script, adds in MIGRATIONS:
        if version < step:
            for statement in script.split(";"):
                conn.execute(statement)
            applied.append(f"version {step}: {adds}")
    if applied:
        conn.execute(
            "INSERT OR REPLACE INTO state (key, value) VALUES ('schema_version', ?)",
            (SCHEMA_VERSION,),
        )
    return applied


def last_ts(conn: sqlite3.Connection) -> int:
    """The file's last ordinary (not delayed) minted timestamp, as ``conn`` sees it.

    Readers see messages up to ``max(now, last_ts)``: ordinary ids may run a few
    microseconds ahead of the clock in a burst and are visible once committed;
    only delayed messages (minted above ``last_ts``) wait for their time.
    """
    return conn.execute("SELECT value FROM state WHERE key = 'last_ts'").fetchone()[0]


def tiebreak(message_id: uuid.UUID) -> bytes:
    """The id bytes that order messages of the same timestamp."""
    return ids.tiebreak_bytes(message_id)


def message_key(incarnation: str, partition: int, message_id: uuid.UUID) -> tuple:
    """The :data:`MESSAGE_KEY` values of a message."""
    return (incarnation, partition, ids.micros_of(message_id), tiebreak(message_id))


def dump_attributes(attributes) -> str | None:
    """Attributes as stored: JSON text, or NULL when there are none."""
    return json.dumps(dict(attributes), ensure_ascii=False) if attributes else None


def row_to_message(row: tuple) -> Message:
    return Message(
        id=uuid.UUID(bytes=row[0]),
        timestamp=row[1],
        partition=row[2],
        body=row[3],
        expires=row[4],
        priority=row[5],
        attributes=json.loads(row[6]) if row[6] is not None else None,
    )


def row_to_queue(row: tuple) -> QueueMeta:
    """The queue a row of :data:`QUEUE_COLUMNS` holds."""
    meta = dict(zip(QUEUE_FIELDS, row, strict=True))
    meta["fifo"] = bool(meta["fifo"])
    meta["attributes"] = json.loads(meta["attributes"]) if meta["attributes"] else {}
    return QueueMeta(**meta)


def queue_values(meta: QueueMeta) -> dict[str, Any]:
    """``meta``'s stored values by column (:data:`QUEUE_FIELDS`, in order)."""
    values = {name: getattr(meta, name) for name in QUEUE_FIELDS}
    return values | {"fifo": int(meta.fifo), "attributes": dump_attributes(meta.attributes)}
