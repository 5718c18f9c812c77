"""One reserve call on Cassandra: the choice across queue partitions.

A call reads, for each queue partition it may serve (all at once), the
subscription's lease partition, the priorities the queue partition used and
the new messages after each priority's position; picks the best candidates
over all of them (priority, then available again before new, then oldest);
and makes each touched lease partition durable. The call goes on until it
has ``limit`` messages or nothing is left (:func:`.rounds.run_rounds`).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from cassandra.cluster import ResponseFuture

from queuey import ids
from queuey.model import DeadLetter, Delivery, Message, QueueMeta, ReadQuery, Reserved, make_receipt
from queuey.model.subscriptions import accepts
from queuey.storage.asks import ReserveAsk
from queuey.storage.cassandra.leases import CLAIMED, LEASED, RELEASED, LeaseState, Slot, advance
from queuey.storage.cassandra.ownedtable import OwnedTable
from queuey.storage.cassandra.reads import PartitionReader, ReadPlan
from queuey.storage.cassandra.rounds import run_rounds
from queuey.storage.cassandra.scancache import READ_AHEAD, Priorities, Scan, ScanCache
from queuey.storage.cassandra.session import consistency_profile
from queuey.storage.cassandra.statements import Connection

#: Most rows one reserve reads past a position, per queue partition and priority.
SCAN_ROWS = 2000
#: Most queue partitions one reserve looks at (chosen at random beyond that).
FANOUT = 32
#: Most dead letters one reserve claims per queue partition.
CLAIMS = 100

#: One partition's share of a round: its deliveries (each with its rank), its
#: dead-letter claims, and whether it may have more to give.
Served = tuple[list[tuple[tuple, Delivery]], list[DeadLetter], bool]


@dataclass
class View:
    """What one reserve round saw of one queue partition."""

    state: LeaseState
    fresh: list[Message] = field(default_factory=list)  # new, in scan order
    scans: dict[int, tuple[list[tuple[uuid.UUID, bool]], bool]] = field(default_factory=dict)
    again: list[Slot] = field(default_factory=list)
    claims: list[Slot] = field(default_factory=list)
    #: Free slot numbers, lowest first, as the round began (a slot found
    #: gone meanwhile frees one more, left for the next call).
    free: list[int] = field(default_factory=list)

    @property
    def capacity(self) -> int:
        """How many new messages it can hand out."""
        return len(self.free)

    #: Per priority, the settled instant its scan covers (a kept scan's own).
    bounds: dict[int, int] = field(default_factory=dict)


class ReserveCall:
    """One reserve call of ``sub`` on ``queue``."""

    def __init__(self, table: OwnedTable, c: Connection, queue: QueueMeta, sub: str) -> None:
        self.table = table
        self.c = c
        self.queue = queue
        self.sub = sub
        #: Per partition, the priorities it used (kept) or their read.
        self._priorities: dict[int, ResponseFuture | frozenset[int]] = {}
        #: Scans this process keeps (as the owner) between calls.
        self.kept: ScanCache = table.scans
        self.now = 0  # the call's clock (microseconds), set by run
        #: The subscription's filter, or None (it takes every message).
        self.accept = accepts(queue, sub)

    def _takes(self, q: int, msg: Message) -> bool:
        """Whether the scan of priority ``q`` may hand ``msg`` out: its own
        priority (the priority-0 scan walks over the others) and, for a
        filtered subscription, a message the filter takes. The positions
        move over every other row (:func:`.leases.advance`)."""
        if q == 0 and msg.priority > 0:
            return False
        return self.accept is None or self.accept(msg)

    def run(self, ask: ReserveAsk) -> Reserved:
        queue, limit, now_micros = self.queue, ask.limit, ask.now_micros
        parts = [p for p in dict.fromkeys(ask.partitions) if 1 <= p <= queue.partitions]
        if len(parts) > FANOUT:
            parts = random.sample(parts, FANOUT)
        settled = min(ask.settled_micros, now_micros)
        self.now = now_micros
        deliveries: list[tuple[tuple, Delivery]] = []
        dead: list[DeadLetter] = []

        def change(states: dict[int, LeaseState]) -> dict[int, Served]:
            """One choice over the partitions held: ``(deliveries, claims, more)``
            per partition, kept only if its write applies."""
            need = limit - len(deliveries)
            views = self._views(states, need, now_micros, settled)
            picks = _choose(views, need)
            return {
                p: self._apply(view, picks.get(p, []), ask.visibility_timeout, now_micros, settled)
                for p, view in views.items()
            }

        def keep(partition: int, result: Served) -> bool:
            got, claimed, more = result
            deliveries.extend(got)
            dead.extend(claimed)
            return more

        run_rounds(
            self.table,
            self.c,
            queue,
            self.sub,
            parts,
            change,
            keep,
            enough=lambda: len(deliveries) >= limit,
            before_load=self._read_priorities,
        )
        deliveries.sort(key=lambda d: d[0])
        return Reserved(deliveries=[d for _, d in deliveries], dead_letters=dead)

    def _read_priorities(self, parts: Sequence[int]) -> None:
        """Start reading which priorities each partition used (while the
        lease partitions are loaded), unless this process keeps them."""
        c, queue = self.c, self.queue
        for p in parts:
            known = self.kept.get((queue.incarnation, p), self.now)
            if isinstance(known, Priorities):
                self._priorities[p] = known.used
                continue
            self._priorities[p] = c.session.execute_async(
                c.st.queue_priorities,
                (queue.incarnation, p),
                execution_profile=consistency_profile(queue),
                timeout=self.table.timeout,
            )

    def _used(self, p: int) -> frozenset[int]:
        """The priorities partition ``p`` used (kept by an owner once read)."""
        found = self._priorities[p]
        if isinstance(found, frozenset):
            return found
        used = frozenset(row[0] for row in found.result())
        self._priorities[p] = used
        queue = (self.queue.application, self.queue.name)
        self.kept.put((self.queue.incarnation, p), Priorities(queue, used, self.now))
        return used

    def _views(
        self, states: dict[int, LeaseState], need: int, now: int, settled: int
    ) -> dict[int, View]:
        """Each partition's state, available-again slots and new messages."""
        queue = self.queue
        views: dict[int, View] = {}
        readers: list[tuple[View, int, PartitionReader | Scan | None, int]] = []
        for p, state in states.items():
            if queue.fifo and _in_flight(state, now):
                # A FIFO partition hands out nothing while any of it is in
                # flight; the conditional write still checks this state.
                views[p] = View(state)
                self._used(p)
                continue
            view = views[p] = View(state, free=state.free_slots())
            for s in state.slots.values():
                if s.available(now) and queue.max_attempts and s.attempts >= queue.max_attempts:
                    view.claims.append(s)
                elif s.state == CLAIMED and s.visible_at <= now:
                    view.claims.append(s)
                elif s.available(now):
                    view.again.append(s)
            del view.claims[CLAIMS:]
            priorities = [0] + sorted(self._used(p) - {0})
            for q in priorities:
                kept = self._kept(state, q, now, need)
                if kept is not None:
                    readers.append((view, q, kept, 0))
                    continue
                rows = self._rows(state, q, need)
                readers.append((view, q, self._reader(p, q, state, now, rows), rows))
        started = [r for _, _, r, _ in readers if isinstance(r, PartitionReader)]
        for reader in started:
            reader.start()
        for reader in started:
            reader.prime()
        for view, q, source, budget in readers:
            if source is None:
                view.scans[q] = ([], True)
                continue
            if isinstance(source, Scan):
                found: list[Message] = source.after(view.state.positions.get(q), now)
                complete = source.exhausted and now <= source.now
                view.bounds[q] = min(settled, source.settled)
            else:
                found, complete = self._read(source, view.state, q, budget, now, settled)
            rows: list[tuple[uuid.UUID, bool]] = []
            exhausted = complete
            fresh = 0
            for msg in found:
                relevant = self._takes(q, msg)
                rows.append((msg.id, relevant))
                if relevant and msg.id not in view.state.by_message:
                    view.fresh.append(msg)
                    fresh += 1
                if fresh >= need or len(rows) >= SCAN_ROWS:
                    exhausted = False
                    break
            view.scans[q] = (rows, exhausted)
        return views

    def _kept(self, state: LeaseState, q: int, now: int, need: int) -> Scan | None:
        """A kept scan of ``(partition, q)`` that can serve this call: it has
        ``need`` new messages after the position, or it saw everything."""
        scan = self.kept.get((self.queue.incarnation, self.sub, state.partition, q), now)
        if not isinstance(scan, Scan):
            return None
        if scan.exhausted and now <= scan.now:
            return scan
        # Later, it is a prefix only (it saw everything up to its own instant:
        # since then a delayed message may have fallen due after it).
        fresh = 0
        for m in scan.after(state.positions.get(q), now):
            if self._takes(q, m) and m.id not in state.by_message:
                fresh += 1
                if fresh >= need:
                    return scan
        return None

    def _rows(self, state: LeaseState, q: int, need: int) -> int:
        """Rows one read after the position of ``q`` asks for: what the call
        needs, at least the read-ahead, plus the slots it passes over."""
        ahead = max(need, READ_AHEAD)
        return min(SCAN_ROWS, ahead + state.ahead(q))

    def _read(
        self,
        reader: PartitionReader,
        state: LeaseState,
        q: int,
        rows: int,
        now: int,
        settled: int,
    ) -> tuple[list[Message], bool]:
        """The messages a read of ``rows`` after the position found (all of
        them, kept for later calls), and whether it reached the end."""
        found: list[Message] = []
        complete = True
        for msg in reader.messages():
            found.append(msg)
            if len(found) >= rows:
                complete = False
                break
        key = (self.queue.incarnation, self.sub, state.partition, q)
        queue = (self.queue.application, self.queue.name)
        self.kept.put(key, Scan.of(queue, found, complete, now, settled))
        return found, complete

    def _reader(
        self,
        partition: int,
        priority: int,
        state: LeaseState,
        now: int,
        rows: int,
    ) -> PartitionReader | None:
        query = ReadQuery(
            partitions=[partition],
            now_micros=now,
            limit=rows,
            order="ascending",
            after_id=state.positions.get(priority),
        )
        c = self.c
        plan = ReadPlan.make(
            c, self.queue, query, self.table.max_ttl_micros, direct=query.after_id is not None
        )
        if plan is None:
            return None
        if priority == 0:
            return PartitionReader(plan, partition)
        return PartitionReader(plan, partition, c.st.priority, (priority,))

    def _apply(
        self,
        view: View,
        picks: list[Slot | Message],
        visibility_timeout: int,
        now: int,
        settled: int,
    ) -> Served:
        """Lease the picks, claim the dead letters and move the positions in
        ``view.state``; returns the deliveries (with their rank), the claims
        and whether the partition may have more to give."""
        c, queue, state = self.c, self.queue, view.state
        p = state.partition
        again = [x for x in picks if isinstance(x, Slot)]
        fresh = [x for x in picks if isinstance(x, Message)]
        named = again + view.claims
        bodies = self.table.messages(c, queue, p, [s.message_id for s in named], now)
        deliveries: list[tuple[tuple, Delivery]] = []
        dead: list[DeadLetter] = []
        more = len(picks) < len(view.again) + min(len(view.fresh), view.capacity)
        for slot in view.claims:
            msg = bodies.get(slot.message_id)
            if msg is None:
                state.gone(slot)
                continue
            new = state.claim(slot, now, queue.visibility_timeout)
            receipt = make_receipt(p, msg.id, new.token)
            dead.append(DeadLetter(msg, new.attempts, new.last_error, receipt, new.generation))
        for slot in again:
            msg = bodies.get(slot.message_id)
            if msg is None:
                state.gone(slot)
                more = True
                continue
            new = state.lease(slot, now, visibility_timeout)
            receipt = make_receipt(p, msg.id, new.token)
            deliveries.append(
                (_rank(msg, True), Delivery(msg, new.attempts, receipt, new.first_at))
            )
        # Slots first (the choice left enough free), then the positions may
        # pass the messages just handed out.
        for number, msg in zip(view.free, fresh, strict=False):
            slot = Slot(number, msg.id, msg.priority, "", "", 0, 0)
            new = state.lease(slot, now, visibility_timeout)
            receipt = make_receipt(p, msg.id, new.token)
            deliveries.append(
                (_rank(msg, False), Delivery(msg, new.attempts, receipt, new.first_at))
            )
        handed = state.by_message
        before = dict(state.positions)
        passed = False
        for q, (rows, exhausted) in view.scans.items():
            bound = view.bounds.get(q, settled)
            pos = advance(state.positions.get(q), rows, exhausted, handed, bound)
            if pos is not None and pos != before.get(q):
                passed = passed or any(ids.order_key(mid) <= ids.order_key(pos) for mid, _ in rows)
                # Moving over nothing but time is written only with other
                # changes, or once the position lags a bucket behind.
                lag = bound - ids.micros_of(before[q]) if q in before else c.bucket_micros
                if passed or fresh or state.dirty or lag >= c.bucket_micros:
                    state.move_position(q, pos)
        return deliveries, dead, more


