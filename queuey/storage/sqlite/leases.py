"""The ``leases`` table as every SQLite work-queue path names it: a lease's
key, its tokens, the live message a lease stands for, and how many leases run.

A lease row is keyed like its message (incarnation, partition, ts, tiebreak)
plus the subscription; the reservation, the receipt calls and the dead-letter
paths all address it through :data:`LEASE_KEY` and :func:`lease_key`.
"""

from __future__ import annotations

import secrets
import sqlite3
import uuid

from queuey import ids
from queuey.model import Message, MessageState, QueueMeta
from queuey.storage.sqlite.schema import COLUMNS, MESSAGE_KEY, row_to_message, tiebreak

LEASE_KEY = "incarnation = ? AND subscription = ? AND partition = ? AND ts = ? AND tiebreak = ?"
#: A lease ``l`` joined to its message ``m``.
LEASED_MESSAGE = (
    "JOIN messages m ON m.incarnation = l.incarnation AND m.partition = l.partition "
    "AND m.ts = l.ts AND m.tiebreak = l.tiebreak"
)
#: Leases and dead-letter claims running at a time, of live messages: what
#: :mod:`.stats` counts as in flight, found through the ``leases_due`` index
#: (one range per state) and a primary-key probe of each message.
_IN_FLIGHT = (
    f"SELECT COUNT(*) FROM leases l INDEXED BY leases_due {LEASED_MESSAGE} "
    "WHERE l.incarnation = ? AND l.subscription = ? AND l.state IN ('leased', 'claimed') "
    "AND l.visible_at > ? AND m.expires > ?"
)


def new_token() -> str:
    return secrets.token_hex(8)


def new_tokens(count: int) -> list[str]:
    """``count`` tokens like :func:`new_token`'s, from one read of the OS's randomness."""
    text = secrets.token_hex(8 * count)
    return [text[i : i + 16] for i in range(0, 16 * count, 16)]


def lease_key(queue: QueueMeta, subscription: str, partition: int, message_id: uuid.UUID) -> tuple:
    """The :data:`LEASE_KEY` parameters of a message's lease in ``subscription``."""
    return (
        queue.incarnation,
        subscription,
        partition,
        ids.micros_of(message_id),
        tiebreak(message_id),
    )


def live_message(conn: sqlite3.Connection, key: tuple, now: int) -> Message | None:
    """The unexpired message a lease ``key`` stands for, or ``None``."""
    row = conn.execute(
        f"SELECT {COLUMNS} FROM messages WHERE {MESSAGE_KEY} AND expires > ?",
        (key[0], *key[2:], now),
    ).fetchone()
    return row_to_message(row) if row is not None else None


def in_flight(conn: sqlite3.Connection, queue: QueueMeta, subscription: str, now: int) -> int:
    """The subscription's messages leased or claimed and not lapsed at ``now``
    (:meth:`queuey.storage.Storage.in_flight`); its cost grows with that
    count, not with the queue."""
    args = (queue.incarnation, subscription, now, now)
    return conn.execute(_IN_FLIGHT, args).fetchone()[0]


#: A lease row's state as :class:`~queuey.model.MessageState` names it.
_STATE_NAMES = {
    "leased": "leased",
    "released": "released",
    "claimed": "claimed",
    "acked": "acked",
    "dead": "dead_lettered",
}


def message_state(
    conn: sqlite3.Connection, queue: QueueMeta, subscription: str, message: Message
) -> MessageState:
    """The message's lease row in ``subscription``; without one, whether the
    subscription's position of its priority has passed it
    (:meth:`queuey.storage.workstore.WorkQueueStore.message_state`)."""
    key = lease_key(queue, subscription, message.partition, message.id)
    row = conn.execute(
        f"SELECT state, attempts, visible_at, last_error FROM leases WHERE {LEASE_KEY}", key
    ).fetchone()
    if row is not None:
        return MessageState(_STATE_NAMES[row[0]], row[1], row[2], row[3])
    position = conn.execute(
        "SELECT ts, tiebreak FROM positions WHERE incarnation = ? AND subscription = ? "
        "AND partition = ? AND priority = ?",
        (queue.incarnation, subscription, message.partition, message.priority),
    ).fetchone()
    behind = position is not None and (key[3], key[4]) <= (position[0], position[1])
    return MessageState("passed" if behind else "new")
