"""Work queues on Cassandra: reserve, ack, release, extend, reopen and stats.

A subscription's state in one queue partition is a :class:`.leases.LeaseState`:
``version``, ``positions`` (per priority), ``dead_lettered`` and at most
:data:`.leases.SLOTS` slots (:mod:`.leases`). Its owner keeps it in memory and
makes each change durable (:mod:`.ownedtable`); every change runs in rounds
(:mod:`.rounds`) on the partitions this process owns, and :mod:`.owned`
forwards the rest to their owners.

New messages are found by reading the messages table after the position of
priority 0 (rows of other priorities are passed over) and the priority index
(``priority_messages``) after each other priority's position, only for the
priorities the queue partition has used (``queue_priorities``). Delayed
messages carry their due time in their id, so they sit beyond every scan's
upper bound and cost nothing until due.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import replace

from queuey.model import (
    DeadLetter,
    Message,
    MessageRef,
    MessageState,
    QueueMeta,
    QueueStats,
    ReceiptStatus,
    Reserved,
    make_receipt,
    parse_receipt,
)
from queuey.model.subscriptions import accepts
from queuey.storage.asks import ExtendAsk, ReleaseAsk, ReserveAsk
from queuey.storage.cassandra.leases import (
    ACKED,
    CLAIMED,
    DEAD,
    FINISHED,
    GONE,
    LEASED,
    RELEASED,
    LeaseState,
    Slot,
)
from queuey.storage.cassandra.ownedtable import OwnedTable
from queuey.storage.cassandra.reservation import ReserveCall
from queuey.storage.cassandra.rounds import change_partitions
from queuey.storage.cassandra.statements import Connection
from queuey.storage.cassandra.workstats import in_flight as count_in_flight
from queuey.storage.cassandra.workstats import queue_stats

#: A slot's state as :class:`~queuey.model.MessageState` names it.
_STATE_NAMES = {
    LEASED: "leased",
    RELEASED: "released",
    CLAIMED: "claimed",
    ACKED: "acked",
    DEAD: "dead_lettered",
}


class CassandraWorkQueue:
    """The work-queue rules on the partitions this process owns (the local
    half of :class:`.owned.OwnedWorkQueue`)."""

    def __init__(self, table: OwnedTable) -> None:
        self.table = table

    # -- reserve ------------------------------------------------------------------
    def reserve(self, c: Connection, queue: QueueMeta, sub: str, ask: ReserveAsk) -> Reserved:
        """See :meth:`queuey.storage.Storage.reserve` and :mod:`.reservation`."""
        return ReserveCall(self.table, c, queue, sub).run(ask)

    # -- receipts -----------------------------------------------------------------
    def _per_partition(
        self, c: Connection, queue: QueueMeta, sub: str, receipts: Sequence[str], change
    ) -> dict[str, ReceiptStatus]:
        """Apply ``change(state, [(receipt, id, token)]) -> {receipt: status}`` to each
        partition's state (:func:`.rounds.change_partitions`)."""
        groups, malformed = receipt_groups(queue, receipts)
        statuses: dict[str, ReceiptStatus] = dict.fromkeys(malformed, "unknown")
        for answers in change_partitions(self.table, c, queue, sub, groups, change).values():
            statuses.update(answers)
        # A partition handed over meanwhile answers nothing (routed again).
        return {r: statuses[r] for r in receipts if r in statuses}

    def ack(
        self, c: Connection, queue: QueueMeta, sub: str, receipts: Sequence[str], now: int
    ) -> dict[str, ReceiptStatus]:
        def change(state: LeaseState, items):
            out = {r: state.ack(mid, token) for r, mid, token in items}
            slotless = [(r, mid) for r, mid, _ in items if out[r] == "unknown"]
            return out | self._recycled(c, queue, sub, state, slotless, now)

        return self._per_partition(c, queue, sub, receipts, change)

    def _recycled(
        self,
        c: Connection,
        queue: QueueMeta,
        sub: str,
        state: LeaseState,
        items: list[tuple[str, uuid.UUID]],
        now: int,
    ) -> dict[str, ReceiptStatus]:
        """``expired`` for the receipts whose message has no slot because it
        was handed out and finished and its slot went to another delivery:
        behind its priority's position, live, and taken by the subscription's
        filter. Which lease finished it is no longer known, so the receipt's
        lease is not the one on record: as for a lease that ended (an ack
        retried after a 503 whose write landed finds its message so). Receipts
        naming no live message, or one never handed out, stay ``unknown``.
        One read per such receipt, only on this rare path."""
        if not items:
            return {}
        bodies = self.table.messages(c, queue, state.partition, [mid for _, mid in items], now)
        accept = accepts(queue, sub)
        out: dict[str, ReceiptStatus] = {}
        for receipt, mid in items:
            msg = bodies.get(mid)
            if (
                msg is not None
                and state.behind(msg.priority, mid)
                and (accept is None or accept(msg))
            ):
                out[receipt] = "expired"
        return out

    def extend(
        self, c: Connection, queue: QueueMeta, sub: str, ask: ExtendAsk
    ) -> dict[str, ReceiptStatus]:
        now, visibility_timeout = ask.now_micros, ask.visibility_timeout

        def change(state: LeaseState, items):
            out = {}
            for r, mid, token in items:
                slot = state.leased(mid, token)
                if isinstance(slot, Slot):
                    state.extend(slot, now, visibility_timeout)
                    slot = "acked"
                out[r] = slot
            return out

        return self._per_partition(c, queue, sub, ask.receipts, change)

    def release(
        self, c: Connection, queue: QueueMeta, sub: str, ask: ReleaseAsk
    ) -> tuple[dict[str, ReceiptStatus], list[DeadLetter]]:
        now, delay, error = ask.now_micros, ask.delay, ask.error
        # Dead letters per partition: a partition whose commit lost a race is
        # changed again from fresh state, which replaces its list.
        dead: dict[int, list[DeadLetter]] = {}

        def change(state: LeaseState, items):
            mine = dead[state.partition] = []
            out = {}
            last = [
                s
                for _, mid, token in items
                if isinstance(s := state.leased(mid, token), Slot)
                and queue.max_attempts
                and s.attempts >= queue.max_attempts
            ]
            named = [s.message_id for s in last]
            bodies = self.table.messages(c, queue, state.partition, named, now)
            for r, mid, token in items:
                slot = state.leased(mid, token)
                if not isinstance(slot, Slot):
                    existing = state.by_message.get(mid)
                    same = existing is not None and existing.token == token
                    out[r] = "acked" if same and existing.state == RELEASED else slot
                    continue
                out[r] = "acked"
                if slot in last:
                    msg = bodies.get(mid)
                    if msg is None:
                        state.gone(slot)
                        continue
                    if error is not None:
                        slot = state.put(_with_error(slot, error))
                    new = state.claim(slot, now, queue.visibility_timeout)
                    receipt = make_receipt(state.partition, mid, new.token)
                    mine.append(
                        DeadLetter(msg, new.attempts, new.last_error, receipt, new.generation)
                    )
                else:
                    state.release(slot, now, delay, error)
            return out

        statuses = self._per_partition(c, queue, sub, ask.receipts, change)
        return statuses, [d for p in sorted(dead) for d in dead[p]]

    def reopen(
        self, c: Connection, queue: QueueMeta, sub: str, refs: Sequence[MessageRef], now: int
    ) -> int:
        by_partition: dict[int, list[uuid.UUID]] = {}
        for ref in dict.fromkeys(refs):
            if 1 <= ref.partition <= queue.partitions and ref.id.version == 1:
                by_partition.setdefault(ref.partition, []).append(ref.id)
        counts = change_partitions(
            self.table,
            c,
            queue,
            sub,
            by_partition,
            lambda state, mids: self._reopen(c, queue, state, mids, now),
        )
        return sum(counts.values())

    def _reopen(
        self, c: Connection, queue: QueueMeta, state: LeaseState, mids: list[uuid.UUID], now: int
    ) -> int:
        live = self.table.messages(c, queue, state.partition, mids, now)
        reopened = 0
        free = iter(state.free_slots())
        for mid in mids:
            slot = state.by_message.get(mid)
            if mid not in live:
                continue
            if slot is not None:
                if slot.state in FINISHED and slot.state != GONE:
                    state.reopen(slot, now)
                    reopened += 1
                continue
            msg = live[mid]
            # No slot but behind the position: it was finished and its slot reused.
            if state.behind(msg.priority, mid):
                number = next(free, None)
                if number is not None:
                    state.reopen(Slot(number, mid, msg.priority, "", "", 0, 0), now)
                    reopened += 1
        return reopened

    def message_state(
        self, c: Connection, queue: QueueMeta, sub: str, message: Message
    ) -> MessageState:
        """The message's slot in ``sub`` as the stats see it (in memory where
        owned here, else as last made durable); without one, whether the
        position of its priority has passed it."""
        state = self.table.read(c, queue, sub, [message.partition])[message.partition]
        slot = state.by_message.get(message.id)
        if slot is None or slot.state == GONE:
            return MessageState("passed" if state.behind(message.priority, message.id) else "new")
        name = _STATE_NAMES[slot.state]
        return MessageState(name, slot.attempts, slot.visible_at, slot.last_error)

    def stats(self, c: Connection, queue: QueueMeta, now: int) -> QueueStats:
        return queue_stats(self.table, c, queue, now)

    def in_flight(self, c: Connection, queue: QueueMeta, sub: str, now: int) -> int:
        """See :func:`.workstats.in_flight`."""
        return count_in_flight(self.table, c, queue, sub, now)


def receipt_groups(
    queue: QueueMeta, receipts: Sequence[str]
) -> tuple[dict[int, list[tuple[str, uuid.UUID, str]]], list[str]]:
    """Receipts by queue partition as ``(receipt, message id, token)``, and
    those that name no partition of the queue (answered ``unknown``)."""
    groups: dict[int, list[tuple[str, uuid.UUID, str]]] = {}
    malformed: list[str] = []
    for receipt in receipts:
        parsed = parse_receipt(receipt)
        if parsed is None or not 1 <= parsed[0] <= queue.partitions:
            malformed.append(receipt)
        else:
            groups.setdefault(parsed[0], []).append((receipt, parsed[1], parsed[2]))
    return groups, malformed


def _with_error(slot: Slot, error: str) -> Slot:
    return replace(slot, last_error=error)