def _in_flight(state: LeaseState, now: int) -> bool:
    """Whether a message of the partition is leased, claimed or released with a
    delay not yet passed (a FIFO partition then waits)."""
    return any(
        s.state in (LEASED, RELEASED, CLAIMED) and s.visible_at > now for s in state.slots.values()
    )


def _rank(msg: Message, again: bool) -> tuple:
    """Reserve order: higher priority, then available again, then oldest."""
    return (-msg.priority, 0 if again else 1, msg.timestamp, ids.order_key(msg.id))


def _choose(views: dict[int, View], need: int) -> dict[int, list[Slot | Message]]:
    """The ``need`` best candidates over all partitions (new ones only while
    their partition has free slots)."""
    candidates: list[tuple[tuple, int, Slot | Message]] = []
    for p, view in views.items():
        for s in view.again:
            key = (-s.priority, 0, s.timestamp, ids.order_key(s.message_id))
            candidates.append((key, p, s))
        for m in view.fresh:
            candidates.append((_rank(m, False), p, m))
    candidates.sort(key=lambda c: c[0])
    capacity = {p: v.capacity for p, v in views.items()}
    picks: dict[int, list[Slot | Message]] = {}
    taken = 0
    for _, p, x in candidates:
        if taken >= need:
            break
        if isinstance(x, Message):
            if capacity[p] <= 0:
                continue
            capacity[p] -= 1
        picks.setdefault(p, []).append(x)
        taken += 1
    return picks
