"""Work queues on SQLite: reserve, ack, release, extend and reopen.

Every call is one short write transaction (``BEGIN IMMEDIATE``, through
:meth:`Database.write`), so it holds the file's write lock from its first
statement: two reservations, in this process or another sharing the file,
never see the same message available, and a lease is exact to the
microsecond of the caller's clock.

A subscription keeps, per partition and priority, the newest message it has
handed out (``positions``), and a ``leases`` row per message it delivered:

========== =================================================================
state      meaning
========== =================================================================
leased     delivered with ``token``; available again once ``visible_at`` passed
released   released (token cleared); available again at ``visible_at``
claimed    claimed for dead-lettering with ``token`` until ``visible_at``
acked      finished by an ack (``token`` kept, so a repeated ack answers acked)
dead       finished as dead-lettered (the claim was acked)
========== =================================================================

A reopen (redrive) draws a new ``generation`` for the lease, which its next
dead letter carries (see :class:`queuey.model.DeadLetter`).

``settled_micros`` is not needed here: inside the write transaction every
committed message is visible and no other write is in flight (SQLite has one
writer), so a position never passes a message that could still appear. One
exception is guarded: a delayed message's id is minted above the file's
``last_ts``, so a reservation whose positions move past ``last_ts`` raises it
to ``now`` and later ids are minted after it, whatever their writer's clock.
"""

from __future__ import annotations

import heapq
import secrets
import uuid
from collections import defaultdict
from collections.abc import Sequence

from queuey import ids
from queuey.model import (
    DeadLetter,
    Delivery,
    Message,
    MessageRef,
    QueueMeta,
    ReceiptStatus,
    Reserved,
    make_receipt,
    parse_receipt,
)
from queuey.storage.sqlite.database import Database
from queuey.storage.sqlite.schema import COLUMNS, last_ts, row_to_message, tiebreak

#: Priorities a message may carry, highest (reserved first) first.
PRIORITIES = range(9, -1, -1)
#: Dead letters claimed per reservation at most; the rest wait for the next one.
MAX_DEAD_LETTERS = 100

_MESSAGE_COLUMNS = ", ".join("m." + c.strip() for c in COLUMNS.split(","))
_DUE = (
    "SELECT l.state, l.attempts, l.last_error, l.first_at, l.generation, m.tiebreak, "
    f"{_MESSAGE_COLUMNS} "
    "FROM leases l INDEXED BY leases_due JOIN messages m ON m.incarnation = l.incarnation "
    "AND m.partition = l.partition AND m.ts = l.ts AND m.tiebreak = l.tiebreak "
    "WHERE l.incarnation = ? AND l.subscription = ? "
    "AND l.state IN ('leased', 'released', 'claimed') AND l.visible_at <= ? "
    "AND m.expires > ? AND l.partition IN ({partitions}) "
    "ORDER BY l.priority DESC, l.ts, l.tiebreak LIMIT ?"
)
#: New messages of one priority above 0 (the partial index holds only those).
_NEW = (
    f"SELECT tiebreak, {COLUMNS} FROM messages INDEXED BY messages_by_priority "
    "WHERE incarnation = ? AND partition = ? AND priority = ? AND priority > 0 "
    "AND (ts, tiebreak) > (?, ?) AND ts <= ? AND expires > ? ORDER BY ts, tiebreak LIMIT ?"
)
#: Whether the queue holds a message above priority 0 (one probe of the partial index).
_ANY_PRIORITY = (
    "SELECT 1 FROM messages INDEXED BY messages_by_priority "
    "WHERE incarnation = ? AND priority > 0 LIMIT 1"
)
#: Every message after a position, for priority 0 (filtered here, see _new_default).
_SCAN = (
    f"SELECT tiebreak, {COLUMNS} FROM messages WHERE incarnation = ? AND partition = ? "
    "AND (ts, tiebreak) > (?, ?) AND ts <= ? ORDER BY ts, tiebreak"
)
#: Rows a reservation examines per partition looking for priority-0 messages.
SCAN_LIMIT = 20000
_LEASE_KEY = "incarnation = ? AND subscription = ? AND partition = ? AND ts = ? AND tiebreak = ?"
_INSERT_LEASE = "INSERT INTO leases VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'leased', ?, ?, 1, '', ?, '')"
#: Ack of a current lease (to acked) or dead-letter claim (to dead): its key, id and token.
_FINISH = (
    "UPDATE leases SET state = CASE state WHEN 'leased' THEN 'acked' ELSE 'dead' END "
    f"WHERE {_LEASE_KEY} AND id = ? AND token = ? AND state IN ('leased', 'claimed')"
)


