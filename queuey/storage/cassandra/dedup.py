"""Dedup ids on Cassandra: a second post of a ``dedup_id`` answers the first message.

The ``dedup`` table holds, per (queue incarnation, dedup id), the whole first
message (id, partition, body, expiry, priority, attributes) and the instant its
window ends (``until``, from the caller's clock, so tests move it). A post
claims its dedup ids with ``INSERT ... IF NOT EXISTS`` *before* writing the
messages; the row's TTL (the window plus slack) only reclaims the space.

Once the message write has landed, the post marks its claim ``written``
(``IF id = <its id>``, rewriting the claim's cells with one TTL). A repeat post
within the window always answers the claimed message and, whatever happened
to that message since, stores nothing when the claim is marked: a missing
message row then means it was deleted (by a consumer, a move, a redrive), and
writing it again would bring it back. Only an unmarked claim whose message row
is missing can be a first attempt that died between its claim and its message
write (the client saw a 503 and retries):

* while its id is younger than the write timeout, readers still hide it
  (invariant 2), so the identical row is written again (an idempotent upsert);
* later, readers (and subscriptions' positions) may have passed that id, so the
  message gets a fresh id and the claim is moved to it (``IF id = <old>``).

A repeat post that finds the message stored under an unmarked claim (the
first post's mark was lost) marks it. The mark is not part of the post's
outcome: a post whose message landed succeeds even if its mark fails, which
leaves the claim as it was before this rule (a later repeat after a delete may
then store a fresh copy). A claim whose window has ended is replaced the same
conditional way as a dead first attempt.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from cassandra.query import UNSET_VALUE

from queuey import ids
from queuey.errors import StorageUnavailable
from queuey.model import Message, NewMessage, QueueMeta
from queuey.storage.cassandra.reads import message_of
from queuey.storage.cassandra.session import (
    DRIVER_ERRORS,
    P_WORK,
    consistency_profile,
    execute_all,
)
from queuey.storage.cassandra.statements import Connection

log = logging.getLogger(__name__)

MICROS = ids.MICROS
#: Seconds a claim outlives its window in Cassandra (clock skew, slow posts).
DEDUP_TTL_SLACK = 3600
#: Conditional rounds for one dedup id before giving up as contended.
ROUNDS = 5


@dataclass(frozen=True)
class Claim:
    """How a post settled one dedup id: the message to answer, whether this
    post writes it, and whether it then marks the claim ``written``."""

    dedup_id: str
    message: Message
    until: int
    write: bool
    mark: bool


def claim_dedup_ids(
    c: Connection,
    queue: QueueMeta,
    messages: Sequence[NewMessage],
    minted: Sequence[Message],
    now: int,
    window: int,
    write_timeout: float,
    mint: Callable[[NewMessage, int], Message],
) -> tuple[list[Message], list[Message], list[Claim]]:
    """(the message to answer for each input, the messages to write, the
    claims to mark with :func:`mark_written` once those writes landed).

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
        claim = resolved[m.dedup_id]
        answers[i] = claim.message
        if i == first_index[m.dedup_id] and claim.write:
            writes.append(claim.message)
    return answers, writes, [claim for claim in resolved.values() if claim.mark]


def mark_written(
    c: Connection, queue: QueueMeta, claims: Sequence[Claim], window: int, timeout: float
) -> None:
    """Mark each claim's message as stored (``IF id = <its id>``: a claim taken
    over meanwhile is left alone). Failures are logged, not raised: the
    messages are stored, and the post must say so."""
    stmts = [
        c.st.replace_dedup.bind(
            _replace_values(
                queue, claim.dedup_id, claim.message, claim.until, window, True, claim.message
            )
        )
        for claim in claims
    ]
    try:
        execute_all(c.session, stmts, P_WORK, timeout)
    except (StorageUnavailable, *DRIVER_ERRORS) as exc:
        log.warning(
            "cassandra: marking %d dedup claim(s) of %s/%s written failed: %s: %s",
            len(claims),
            queue.application,
            queue.name,
            type(exc).__name__,
            exc,
        )


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


def _replace_values(
    queue: QueueMeta,
    dedup_id: str,
    msg: Message,
    until: int,
    window: int,
    written: bool,
    expected: Message,
) -> tuple:
    """The values of ``replace_dedup``: the claim becomes ``msg`` if it still names
    ``expected``."""
    values = _claim_values(queue, dedup_id, msg, until, window)
    return (values[-1], *values[2:9], written, queue.incarnation, dedup_id, expected.id)


def _claim_all(
    c: Connection,
    queue: QueueMeta,
    claimed: dict[str, Message],
    now: int,
    window: int,
    write_timeout: float,
    mint: Callable[[NewMessage, int], Message],
) -> dict[str, Claim]:
    """dedup id -> how this post settles it."""
    until = now + window * MICROS
    stmts = [
        c.st.insert_dedup.bind(_claim_values(queue, d, msg, until, window))
        for d, msg in claimed.items()
    ]
    results = execute_all(c.session, stmts, P_WORK, write_timeout)
    out: dict[str, Claim] = {}
    for (dedup_id, msg), rs in zip(claimed.items(), results, strict=True):
        for _ in range(ROUNDS):
            row = dict(zip(rs.column_names, rs.one(), strict=True))
            if row["[applied]"]:
                out[dedup_id] = Claim(dedup_id, msg, until, write=True, mark=True)
                break
            first = _stored(row)
            if row["until"] <= now:  # the window ended: this post starts a new one
                new_until, answer = until, msg
            else:
                answer, write, mark = _existing(
                    c, queue, first, bool(row["written"]), now, write_timeout, mint
                )
                if answer is first:
                    out[dedup_id] = Claim(dedup_id, first, row["until"], write, mark)
                    break
                new_until = row["until"]
            rs = c.session.execute(
                c.st.replace_dedup,
                _replace_values(queue, dedup_id, answer, new_until, window, False, first),
                execution_profile=P_WORK,
            )
            row = dict(zip(rs.column_names, rs.one(), strict=True))
            if row["[applied]"]:
                out[dedup_id] = Claim(dedup_id, answer, new_until, write=True, mark=True)
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
    written: bool,
    now: int,
    write_timeout: float,
    mint: Callable[[NewMessage, int], Message],
) -> tuple[Message, bool, bool]:
    """(message to answer, write it, mark the claim) for a live claim:
    ``first`` itself, as it is when its write completed (even if the message
    is gone since) or when it is stored; rewritten if its row is missing but
    no reader can have passed it yet; otherwise a fresh copy."""
    if written or first.expires <= now:
        return first, False, False
    found = c.session.execute(
        c.st.get_message,
        (queue.incarnation, first.partition, c.bucket_of(first.timestamp), first.id),
        execution_profile=consistency_profile(queue),
    ).one()
    if found is not None:
        return first, False, True
    if first.timestamp > now - int(write_timeout * MICROS):
        return first, True, True
    fresh = mint(NewMessage(first.body, first.partition, 1, priority=first.priority), now)
    return replace(fresh, expires=first.expires, attributes=first.attributes), True, True
