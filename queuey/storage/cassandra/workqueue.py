"""Work queues on Cassandra: reserve, ack, release, extend, reopen and stats.

A subscription's state in one queue partition lives in one Cassandra partition
of ``leases`` (key: incarnation, subscription, queue partition): static columns
``version``, ``positions`` (per priority) and ``dead_lettered``, and at most
:data:`.leases.SLOTS` slot rows (:mod:`.leases`). Every change reads that
partition, computes the new state in Python and writes the touched rows in one
single-partition batch conditional on ``version`` (a lightweight transaction at
LOCAL_SERIAL). Any number of API nodes serve a subscription without talking to
each other: a lost race costs a re-read and another attempt, and reserve first
tries the other partitions it was given.

New messages are found by reading the messages table after the position of
priority 0 (rows of other priorities are passed over) and the priority index
(``priority_messages``) after each other priority's position, only for the
priorities the queue partition has used (``queue_priorities``). Delayed
messages carry their due time in their id, so they sit beyond every scan's
upper bound and cost nothing until due.
"""

from __future__ import annotations

import collections
import random
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace

from cassandra import ConsistencyLevel, WriteTimeout, WriteType
from cassandra.query import BatchStatement, BatchType

from queuey import ids
from queuey.errors import StorageUnavailable
from queuey.model import (
    DeadLetter,
    Message,
    MessageRef,
    QueueMeta,
    ReceiptStatus,
    Reserved,
    make_receipt,
    parse_receipt,
)
from queuey.storage.cassandra.leases import (
    FINISHED,
    GONE,
    RELEASED,
    SLOTS,
    LeaseState,
    Slot,
)
from queuey.storage.cassandra.reads import message_of
from queuey.storage.cassandra.reservation import Reservation
from queuey.storage.cassandra.session import P_WORK, consistency_profile, execute_all
from queuey.storage.cassandra.settings import CASSANDRA_MAX_TTL, CassandraSettings
from queuey.storage.cassandra.statements import Connection
from queuey.storage.cassandra.turns import Turns
from queuey.storage.cassandra.workstats import queue_stats

MICROS = ids.MICROS
#: Conditional rounds for one call before answering "unavailable" (contention).
ROUNDS = 40
#: Seconds between a process's re-registrations of a subscription it uses.
REGISTER_EVERY = 86400
#: Subscriptions a process remembers having registered.
REGISTERED_CACHE = 65_536


