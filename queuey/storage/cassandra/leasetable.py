"""The ``leases`` table: a subscription's lease partitions as read and written.

One :class:`LeaseTable` per backend holds what every work-queue path shares:
reading a lease partition into a :class:`.leases.LeaseState`, writing the
states that changed in one conditional batch each (a lightweight transaction
on ``version`` at LOCAL_SERIAL), this process's turns on lease partitions
(:class:`.turns.Turns`), and reading the messages that slots name. The work
queue (:mod:`queuey.storage.cassandra.workqueue`), a reserve call (:mod:`.reservation`), the
conditional rounds (:mod:`.rounds`) and the stats (:mod:`.workstats`) are
built on it and never on each other.
"""

from __future__ import annotations

import collections
import random
import threading
import time
import uuid
from collections.abc import Sequence

from cassandra import ConsistencyLevel, WriteTimeout, WriteType
from cassandra.query import BatchStatement, BatchType

from queuey.model import Message, QueueMeta
from queuey.storage.cassandra.leases import SLOTS, LeaseState, Slot
from queuey.storage.cassandra.reads import message_of
from queuey.storage.cassandra.scancache import ScanCache
from queuey.storage.cassandra.session import P_WORK, consistency_profile, execute_all
from queuey.storage.cassandra.settings import CASSANDRA_MAX_TTL, CassandraSettings
from queuey.storage.cassandra.statements import Connection
from queuey.storage.cassandra.turns import Turns

#: Seconds between a process's re-registrations of a subscription it uses.
REGISTER_EVERY = 86400
#: Subscriptions a process remembers having registered.
REGISTERED_CACHE = 65_536


class LeaseTable:
    """Lease partitions I/O and turns, shared by every work-queue path of one backend."""

    def __init__(self, config: CassandraSettings, max_ttl_micros: int) -> None:
        self.max_ttl_micros = max_ttl_micros
        self.timeout = config.request_timeout
        #: Lease rows live as long as any message they can name (refreshed on write).
        self.lease_ttl = min(CASSANDRA_MAX_TTL, config.max_ttl + 86400)
        self.turns = Turns()
        #: Scans kept between reserves (only an owner keeps them).
        self.scans: ScanCache | None = None
        self._registered: collections.OrderedDict[tuple[str, str], float] = (
            collections.OrderedDict()
        )
        self._registered_lock = threading.Lock()

    # -- turns --------------------------------------------------------------------
    def take_turns(self, queue: QueueMeta, sub: str, pending: Sequence[int]) -> list[int]:
        """The partitions among ``pending`` no other thread of this node is
        changing (their turns taken); if there are none, wait for one."""
        keys = self.turns.try_take([(queue.incarnation, sub, p) for p in pending])
        if keys:
            return [k[2] for k in keys]
        p = random.choice(list(pending))
        self.turns.take((queue.incarnation, sub, p), 4 * self.timeout)
        return [p]

    def give_back(self, queue: QueueMeta, sub: str, held: Sequence[int]) -> None:
        """End the turns :meth:`take_turns` took."""
        self.turns.give_back([(queue.incarnation, sub, p) for p in held])

    # -- state I/O ----------------------------------------------------------------
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

    def read(
        self, c: Connection, queue: QueueMeta, sub: str, partitions: Sequence[int]
    ) -> dict[int, LeaseState]:
        """The states as the stats see them (here: as stored)."""
        return self.load(c, queue, sub, partitions)

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

    # -- the messages slots name --------------------------------------------------
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
