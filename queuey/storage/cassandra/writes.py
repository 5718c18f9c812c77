"""Writing messages to Cassandra: id minting, the bucket index, atomic batches.

A write mints each message's id from the clock, records the (bucket, TTL)
index rows readers need to find the message *before* the message itself, then
stores the messages in one statement or batch. Everything must land within
the backend's write timeout of the ids being minted, because readers hide only
that much of the newest data (invariant 2: no reader skips a message).

Nothing that can fail follows the message write on the caller's path (the
dedup claims' ``written`` mark, :mod:`.dedup`, logs its failures), so a write
Cassandra applied is never reported as failed. A write that times out (``WriteTimeout``,
or no answer in time) is genuinely unknown: Cassandra may still apply it (a
logged batch is replayed from the batchlog), so its ``StorageUnavailable``
means "outcome unknown", not "not stored".

Concurrent posts to one queue partition in this process share one write
(group commit, :mod:`.postgroup`): while a write of that (queue incarnation,
partition) is in flight, newcomers queue and go out together, capped in
messages and bytes, as the next write; its ids are minted when it is formed,
so the rule above holds for the group. A failure of the shared write fails
every caller in it. Posts with a ``dedup_id``, posts spanning partitions, and
posts too big to share go alone, as described above.
"""

from __future__ import annotations

import collections
import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from cassandra.query import UNSET_VALUE, BatchStatement, BatchType, BoundStatement

from queuey import ids
from queuey.clock import Clock
from queuey.model import Message, NewMessage, QueueMeta
from queuey.storage.cassandra.dedup import claim_dedup_ids, mark_written
from queuey.storage.cassandra.postgroup import PostGroups
from queuey.storage.cassandra.reads import delayed_id
from queuey.storage.cassandra.session import consistency_profile, execute_all, remaining
from queuey.storage.cassandra.settings import CASSANDRA_MAX_TTL, PREFIX, CassandraSettings
from queuey.storage.cassandra.statements import Connection

MICROS = ids.MICROS
#: Most (incarnation, partition, bucket, message ttl) keys remembered as indexed.
INDEX_CACHE_SIZE = 65_536


