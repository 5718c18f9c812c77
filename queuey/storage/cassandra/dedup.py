"""Dedup ids on Cassandra: a second post of a ``dedup_id`` answers the first message.

The ``dedup`` table holds, per (queue incarnation, dedup id), the whole first
message (id, partition, body, expiry, priority, attributes) and the instant its
window ends (``until``, from the caller's clock, so tests move it). A post
claims its dedup ids with ``INSERT ... IF NOT EXISTS`` *before* writing the
messages; the row's TTL (the window plus slack) only reclaims the space.

A post that finds the id claimed answers the stored message, and makes sure it
is stored: a first attempt may have died between its claim and its message
write (the client saw a 503 and retries). If the message row is missing:

* while its id is younger than the write timeout, readers still hide it
  (invariant 2), so the identical row is written again (an idempotent upsert);
* later, readers (and subscriptions' positions) may have passed that id, so the
  message gets a fresh id and the claim is moved to it (``IF id = <old>``).

A claim whose window has ended is replaced the same conditional way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from cassandra.query import UNSET_VALUE

from queuey import ids
from queuey.errors import StorageUnavailable
from queuey.storage import Message, NewMessage, QueueMeta
from queuey.storage.cassandra.reads import message_of
from queuey.storage.cassandra.session import P_WORK, consistency_profile, execute_all
from queuey.storage.cassandra.statements import Connection

MICROS = ids.MICROS
#: Seconds a claim outlives its window in Cassandra (clock skew, slow posts).
DEDUP_TTL_SLACK = 3600
#: Conditional rounds for one dedup id before giving up as contended.
ROUNDS = 5


def claim_dedup_ids(
    c: Connection,
    queue: QueueMeta,
    messages: Sequence[NewMessage],
    minted: Sequence[Message],
    now: int,
    window: int,
    write_timeout: float,
    mint: Callable[[NewMessage, int], Message],
) -> tuple[list[Message], list[Message]]:
    """(the message to answer for each input, the messages to write).

    Within one batch, a repeated dedup id answers its first occurrence.
    """
    answers = list(minted)
    first_index: dict[str, int] = {}
    for i, m in enumerate(messages):
        if m.dedup_id is not None:
            first_index.setdefault(m.dedup_id, i)
    claimed = {dedup_id: minted[i] for dedup_id, i in first_index.items()}
    resolved = _claim_all(c, queue, claimed, now, window, write_timeout, mint)
    writes: list[Message] = []
    for i, m in enumerate(messages):
        if m.dedup_id is None:
            writes.append(minted[i])
            continue
        answer, write = resolved[m.dedup_id]
        answers[i] = answer
        if i == first_index[m.dedup_id] and write:
            writes.append(answer)
    return answers, writes


def _claim_values(queue: QueueMeta, dedup_id: str, msg: Message, until: int, window: int) -> tuple:
    return (
        queue.incarnation,
        dedup_id,
        until,
        msg.id,
        msg.partition,
        msg.body,
        msg.expires,
        msg.priority,
        msg.attributes or UNSET_VALUE,
        window + DEDUP_TTL_SLACK,
    )


def _claim_all(
    c: Connection,
    queue: QueueMeta,
    claimed: dict[str, Message],
    now: int,
    window: int,
    write_timeout: float,
    mint: Callable[[NewMessage, int], Message],
) -> dict[str, tuple[Message, bool]]:
    """dedup id -> (message to answer, whether this post must write it)."""
    until = now + window * MICROS
    stmts = [
        c.st.insert_dedup.bind(_claim_values(queue, d, msg, until, window))
        for d, msg in claimed.items()
    ]
    results = execute_all(c.session, stmts, P_WORK, write_timeout)
    out: dict[str, tuple[Message, bool]] = {}
    for (dedup_id, msg), rs in zip(claimed.items(), results, strict=True):
        for _ in range(ROUNDS):
            row = dict(zip(rs.column_names, rs.one(), strict=True))
            if row["[applied]"]:
                out[dedup_id] = (msg, True)
                break
            first = _stored(row)
            if row["until"] <= now:  # the window ended: this post starts a new one
                new_until, answer, write = until, msg, True
            else:
                answer, write = _existing(c, queue, first, now, write_timeout, mint)
                if answer is first:
                    out[dedup_id] = (answer, write)
                    break
                new_until = row["until"]
            values = _claim_values(queue, dedup_id, answer, new_until, window)
            rs = c.session.execute(
                c.st.replace_dedup,
                (values[-1], *values[2:9], queue.incarnation, dedup_id, first.id),
                execution_profile=P_WORK,
            )
            row = dict(zip(rs.column_names, rs.one(), strict=True))
            if row["[applied]"]:
                out[dedup_id] = (answer, write)
                break
            rs = c.session.execute(
                c.st.insert_dedup,
                _claim_values(queue, dedup_id, msg, until, window),
                execution_profile=P_WORK,
            )
        else:
            raise StorageUnavailable(f"cassandra: dedup id {dedup_id!r}: too much contention")
    return out


def _stored(row: dict) -> Message:
    return message_of(
        (row["id"], row["body"], row["expires"], row["priority"], row["attributes"]),
        row["partition"],
    )


def _existing(
    c: Connection,
    queue: QueueMeta,
    first: Message,
    now: int,
    write_timeout: float,
    mint: Callable[[NewMessage, int], Message],
) -> tuple[Message, bool]:
    """What to answer for a live claim: ``first`` itself (rewritten if its row
    is missing but no reader can have passed it yet), or a fresh copy."""
    if first.expires <= now:
        return first, False
    found = c.session.execute(
        c.st.get_message,
        (queue.incarnation, first.partition, c.bucket_of(first.timestamp), first.id),
        execution_profile=consistency_profile(queue),
    ).one()
    if found is not None:
        return first, False
    if first.timestamp > now - int(write_timeout * MICROS):
        return first, True
    fresh = mint(NewMessage(first.body, first.partition, 1, priority=first.priority), now)
    return replace(fresh, expires=first.expires, attributes=first.attributes), True
