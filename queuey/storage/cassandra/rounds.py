"""Rounds: how every work-queue change reaches its lease partitions.

Each round takes this process's turns on some pending lease partitions (those
free, or else waits for one: :meth:`.ownedtable.OwnedTable.take_turns`),
loads their states, lets the caller change them, makes the changed ones
durable and gives the turns back. A partition the table no longer holds
(handed over meanwhile) is left out of the call. Reserve, ack, release,
extend and reopen all run through :func:`run_rounds`; a call gives up after
:data:`ROUNDS` rounds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from queuey.errors import StorageUnavailable
from queuey.model import QueueMeta
from queuey.storage.cassandra.leases import LeaseState
from queuey.storage.cassandra.ownedtable import OwnedTable
from queuey.storage.cassandra.statements import Connection

#: Rounds for one call before answering "unavailable".
ROUNDS = 40

R = TypeVar("R")
T = TypeVar("T")


def run_rounds(
    table: OwnedTable,
    c: Connection,
    queue: QueueMeta,
    sub: str,
    partitions: Sequence[int],
    change: Callable[[dict[int, LeaseState]], Mapping[int, R]],
    keep: Callable[[int, R], bool],
    *,
    enough: Callable[[], bool] = lambda: False,
    before_load: Callable[[list[int]], None] | None = None,
) -> bool:
    """Change ``sub``'s lease partitions of ``partitions`` in rounds; whether
    nothing was left to look at (or the caller had enough) within the rounds.

    A table may load fewer partitions than asked (this process stopped
    owning them): those are dropped from the call, and the caller sees no
    result for them.

    Each round, ``change(states)`` changes the states of the partitions held
    (all at once, so a caller may choose across them) and returns a result
    per partition; after the write, ``keep(partition, result)`` receives each
    result and answers whether to look at that partition again. Rounds stop
    when nothing is pending, ``enough()`` is true, or after :data:`ROUNDS`.
    ``before_load(held)`` may start reads that the round needs, so they
    overlap the load of the lease partitions.
    """
    pending = list(partitions)
    for _ in range(ROUNDS):
        if not pending or enough():
            return True
        held = table.take_turns(queue, sub, pending)
        try:
            if before_load is not None:
                before_load(held)
            states = table.load(c, queue, sub, held)
            results = change(states)
            table.commit(c, queue, sub, [s for p, s in states.items() if s.dirty])
        finally:
            table.give_back(queue, sub, held)
        again = [p for p in held if p in states and keep(p, results[p])]
        pending = [p for p in pending if p not in held] + again
    return not pending or enough()


def change_partitions(
    table: OwnedTable,
    c: Connection,
    queue: QueueMeta,
    sub: str,
    work: Mapping[int, T],
    change: Callable[[LeaseState, T], R],
) -> dict[int, R]:
    """Apply ``change(state, work[partition])`` to each partition's state, all
    partitions at once; returns what ``change`` returned on each partition."""
    answers: dict[int, R] = {}

    def each(states: dict[int, LeaseState]) -> dict[int, R]:
        return {p: change(state, work[p]) for p, state in states.items()}

    def keep(partition: int, answer: R) -> bool:
        answers[partition] = answer
        return False

    if not run_rounds(table, c, queue, sub, list(work), each, keep):
        raise StorageUnavailable("cassandra: too much contention on a subscription")
    return answers