class WorkQueues:
    """The work-queue half of :class:`.backend.CassandraStorage` (shares its connection)."""

    def __init__(self, config: CassandraSettings, max_ttl_micros: int) -> None:
        self.config = config
        self.max_ttl_micros = max_ttl_micros
        self.timeout = config.request_timeout
        #: Lease rows live as long as any message they can name (refreshed on write).
        self.lease_ttl = min(CASSANDRA_MAX_TTL, config.max_ttl + 86400)
        self.turns = Turns()
        self._registered: collections.OrderedDict[tuple[str, str], float] = (
            collections.OrderedDict()
        )
        self._registered_lock = threading.Lock()

    def _register(self, c: Connection, queue: QueueMeta, sub: str, new: bool) -> None:
        """Record the subscription for stats when it first writes, and again
        once a day from each process so the row outlives its TTL while used."""
        key = (queue.incarnation, sub)
        with self._registered_lock:
            last = self._registered.get(key)
        if not new and last is not None and time.monotonic() - last < REGISTER_EVERY:
            return
        c.session.execute(
            c.st.insert_subscription,
            (queue.incarnation, sub, self.lease_ttl),
            execution_profile=P_WORK,
            timeout=self.timeout,
        )
        with self._registered_lock:
            self._registered[key] = time.monotonic()
            self._registered.move_to_end(key)
            while len(self._registered) > REGISTERED_CACHE:
                self._registered.popitem(last=False)

    # -- state I/O --------------------------------------------------------------
    def load(
        self, c: Connection, queue: QueueMeta, sub: str, partitions: Sequence[int]
    ) -> dict[int, LeaseState]:
        stmts = []
        for p in partitions:
            bound = c.st.read_leases.bind((queue.incarnation, sub, p))
            bound.fetch_size = SLOTS + 1
            stmts.append(bound)
        results = execute_all(c.session, stmts, P_WORK, self.timeout)
        return {p: _state(p, rs) for p, rs in zip(partitions, results, strict=True)}

    def commit(
        self, c: Connection, queue: QueueMeta, sub: str, states: Sequence[LeaseState]
    ) -> list[bool]:
        """Write each dirty state if its version is unchanged; whether each applied."""
        batches = []
        if states:
            self._register(c, queue, sub, any(s.version is None for s in states))
        for s in states:
            batch = BatchStatement(batch_type=BatchType.UNLOGGED)
            key = (queue.incarnation, sub, s.partition)
            batch.add(
                c.st.write_lease_head,
                (
                    self.lease_ttl,
                    (s.version or 0) + 1,
                    s.positions,
                    s.dead_lettered,
                    *key,
                    s.version,
                ),
            )
            for n in sorted(s.changed):
                x = s.slots[n]
                batch.add(
                    c.st.write_slot,
                    (
                        self.lease_ttl,
                        x.message_id,
                        x.priority,
                        x.token,
                        x.state,
                        x.visible_at,
                        x.attempts,
                        x.last_error,
                        x.first_at,
                        x.generation,
                        *key,
                        n,
                    ),
                )
            batches.append(batch)
        futures = [
            c.session.execute_async(b, execution_profile=P_WORK, timeout=self.timeout)
            for b in batches
        ]
        applied = []
        for state, future in zip(states, futures, strict=True):
            try:
                applied.append(bool(future.result().one()[0]))
            except WriteTimeout as exc:
                if exc.write_type != WriteType.CAS:
                    raise
                applied.append(self._landed(c, queue, sub, state))
        return applied

    def _landed(self, c: Connection, queue: QueueMeta, sub: str, mine: LeaseState) -> bool:
        """Whether a conditional write that timed out was applied after all.

        A read at LOCAL_SERIAL first finishes any Paxos round left in progress,
        so its answer is final: the write landed if the partition holds the
        version it wrote and every slot it wrote (lease tokens are random, so
        no other writer wrote the same ones).
        """
        bound = c.st.read_leases.bind((queue.incarnation, sub, mine.partition))
        bound.fetch_size = SLOTS + 1
        bound.consistency_level = ConsistencyLevel.LOCAL_SERIAL
        now = _state(mine.partition, c.session.execute(bound, timeout=self.timeout))
        if now.version != (mine.version or 0) + 1 or now.positions != mine.positions:
            return False
        return all(now.slots.get(n) == mine.slots[n] for n in mine.changed)

    def messages(
        self, c: Connection, queue: QueueMeta, partition: int, slots: Sequence[Slot], now: int
    ) -> dict[uuid.UUID, Message]:
        """The live messages the slots name."""
        stmts = [
            c.st.get_message.bind(
                (queue.incarnation, partition, c.bucket_of(s.timestamp), s.message_id)
            )
            for s in slots
        ]
        found = {}
        for rs in execute_all(c.session, stmts, consistency_profile(queue), self.timeout):
            row = rs.one()
            if row is not None and row[2] > now:
                found[row[0]] = message_of(row, partition)
        return found

    # -- reserve ------------------------------------------------------------------
    def reserve(self, c: Connection, queue: QueueMeta, sub: str, **kw) -> Reserved:
        """See :meth:`queuey.storage.Storage.reserve` and :mod:`.reservation`."""
        return Reservation(self, c, queue, sub).run(**kw)

    # -- receipts -----------------------------------------------------------------
    def _per_partition(
        self, c: Connection, queue: QueueMeta, sub: str, receipts: Sequence[str], change
    ) -> dict[str, ReceiptStatus]:
        """Apply ``change(state, [(receipt, id, token)]) -> {receipt: status}`` to each
        partition's state, all partitions at once, again for those another
        node changed meanwhile."""
        statuses: dict[str, ReceiptStatus] = {}
        groups: dict[int, list[tuple[str, uuid.UUID, str]]] = {}
        for receipt in receipts:
            parsed = parse_receipt(receipt)
            if parsed is None or not 1 <= parsed[0] <= queue.partitions:
                statuses[receipt] = "unknown"
                continue
            groups.setdefault(parsed[0], []).append((receipt, parsed[1], parsed[2]))
        pending = list(groups)
        for attempt in range(ROUNDS):
            if not pending:
                break
            held = self.take_turns(queue, sub, pending)
            try:
                states = self.load(c, queue, sub, held)
                answers = {p: change(states[p], groups[p]) for p in held}
                dirty = [p for p in held if states[p].dirty]
                applied = self.commit(c, queue, sub, [states[p] for p in dirty])
            finally:
                self.turns.give_back([(queue.incarnation, sub, p) for p in held])
            lost = {p for p, ok in zip(dirty, applied, strict=True) if not ok}
            for p in held:
                if p not in lost:
                    statuses.update(answers[p])
            pending = [p for p in pending if p not in held or p in lost]
            if lost:
                time.sleep(random.uniform(0, 0.002 * min(attempt + 1, 10)))
        else:
            raise StorageUnavailable("cassandra: too much contention on a subscription")
        return {r: statuses[r] for r in receipts}

    def take_turns(self, queue: QueueMeta, sub: str, pending: Sequence[int]) -> list[int]:
        """The partitions among ``pending`` no other thread of this node is
        changing (their turns taken); if there are none, wait for one."""
        keys = self.turns.try_take([(queue.incarnation, sub, p) for p in pending])
        if keys:
            return [k[2] for k in keys]
        p = random.choice(list(pending))
        self.turns.take((queue.incarnation, sub, p), 4 * self.timeout)
        return [p]

    def change(self, c: Connection, queue: QueueMeta, sub: str, partition: int, fn):
        """Read one lease partition, let ``fn(state)`` change it and write it
        conditionally, again until no one else changed it meanwhile; returns
        what ``fn`` returned on the applied attempt."""
        key = (queue.incarnation, sub, partition)
        for attempt in range(ROUNDS):
            self.turns.take(key, 4 * self.timeout)
            try:
                state = self.load(c, queue, sub, [partition])[partition]
                got = fn(state)
                if not state.dirty or self.commit(c, queue, sub, [state])[0]:
                    return got
            finally:
                self.turns.give_back([key])
            time.sleep(random.uniform(0, 0.002 * min(attempt + 1, 10)))
        raise StorageUnavailable("cassandra: too much contention on a subscription")

    def ack(
        self, c: Connection, queue: QueueMeta, sub: str, receipts: Sequence[str], now: int
    ) -> dict[str, ReceiptStatus]:
        def change(state: LeaseState, items):
            return {r: state.ack(mid, token) for r, mid, token in items}

        return self._per_partition(c, queue, sub, receipts, change)

    def extend(
        self,
        c: Connection,
        queue: QueueMeta,
        sub: str,
        receipts: Sequence[str],
        now: int,
        visibility_timeout: int,
    ) -> dict[str, ReceiptStatus]:
        def change(state: LeaseState, items):
            out = {}
            for r, mid, token in items:
                slot = state.leased(mid, token)
                if isinstance(slot, Slot):
                    state.extend(slot, now, visibility_timeout)
                    slot = "acked"
                out[r] = slot
            return out

        return self._per_partition(c, queue, sub, receipts, change)

    def release(
        self,
        c: Connection,
        queue: QueueMeta,
        sub: str,
        receipts: Sequence[str],
        now: int,
        delay: int,
        error: str | None,
    ) -> tuple[dict[str, ReceiptStatus], list[DeadLetter]]:
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
            bodies = self.messages(c, queue, state.partition, last, now) if last else {}
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

        statuses = self._per_partition(c, queue, sub, receipts, change)
        return statuses, [d for p in sorted(dead) for d in dead[p]]

    def reopen(
        self, c: Connection, queue: QueueMeta, sub: str, refs: Sequence[MessageRef], now: int
    ) -> int:
        count = 0
        by_partition: dict[int, list[uuid.UUID]] = {}
        for ref in dict.fromkeys(refs):
            if 1 <= ref.partition <= queue.partitions and ref.id.version == 1:
                by_partition.setdefault(ref.partition, []).append(ref.id)
        for p, mids in by_partition.items():
            count += self.change(
                c, queue, sub, p, lambda state, mids=mids: self._reopen(c, queue, state, mids, now)
            )
        return count

    def _reopen(
        self, c: Connection, queue: QueueMeta, state: LeaseState, mids: list[uuid.UUID], now: int
    ) -> int:
        lookups = [Slot(-1, mid, 0, "", "", 0, 0) for mid in mids]
        live = self.messages(c, queue, state.partition, lookups, now)
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

    def stats(self, c: Connection, queue: QueueMeta, now: int):
        return queue_stats(self, c, queue, now)


def _with_error(slot: Slot, error: str) -> Slot:
    return replace(slot, last_error=error)


def _state(partition: int, rs) -> LeaseState:
    slots: dict[int, Slot] = {}
    head = None
    for row in rs:
        (
            number,
            version,
            positions,
            dead,
            mid,
            priority,
            token,
            st,
            visible,
            attempts,
            err,
            first,
            generation,
        ) = row
        head = head or (version, positions, dead)
        if number is not None and mid is not None:
            slots[number] = Slot(
                number,
                mid,
                priority or 0,
                token or "",
                st or "",
                visible or 0,
                attempts or 0,
                err or "",
                first or 0,
                generation or "",
            )
    version, positions, dead = head or (None, None, 0)
    return LeaseState(
        partition=partition,
        version=version,
        positions=dict(positions or {}),
        dead_lettered=dead or 0,
        slots=slots,
    )
