"""What an owner read after a position, kept for its next reserves.

A reserve reads, for each queue partition and priority it serves, the
messages after the subscription's position, and takes the best of them over
all partitions: a reserve of 100 over 8 partitions reads up to 800 messages
to hand out 100. The owner of a partition (:mod:`queuey.storage.cassandra.owned`) is the
only one handing it out, so it keeps what it read (:class:`Scan`) and later
reserves take from it without reading again, until it runs short, grows old,
or the queue gets new messages through this process or an announcement from
another (:meth:`ScanCache.drop_queue`). A scan that reached the end says
"nothing more" only to calls at its own instant: a delayed message may fall
due after it any time later, so later calls take it as a prefix (read again
once it runs short). A message falling due inside a kept prefix is handed out
when the prefix is read again (the position cannot pass it, see below).

A scan made at an earlier call knows only what had landed by then, so a
position may pass only what that scan's own settled instant covered: the
reserve moves positions with ``min(settled now, scan.settled)`` (the settled
rule of :func:`queuey.storage.cassandra.leases.advance`), and a message that
landed late with an older id is found by a later read. A kept message that
expired meanwhile is skipped.

The priorities a queue partition has used (:class:`Priorities`) are kept the
same way and dropped with its scans: without them every reserve would read
them again for each partition. A priority first used through another process
is seen at its announcement, at worst when the kept set grows old.
"""

from __future__ import annotations

import bisect
import collections
import threading
import uuid
from dataclasses import dataclass, field

from queuey import ids
from queuey.model import Message

#: Rows an owner reads ahead past a position (per queue partition and priority).
READ_AHEAD = 500
#: Microseconds (of the callers' clock) a kept scan serves reserves.
MAX_AGE = 2_000_000
#: Entries (scans, priorities) kept per process (least recently used dropped first).
ENTRIES = 512

#: A scan's: incarnation, subscription, partition, priority; a partition's
#: priorities: incarnation, partition.
Key = tuple[str, str, int, int] | tuple[str, int]


@dataclass(frozen=True)
class Scan:
    """Rows read after a position, in order, as of one call."""

    queue: tuple[str, str]  # application, name
    messages: tuple[Message, ...]
    exhausted: bool  # the read reached the end of what had landed
    now: int  # the call's clock when read (microseconds)
    settled: int  # the call's settled instant
    keys: tuple = field(default=(), compare=False)  # the messages' order keys

    @classmethod
    def of(
        cls,
        queue: tuple[str, str],
        messages: list[Message],
        exhausted: bool,
        now: int,
        settled: int,
    ) -> Scan:
        keys = tuple(ids.order_key(m.id) for m in messages)
        return cls(queue, tuple(messages), exhausted, now, settled, keys)

    def after(self, position: uuid.UUID | None, now: int) -> list[Message]:
        """The kept messages after ``position`` that a call at ``now`` may
        hand out: not expired, and due (a concurrent call that started
        later may have read the scan at a later instant)."""
        start = 0 if position is None else bisect.bisect_right(self.keys, ids.order_key(position))
        found = [m for m in self.messages[start:] if m.expires > now]
        if now < self.now:
            found = [m for m in found if ids.micros_of(m.id) <= now]
        return found


@dataclass(frozen=True)
class Priorities:
    """The priorities a queue partition has used, as of one call."""

    queue: tuple[str, str]  # application, name
    used: frozenset[int]
    now: int  # the call's clock when read (microseconds)


Entry = Scan | Priorities


class ScanCache:
    """This process's kept scans (thread-safe, bounded), indexed by queue so
    a post to a queue with none kept costs a dictionary lookup."""

    def __init__(self) -> None:
        self._entries: collections.OrderedDict[Key, Entry] = collections.OrderedDict()
        self._by_queue: dict[tuple[str, str], set[Key]] = {}
        self._lock = threading.Lock()

    def _forget(self, key: Key) -> None:
        entry = self._entries.pop(key)
        keys = self._by_queue[entry.queue]
        keys.discard(key)
        if not keys:
            del self._by_queue[entry.queue]

    def get(self, key: Key, now: int) -> Entry | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if now - entry.now > MAX_AGE:
                self._forget(key)
                return None
            self._entries.move_to_end(key)
            return entry

    def put(self, key: Key, entry: Entry) -> None:
        with self._lock:
            if key in self._entries:
                self._forget(key)
            self._entries[key] = entry
            self._by_queue.setdefault(entry.queue, set()).add(key)
            while len(self._entries) > ENTRIES:
                self._forget(next(iter(self._entries)))

    def drop_queue(self, application: str, name: str) -> None:
        """Forget everything kept of a queue (it has new messages)."""
        with self._lock:
            for key in list(self._by_queue.get((application, name), ())):
                self._forget(key)
