"""The owned lease state's on-disk form (:mod:`queuey.storage.cassandra.statelog`):
what an owner wrote is what its successor reads back, and nothing else."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from queuey import ids
from queuey.storage.cassandra.leases import ACKED, LEASED, LeaseState, Slot
from queuey.storage.cassandra.statelog import (
    RING,
    decode,
    decode_slot,
    encode_delta,
    encode_slot,
    encode_snapshot,
)


def mid(micros: int) -> uuid.UUID:
    return ids.min_uuid(micros)


def slot(n: int, micros: int, state: str = LEASED, priority: int = 0) -> Slot:
    return Slot(
        n, ids.make_uuid(micros, 1, n), priority, "t%d" % n, state, micros + 30, 1, "", micros
    )


def rows(snapshot: bytes | None, deltas: list[tuple[int, int, bytes]]) -> list[tuple]:
    """The rows of one work_state partition: (snapshot, ring, epoch, seq, delta)."""
    out = [(snapshot, seq % RING, epoch, seq, delta) for epoch, seq, delta in deltas]
    return out or [(snapshot, None, None, None, None)]


@given(
    st.integers(0, 999),
    st.integers(0, 10**16),
    st.text(max_size=20),
    st.sampled_from("LRACDG"),
    st.integers(0, 9),
)
def test_a_slot_round_trips(number, micros, error, state, priority):
    s = Slot(number, ids.make_uuid(micros, 1, 1), priority, "abc", state, micros, 3, error, 7, "g")
    assert decode_slot(encode_slot(s)) == s


def test_nothing_written_reads_as_a_fresh_partition():
    loaded = decode(3, rows(None, []))
    assert (loaded.epoch, loaded.seq, loaded.state.slots, loaded.state.positions) == (0, 0, {}, {})


def test_snapshot_then_deltas_of_its_epoch_in_order():
    base = LeaseState(partition=1, slots={0: slot(0, 1000)})
    snap = encode_snapshot(base, epoch=7, seq=0)
    one = LeaseState(partition=1, slots=dict(base.slots))
    one.put(slot(1, 2000))
    one.move_position(0, mid(1500))
    two = LeaseState(partition=1, slots=dict(one.slots), positions=dict(one.positions))
    two.put(Slot(**{**one.slots[1].__dict__, "state": ACKED}))
    loaded = decode(1, rows(snap, [(7, 1, encode_delta(one)), (7, 2, encode_delta(two))]))
    assert loaded.epoch == 7 and loaded.seq == 2
    assert loaded.state.slots[1].state == ACKED
    assert loaded.state.slots[0] == base.slots[0]
    assert loaded.state.positions == {0: mid(1500)}


def test_deltas_of_another_epoch_and_after_a_gap_are_ignored():
    base = LeaseState(partition=1)
    snap = encode_snapshot(base, epoch=9, seq=4)
    stale = LeaseState(partition=1)
    stale.put(slot(5, 100, ACKED))  # a frozen former owner's late write
    later = LeaseState(partition=1)
    later.put(slot(6, 200))
    loaded = decode(
        1,
        rows(
            snap,
            [(8, 5, encode_delta(stale)), (9, 4, encode_delta(stale)), (9, 6, encode_delta(later))],
        ),
    )
    assert loaded.state.slots == {} and loaded.seq == 4


def test_a_snapshot_leaves_out_what_a_new_delivery_may_reuse():
    state = LeaseState(partition=1)
    state.put(slot(0, 1000, ACKED))  # finished, behind the position: free
    state.put(slot(1, 3000, ACKED))  # finished ahead of the position: must stay
    state.put(slot(2, 500, LEASED))
    state.move_position(0, mid(2000))
    loaded = decode(1, rows(encode_snapshot(state, 1, 0), []))
    assert sorted(loaded.state.slots) == [1, 2]
