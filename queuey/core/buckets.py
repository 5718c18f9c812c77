"""Token buckets: every rate limit of the service (requests, posts, deliveries).

A bucket holds up to ``capacity`` tokens and gains ``rate`` tokens a second.
What a bucket guarantees, whatever the sequence of asks: over any window of
``T`` seconds it hands out at most ``rate * T + capacity`` tokens (plus, for a
batch larger than the capacity, the batch's excess: see :func:`take_tokens`).

Buckets live in one :class:`~queuey.core.slots.SlotTable` per application
(:class:`Buckets`): shared by every process of the server, or of the host,
when given a directory, else in this process. One application's keys can
fill only its own table; a key it cannot get is refused
(:class:`~queuey.core.slots.TableFull`), never counted in a weaker,
per-process bucket.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from queuey.core.slots import TableSet

#: Tokens lost to floating point (seconds since the epoch times a rate).
_EPSILON = 1e-6
#: Keys (buckets live at once) one application may hold, by default
#: (``queuey.flow.keys_per_application``).
DEFAULT_KEYS = 4096


def take_tokens(
    tokens: float, last: float, now: float, rate: float, capacity: int, want: int, whole: bool
) -> tuple[float, float, int, float]:
    """Up to ``want`` tokens of a bucket: ``(tokens, last, taken, wait)``.

    ``whole``: all ``want`` tokens or none. An ask larger than ``capacity``
    (a batch bigger than the burst a server's share of a rate allows) needs
    a full bucket and leaves it in debt by the difference, so the tokens it
    took beyond the capacity are paid back before anything else passes.
    Not ``whole``: as many as there are. ``wait`` is the seconds until the
    ask could pass when none was taken, else 0. Time going backwards (a
    wall clock stepped back) refills nothing and restarts the count.
    """
    if now > last:
        # Clocks count microseconds: rounding the difference to them undoes the
        # float error of two times since the epoch (~0.2 us, times the rate).
        elapsed = round((now - last) * 1_000_000) / 1_000_000
        tokens = min(float(capacity), tokens + elapsed * rate)
    else:
        tokens = min(float(capacity), tokens)
    need = min(want, capacity) if whole else 1
    have = tokens + _EPSILON
    if whole:
        taken = want if have >= need else 0
    else:
        taken = max(0, min(want, int(have)))
    if taken:
        return tokens - taken, now, taken, 0.0
    return tokens, now, 0, max(need - tokens, 0.0) / rate


def take_token(
    tokens: float, last: float, now: float, rate: float, burst: int
) -> tuple[float, float, float]:
    """One token (one request): ``(tokens, last, wait)``; ``wait`` 0 when taken."""
    tokens, last, _, wait = take_tokens(tokens, last, now, rate, burst, 1, True)
    return tokens, last, wait


def give_tokens(tokens: float, count: int, capacity: int) -> float:
    """A bucket after ``count`` unused tokens came back."""
    return min(float(capacity), tokens + count)


def _full_at(tokens: float, last: float, rate: float, capacity: int) -> float:
    """When the bucket is full again: from then on it is the same as a new one."""
    return last + max(0.0, capacity - tokens) / rate


class Buckets:
    """Every application's buckets, each in its application's table.

    ``directory``: where the tables' files are (shared by the processes
    that map them); None keeps them in this process. ``keys``: most buckets
    one application holds at once (full buckets are given up when a new one
    needs the room: they hold nothing a new bucket would not).
    """

    def __init__(self, directory: str | Path | None = None, keys: int = DEFAULT_KEYS) -> None:
        self.tables = TableSet(directory, "buckets", keys, 3)

    def take(
        self,
        owner: str,
        key: str,
        now: Callable[[], float],
        rate: float,
        capacity: int,
        want: int,
        whole: bool,
    ) -> tuple[int, float]:
        """Up to ``want`` tokens of ``owner``'s bucket ``key`` (full on first
        use; :func:`take_tokens`): ``(taken, wait)``. ``now`` is read under the lock."""
        with self.tables.of(owner).locked() as table:
            at = now()
            index = table.claim(key, (float(capacity), at, at), lambda v: at >= v[2])
            tokens, last, _ = table.read(index)
            tokens, last, taken, wait = take_tokens(tokens, last, at, rate, capacity, want, whole)
            table.write(index, (tokens, last, _full_at(tokens, last, rate, capacity)))
            return taken, wait

    def peek(
        self, owner: str, key: str, now: Callable[[], float], rate: float, capacity: int, want: int
    ) -> float:
        """The seconds until ``want`` tokens could be taken whole (0: now), taking nothing."""
        with self.tables.of(owner).locked() as table:
            index = table.find(key)
            if index is None:
                return 0.0
            at = now()
            tokens, last, _ = table.read(index)
            return take_tokens(tokens, last, at, rate, capacity, want, True)[3]

    def give_back(self, owner: str, key: str, count: int, capacity: int) -> None:
        """Return ``count`` tokens taken and not used."""
        if count <= 0:
            return
        with self.tables.of(owner).locked() as table:
            index = table.find(key)
            if index is None:
                return
            tokens, last, full_at = table.read(index)
            tokens = give_tokens(tokens, count, capacity)
            table.write(index, (tokens, last, full_at if tokens < capacity else last))

    def close(self) -> None:
        self.tables.close()


def rate_wait(wait: float, most: float) -> int:
    """Whole seconds to tell a refused caller (at least 1, at most ``most``)."""
    return max(1, math.ceil(min(wait, most)))
