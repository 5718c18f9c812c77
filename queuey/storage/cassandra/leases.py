"""A subscription's state in one queue partition, and the rules that change it.

Pure logic, no I/O: its owner keeps a :class:`LeaseState` in memory
(:mod:`.ownedtable`), :mod:`queuey.storage.cassandra.workqueue` and
:mod:`.reservation` apply these transitions, and the owner makes durable only
the slots they touched (:mod:`.statelog`).

The state is a few *positions* (one per priority: every message of that
priority at or before it has been handed out, so later calls only look after
it) and a bounded set of numbered *slots*, one per message handed out and not
yet behind the position or not yet finished. A slot is overwritten when it is
reused, never deleted, so the partition holds at most :data:`SLOTS` rows and
no tombstones.

Slot states: ``L`` leased (until ``visible_at``; once that passed, available
again), ``R`` released (available again at ``visible_at``), ``A`` acked,
``C`` claimed for dead-lettering (until ``visible_at``), ``D`` dead-lettered,
``G`` gone (the message expired or was deleted while it had a slot).

A slot's ``generation`` is empty until a reopen (redrive), which draws a new
one; it travels with the next dead letter (:class:`queuey.model.DeadLetter`).
A reopen of a message whose slot was reused draws one too, so it never
depends on the slot having been kept.
"""

from __future__ import annotations

import os
import secrets
import threading
import uuid
from dataclasses import dataclass, field, replace

from queuey import ids
from queuey.model import ReceiptStatus

LEASED, RELEASED, ACKED, CLAIMED, DEAD, GONE = "L", "R", "A", "C", "D", "G"
#: States after which the message is never delivered again (unless reopened).
FINISHED = frozenset({ACKED, DEAD, GONE})
#: Slots per (subscription, queue partition): the most messages of one queue
#: partition handed out and not yet settled behind the position.
SLOTS = 1000


#: Random bytes drawn at once for the tokens of one thread (a reserve of
#: 100 otherwise asks the kernel 100 times).
_POOL_BYTES = 4096
_pool = threading.local()
# A forked child must not hand out its parent's remaining bytes again.
os.register_at_fork(after_in_child=lambda: _pool.__dict__.clear())


def new_token() -> str:
    """A lease token: different for every delivery, so old receipts go stale
    (8 bytes from the operating system's random source, drawn in bulk)."""
    buffer: bytes = getattr(_pool, "buffer", b"")
    at: int = getattr(_pool, "at", 0)
    if at + 8 > len(buffer):
        buffer, at = secrets.token_bytes(_POOL_BYTES), 0
        _pool.buffer = buffer
    _pool.at = at + 8
    return buffer[at : at + 8].hex()


@dataclass(frozen=True)
class Slot:
    number: int
    message_id: uuid.UUID
    priority: int
    token: str
    state: str
    visible_at: int  # microseconds
    attempts: int
    last_error: str = ""
    first_at: int = 0  # microseconds: first delivery in the subscription (0: none yet)
    generation: str = ""  # drawn anew by every reopen

    @property
    def timestamp(self) -> int:
        return ids.micros_of(self.message_id)

    def available(self, now: int) -> bool:
        """Leased or released, and due again."""
        return self.state in (LEASED, RELEASED) and self.visible_at <= now


