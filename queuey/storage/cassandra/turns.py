"""Turns on lease partitions within one process (see :class:`Turns`)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from queuey.errors import StorageUnavailable

#: Lock stripes per process (see :class:`Turns`).
STRIPES = 1024


class Turns:
    """In-process turns on lease partitions, so the threads of one API node
    never race each other's lightweight transactions on the same partition:
    Paxos makes competing proposers back off and retry inside Cassandra, which
    costs far more than waiting here. Nodes still race each other, safely.

    Striped (a bounded number of locks); a thread holding turns never waits
    for another (reserve takes only free ones, or waits while holding none),
    so there is no deadlock.
    """

    def __init__(self) -> None:
        self._locks = [threading.Lock() for _ in range(STRIPES)]

    def _lock(self, key: tuple) -> threading.Lock:
        return self._locks[hash(key) % STRIPES]

    def try_take(self, keys: Sequence[tuple]) -> list[tuple]:
        """The keys whose turn was free (now taken), without waiting."""
        taken: list[tuple] = []
        locks: set[int] = set()
        for key in keys:
            lock = self._lock(key)
            if id(lock) in locks:
                taken.append(key)
            elif lock.acquire(blocking=False):
                locks.add(id(lock))
                taken.append(key)
        return taken

    def take(self, key: tuple, timeout: float) -> None:
        if not self._lock(key).acquire(timeout=timeout):
            raise StorageUnavailable("cassandra: subscription busy on this node, retry")

    def give_back(self, keys: Sequence[tuple]) -> None:
        for lock in {id(lk): lk for lk in map(self._lock, keys)}.values():
            lock.release()
