"""Dead letters on SQLite: a lease claimed for dead-lettering, and reopened.

A lease whose attempts are spent is *claimed* (state ``claimed``, a fresh
token, visible again once the claim's time is up), by the reservation that
finds it due or by the release that spent its last attempt; the claim comes
back as a :class:`~queuey.model.DeadLetter` whose ack finishes the lease as
``dead``. A reopen (redrive) makes a finished lease available again and draws
a new ``generation``, which its next dead letter carries.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from queuey.model import DeadLetter, Message, MessageRef, QueueMeta, make_receipt
from queuey.storage.sqlite.leases import LEASE_KEY, lease_key, new_token
from queuey.storage.sqlite.schema import MESSAGE_KEY


def claim(conn: sqlite3.Connection, key: tuple, until: int, last_error: str) -> str:
    """Claim the lease ``key`` for dead-lettering until ``until``; returns the claim's token."""
    token = new_token()
    conn.execute(
        "UPDATE leases SET state = 'claimed', token = ?, visible_at = ?, "
        f"last_error = ? WHERE {LEASE_KEY}",
        (token, until, last_error, *key),
    )
    return token


def dead_letter(
    message: Message, attempts: int, last_error: str, token: str, generation: str
) -> DeadLetter:
    """The dead letter a claim with ``token`` hands out."""
    receipt = make_receipt(message.partition, message.id, token)
    return DeadLetter(message, attempts, last_error, receipt, generation)


def reopen(
    conn: sqlite3.Connection,
    queue: QueueMeta,
    subscription: str,
    refs: Sequence[MessageRef],
    now: int,
) -> int:
    """Make finished live messages available again with 0 attempts."""
    reopened = 0
    for ref in dict.fromkeys(refs):
        key = lease_key(queue, subscription, ref.partition, ref.id)
        reopened += conn.execute(
            "UPDATE leases SET state = 'released', token = '', visible_at = ?, "
            "attempts = 0, last_error = '', first_at = 0, generation = ? "
            f"WHERE {LEASE_KEY} AND id = ? "
            "AND state IN ('acked', 'dead') AND EXISTS (SELECT 1 FROM messages "
            f"WHERE {MESSAGE_KEY} AND expires > ?)",
            (now, new_token(), *key, ref.id.bytes, key[0], *key[2:], now),
        ).rowcount
    return reopened