@dataclass
class LeaseState:
    """One (queue incarnation, subscription, queue partition) as read, plus the
    changes made to it since (``changed`` slot numbers, ``head_changed``)."""

    partition: int
    version: int | None = None
    positions: dict[int, uuid.UUID] = field(default_factory=dict)
    dead_lettered: int = 0
    slots: dict[int, Slot] = field(default_factory=dict)
    changed: set[int] = field(default_factory=set)
    head_changed: bool = False

    def __post_init__(self) -> None:
        self.by_message = {s.message_id: s for s in self.slots.values()}

    @property
    def dirty(self) -> bool:
        return self.head_changed or bool(self.changed)

    def put(self, slot: Slot) -> Slot:
        old = self.slots.get(slot.number)
        if old is not None and self.by_message.get(old.message_id) is old:
            del self.by_message[old.message_id]
        self.slots[slot.number] = slot
        self.by_message[slot.message_id] = slot
        self.changed.add(slot.number)
        return slot

    def behind(self, priority: int, message_id: uuid.UUID) -> bool:
        """Whether the position of ``priority`` has passed ``message_id``."""
        pos = self.positions.get(priority)
        return pos is not None and ids.order_key(message_id) <= ids.order_key(pos)

    def move_position(self, priority: int, position: uuid.UUID) -> None:
        old = self.positions.get(priority)
        if old is None or ids.order_key(position) > ids.order_key(old):
            self.positions[priority] = position
            self.head_changed = True

    def reusable(self) -> list[int]:
        """Numbers of the slots a new delivery may reuse: gone, or finished
        and behind its position (a slot ahead of the position is what stops a
        finished message from being handed out again)."""
        keys = {q: ids.order_key(pos) for q, pos in self.positions.items()}
        key_of, finished = ids.order_key, FINISHED
        return [
            s.number
            for s in self.slots.values()
            if s.state == GONE
            or (
                s.state in finished
                and (k := keys.get(s.priority)) is not None
                and key_of(s.message_id) <= k
            )
        ]

    def free_slots(self) -> list[int]:
        """Slot numbers a new delivery may take, lowest first: unused numbers
        and :meth:`reusable` slots."""
        free = self.reusable()
        slots = self.slots
        if len(slots) < SLOTS:
            free.extend(n for n in range(SLOTS) if n not in slots)
        return sorted(free)

    def ahead(self, priority: int) -> int:
        """How many slots a scan after the position of ``priority`` passes
        over: their messages are after it (priority 0 scans every priority's
        messages, the others their own)."""
        pos = self.positions.get(priority)
        key = ids.order_key(pos) if pos is not None else None
        return sum(
            1
            for s in self.slots.values()
            if (priority == 0 or s.priority == priority)
            and (key is None or ids.order_key(s.message_id) > key)
        )

    # -- transitions ------------------------------------------------------------
    def lease(self, slot: Slot, now: int, visibility_timeout: int) -> Slot:
        return self.put(
            replace(
                slot,
                token=new_token(),
                state=LEASED,
                visible_at=now + visibility_timeout * ids.MICROS,
                attempts=slot.attempts + 1,
                first_at=slot.first_at or now,
            )
        )

    def claim(self, slot: Slot, now: int, claim_timeout: int) -> Slot:
        """Claim for dead-lettering (see :class:`queuey.model.DeadLetter`)."""
        return self.put(
            replace(
                slot, token=new_token(), state=CLAIMED, visible_at=now + claim_timeout * ids.MICROS
            )
        )

    def ack(self, message_id: uuid.UUID, token: str) -> ReceiptStatus:
        slot = self.by_message.get(message_id)
        if slot is None:
            return "unknown"
        if slot.token != token:
            return "expired"
        if slot.state in (ACKED, DEAD):
            return "acked"
        if slot.state == LEASED:
            self.put(replace(slot, state=ACKED))
            return "acked"
        if slot.state == CLAIMED:
            self.put(replace(slot, state=DEAD))
            self.dead_lettered += 1
            self.head_changed = True
            return "acked"
        return "expired"

    def leased(self, message_id: uuid.UUID, token: str) -> Slot | ReceiptStatus:
        """The slot a receipt still holds, or the status to answer."""
        slot = self.by_message.get(message_id)
        if slot is None:
            return "unknown"
        if slot.token != token or slot.state != LEASED:
            return "expired"
        return slot

    def release(self, slot: Slot, now: int, delay: int, error: str | None) -> None:
        last_error = slot.last_error if error is None else error
        self.put(
            replace(
                slot, state=RELEASED, visible_at=now + delay * ids.MICROS, last_error=last_error
            )
        )

    def extend(self, slot: Slot, now: int, visibility_timeout: int) -> None:
        self.put(replace(slot, visible_at=now + visibility_timeout * ids.MICROS))

    def reopen(self, slot: Slot, now: int) -> None:
        self.put(
            replace(
                slot,
                token=new_token(),
                state=RELEASED,
                visible_at=now,
                attempts=0,
                last_error="",
                first_at=0,
                generation=new_token(),
            )
        )

    def gone(self, slot: Slot) -> None:
        self.put(replace(slot, state=GONE))


def advance(
    position: uuid.UUID | None,
    rows: list[tuple[uuid.UUID, bool]],
    exhausted: bool,
    handed_out: set[uuid.UUID] | dict,
    settled: int,
) -> uuid.UUID | None:
    """How far a position may move after a scan of the ids after it.

    ``rows``: the scanned ids in order, each with whether it belongs to the
    position's priority (priority 0 scans the whole table and passes over the
    others). The position moves over the contiguous prefix already handed out,
    never up to ``settled`` (a newer id may still have an older one in flight
    before it; the instant itself is kept out, so a write stamped exactly then
    is found too); when the scan saw everything and handed it all out, to just
    before ``settled``.
    """
    new = position
    for mid, relevant in rows:
        if ids.micros_of(mid) >= settled or (relevant and mid not in handed_out):
            return new
        new = mid
    if exhausted:
        boundary = ids.min_uuid(settled)
        if new is None or ids.order_key(boundary) > ids.order_key(new):
            new = boundary
    return new
