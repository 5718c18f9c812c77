"""Conditional rounds: how every work-queue change reaches its lease partitions.

Each round takes this process's turns on some pending lease partitions (those
free, or else waits for one: :meth:`.leasetable.LeaseTable.take_turns`), reads
them, lets the caller change the states, writes the changed ones
conditionally (a lightweight transaction each) and gives the turns back.
Partitions whose write lost a race to another node are read and changed
again from fresh state after a short random back-off that grows with the
attempts; a call gives up after :data:`ROUNDS` rounds. Reserve, ack, release,
extend and reopen all run through :func:`run_rounds`, so contention is
handled the same way everywhere.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from queuey.errors import StorageUnavailable
from queuey.model import QueueMeta
from queuey.storage.cassandra.leases import LeaseState
from queuey.storage.cassandra.leasetable import LeaseTable
from queuey.storage.cassandra.statements import Connection

#: Conditional rounds for one call before answering "unavailable" (contention).
ROUNDS = 40

R = TypeVar("R")
T = TypeVar("T")


@dataclass(frozen=True)
class Outcome:
    """How :func:`run_rounds` ended."""

    #: Nothing was left to look at (or the caller had enough) within the rounds.
    finished: bool
    #: The last round lost a race on some partition.
    contended: bool


def backoff(attempt: int) -> None:
    """Sleep a little before the next round, longer after more lost races
    (random, so nodes that collided do not collide again in step)."""
    time.sleep(random.uniform(0, 0.002 * min(attempt + 1, 10)))


def run_rounds(
    table: LeaseTable,
    c: Connection,
    queue: QueueMeta,
    sub: str,
    partitions: Sequence[int],
    change: Callable[[dict[int, LeaseState]], Mapping[int, R]],
    keep: Callable[[int, R], bool],
    *,
    enough: Callable[[], bool] = lambda: False,
    before_load: Callable[[list[int]], None] | None = None,
) -> Outcome:
    """Change ``sub``'s lease partitions of ``partitions`` in rounds.

    A table may load fewer partitions than asked (an owned table leaves out
    those this process stopped owning): those are dropped from the call, and
    the caller sees no result for them.

    Each round, ``change(states)`` changes the states of the partitions held
    (all at once, so a caller may choose across them) and returns a result
    per partition; after the write, ``keep(partition, result)`` receives the
    result of each partition whose state was written or needed no write, and
    answers whether to look at that partition again. A partition whose write
    lost a race stays pending and its result is dropped. Rounds stop when
    nothing is pending, ``enough()`` is true, or after :data:`ROUNDS`.
    ``before_load(held)`` may start reads that the round needs, so they
    overlap the read of the lease partitions.
    """
    pending = list(partitions)
    lost: list[int] = []
    for attempt in range(ROUNDS):
        if not pending or enough():
            return Outcome(finished=True, contended=bool(lost))
        held = table.take_turns(queue, sub, pending)
        try:
            if before_load is not None:
                before_load(held)
            states = table.load(c, queue, sub, held)
            results = change(states)
            dirty = [p for p in held if p in states and states[p].dirty]
            applied = table.commit(c, queue, sub, [states[p] for p in dirty])
        finally:
            table.give_back(queue, sub, held)
        lost = [p for p, ok in zip(dirty, applied, strict=True) if not ok]
        again = [p for p in held if p in states and p not in lost and keep(p, results[p])]
        pending = [p for p in pending if p not in held] + lost + again
        if pending and lost:
            backoff(attempt)
    return Outcome(finished=not pending or enough(), contended=bool(lost))


def change_partitions(
    table: LeaseTable,
    c: Connection,
    queue: QueueMeta,
    sub: str,
    work: Mapping[int, T],
    change: Callable[[LeaseState, T], R],
) -> dict[int, R]:
    """Apply ``change(state, work[partition])`` to each partition's state, all
    partitions at once, again for those another node changed meanwhile;
    returns what ``change`` returned on each partition's applied attempt."""
    answers: dict[int, R] = {}

    def each(states: dict[int, LeaseState]) -> dict[int, R]:
        return {p: change(state, work[p]) for p, state in states.items()}

    def keep(partition: int, answer: R) -> bool:
        answers[partition] = answer
        return False

    if not run_rounds(table, c, queue, sub, list(work), each, keep).finished:
        raise StorageUnavailable("cassandra: too much contention on a subscription")
    return answers
