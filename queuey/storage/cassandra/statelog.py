"""An owned lease partition's state on disk: a snapshot plus a ring of deltas.

The owner of a subscription's queue partition (:mod:`queuey.storage.cassandra.ownership`) keeps its
:class:`.leases.LeaseState` in memory and makes every change durable before
it answers, with plain writes to one Cassandra partition of ``work_state``
(key: incarnation, subscription, queue partition):

* each change is one **delta** row: the slots it touched, the positions and
  the dead-letter count, numbered by a sequence that starts again at every
  ownership *epoch*; the row is ``ring = seq % RING``, so the partition holds
  at most :data:`RING` rows and deltas overwrite old ones instead of leaving
  tombstones;
* every :data:`SNAPSHOT_EVERY` deltas (and when an owner takes over) the
  whole state goes into the static ``snapshot`` cell, with the epoch and the
  sequence it covers, so the ring never wraps over a delta still needed.

Reading the state back (:meth:`StateLog.load`) takes the snapshot and applies
the deltas of the snapshot's epoch that follow it, in order, stopping at the
first gap. Every write carries an explicit timestamp taken before its owner
checked that its term still runs, so a write of an owner frozen past its term
loses to everything its successor wrote (Cassandra keeps the newest
timestamp per cell), and a delta of an earlier epoch is never applied.
"""

from __future__ import annotations

import json
import uuid
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cassandra.cluster import Session
from cassandra.query import BatchStatement, BatchType

from queuey.storage.cassandra.leases import LeaseState, Slot
from queuey.storage.cassandra.session import P_WORK

#: Delta rows per lease partition (the ring).
RING = 128
#: Deltas between two snapshots (at most half the ring, so a delta is never
#: overwritten before a snapshot covers it).
SNAPSHOT_EVERY = 64


def encode_slot(s: Slot) -> list:
    return [
        s.number,
        s.message_id.hex,
        s.priority,
        s.token,
        s.state,
        s.visible_at,
        s.attempts,
        s.last_error,
        s.first_at,
        s.generation,
    ]


def decode_slot(x: Sequence) -> Slot:
    number, mid, priority, token, state, visible, attempts, err, first, gen = x
    return Slot(
        int(number),
        uuid.UUID(hex=mid),
        int(priority),
        str(token),
        str(state),
        int(visible),
        int(attempts),
        str(err),
        int(first),
        str(gen),
    )


def _head(state: LeaseState) -> dict:
    return {
        "p": {str(q): pos.hex for q, pos in state.positions.items()},
        "d": state.dead_lettered,
    }


def _apply_head(state: LeaseState, head: dict) -> None:
    state.positions = {int(q): uuid.UUID(hex=h) for q, h in head["p"].items()}
    state.dead_lettered = int(head["d"])


def encode_delta(state: LeaseState) -> bytes:
    """The slots ``state`` changed, with its positions and dead-letter count."""
    body = _head(state)
    body["s"] = [encode_slot(state.slots[n]) for n in sorted(state.changed)]
    return json.dumps(body, separators=(",", ":")).encode()


def encode_snapshot(state: LeaseState, epoch: int, seq: int) -> bytes:
    """The whole state; slots a new delivery may reuse are left out (a
    missing slot number is free, and a finished message behind its position
    is never looked at again)."""
    body = _head(state)
    body["e"], body["q"] = epoch, seq
    reusable = set(state.reusable())
    body["s"] = [encode_slot(s) for s in state.slots.values() if s.number not in reusable]
    return zlib.compress(json.dumps(body, separators=(",", ":")).encode(), 1)


@dataclass
class Loaded:
    """A lease partition as read back: its state, and the epoch and sequence
    of the last change applied (epoch 0: nothing was ever written)."""

    state: LeaseState
    epoch: int
    seq: int


def decode(partition: int, rows: Sequence[tuple]) -> Loaded:
    """Rebuild the state from the rows ``(snapshot, ring, epoch, seq, delta)``."""
    snapshot = next((r[0] for r in rows if r[0] is not None), None)
    state = LeaseState(partition=partition)
    if snapshot is None:
        return Loaded(state, 0, 0)
    body = json.loads(zlib.decompress(snapshot))
    _apply_head(state, body)
    slots = {s.number: s for s in map(decode_slot, body["s"])}
    epoch, seq = int(body["e"]), int(body["q"])
    deltas = sorted((r[3], r[4]) for r in rows if r[2] == epoch and r[3] is not None and r[3] > seq)
    for number, delta in deltas:
        if number != seq + 1 or delta is None:
            break  # a gap: nothing after it was ever answered
        change = json.loads(delta)
        _apply_head(state, change)
        for s in map(decode_slot, change["s"]):
            slots[s.number] = s
        seq = number
    loaded = LeaseState(
        partition=partition,
        positions=state.positions,
        dead_lettered=state.dead_lettered,
        slots=slots,
    )
    return Loaded(loaded, epoch, seq)


class StateLog:
    """The ``work_state`` statements of one connection."""

    def __init__(self, session: Session, keyspace: str, ttl: int, timeout: float) -> None:
        self.session = session
        self.ttl = ttl
        self.timeout = timeout
        key = "incarnation = ? AND subscription = ? AND partition = ?"
        p = session.prepare
        self._read = p(
            f"SELECT snapshot, ring, epoch, seq, delta FROM {keyspace}.work_state WHERE {key}"
        )
        self._delta = p(
            f"UPDATE {keyspace}.work_state USING TTL ? AND TIMESTAMP ? "
            f"SET epoch = ?, seq = ?, delta = ? WHERE {key} AND ring = ?"
        )
        self._snapshot = p(
            f"UPDATE {keyspace}.work_state USING TTL ? AND TIMESTAMP ? SET snapshot = ? WHERE {key}"
        )

    def load_async(self, key: tuple[str, str, int]):
        bound = self._read.bind(key)
        bound.fetch_size = RING + 1
        return self.session.execute_async(bound, execution_profile=P_WORK, timeout=self.timeout)

    def load(self, key: tuple[str, str, int]) -> Loaded:
        return decode(key[2], list(self.load_async(key).result()))

    def write_deltas(
        self, deltas: Sequence[tuple[tuple[str, str, int], LeaseState, int, int, int]]
    ):
        """Start writing each ``(key, state, epoch, seq, ts)``'s changes as
        delta ``seq`` of its partition, all in one request (a future)."""
        values = [
            (self.ttl, ts, epoch, seq, encode_delta(state), *key, seq % RING)
            for key, state, epoch, seq, ts in deltas
        ]
        if len(values) == 1:
            stmt: Any = self._delta.bind(values[0])
        else:
            stmt = BatchStatement(batch_type=BatchType.UNLOGGED)
            for v in values:
                stmt.add(self._delta, v)
        return self.session.execute_async(stmt, execution_profile=P_WORK, timeout=self.timeout)

    def write_snapshot(
        self, key: tuple[str, str, int], state: LeaseState, epoch: int, seq: int, ts: int
    ):
        """Start writing the whole state as covering ``(epoch, seq)`` (a future)."""
        return self.session.execute_async(
            self._snapshot,
            (self.ttl, ts, encode_snapshot(state, epoch, seq), *key),
            execution_profile=P_WORK,
            timeout=self.timeout,
        )
