"""Group commit for Cassandra posts: concurrent posts to one queue partition share one write.

Each post costs Cassandra a round trip and a commit-log sync, so many small
posts to one queue partition are cheaper as one batch. The rule:

* A post joins a *lane*: (queue incarnation, queue partition, consistency,
  plain or not). Only posts whose messages all go to one queue partition and
  carry no ``dedup_id`` join one; the others (and posts too big to share a
  write, :data:`MAX_GROUP_MESSAGES`, :data:`MAX_GROUP_BYTES`) go alone at once,
  as before. Dedup posts claim their ids with lightweight transactions before
  their ids may be written, which does not fit a write formed later by another
  thread. *Plain* posts (no delay, no priority) fill one Cassandra partition,
  so their group is an unlogged batch; groups of delayed or prioritised
  messages mostly span several (a logged batch) and have a lane of their own,
  so they never turn a plain group's batch into a logged one.
* At most one write per lane is in flight. A post finding its lane idle writes
  at once, alone (no added latency). Posts arriving meanwhile queue up; when
  the write returns, the oldest waiting post becomes the leader of the next
  group: the waiting posts, in arrival order, up to the caps. The rest wait
  for the following write. Lanes are independent: another partition or queue
  never waits for this one.
* The leader mints every id of the group when it forms the write (one clock
  reading), so the group lands within the write timeout of its ids being
  minted (see :mod:`.writes`). Each caller gets exactly its own messages, in
  its order; undelayed ids increase through the group in arrival order.
* A caller returns only once the write holding its messages is done. If that
  write fails or times out, every caller in it gets its own
  ``StorageUnavailable`` (for a timeout: outcome unknown, as for a lone post).
* Nobody waits forever: a post still queued after the write timeout is
  withdrawn (nothing stored, ``StorageUnavailable``); one taken into a write
  waits at most the write timeout plus :data:`GRACE` for its outcome. A caller
  interrupted while queued withdraws its post; one interrupted after being made
  leader, before writing, hands the group to the next of its posts.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Sequence

from queuey.clock import Clock
from queuey.errors import StorageUnavailable
from queuey.model import Message, NewMessage, QueueMeta
from queuey.storage.cassandra.session import consistency_profile, unavailable
from queuey.storage.cassandra.statements import Connection

log = logging.getLogger(__name__)

#: Combine concurrent posts (False: every post writes alone, as before; read
#: at each post, for benchmarks and for ruling this out when debugging).
ENABLED = True
#: Most messages in one combined write.
MAX_GROUP_MESSAGES = 100
#: Most estimated bytes in one combined write: well under Cassandra's default
#: ``batch_size_fail_threshold`` (50 KiB), which applies to the logged
#: (multi-partition) batches of delayed or prioritised messages.
MAX_GROUP_BYTES = 16 * 1024
#: Estimated bytes of a message row besides its body and attributes (key,
#: clustering id, expiry, priority, per-cell timestamps and TTLs).
ROW_OVERHEAD = 128
#: Seconds past the write timeout a caller waits for a write holding its messages.
GRACE = 1.0

Mint = Callable[[NewMessage, int], Message]
Write = Callable[[Connection, QueueMeta, Sequence[Message], int, float], None]
Lane = tuple[str, int, str, bool]

# A post's states: queued in its lane; leading a group (to write it); taken
# into a group another caller writes; resolved (or withdrawn).
PENDING, LEADING, TAKEN, DONE = "pending", "leading", "taken", "done"


def post_size(messages: Sequence[NewMessage]) -> int:
    """Estimated bytes ``messages`` add to a batch (twice for a prioritised
    message, which is also written to its priority's table)."""
    total = 0
    for m in messages:
        body = m.body
        n = ROW_OVERHEAD + (len(body) if body.isascii() else len(body.encode()))
        if m.attributes:
            n += sum(len(k.encode()) + len(v.encode()) for k, v in m.attributes.items())
        total += 2 * n if m.priority > 0 else n
    return total


class Post:
    """One caller's messages on their way through a group write."""

    __slots__ = (
        "messages",
        "size",
        "state",
        "group",
        "taken_at",
        "started",
        "stored",
        "error",
        "wake",
    )

    def __init__(self, messages: Sequence[NewMessage], size: int) -> None:
        self.messages = messages
        self.size = size
        self.state = PENDING
        #: The posts this one writes, while it leads.
        self.group: list[Post] = []
        self.taken_at = 0.0
        self.started = False
        self.stored: list[Message] = []
        self.error: StorageUnavailable | None = None
        #: Set when the post is to lead a group, or is resolved.
        self.wake = threading.Event()

    def outcome(self) -> list[Message]:
        """All the caller's messages with their ids, or its exception: never a
        partial or empty success."""
        if self.error is not None:
            raise self.error
        if self.state != DONE or len(self.stored) != len(self.messages):
            raise StorageUnavailable("cassandra: the write was not completed", retry_after=1)
        return self.stored


def failed(exc: BaseException) -> StorageUnavailable:
    """The error one caller of a failed group write sees (one instance per caller)."""
    if isinstance(exc, StorageUnavailable):
        error = StorageUnavailable(str(exc), exc.retry_after)
    else:
        error = StorageUnavailable(f"cassandra: put messages failed ({type(exc).__name__})")
    error.__cause__ = exc
    return error


class PostGroups:
    """The lanes of one :class:`~.writes.MessageWriter`; safe to share between threads."""

    def __init__(
        self,
        clock: Clock,
        mint: Mint,
        write: Write,
        max_messages: int = MAX_GROUP_MESSAGES,
        max_bytes: int = MAX_GROUP_BYTES,
    ) -> None:
        self.clock = clock
        self.mint = mint
        self.write = write
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        # A lane is here while a write of it is in flight; its queued posts.
        self._lanes: dict[Lane, collections.deque[Post]] = {}

    def lane(self, queue: QueueMeta, messages: Sequence[NewMessage]) -> Lane | None:
        """The lane ``messages`` may join, or ``None`` if they go alone."""
        if not ENABLED or not messages or len(messages) > self.max_messages:
            return None
        partition = messages[0].partition
        plain = True
        for m in messages:
            if m.dedup_id is not None or m.partition != partition:
                return None
            if m.delay > 0 or m.priority > 0:
                plain = False
        return (queue.incarnation, partition, consistency_profile(queue), plain)

    def waiting(self) -> int:
        """Posts queued behind a write in flight, over every lane."""
        with self._lock:
            return sum(len(w) for w in self._lanes.values())

    def put(
        self,
        lane: Lane,
        c: Connection,
        queue: QueueMeta,
        messages: Sequence[NewMessage],
        write_timeout: float,
    ) -> list[Message] | None:
        """Store ``messages`` in the lane's next write; ``None`` if they are too
        big to share one (the caller then writes them alone)."""
        size = post_size(messages)
        if size > self.max_bytes:
            return None
        post = Post(messages, size)
        with self._lock:
            waiting = self._lanes.get(lane)
            if waiting is None:
                self._lanes[lane] = collections.deque()
                post.state, post.group = LEADING, [post]
            else:
                waiting.append(post)
        try:
            if post.state == LEADING or self._await_turn(lane, post, write_timeout):
                self._lead(lane, c, queue, post, write_timeout)
        except BaseException:
            self._abandon(lane, post)
            raise
        return post.outcome()

    def _await_turn(self, lane: Lane, post: Post, write_timeout: float) -> bool:
        """Wait until the post leads a group (True) or its write is done (False).

        Raises ``StorageUnavailable`` if it is still queued after the write
        timeout (then withdrawn: nothing stored) or its write took longer than
        a write can (outcome unknown).
        """
        turn_by = time.monotonic() + write_timeout
        while True:
            with self._lock:
                now = time.monotonic()
                if post.state == DONE:
                    return False
                if post.state == LEADING:
                    return True
                if post.state == PENDING:
                    if now >= turn_by:
                        self._lanes[lane].remove(post)
                        post.state = DONE
                        raise StorageUnavailable(
                            "cassandra: put messages: too many writes queued for this "
                            "partition; nothing was stored",
                            retry_after=1,
                        )
                    until = turn_by
                else:  # TAKEN
                    until = post.taken_at + write_timeout + GRACE
                    if now >= until:
                        raise StorageUnavailable(
                            "cassandra: put messages: no answer in time; outcome unknown"
                        )
            post.wake.wait(until - now)

    def _lead(
        self, lane: Lane, c: Connection, queue: QueueMeta, post: Post, write_timeout: float
    ) -> None:
        """Mint and write the post's group, resolve every post of it, pass the lane on."""
        group = post.group
        try:
            post.started = True
            deadline = time.monotonic() + write_timeout
            now = self.clock.now_micros()
            for p in group:
                p.stored = [self.mint(m, now) for m in p.messages]
            with unavailable("put messages"):
                self.write(c, queue, [m for p in group for m in p.stored], now, deadline)
        except BaseException as exc:
            if not isinstance(exc, StorageUnavailable):
                log.error("cassandra: a group write of %d posts failed", len(group), exc_info=exc)
            for p in group:
                p.error, p.stored = failed(exc), []
            if not isinstance(exc, Exception):
                raise
        finally:
            with self._lock:
                for p in group:
                    p.state = DONE
                    p.wake.set()
                self._hand_off(lane)

    def _hand_off(self, lane: Lane) -> None:
        """(Lock held.) Make the oldest queued post lead the lane's next write,
        or mark the lane idle."""
        waiting = self._lanes[lane]
        if not waiting:
            del self._lanes[lane]
            return
        first = waiting.popleft()
        group, count, size = [first], len(first.messages), first.size
        while waiting:
            nxt = waiting[0]
            if count + len(nxt.messages) > self.max_messages or size + nxt.size > self.max_bytes:
                break
            group.append(waiting.popleft())
            count, size = count + len(nxt.messages), size + nxt.size
        self._give(group)

    def _give(self, group: list[Post]) -> None:
        """(Lock held.) ``group``'s first post leads it; the others are taken."""
        taken_at = time.monotonic()
        for p in group:
            p.state, p.taken_at = TAKEN, taken_at
        leader = group[0]
        leader.state, leader.group = LEADING, group
        leader.wake.set()

    def _abandon(self, lane: Lane, post: Post) -> None:
        """The caller leaves with an exception: withdraw its post if still
        queued; if it was to lead a write it never started, hand that on."""
        with self._lock:
            if post.state == PENDING:
                self._lanes[lane].remove(post)
            elif post.state == LEADING and not post.started:
                rest = [p for p in post.group if p is not post]
                if rest:
                    self._give(rest)
                else:
                    self._hand_off(lane)
            else:
                return
            post.state = DONE
