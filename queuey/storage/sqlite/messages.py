"""Stored messages on SQLite: stream reads, reads by id, deletes, and the
fence a stream read takes behind a due delayed message.

Posts go through :mod:`.group_commit`. Every read here runs in one read
transaction, bounded by the file's ``last_ts`` as that snapshot sees it
(:class:`~queuey.storage.sqlite.SQLiteStorage` says why that bound is safe
and when a read needs the fence first).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from queuey import ids
from queuey.model import Message, MessageRef, QueueMeta, ReadQuery, merge_partitions
from queuey.storage.sqlite.database import Database
from queuey.storage.sqlite.schema import (
    COLUMNS,
    MESSAGE_KEY,
    last_ts,
    message_key,
    row_to_message,
    tiebreak,
)


def read_snapshot(db: Database, queue: QueueMeta, query: ReadQuery) -> tuple[list[Message], int]:
    """The messages ``query`` asks for and the ``last_ts`` of the snapshot they came from."""
    descending = query.order == "descending"
    where = ["incarnation = ?", "partition = ?", "ts <= ?", "expires > ?"]
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

    def run(conn: sqlite3.Connection) -> tuple[list[Message], int]:
        last = last_ts(conn)
        bound = max(query.now_micros, last)
        cursors = [
            map(
                row_to_message,
                conn.execute(sql, (queue.incarnation, p, bound, *params, query.limit)),
            )
            for p in query.partitions
        ]
        return merge_partitions(cursors, query.limit, descending), last

    # One read transaction: every partition is read from the same snapshot, or
    # a later commit in one partition could be merged in ahead of an earlier
    # one missed in another (a skip). The cursors are consumed lazily by the
    # merge, so a read holds one page.
    return db.read(run, snapshot=True)


def fence(db: Database, now_micros: int) -> None:
    """Raise ``last_ts`` to ``now_micros``: once this commits, no write in
    flight can still commit an id at or below it."""
    with db.write() as conn:
        conn.execute("UPDATE state SET value = max(value, ?) WHERE key = 'last_ts'", (now_micros,))


def get_by_refs(
    db: Database, queue: QueueMeta, refs: Sequence[MessageRef], now_micros: int
) -> list[Message]:
    """The live messages ``refs`` name, from one snapshot (see :meth:`Storage.get_messages`)."""

    def fetch(conn: sqlite3.Connection) -> list[Message]:
        bound = max(now_micros, last_ts(conn))
        found = []
        for ref in refs:
            row = conn.execute(
                f"SELECT {COLUMNS} FROM messages WHERE {MESSAGE_KEY} AND expires > ? AND ts <= ?",
                (*message_key(queue.incarnation, ref.partition, ref.id), now_micros, bound),
            ).fetchone()
            if row is not None and row[0] == ref.id.bytes:
                found.append(row_to_message(row))
        return found

    return db.read(fetch, snapshot=True)


def delete_by_refs(db: Database, queue: QueueMeta, refs: Sequence[MessageRef]) -> None:
    with db.write() as conn:
        conn.executemany(
            f"DELETE FROM messages WHERE {MESSAGE_KEY} AND id = ?",
            [
                (*message_key(queue.incarnation, ref.partition, ref.id), ref.id.bytes)
                for ref in refs
            ],
        )
