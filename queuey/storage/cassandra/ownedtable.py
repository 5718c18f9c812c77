"""Lease partitions held in memory by their owner (see :mod:`queuey.storage.cassandra.ownership`).

:class:`OwnedTable` has the interface of :class:`.leasetable.LeaseTable`, so
the work queue, a reserve call and the rounds run on it unchanged: ``load``
hands out a copy of the owned state (under this process's turn on the
partition; a partition handed over since the call was routed is left out and
the call routes it again), ``commit`` makes the changed copy durable as one delta
(:mod:`.statelog`), checks that the term still runs, and only then installs
it as the state in memory. No write is conditional; every commit applies.
A write that fails leaves the outcome unknown, so the partition is dropped
and taken again with a new epoch, which reads back whatever landed.
"""

from __future__ import annotations

from collections.abc import Sequence

from queuey.errors import StorageUnavailable
from queuey.model import QueueMeta
from queuey.storage.cassandra.leases import LeaseState
from queuey.storage.cassandra.leasetable import LeaseTable
from queuey.storage.cassandra.ownership import Held, NotOwner, Ownership
from queuey.storage.cassandra.scancache import ScanCache
from queuey.storage.cassandra.settings import CassandraSettings
from queuey.storage.cassandra.statelog import SNAPSHOT_EVERY, decode
from queuey.storage.cassandra.statements import Connection


def copy_state(state: LeaseState, epoch: int) -> LeaseState:
    """A copy to change (its ``version`` carries the epoch it came from)."""
    return LeaseState(
        partition=state.partition,
        version=epoch,
        positions=dict(state.positions),
        dead_lettered=state.dead_lettered,
        slots=dict(state.slots),
    )


class OwnedTable(LeaseTable):
    """The owned partitions' states in memory, made durable change by change."""

    def __init__(self, config: CassandraSettings, max_ttl_micros: int) -> None:
        super().__init__(config, max_ttl_micros)
        self.ownership = Ownership(config, self.turns, self.lease_ttl)
        self.scans = ScanCache()

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
    ) -> list[bool]:
        if not states:
            return []
        self._register(c, queue, sub, False)
        stamp = self.ownership.stamp
        pending = []
        for state in states:
            h = self._held(queue, sub, state.partition)
            if h.epoch != state.version:
                raise NotOwner("cassandra: the partition changed owner meanwhile, retry")
            pending.append((h, state, h.seq + 1, stamp()))
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
                failed = NotOwner("cassandra: ownership term ended, retry")
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
            if isinstance(failed, StorageUnavailable):
                raise failed
            raise StorageUnavailable(f"cassandra: lease state write failed: {failed}") from failed
        return [True] * len(states)

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