def new_token() -> str:
    return secrets.token_hex(8)


def new_tokens(count: int) -> list[str]:
    """``count`` tokens like :func:`new_token`'s, from one read of the OS's randomness."""
    text = secrets.token_hex(8 * count)
    return [text[i : i + 16] for i in range(0, 16 * count, 16)]


class _Row:
    """A due lease or a new message, as a reservation considers it."""

    __slots__ = ("state", "attempts", "last_error", "first_at", "generation", "tiebreak", "message")

    def __init__(
        self, state, attempts, last_error, tb, message: Message, first_at=0, generation=""
    ) -> None:
        self.state = state
        self.attempts = attempts
        self.last_error = last_error
        self.first_at = first_at
        self.generation = generation
        self.tiebreak = tb
        self.message = message


class WorkQueues:
    """The work-queue half of :class:`~queuey.storage.sqlite.SQLiteStorage`."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # -- reserve ------------------------------------------------------------------
    def reserve(
        self,
        queue: QueueMeta,
        subscription: str,
        partitions: Sequence[int],
        limit: int,
        visibility_timeout: int,
        now: int,
    ) -> Reserved:
        parts = sorted(set(partitions))
        with self.db.write() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO subscriptions VALUES (?, ?, ?)",
                (queue.incarnation, subscription, now),
            )
            if queue.fifo:
                parts = self._fifo_free(conn, queue, subscription, parts, now)
                if not parts:
                    return Reserved([], [])
            due, dead = self._due(conn, queue, subscription, parts, limit, now)
            positions = {
                (part, priority): (ts, tb)
                for part, priority, ts, tb in conn.execute(
                    "SELECT partition, priority, ts, tiebreak FROM positions "
                    "WHERE incarnation = ? AND subscription = ?",
                    (queue.incarnation, subscription),
                )
            }
            last = last_ts(conn)
            visible = max(now, last)
            chosen: list[_Row] = []
            passed: dict[int, tuple[int, bytes]] = {}
            # One index probe says whether the queue holds any message above
            # priority 0; without one, the nine per-priority walks are skipped.
            prioritised = conn.execute(_ANY_PRIORITY, (queue.incarnation,)).fetchone()
            for priority in PRIORITIES:
                chosen += due[priority][: limit - len(chosen)]
                if len(chosen) >= limit:
                    break
                if priority and prioritised is None:
                    continue
                after = [positions.get((part, priority), (-1, b"")) for part in parts]
                need = limit - len(chosen)
                found = (
                    self._new(conn, queue, parts, after, priority, need, visible, now)
                    if priority
                    else self._new_default(conn, queue, parts, after, need, visible, now, passed)
                )
                chosen += found
            until = now + visibility_timeout * ids.MICROS
            new_leases: list[tuple] = []
            moved: dict[tuple[int, int], tuple[int, bytes]] = {}
            tokens = new_tokens(len(chosen))
            leased = [
                self._lease(conn, queue, subscription, row, token, until, now, new_leases, moved)
                for row, token in zip(chosen, tokens, strict=True)
            ]
            conn.executemany(_INSERT_LEASE, new_leases)
            for part, position in passed.items():
                moved[(part, 0)] = max(moved.get((part, 0), position), position)
            conn.executemany(
                "INSERT OR REPLACE INTO positions VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (queue.incarnation, subscription, part, priority, ts, tb)
                    for (part, priority), (ts, tb) in moved.items()
                ],
            )
            claim_until = now + queue.visibility_timeout * ids.MICROS
            letters = [self._claim(conn, queue, subscription, row, claim_until) for row in dead]
            newest = max(
                [r.message.timestamp for r in chosen if r.state is None]
                + [ts for ts, _ in passed.values()],
                default=None,
            )
            if newest is not None and newest > last:
                conn.execute("UPDATE state SET value = ? WHERE key = 'last_ts'", (now,))
        # Receipts are made once the write lock is released.
        deliveries = [
            Delivery(message, attempts, make_receipt(message.partition, message.id, token), first)
            for message, attempts, token, first in leased
        ]
        return Reserved(deliveries, letters)

    def _fifo_free(self, conn, queue, subscription, parts, now) -> list[int]:
        """The partitions of a FIFO queue with nothing in flight in ``subscription``."""
        busy = {
            row[0]
            for row in conn.execute(
                "SELECT DISTINCT partition FROM leases INDEXED BY leases_due "
                "WHERE incarnation = ? AND subscription = ? "
                "AND state IN ('leased', 'released', 'claimed') AND visible_at > ?",
                (queue.incarnation, subscription, now),
            )
        }
        return [p for p in parts if p not in busy]

    def _due(self, conn, queue, subscription, parts, limit, now):
        """Leases available again, by priority, and those due for dead-lettering."""
        sql = _DUE.format(partitions=", ".join("?" * len(parts)))
        rows = conn.execute(
            sql, (queue.incarnation, subscription, now, now, *parts, limit + MAX_DEAD_LETTERS)
        )
        due: dict[int, list[_Row]] = defaultdict(list)
        dead: list[_Row] = []
        for state, attempts, last_error, first_at, generation, tb, *message in rows:
            message = row_to_message(message)
            row = _Row(state, attempts, last_error, tb, message, first_at, generation)
            exhausted = queue.max_attempts and attempts >= queue.max_attempts
            if state == "claimed" or exhausted:
                if len(dead) < MAX_DEAD_LETTERS:
                    dead.append(row)
            else:
                due[row.message.priority].append(row)
        return due, dead

    def _new(self, conn, queue, parts, after, priority, need, visible, now) -> list[_Row]:
        """Up to ``need`` messages of ``priority`` never handed out, oldest first
        (``after``: each partition's position for this priority; ``visible``:
        the newest timestamp this call may see, see :func:`.schema.last_ts`)."""
        streams = []
        for part, (after_ts, after_tb) in zip(parts, after, strict=True):
            rows = conn.execute(
                _NEW,
                (queue.incarnation, part, priority, after_ts, after_tb, visible, now, need),
            ).fetchall()
            streams.append([_Row(None, 0, "", row[0], row_to_message(row[1:])) for row in rows])
        if len(streams) == 1:
            return streams[0]
        merged = heapq.merge(*streams, key=lambda r: (r.message.timestamp, r.tiebreak))
        return list(merged)[:need]

    def _new_default(self, conn, queue, parts, after, need, visible, now, passed) -> list[_Row]:
        """Up to ``need`` priority-0 messages never handed out, oldest first.

        They are found by walking the primary key from each partition's
        priority-0 position (no priority index to maintain on every post): one
        cursor per partition, merged by id order and stepped only as far as the
        merge consumes, so a reservation reads about ``need`` rows however many
        partitions it spans, and makes a message of only the rows it takes.
        Every priority-0 row consumed is taken, so each partition's position
        may move to the last row consumed from it: rows of other priorities or
        expired ones are walked over once, not on every call. ``passed``
        receives those positions. A partition's walk stops after
        :data:`SCAN_LIMIT` rows (the next call goes on).
        """
        heap = []
        cursors = []
        for index, (part, (after_ts, after_tb)) in enumerate(zip(parts, after, strict=True)):
            cursor = conn.execute(_SCAN, (queue.incarnation, part, after_ts, after_tb, visible))
            cursors.append(cursor)
            row = cursor.fetchone()
            if row is not None:
                heap.append((row[2], row[0], index, row))
        heapq.heapify(heap)
        examined = [0] * len(parts)
        last: dict[int, tuple] = {}
        chosen: list[_Row] = []
        while heap and len(chosen) < need:
            _, _, index, row = heap[0]
            last[index] = row
            examined[index] += 1
            if row[6] == 0 and row[5] > now:
                chosen.append(_Row(None, 0, "", row[0], row_to_message(row[1:])))
            following = cursors[index].fetchone() if examined[index] < SCAN_LIMIT else None
            if following is None:
                heapq.heappop(heap)
            else:
                heapq.heapreplace(heap, (following[2], following[0], index, following))
        for cursor in cursors:
            cursor.close()
        for index, row in last.items():
            passed[parts[index]] = (row[2], row[0])
        return chosen

    def _lease(
        self, conn, queue, subscription, row: _Row, token, until: int, now: int, new_leases, moved
    ) -> tuple[Message, int, str, int]:
        """Lease one row with ``token``: a due lease is updated here; a new
        message's lease row goes to ``new_leases`` and its position to
        ``moved`` (the newest per partition and priority), both written once
        for the whole reservation. Returns (message, attempts, token, first)."""
        message = row.message
        key = (queue.incarnation, subscription, message.partition, message.timestamp, row.tiebreak)
        first = row.first_at or now
        if row.state is None:
            new_leases.append(
                (*key, message.id.bytes, message.priority, message.expires, token, until, now)
            )
            place = (message.partition, message.priority)
            position = (message.timestamp, row.tiebreak)
            if place not in moved or moved[place] < position:
                moved[place] = position
            attempts = 1
        else:
            conn.execute(
                "UPDATE leases SET state = 'leased', token = ?, visible_at = ?, "
                f"attempts = attempts + 1, first_at = ? WHERE {_LEASE_KEY}",
                (token, until, first, *key),
            )
            attempts = row.attempts + 1
        return message, attempts, token, first

    def _claim(self, conn, queue, subscription, row: _Row, until: int) -> DeadLetter:
        message, token = row.message, new_token()
        key = (queue.incarnation, subscription, message.partition, message.timestamp, row.tiebreak)
        conn.execute(
            f"UPDATE leases SET state = 'claimed', token = ?, visible_at = ? WHERE {_LEASE_KEY}",
            (token, until, *key),
        )
        claim = make_receipt(message.partition, message.id, token)
        return DeadLetter(message, row.attempts, row.last_error, claim, row.generation)

    # -- receipts -----------------------------------------------------------------
    @staticmethod
    def _lease_key(queue, subscription, receipt) -> tuple[tuple, uuid.UUID, str] | None:
        """``(lease key, message id, token)`` a receipt names, or ``None`` if malformed."""
        parsed = parse_receipt(receipt)
        if parsed is None:
            return None
        partition, message_id, token = parsed
        key = (
            queue.incarnation,
            subscription,
            partition,
            ids.micros_of(message_id),
            tiebreak(message_id),
        )
        return key, message_id, token

    @classmethod
    def _lookup(cls, conn, queue, subscription, receipt):
        """``(key, token, lease row)`` for a receipt, or ``None`` when unknown."""
        named = cls._lease_key(queue, subscription, receipt)
        if named is None:
            return None
        key, message_id, token = named
        row = conn.execute(
            f"SELECT id, state, token, attempts, last_error, generation FROM leases "
            f"WHERE {_LEASE_KEY}",
            key,
        ).fetchone()
        if row is None or row[0] != message_id.bytes:
            return None
        return key, token, row

    def ack(
        self, queue: QueueMeta, subscription: str, receipts: Sequence[str], now: int
    ) -> dict[str, ReceiptStatus]:
        """Finish leases and dead-letter claims (see :meth:`Storage.ack`).

        Every current lease or claim is finished by one conditional update per
        receipt (its key, id and token), all in one call. When one missed,
        each receipt is looked up after the updates: its lease now finished
        with its token is acked (by this call or an earlier one); otherwise it
        is expired or unknown. Receipts are parsed before the write lock is
        taken.
        """
        answer: dict[str, ReceiptStatus] = {}
        parsed = []
        for receipt in dict.fromkeys(receipts):
            named = self._lease_key(queue, subscription, receipt)
            if named is None:
                answer[receipt] = "unknown"
                continue
            key, message_id, token = named
            parsed.append((receipt, key, message_id.bytes, token))
        if not parsed:
            return answer
        with self.db.write() as conn:
            finished = conn.executemany(
                _FINISH, [(*key, raw_id, token) for _, key, raw_id, token in parsed]
            ).rowcount
            for receipt, key, raw_id, token in parsed:
                if finished == len(parsed):
                    answer[receipt] = "acked"  # every update found its lease
                    continue
                row = conn.execute(
                    f"SELECT id, state, token FROM leases WHERE {_LEASE_KEY}", key
                ).fetchone()
                if row is None or row[0] != raw_id:
                    answer[receipt] = "unknown"
                elif row[2] == token and row[1] in ("acked", "dead"):
                    answer[receipt] = "acked"  # a repeated ack
                else:
                    answer[receipt] = "expired"
        return answer

    def release(
        self,
        queue: QueueMeta,
        subscription: str,
        receipts: Sequence[str],
        now: int,
        delay: int,
        error: str | None,
    ) -> tuple[dict[str, ReceiptStatus], list[DeadLetter]]:
        """End leases now (see :meth:`Storage.release`); only a current lease
        (state ``leased``, its token) can be released, anything else is expired."""
        answer: dict[str, ReceiptStatus] = {}
        letters: list[DeadLetter] = []
        with self.db.write() as conn:
            for receipt in dict.fromkeys(receipts):
                found = self._lookup(conn, queue, subscription, receipt)
                if found is None:
                    answer[receipt] = "unknown"
                    continue
                key, token, (_, state, current, attempts, last_error, generation) = found
                if state != "leased" or token != current:
                    answer[receipt] = "expired"
                    continue
                answer[receipt] = "acked"
                last_error = error if error is not None else last_error
                if queue.max_attempts and attempts >= queue.max_attempts:
                    claim = new_token()
                    until = now + queue.visibility_timeout * ids.MICROS
                    conn.execute(
                        "UPDATE leases SET state = 'claimed', token = ?, visible_at = ?, "
                        f"last_error = ? WHERE {_LEASE_KEY}",
                        (claim, until, last_error, *key),
                    )
                    message = self._message(conn, key, now)
                    if message is not None:
                        receipt_ = make_receipt(message.partition, message.id, claim)
                        letters.append(
                            DeadLetter(message, attempts, last_error, receipt_, generation)
                        )
                else:
                    conn.execute(
                        "UPDATE leases SET state = 'released', token = '', visible_at = ?, "
                        f"last_error = ? WHERE {_LEASE_KEY}",
                        (now + delay * ids.MICROS, last_error, *key),
                    )
        return answer, letters

    @staticmethod
    def _message(conn, key, now) -> Message | None:
        row = conn.execute(
            f"SELECT {COLUMNS} FROM messages WHERE incarnation = ? AND partition = ? "
            "AND ts = ? AND tiebreak = ? AND expires > ?",
            (key[0], *key[2:], now),
        ).fetchone()
        return row_to_message(row) if row is not None else None

    def extend(
        self,
        queue: QueueMeta,
        subscription: str,
        receipts: Sequence[str],
        now: int,
        visibility_timeout: int,
    ) -> dict[str, ReceiptStatus]:
        """Move current leases' ends (see :meth:`Storage.extend`)."""
        answer: dict[str, ReceiptStatus] = {}
        until = now + visibility_timeout * ids.MICROS
        with self.db.write() as conn:
            for receipt in dict.fromkeys(receipts):
                found = self._lookup(conn, queue, subscription, receipt)
                if found is None:
                    answer[receipt] = "unknown"
                    continue
                key, token, (_, state, current, *_) = found
                if state != "leased" or token != current:
                    answer[receipt] = "expired"
                    continue
                conn.execute(f"UPDATE leases SET visible_at = ? WHERE {_LEASE_KEY}", (until, *key))
                answer[receipt] = "acked"
        return answer

    def reopen(
        self, queue: QueueMeta, subscription: str, refs: Sequence[MessageRef], now: int
    ) -> int:
        """Make finished live messages available again with 0 attempts."""
        reopened = 0
        with self.db.write() as conn:
            for ref in dict.fromkeys(refs):
                key = (
                    queue.incarnation,
                    subscription,
                    ref.partition,
                    ids.micros_of(ref.id),
                    tiebreak(ref.id),
                )
                reopened += conn.execute(
                    "UPDATE leases SET state = 'released', token = '', visible_at = ?, "
                    "attempts = 0, last_error = '', first_at = 0, generation = ? "
                    f"WHERE {_LEASE_KEY} AND id = ? "
                    "AND state IN ('acked', 'dead') AND EXISTS (SELECT 1 FROM messages "
                    "WHERE incarnation = ? AND partition = ? AND ts = ? AND tiebreak = ? "
                    "AND expires > ?)",
                    (now, new_token(), *key, ref.id.bytes, key[0], *key[2:], now),
                ).rowcount
        return reopened
