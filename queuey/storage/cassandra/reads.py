"""Reading a queue's messages from Cassandra: the read plan and the
per-partition reader.

A read works out its bounds once (:class:`ReadPlan`), then walks each queue
partition's bucket index and buckets in read order (:class:`PartitionReader`),
all partitions concurrently, and merges them with
:func:`queuey.model.merge_partitions`. Only about one page per partition is
held at a time, however many messages the buckets hold.
"""

from __future__ import annotations

import collections
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace

from cassandra.cluster import ResponseFuture
from cassandra.query import BoundStatement, PreparedStatement

from queuey import ids
from queuey.model import Message, MessagePage, QueueMeta, ReadQuery, merge_partitions
from queuey.storage.cassandra.session import consistency_profile
from queuey.storage.cassandra.statements import Connection, RangeStatements

#: Bucket-index rows fetched per page.
INDEX_PAGE = 64
#: How far past now a read looks for ids an ordinary write minted ahead of the
#: clock (an id generator steps a microsecond per id within one instant).
LOOKAHEAD_MICROS = ids.MICROS
#: The node bit every ordinary id has set (:class:`queuey.ids.IdGenerator`);
#: a delayed id is minted with it clear (:meth:`.writes.MessageWriter.mint`).
_MULTICAST = 0x010000000000


def delayed_id(node: int) -> int:
    """A node for a delayed message's id: random, multicast bit clear."""
    return node & ~_MULTICAST


def is_delayed(message_id: uuid.UUID) -> bool:
    return not message_id.node & _MULTICAST


def hidden(message_id: uuid.UUID, now: int) -> bool:
    """A delayed message not due yet: invisible to every reader."""
    return ids.micros_of(message_id) > now and is_delayed(message_id)


def message_of(row: tuple, partition: int) -> Message:
    """A :class:`Message` from a row of ``Statements.MESSAGE_COLS``."""
    mid, body, expires, priority, attributes = row
    return Message(
        id=mid,
        timestamp=ids.micros_of(mid),
        partition=partition,
        body=body,
        expires=expires,
        priority=priority or 0,
        attributes=dict(attributes) if attributes else None,
    )


def read_messages(
    c: Connection, queue: QueueMeta, query: ReadQuery, max_ttl_micros: int
) -> list[Message]:
    """Messages of ``query.partitions`` matching ``query``, merged by id order.

    ``query`` asks for at least one message of at least one partition.
    """
    plan = ReadPlan.make(c, queue, query, max_ttl_micros)
    if plan is None:
        return []
    readers = [PartitionReader(plan, p) for p in dict.fromkeys(query.partitions)]
    for r in readers:  # every partition's bucket index, concurrently
        r.start()
    for r in readers:  # then every partition's first bucket, concurrently
        r.prime()
    return merge_partitions([r.messages() for r in readers], query.limit, plan.descending)


def scan_partition(
    c: Connection, queue: QueueMeta, query: ReadQuery, max_ttl_micros: int, page_size: int
) -> Iterator[MessagePage]:
    """Every message of ``query``'s one partition in id order, as column pages.

    The bulk path (Spark): rows come as bytes (no UUID or text decoding per
    row), ``page_size`` at a time, and the next page is always being fetched
    while the caller works on the current one.
    """
    (partition,) = query.partitions
    plan = ReadPlan.make(
        c, queue, replace(query, order="ascending", limit=page_size), max_ttl_micros
    )
    if plan is None:
        return
    yield from PartitionReader(plan, partition, c.st.scan).pages()


def _column_page(plan: ReadPlan, partition: int, rows: list) -> MessagePage | None:
    """A scan page from rows of ``RangeStatements.SCAN_COLS``, dead rows dropped."""
    raw_ids, bodies, expires = zip(*rows, strict=True)
    served = sum(map(len, bodies)) + 24 * len(bodies)
    now = plan.now
    after = plan.after_id.bytes if plan.after_id is not None else None
    # Delayed ids not due yet can only lie past now.
    future = ids.micros_of(plan.hi_id) > now
    if min(expires) > now and raw_ids[0] != after and not future:
        return MessagePage(partition, b"".join(raw_ids), bodies, served)
    keep = [
        i
        for i, (raw, expiry) in enumerate(zip(raw_ids, expires, strict=True))
        if expiry > now and raw != after and not (future and hidden(uuid.UUID(bytes=raw), now))
    ]
    if not keep:
        return None
    return MessagePage(
        partition, b"".join(raw_ids[i] for i in keep), [bodies[i] for i in keep], served
    )


