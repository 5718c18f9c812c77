"""The reservation path of SQLite work queues: which messages a reserve
leases, and where the subscription's positions move.

A reservation takes, highest priority first, the leases due again (released,
or timed out) and then messages never handed out, found from the
subscription's position per partition and priority; leases whose attempts are
spent are claimed for dead-lettering on the way (:mod:`.deadletters`).

``settled_micros`` is not needed here: inside the write transaction every
committed message is visible and no other write is in flight (SQLite has one
writer), so a position never passes a message that could still appear. One
exception is guarded: a delayed message's id is minted above the file's
``last_ts``, so a reservation whose positions move past ``last_ts`` raises it
to ``now`` and later ids are minted after it, whatever their writer's clock.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass

from queuey import ids
from queuey.model import DeadLetter, QueueMeta
from queuey.model.subscriptions import accepts
from queuey.storage.asks import ReserveAsk
from queuey.storage.sqlite.deadletters import claim, dead_letter
from queuey.storage.sqlite.group_commit import Transaction
from queuey.storage.sqlite.leases import LEASE_KEY, LEASED_MESSAGE, in_flight, new_tokens
from queuey.storage.sqlite.schema import COLUMNS, M_COLUMNS, row_to_message

#: Priorities a message may carry, highest (reserved first) first.
PRIORITIES = range(9, -1, -1)
#: Dead letters claimed per reservation at most; the rest wait for the next one.
MAX_DEAD_LETTERS = 100
#: Rows a reservation examines per partition looking for priority-0 messages.
SCAN_LIMIT = 20000

_DUE = (
    "SELECT l.state, l.attempts, l.last_error, l.first_at, l.generation, m.tiebreak, "
    f"{M_COLUMNS} FROM leases l INDEXED BY leases_due {LEASED_MESSAGE} "
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
_INSERT_LEASE = "INSERT INTO leases VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'leased', ?, ?, 1, '', ?, '')"

#: A message leased: (its row of :data:`.schema.COLUMNS`, attempts, token,
#: first delivered at). The row becomes a message (:func:`.schema.row_to_message`)
#: once the write lock is released: nothing but the lease is made under it.
Leased = tuple[tuple, int, str, int]

#: Where a row of :data:`.schema.COLUMNS` holds what a lease is keyed and ordered by.
_ID, _TS, _PARTITION, _EXPIRES, _PRIORITY = 0, 1, 2, 4, 5


@dataclass(slots=True, eq=False)
class _Row:
    """A due lease (its ``state``) or a new message (``state`` None), as a
    reservation considers it: the message's row of :data:`.schema.COLUMNS`."""

    state: str | None
    attempts: int
    last_error: str
    tiebreak: bytes
    values: tuple
    first_at: int = 0
    generation: str = ""


def reserve(
    txn: Transaction, queue: QueueMeta, subscription: str, ask: ReserveAsk
) -> tuple[list[Leased], list[DeadLetter]]:
    """Lease up to ``ask.limit`` messages inside the caller's write transaction,
    and claim the dead letters found due on the way.

    With ``ask.max_in_flight`` the limit shrinks to the room left under it,
    counted in this transaction: no other write runs meanwhile, so concurrent
    reservations (any thread or process) never lease past the cap."""
    conn = txn.conn
    limit, now = ask.limit, ask.now_micros
    parts = sorted(set(ask.partitions))
    conn.execute(
        "INSERT OR IGNORE INTO subscriptions VALUES (?, ?, ?)",
        (queue.incarnation, subscription, now),
    )
    if ask.max_in_flight > 0:
        room = ask.max_in_flight - in_flight(conn, queue, subscription, now)
        limit = max(0, min(limit, room))
    if queue.fifo:
        parts = _fifo_free(conn, queue, subscription, parts, now)
        if not parts:
            return [], []
    due, dead = _due(conn, queue, subscription, parts, limit, now)
    positions = {
        (part, priority): (ts, tb)
        for part, priority, ts, tb in conn.execute(
            "SELECT partition, priority, ts, tiebreak FROM positions "
            "WHERE incarnation = ? AND subscription = ?",
            (queue.incarnation, subscription),
        )
    }
    last = txn.last_ts()
    visible = max(now, last)
    chosen: list[_Row] = []
    passed: dict[int, tuple[int, bytes]] = {}
    # Positions a filtered subscription walks past (messages it refuses).
    skipped: dict[tuple[int, int], tuple[int, bytes]] = {}
    accept = accepts(queue, subscription)
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
            _new(conn, queue, parts, after, priority, need, (visible, now), accept, skipped)
            if priority
            else _new_default(conn, queue, parts, after, need, visible, now, passed, accept)
        )
        chosen += found
    until = now + ask.visibility_timeout * ids.MICROS
    new_leases: list[tuple] = []
    moved: dict[tuple[int, int], tuple[int, bytes]] = {}
    tokens = new_tokens(len(chosen))
    leased = [
        _lease(conn, queue, subscription, row, token, until, now, new_leases, moved)
        for row, token in zip(chosen, tokens, strict=True)
    ]
    conn.executemany(_INSERT_LEASE, new_leases)
    for part, position in passed.items():
        skipped[(part, 0)] = position
    for place, position in skipped.items():
        moved[place] = max(moved.get(place, position), position)
    conn.executemany(
        "INSERT OR REPLACE INTO positions VALUES (?, ?, ?, ?, ?, ?)",
        [
            (queue.incarnation, subscription, part, priority, ts, tb)
            for (part, priority), (ts, tb) in moved.items()
        ],
    )
    claim_until = now + queue.visibility_timeout * ids.MICROS
    letters = [_claim(conn, queue, subscription, row, claim_until) for row in dead]
    newest = max(
        [r.values[_TS] for r in chosen if r.state is None] + [ts for ts, _ in skipped.values()],
        default=None,
    )
    if newest is not None and newest > last:
        txn.raise_last_ts(now)
    return leased, letters


