"""What a receipt's holder does on SQLite: ack, release and extend.

A receipt names its lease (partition, message id) and the token it was
handed out with; only the current holder (that token, state ``leased``) may
release or extend it. An ack also finishes a dead-letter claim. Receipts are
parsed before the write lock is taken (:func:`parse`); the rest runs inside
the caller's write transaction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence

from queuey import ids
from queuey.model import DeadLetter, QueueMeta, ReceiptStatus, parse_receipt
from queuey.storage.asks import ExtendAsk, ReleaseAsk
from queuey.storage.sqlite.deadletters import claim, dead_letter
from queuey.storage.sqlite.leases import LEASE_KEY, lease_key, live_message

#: Ack of a current lease (to acked) or dead-letter claim (to dead): its key, id and token.
_FINISH = (
    "UPDATE leases SET state = CASE state WHEN 'leased' THEN 'acked' ELSE 'dead' END "
    f"WHERE {LEASE_KEY} AND id = ? AND token = ? AND state IN ('leased', 'claimed')"
)

#: A receipt made out: (receipt, lease key, raw message id, token).
Parsed = tuple[str, tuple, bytes, str]


def _named(
    queue: QueueMeta,
    subscription: str,
    receipts: Sequence[str],
    answer: dict[str, ReceiptStatus],
) -> Iterator[Parsed]:
    """Each distinct receipt made out (:data:`Parsed`); a malformed one is
    answered ``unknown`` in ``answer`` on the way."""
    for receipt in dict.fromkeys(receipts):
        parsed = parse_receipt(receipt)
        if parsed is None:
            answer[receipt] = "unknown"
            continue
        partition, message_id, token = parsed
        key = lease_key(queue, subscription, partition, message_id)
        yield receipt, key, message_id.bytes, token


def _held(
    conn: sqlite3.Connection,
    queue: QueueMeta,
    subscription: str,
    receipts: Sequence[str],
    answer: dict[str, ReceiptStatus],
) -> Iterator[tuple[str, tuple, tuple]]:
    """``(receipt, lease key, lease row)`` for each distinct receipt whose lease
    it still holds (state ``leased``, its token); the others are answered
    ``unknown`` (malformed, or no such lease) or ``expired`` on the way."""
    for receipt, key, raw_id, token in _named(queue, subscription, receipts, answer):
        row = conn.execute(
            "SELECT id, state, token, attempts, last_error, generation FROM leases "
            f"WHERE {LEASE_KEY}",
            key,
        ).fetchone()
        if row is None or row[0] != raw_id:
            answer[receipt] = "unknown"
        elif row[1] != "leased" or row[2] != token:
            answer[receipt] = "expired"
        else:
            yield receipt, key, row


def parse(
    queue: QueueMeta, subscription: str, receipts: Sequence[str]
) -> tuple[dict[str, ReceiptStatus], list[Parsed]]:
    """Each distinct receipt made out, and the answer ``unknown`` for the malformed."""
    answer: dict[str, ReceiptStatus] = {}
    parsed = list(_named(queue, subscription, receipts, answer))
    return answer, parsed


def ack(
    conn: sqlite3.Connection, parsed: Sequence[Parsed], answer: dict[str, ReceiptStatus]
) -> None:
    """Finish leases and dead-letter claims, answering each receipt in ``answer``.

    Every current lease or claim is finished by one conditional update per
    receipt (its key, id and token), all in one call. When one missed,
    each receipt is looked up after the updates: its lease now finished
    with its token is acked (by this call or an earlier one); otherwise it
    is expired or unknown.
    """
    finished = conn.executemany(
        _FINISH, [(*key, raw_id, token) for _, key, raw_id, token in parsed]
    ).rowcount
    for receipt, key, raw_id, token in parsed:
        if finished == len(parsed):
            answer[receipt] = "acked"  # every update found its lease
            continue
        row = conn.execute(f"SELECT id, state, token FROM leases WHERE {LEASE_KEY}", key).fetchone()
        if row is None or row[0] != raw_id:
            answer[receipt] = "unknown"
        elif row[2] == token and row[1] in ("acked", "dead"):
            answer[receipt] = "acked"  # a repeated ack
        else:
            answer[receipt] = "expired"


def release(
    conn: sqlite3.Connection, queue: QueueMeta, subscription: str, ask: ReleaseAsk
) -> tuple[dict[str, ReceiptStatus], list[DeadLetter]]:
    """End leases now; only a current lease (state ``leased``, its token) can
    be released, anything else is expired. A lease whose attempts are spent is
    claimed for dead-lettering instead (:mod:`.deadletters`)."""
    now = ask.now_micros
    answer: dict[str, ReceiptStatus] = {}
    letters: list[DeadLetter] = []
    for receipt, key, (*_, attempts, last_error, generation) in _held(
        conn, queue, subscription, ask.receipts, answer
    ):
        answer[receipt] = "acked"
        last_error = ask.error if ask.error is not None else last_error
        if queue.max_attempts and attempts >= queue.max_attempts:
            until = now + queue.visibility_timeout * ids.MICROS
            claimed = claim(conn, key, until, last_error)
            message = live_message(conn, key, now)
            if message is not None:
                letters.append(dead_letter(message, attempts, last_error, claimed, generation))
        else:
            conn.execute(
                "UPDATE leases SET state = 'released', token = '', visible_at = ?, "
                f"last_error = ? WHERE {LEASE_KEY}",
                (now + ask.delay * ids.MICROS, last_error, *key),
            )
    return answer, letters


def extend(
    conn: sqlite3.Connection, queue: QueueMeta, subscription: str, ask: ExtendAsk
) -> dict[str, ReceiptStatus]:
    """Move current leases' ends to ``visibility_timeout`` seconds from ``now_micros``."""
    answer: dict[str, ReceiptStatus] = {}
    until = ask.now_micros + ask.visibility_timeout * ids.MICROS
    for receipt, key, _ in _held(conn, queue, subscription, ask.receipts, answer):
        conn.execute(f"UPDATE leases SET visible_at = ? WHERE {LEASE_KEY}", (until, *key))
        answer[receipt] = "acked"
    return answer