@dataclass(frozen=True)
class ReadPlan:
    """A read's bounds, worked out once for all its partitions."""

    conn: Connection
    profile: str
    incarnation: str
    descending: bool
    now: int
    after_id: uuid.UUID | None
    lo_id: uuid.UUID  # inclusive
    hi_id: uuid.UUID  # exclusive
    lo_bucket: int
    hi_bucket: int
    page: int  # rows fetched per request for one partition
    delayed_too: bool = False
    direct: bool = False

    @classmethod
    def make(
        cls,
        c: Connection,
        queue: QueueMeta,
        q: ReadQuery,
        max_ttl_micros: int,
        *,
        delayed_too: bool = False,
        direct: bool = False,
    ) -> ReadPlan | None:
        """The plan, or ``None`` when the bounds leave nothing to read.

        ``delayed_too``: include messages not yet due (stats count them).
        ``direct``: when the bounds lie in one bucket, read it without asking
        the bucket index (reserve, whose position is usually in the current
        bucket; the index is what skips expired rows, and there a slice after
        the position holds at most one bucket of them)."""
        # Older messages are expired whatever their TTL (TTLs are <= max_ttl):
        # this also keeps reads away from expired bucket-index rows.
        lo_ts = q.now_micros - max_ttl_micros + 1
        if q.after_micros is not None:
            lo_ts = max(lo_ts, q.after_micros + 1)
        lo_id = ids.min_uuid(lo_ts)
        if q.after_id is not None:
            lo_ts = max(lo_ts, ids.micros_of(q.after_id))
            if ids.order_key(q.after_id) > ids.order_key(lo_id):
                lo_id = q.after_id  # exclusive: the row itself is skipped
        # A delayed message's id is its due time: reads stop just past now
        # (ordinary ids minted ahead) and drop the delayed ones not yet due.
        hi_ts = ids.MAX_MICROS
        if not delayed_too:
            hi_ts = min(q.now_micros + LOOKAHEAD_MICROS + 1, ids.MAX_MICROS)
        if q.until_micros is not None:
            hi_ts = min(hi_ts, q.until_micros)
        if hi_ts <= lo_ts:
            return None
        width = len(dict.fromkeys(q.partitions))
        page = min(q.limit + 1, max(20, -(-2 * (q.limit + 1) // width)))
        return cls(
            conn=c,
            profile=consistency_profile(queue),
            incarnation=queue.incarnation,
            descending=q.order == "descending",
            now=q.now_micros,
            after_id=q.after_id,
            lo_id=lo_id,
            hi_id=ids.min_uuid(hi_ts),
            lo_bucket=lo_ts // c.bucket_micros,
            hi_bucket=(hi_ts - 1) // c.bucket_micros,
            page=page,
            delayed_too=delayed_too,
            direct=direct and lo_ts // c.bucket_micros == (hi_ts - 1) // c.bucket_micros,
        )


class PartitionReader:
    """Walks one queue partition's buckets in read order, a page at a time.

    Holds at most one page of the bucket index and one page of messages, so
    a read never keeps more than about the page it answers.
    """

    def __init__(
        self,
        plan: ReadPlan,
        partition: int,
        source: RangeStatements | None = None,
        key: tuple = (),
    ) -> None:
        """``source`` and ``key``: another time-bucketed table with the same
        columns (the priority index) and its key columns after the partition."""
        self.plan = plan
        self.partition = partition
        src = source or plan.conn.st.messages
        self._key = (plan.incarnation, partition, *key)
        self._light = src.light
        self._index_stmt: PreparedStatement = src.index_desc if plan.descending else src.index_asc
        self._msg_stmt: PreparedStatement = src.rows_desc if plan.descending else src.rows_asc
        # (bucket, lowest live id in it) ready to read, in read order
        self._buckets: collections.deque[tuple[int, uuid.UUID]] = collections.deque()
        self._current: list[int] | None = None  # [bucket, longest TTL] still collecting
        self._index_bound: BoundStatement | None = None
        self._index_future: ResponseFuture | None = None
        self._index_state: bytes | None = None
        self._index_done = False
        self._msg_future: ResponseFuture | None = None
        self._bucket: tuple[int, uuid.UUID] | None = None

    def _send(self, stmt: BoundStatement, paging_state: bytes | None = None) -> ResponseFuture:
        return self.plan.conn.session.execute_async(
            stmt, execution_profile=self.plan.profile, paging_state=paging_state
        )

    def start(self) -> None:
        p = self.plan
        if p.direct:
            self._buckets.append((p.lo_bucket, p.lo_id))
            self._index_done = True
            return
        self._index_bound = self._index_stmt.bind((*self._key, p.lo_bucket, p.hi_bucket))
        self._index_bound.fetch_size = INDEX_PAGE
        self._index_future = self._send(self._index_bound)

    def _close_bucket(self) -> None:
        """Queue the bucket collected so far, unless all its messages have expired."""
        if self._current is None:
            return
        bucket, longest_ttl = self._current
        self._current = None
        p = self.plan
        # Messages stamped before this have expired whatever their TTL: start
        # the slice after them rather than read their expired cells.
        live_from = p.now - longest_ttl * ids.MICROS + 1
        if live_from >= (bucket + 1) * p.conn.bucket_micros:
            return
        lo = ids.min_uuid(live_from)
        if ids.order_key(p.lo_id) > ids.order_key(lo):
            lo = p.lo_id
        self._buckets.append((bucket, lo))

    def _more_buckets(self) -> bool:
        """Refill the bucket queue from the index; False when it is exhausted."""
        while not self._buckets:
            if self._index_future is None:
                if self._index_done or self._index_bound is None:
                    self._close_bucket()
                    return bool(self._buckets)
                self._index_future = self._send(self._index_bound, self._index_state)
            rs = self._index_future.result()
            self._index_future = None
            for bucket, ttl in rs.current_rows:
                if self._current is not None and self._current[0] == bucket:
                    self._current[1] = max(self._current[1], ttl)
                else:
                    self._close_bucket()
                    self._current = [bucket, ttl]
            self._index_state = rs.paging_state
            self._index_done = self._index_state is None
        return True

    def _query_bucket(self, paging_state: bytes | None = None) -> ResponseFuture:
        assert self._bucket is not None
        p = self.plan
        bucket, lo = self._bucket
        bound = self._msg_stmt.bind((*self._key, bucket, lo, p.hi_id))
        bound.fetch_size = p.page
        return self._send(bound, paging_state)

    def prime(self) -> None:
        """Send the first bucket's query (after :meth:`start`)."""
        if self._msg_future is None and self._more_buckets():
            self._bucket = self._buckets.popleft()
            self._msg_future = self._query_bucket()

    def _next_bucket(self) -> bool:
        """Send the query of the next bucket to read; False when there is none."""
        if not self._more_buckets():
            return False
        self._bucket = self._buckets.popleft()
        self._msg_future = self._query_bucket()
        return True

    def pages(self) -> Iterator[MessagePage]:
        """Column pages of a scan (``source`` is ``Statements.scan``).

        The next request (the bucket's next page, or the next bucket) is sent
        before the current page is handed over, so Cassandra works while the
        caller does.
        """
        self.start()
        while self._msg_future is not None or self._next_bucket():
            assert self._msg_future is not None
            rs = self._msg_future.result()
            self._msg_future = None
            rows = rs.current_rows
            if rs.paging_state is not None:
                self._msg_future = self._query_bucket(rs.paging_state)
            else:
                self._next_bucket()
            page = _column_page(self.plan, self.partition, rows) if rows else None
            if page is not None:
                yield page

    def messages(self) -> Iterator[Message]:
        p = self.plan
        while True:
            if self._msg_future is None:
                if not self._more_buckets():
                    return
                self._bucket = self._buckets.popleft()
                self._msg_future = self._query_bucket()
            rs = self._msg_future.result()
            self._msg_future = None
            state = rs.paging_state
            for row in rs.current_rows:
                if self._light:
                    row = (row[0], "", row[1], row[2], None)
                if row[2] > p.now and row[0] != p.after_id:
                    if p.delayed_too or not hidden(row[0], p.now):
                        yield message_of(row, self.partition)
            if state is not None:
                self._msg_future = self._query_bucket(state)