class MessageWriter:
    """Stores messages for one backend instance; safe to share between threads.

    Owns the id generator (ids of one process never repeat or go backwards)
    and remembers which bucket-index rows this process has written already.
    """

    def __init__(self, config: CassandraSettings, clock: Clock, dedup_window: int = 300) -> None:
        self.config = config
        self.clock = clock
        self.dedup_window = dedup_window
        self._ids = ids.IdGenerator()
        # index rows (bucket, priority bucket, priority in use) this process wrote
        self._indexed: collections.OrderedDict[tuple, None] = collections.OrderedDict()
        # A queue partition's "priority in use" row is rewritten once per
        # window and lives long enough for any message written meanwhile.
        self._priority_refresh = max(3600, config.max_ttl // 2)
        self._priority_ttl = min(
            CASSANDRA_MAX_TTL, config.max_ttl + 2 * self._priority_refresh + 86400
        )
        self._indexed_lock = threading.Lock()
        #: Concurrent posts to one queue partition share one write.
        self.groups = PostGroups(clock, self.mint, self.write)

    def check_ttls(self, messages: Sequence[NewMessage], max_ttl: int) -> None:
        """``ValueError`` for a TTL Cassandra could not keep (see ``max_ttl``).

        The service checks ``queuey.max_ttl`` against the backend's maximum at
        start-up, so a request never gets here with a ttl too long.
        """
        for m in messages:
            if not 1 <= m.ttl <= max_ttl:
                raise ValueError(f"ttl {m.ttl} outside 1..{max_ttl} ({PREFIX}max_ttl)")

    def mint(self, m: NewMessage, now: int) -> Message:
        """The stored form of ``m``, with its id.

        A delayed message's id is stamped with its due time, outside the
        generator (whose last id must not jump into the future): a random node
        and clock sequence keep such ids distinct, and the node's multicast bit,
        clear, marks them as delayed for readers (:func:`.reads.hidden`). Its
        expiry counts from now.
        """
        if m.delay > 0:
            ts = now + m.delay * MICROS
            rnd = int.from_bytes(os.urandom(8), "big")
            mid = ids.make_uuid(ts, delayed_id(rnd & 0xFFFFFFFFFFFF), (rnd >> 48) & 0x3FFF)
            expires = now + m.ttl * MICROS
        else:
            ts = self._ids.next_micros(now)
            mid = self._ids.make(ts)
            expires = ts + m.ttl * MICROS
        return Message(
            id=mid,
            timestamp=ts,
            partition=m.partition,
            body=m.body,
            expires=expires,
            priority=m.priority,
            attributes=dict(m.attributes) if m.attributes else None,
        )

    def put(
        self,
        c: Connection,
        queue: QueueMeta,
        messages: Sequence[NewMessage],
        write_timeout: float,
    ) -> list[Message]:
        """Mint ids and store ``messages`` all or nothing; they must land within
        ``write_timeout`` seconds or the write fails.

        Messages with a ``dedup_id`` first claim it (:mod:`.dedup`); one whose
        id is claimed already is answered with the first message instead.
        Once the messages landed, their claims are marked written (a failed
        mark is logged: the post has succeeded). Other posts to one queue
        partition may share the write of concurrent ones (:mod:`.postgroup`).
        """
        lane = self.groups.lane(queue, messages)
        if lane is not None:
            stored = self.groups.put(lane, c, queue, messages, write_timeout)
            if stored is not None:
                return stored
        # Readers hide the newest write_timeout_seconds (plus skew): every
        # message must be stored within that time of its id being minted.
        deadline = time.monotonic() + write_timeout
        now = self.clock.now_micros()
        minted = [self.mint(m, now) for m in messages]
        answers, writes, claims = minted, minted, []
        if any(m.dedup_id for m in messages):
            answers, writes, claims = claim_dedup_ids(
                c, queue, messages, minted, now, self.dedup_window, write_timeout, self.mint
            )
        if writes:
            self.write(c, queue, writes, now, deadline)
        if claims:
            mark_written(c, queue, claims, self.dedup_window, self.config.request_timeout)
        return answers

    def write(
        self,
        c: Connection,
        queue: QueueMeta,
        messages: Sequence[Message],
        now: int,
        deadline: float,
    ) -> None:
        """Store minted messages (and their index rows) atomically."""
        st, session = c.st, c.session
        profile = consistency_profile(queue)
        inc = queue.incarnation
        stmts: list[BoundStatement] = []
        keys: set[tuple[int, ...]] = set()
        index: dict[tuple, tuple[Any, tuple]] = {}  # cache key -> (statement, values)
        bucket_us = c.bucket_micros
        for msg in messages:
            bucket = msg.timestamp // bucket_us
            # Cassandra counts the TTL from its own clock: one second of slack.
            row_ttl = -(-(msg.expires - now) // MICROS) + 1
            attributes = msg.attributes or UNSET_VALUE
            p, prio = msg.partition, msg.priority
            keys.add((p, bucket))
            stmts.append(
                st.insert_message.bind(
                    (inc, p, bucket, msg.id, msg.body, msg.expires, prio, attributes, row_ttl)
                )
            )
            # The index rows outlive every message of their bucket with this lifetime.
            life = max(1, -(-(msg.expires - msg.timestamp) // MICROS))
            left = -(-((bucket + 1) * bucket_us - now) // MICROS)
            index_ttl = min(life + left + bucket_us // MICROS + 1, CASSANDRA_MAX_TTL)
            index.setdefault(
                ("m", inc, p, bucket, life), (st.insert_bucket, (inc, p, bucket, life, index_ttl))
            )
            if prio > 0:
                keys.add((p, prio, bucket))
                stmts.append(
                    st.insert_priority_message.bind(
                        (inc, p, prio, bucket, msg.id, msg.body, msg.expires, attributes, row_ttl)
                    )
                )
                index.setdefault(
                    ("p", inc, p, prio, bucket, life),
                    (st.insert_priority_bucket, (inc, p, prio, bucket, life, index_ttl)),
                )
                window = self._priority_refresh
                index.setdefault(
                    ("q", inc, p, prio, now // (window * MICROS)),
                    (st.insert_queue_priority, (inc, p, prio, self._priority_ttl)),
                )
        self._write_index(c, profile, index, deadline)
        if len(stmts) == 1:
            session.execute(stmts[0], execution_profile=profile, timeout=remaining(deadline))
        else:
            # One Cassandra partition: an unlogged batch is atomic and isolated.
            # Several: a logged batch is the atomic way (batchlog).
            kind = BatchType.UNLOGGED if len(keys) == 1 else BatchType.LOGGED
            batch = BatchStatement(batch_type=kind)
            for s in stmts:
                batch.add(s)
            session.execute(batch, execution_profile=profile, timeout=remaining(deadline))

    def _write_index(
        self,
        c: Connection,
        profile: str,
        index: Mapping[tuple, tuple[Any, tuple]],
        deadline: float,
    ) -> None:
        """Record the buckets (and priorities) about to receive messages, before
        the messages land.

        Written first so a message is never stored where readers cannot find
        it; an index row this process wrote already costs nothing.
        """
        with self._indexed_lock:
            needed = [(key, row) for key, row in index.items() if key not in self._indexed]
        if not needed:
            return
        stmts = [stmt.bind(values) for _, (stmt, values) in needed]
        execute_all(c.session, stmts, profile, self.config.request_timeout, deadline)
        with self._indexed_lock:
            for key, _ in needed:
                self._indexed[key] = None
            while len(self._indexed) > INDEX_CACHE_SIZE:
                self._indexed.popitem(last=False)
