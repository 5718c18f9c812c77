"""Fair queues: which message groups are busy right now.

A fair queue serves quiet groups before busy ones, as Amazon SQS fair queues
do: when one group (a tenant) floods the queue, the other groups' messages
are still handed out promptly, and the busy group gets what they leave.

The choice is made when a message is posted, so that every backend's reserve
serves it with the machinery it already has: while one of a fair queue's
groups is busy, the queue's messages are stored in one of two *lanes*,
priority 1 for a quiet group's and priority 0 for a busy group's, and a
reserve takes higher priorities first (a post to a fair queue may not name a
priority of its own). Within a lane, messages keep their order. When no
group is busy, every message is stored at priority 0, in arrival order, at
the cost of any other message (a message above priority 0 costs a second row
on Cassandra): fairness costs something only while a flood is being served.

A group found busy stays busy for :data:`HOLD` seconds after the last post
that found it so, and so does the queue's fair mode: a flood posted at once
is served for a while after its last post, and the messages of the quiet
groups must keep passing it until it is drained. A flood that takes longer
than :data:`HOLD` to drain is, after that, served in arrival order again.

A group is **busy** when its posts in the last :data:`WINDOW` seconds (a
sliding window of two halves) exceed both :attr:`GroupTracker.threshold`
messages and ``factor`` times the mean of the other groups' recent posts.
So two groups posting alike are both quiet, a group sending 10 messages a
second beside one that sent 100,000 at once stays quiet, and a flood is
busy from its ``threshold``-th message even before any other group posts
(alone, its lane makes no difference: a reserve takes the lower lane when
the higher one is empty). Each
server process counts the posts it takes; behind a load balancer every
process sees a part of a flood and marks it busy after ``threshold`` of its
own messages, so at most ``threshold`` x processes messages of a flood go to
the quiet lane.

The tracker is bounded: at most :data:`MAX_QUEUES` queues and
:data:`MAX_GROUPS` groups per queue are counted (the smallest counts give way),
and :meth:`top` answers the busiest groups for the metrics.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

#: Seconds of posts a group's count covers (two halves, the older one fading).
WINDOW = 10.0
#: Queues and groups per queue counted at most.
MAX_QUEUES = 10_000
MAX_GROUPS = 1_000
#: Seconds a busy group stays busy after the last post that found it so.
HOLD = 300.0
#: The lanes (stored priorities) of a fair queue's messages: while a group is
#: busy, quiet groups' messages go to the quiet lane; otherwise all go to 0.
QUIET_LANE = 1
BUSY_LANE = 0
NORMAL_LANE = 0

Key = tuple[str, str]


class _Counts:
    """One queue's posts per group in the current and the previous half window."""

    __slots__ = ("half", "current", "previous", "total_current", "total_previous", "busy_until")

    def __init__(self, half: int) -> None:
        self.half = half
        #: Groups found busy, and until when they count as busy.
        self.busy_until: dict[str, float] = {}
        self.current: dict[str, int] = {}
        self.previous: dict[str, int] = {}
        self.total_current = 0
        self.total_previous = 0

    def roll(self, half: int) -> None:
        if half == self.half:
            return
        if half == self.half + 1:
            self.previous, self.total_previous = self.current, self.total_current
        else:
            self.previous, self.total_previous = {}, 0
        self.current, self.total_current = {}, 0
        self.half = half

    def count(self, group: str, weight: float) -> float:
        return self.current.get(group, 0) + weight * self.previous.get(group, 0)

    def groups(self) -> set[str]:
        return set(self.current) | set(self.previous)


class GroupTracker:
    """Recent posts per group of each fair queue, in this process."""

    def __init__(self, now: Callable[[], float], threshold: int = 100, factor: float = 2.0) -> None:
        self.now = now
        self.threshold = threshold
        self.factor = factor
        self._queues: dict[Key, _Counts] = {}
        self._lock = threading.Lock()
        #: Called with the queue's key after each count, outside the lock
        #: (the metrics' cross-process figures: :mod:`queuey.core.fairmetrics`).
        self.on_counted: Callable[[Key], None] | None = None

    def _position(self) -> tuple[int, float]:
        """The current half window, and how much of the previous one still counts."""
        at = self.now() / (WINDOW / 2)
        half = int(at)
        return half, 1.0 - (at - half)

    def lanes(self, queue: Key, groups: list[str]) -> list[int]:
        """Count one post per entry of ``groups`` and answer each one's lane."""
        half, weight = self._position()
        now = self.now()
        with self._lock:
            counts = self._queues.get(queue)
            if counts is None:
                if len(self._queues) >= MAX_QUEUES:
                    self._queues.clear()
                counts = self._queues[queue] = _Counts(half)
            counts.roll(half)
            lanes = []
            for group in groups:
                if group not in counts.current and len(counts.current) >= MAX_GROUPS:
                    smallest = min(counts.current, key=counts.current.__getitem__)
                    counts.total_current -= counts.current.pop(smallest)
                counts.current[group] = counts.current.get(group, 0) + 1
                counts.total_current += 1
                lanes.append(self._lane(counts, group, weight, now))
        if self.on_counted is not None:
            self.on_counted(queue)
        return lanes

    def _lane(self, counts: _Counts, group: str, weight: float, now: float) -> int:
        held = counts.busy_until
        if self._busy(counts, group, weight):
            if group not in held and len(held) >= MAX_GROUPS:
                held.pop(min(held, key=held.__getitem__))
            held[group] = now + HOLD
            return BUSY_LANE
        if held.get(group, 0.0) > now:
            return BUSY_LANE
        if held and max(held.values()) > now:
            return QUIET_LANE
        held.clear()
        return NORMAL_LANE

    def _busy(self, counts: _Counts, group: str, weight: float) -> bool:
        mine = counts.count(group, weight)
        if mine <= self.threshold:
            return False
        total = counts.total_current + weight * counts.total_previous
        others = len(counts.groups()) - 1
        return others == 0 or mine > self.factor * (total - mine) / others

    def top(self, queue: Key, count: int) -> list[tuple[str, float]]:
        """The ``count`` groups of ``queue`` with the most recent posts, busiest first."""
        half, weight = self._position()
        with self._lock:
            counts = self._queues.get(queue)
            if counts is None:
                return []
            counts.roll(half)
            ranked = sorted(
                ((group, counts.count(group, weight)) for group in counts.groups()),
                key=lambda item: -item[1],
            )
        return [item for item in ranked[:count] if item[1] > 0]

    def busy(self, queue: Key) -> list[str]:
        """The groups of ``queue`` busy now (found busy within :data:`HOLD`)."""
        now = self.now()
        with self._lock:
            counts = self._queues.get(queue)
            if counts is None:
                return []
            return sorted(g for g, until in counts.busy_until.items() if until > now)
