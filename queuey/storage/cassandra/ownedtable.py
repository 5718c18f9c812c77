"""Lease partitions held in memory by their owner (see :mod:`queuey.storage.cassandra.ownership`).

One :class:`OwnedTable` per backend is what the work queue, a reserve call
and the rounds run on: ``load`` hands out a copy of the owned state (under
this process's turn on the partition, :class:`.turns.Turns`; a partition
handed over since the call was routed is left out and the call routes it
again), ``commit`` makes the changed copy durable as one delta
(:mod:`.statelog`), checks that the term still runs, and only then installs
it as the state in memory. No write is conditional; every commit applies.
A write that fails leaves the outcome unknown, so the partition is dropped
and taken again with a new epoch, which reads back whatever landed. The
table also registers subscriptions for the stats and reads the messages
that slots name.
"""

from __future__ import annotations

import collections
import random
import threading
import time
import uuid
from collections.abc import Sequence

from queuey import ids
from queuey.model import Message, QueueMeta
from queuey.storage.cassandra.leases import LeaseState
from queuey.storage.cassandra.ownership import Held, NotOwner, Ownership
from queuey.storage.cassandra.peerchannel import OutcomeUnknown
from queuey.storage.cassandra.reads import message_of
from queuey.storage.cassandra.scancache import ScanCache
from queuey.storage.cassandra.session import P_WORK, consistency_profile, execute_all
from queuey.storage.cassandra.settings import CASSANDRA_MAX_TTL, CassandraSettings
from queuey.storage.cassandra.statelog import SNAPSHOT_EVERY, decode
from queuey.storage.cassandra.statements import Connection
from queuey.storage.cassandra.turns import Turns

#: Seconds between a process's re-registrations of a subscription it uses.
REGISTER_EVERY = 86400
#: Subscriptions a process remembers having registered.
REGISTERED_CACHE = 65_536


def copy_state(state: LeaseState, epoch: int) -> LeaseState:
    """A copy to change (its ``version`` carries the epoch it came from)."""
    return LeaseState(
        partition=state.partition,
        version=epoch,
        positions=dict(state.positions),
        dead_lettered=state.dead_lettered,
        slots=dict(state.slots),
    )


class OwnedTable:
    """The owned partitions' states in memory, made durable change by change."""

    def __init__(self, config: CassandraSettings, max_ttl_micros: int) -> None:
        self.max_ttl_micros = max_ttl_micros
        self.timeout = config.request_timeout
        #: Lease state lives as long as any message it can name (refreshed on write).
        self.lease_ttl = min(CASSANDRA_MAX_TTL, config.max_ttl + 86400)
        self.turns = Turns()
        self.ownership = Ownership(config, self.turns, self.lease_ttl)
        #: Scans kept between reserves.
        self.scans = ScanCache()
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

    def _held(self, queue: QueueMeta, sub: str, partition: int) -> Held:
        h = self.ownership.held((queue.incarnation, sub, partition))
        if h is None:
            raise NotOwner("cassandra: this process no longer owns the partition, retry")
        return h

    def load(
        self, c: Connection, queue: QueueMeta, sub: str, partitions: Sequence[int]
    ) -> dict[int, LeaseState]:
        out = {}
        for p in partitions:
            h = self.ownership.held((queue.incarnation, sub, p))
            if h is not None:  # else handed over since the call was routed
                out[p] = copy_state(h.state, h.epoch)
        return out

    def read(
        self, c: Connection, queue: QueueMeta, sub: str, partitions: Sequence[int]
    ) -> dict[int, LeaseState]:
        """The states as the stats see them: in memory where owned here, else
        as last made durable by their owner."""
        out: dict[int, LeaseState] = {}
        reads = []
        for p in partitions:
            key = (queue.incarnation, sub, p)
            h = self.ownership.held(key)
            if h is not None:
                out[p] = copy_state(h.state, h.epoch)
            else:
                reads.append((p, self.ownership.log.load_async(key)))
        for p, future in reads:
            out[p] = decode(p, list(future.result())).state
        return out

    def commit(
        self, c: Connection, queue: QueueMeta, sub: str, states: Sequence[LeaseState]
    ) -> None:
        """Make the changed states durable, then install them in memory; a
        failure drops the partitions and raises :class:`.peerchannel.OutcomeUnknown`."""
        if not states:
            return
        self._register(c, queue, sub)
        stamp = self.ownership.stamp
        pending = []
        for state in states:
            # Stamped before the term is checked: a write that leaves after
            # the term ended (this process frozen in between) carries a time
            # from within it, so it loses to all a successor writes.
            ts = stamp()
            h = self._held(queue, sub, state.partition)
            if h.epoch != state.version:
                raise NotOwner("cassandra: the partition changed owner meanwhile, retry")
            pending.append((h, state, h.seq + 1, ts))
        # One request for every partition the call changed (an unlogged batch:
        # each delta stands alone, so nothing needs the batch log).
        future = self.ownership.log.write_deltas(
            [(h.key, state, h.epoch, seq, ts) for h, state, seq, ts in pending]
        )
        failed: BaseException | None = None
        try:
            future.result()
        except Exception as exc:  # noqa: BLE001 - unknown outcome: start again
            failed = exc
        for h, state, seq, _ in pending:
            if failed is None and not h.valid():
                failed = OutcomeUnknown("cassandra: ownership term ended during a write, retry")
            if failed is not None:
                self.ownership.drop(h.key, h.epoch)
                continue
            state.changed = set()
            state.head_changed = False
            h.state, h.seq = state, seq
            h.since_snapshot += 1
            if h.since_snapshot >= SNAPSHOT_EVERY:
                self._snapshot(h)
        if failed is not None:
            if isinstance(failed, OutcomeUnknown):
                raise failed
            raise OutcomeUnknown(f"cassandra: lease state write failed: {failed}") from failed

    def _snapshot(self, h: Held) -> None:
        """Fold the deltas into the snapshot, so the ring never wraps over one
        still needed (a failure drops the partition: it is read back anew)."""
        try:
            self.ownership.log.write_snapshot(
                h.key, h.state, h.epoch, h.seq, self.ownership.stamp()
            ).result()
        except Exception:  # noqa: BLE001
            self.ownership.drop(h.key, h.epoch)
            return
        h.since_snapshot = 0

    def _register(self, c: Connection, queue: QueueMeta, sub: str) -> None:
        """Record the subscription for stats, again once a day from each
        process so the row outlives its TTL while used."""
        key = (queue.incarnation, sub)
        with self._registered_lock:
            last = self._registered.get(key)
        if last is not None and time.monotonic() - last < REGISTER_EVERY:
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
        self,
        c: Connection,
        queue: QueueMeta,
        partition: int,
        message_ids: Sequence[uuid.UUID],
        now: int,
    ) -> dict[uuid.UUID, Message]:
        """The live messages of ``message_ids`` (those slots name, or receipts);
        none asked, no request made."""
        stmts = [
            c.st.get_message.bind(
                (queue.incarnation, partition, c.bucket_of(ids.micros_of(mid)), mid)
            )
            for mid in message_ids
        ]
        found = {}
        for rs in execute_all(c.session, stmts, consistency_profile(queue), self.timeout):
            row = rs.one()
            if row is not None and row[2] > now:
                found[row[0]] = message_of(row, partition)
        return found