def _fifo_free(conn, queue, subscription, parts, now) -> list[int]:
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


def _due(conn, queue, subscription, parts, limit, now):
    """Leases available again, by priority, and those due for dead-lettering."""
    sql = _DUE.format(partitions=", ".join("?" * len(parts)))
    rows = conn.execute(
        sql, (queue.incarnation, subscription, now, now, *parts, limit + MAX_DEAD_LETTERS)
    )
    due: dict[int, list[_Row]] = defaultdict(list)
    dead: list[_Row] = []
    for state, attempts, last_error, first_at, generation, tb, *message in rows:
        row = _Row(state, attempts, last_error, tb, tuple(message), first_at, generation)
        exhausted = queue.max_attempts and attempts >= queue.max_attempts
        if state == "claimed" or exhausted:
            if len(dead) < MAX_DEAD_LETTERS:
                dead.append(row)
        else:
            due[message[_PRIORITY]].append(row)
    return due, dead


def _new(conn, queue, parts, after, priority, need, instants, accept, skipped) -> list[_Row]:
    """Up to ``need`` messages of ``priority`` never handed out, oldest first
    (``after``: each partition's position for this priority; ``instants``:
    the newest timestamp this call may see, see :func:`.schema.last_ts`, and
    now).

    With a filter (``accept``) each partition's walk goes on past the
    messages it refuses, up to :data:`SCAN_LIMIT` rows; ``skipped``
    receives, per partition and priority, how far the position may move:
    past refused messages, never past one taken but not chosen."""
    visible, now = instants
    streams = []
    walks: list[list[tuple[tuple[int, bytes], _Row | None]]] = []
    for part, (after_ts, after_tb) in zip(parts, after, strict=True):
        rows = conn.execute(
            _NEW,
            (queue.incarnation, part, priority, after_ts, after_tb, visible, now)
            + ((need,) if accept is None else (SCAN_LIMIT,)),
        )
        taken: list[_Row] = []
        walk: list[tuple[tuple[int, bytes], _Row | None]] = []
        for row in rows:
            place = (row[1 + _TS], row[0])
            if accept is None or accept(row_to_message(row[1:])):
                taken.append(_Row(None, 0, "", row[0], row[1:]))
                walk.append((place, taken[-1]))
                if len(taken) >= need:
                    break
            else:
                walk.append((place, None))
        rows.close()
        streams.append(taken)
        walks.append(walk)
    if len(streams) == 1:
        chosen = streams[0]
    else:
        merged = heapq.merge(*streams, key=lambda r: (r.values[_TS], r.tiebreak))
        chosen = list(merged)[:need]
    if accept is not None:
        ids_chosen = {id(r) for r in chosen}
        for part, walk in zip(parts, walks, strict=True):
            position = None
            for place, row in walk:
                if row is not None and id(row) not in ids_chosen:
                    break
                position = place
            if position is not None:
                skipped[(part, priority)] = position
    return chosen


def _new_default(conn, queue, parts, after, need, visible, now, passed, accept) -> list[_Row]:
    """Up to ``need`` priority-0 messages never handed out, oldest first.

    They are found by walking the primary key from each partition's
    priority-0 position (no priority index to maintain on every post): one
    cursor per partition, merged by id order and stepped only as far as the
    merge consumes, so a reservation reads about ``need`` rows however many
    partitions it spans, and makes no message of the rows it takes (a filter
    excepted: it judges messages).
    Every priority-0 row consumed is taken, so each partition's position
    may move to the last row consumed from it: rows of other priorities,
    expired ones and those a filter (``accept``) refuses are walked over
    once, not on every call. ``passed``
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
        if row[1 + _PRIORITY] == 0 and row[1 + _EXPIRES] > now:
            if accept is None or accept(row_to_message(row[1:])):
                chosen.append(_Row(None, 0, "", row[0], row[1:]))
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
    conn, queue, subscription, row: _Row, token, until: int, now: int, new_leases, moved
) -> Leased:
    """Lease one row with ``token``: a due lease is updated here; a new
    message's lease row goes to ``new_leases`` and its position to
    ``moved`` (the newest per partition and priority), both written once
    for the whole reservation."""
    values = row.values
    key = (queue.incarnation, subscription, values[_PARTITION], values[_TS], row.tiebreak)
    first = row.first_at or now
    if row.state is None:
        new_leases.append(
            (*key, values[_ID], values[_PRIORITY], values[_EXPIRES], token, until, now)
        )
        place = (values[_PARTITION], values[_PRIORITY])
        position = (values[_TS], row.tiebreak)
        if place not in moved or moved[place] < position:
            moved[place] = position
        attempts = 1
    else:
        conn.execute(
            "UPDATE leases SET state = 'leased', token = ?, visible_at = ?, "
            f"attempts = attempts + 1, first_at = ? WHERE {LEASE_KEY}",
            (token, until, first, *key),
        )
        attempts = row.attempts + 1
    return values, attempts, token, first


def _claim(conn, queue, subscription, row: _Row, until: int) -> DeadLetter:
    values = row.values
    key = (queue.incarnation, subscription, values[_PARTITION], values[_TS], row.tiebreak)
    token = claim(conn, key, until, row.last_error)
    message = row_to_message(values)
    return dead_letter(message, row.attempts, row.last_error, token, row.generation)
