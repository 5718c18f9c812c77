"""Writing messages to Cassandra: id minting, the bucket index, atomic batches.

A write mints each message's id from the clock, records the (bucket, TTL)
index rows readers need to find the message *before* the message itself, then
stores the messages in one statement or batch. Everything must land within
the backend's write timeout of the ids being minted, because readers hide only
that much of the newest data (invariant 2: no reader skips a message).

Nothing follows the message write on the caller's path, so a write Cassandra
applied is never reported as failed. A write that times out (``WriteTimeout``,
or no answer in time) is genuinely unknown: Cassandra may still apply it (a
logged batch is replayed from the batchlog), so its ``StorageUnavailable``
means "outcome unknown", not "not stored".
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Mapping, Sequence

from cassandra.query import BatchStatement, BatchType, BoundStatement

from queuey import ids
from queuey.clock import Clock
from queuey.storage import Message, NewMessage, QueueMeta
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

    def __init__(self, config: CassandraSettings, clock: Clock) -> None:
        self.config = config
        self.clock = clock
        self._ids = ids.IdGenerator()
        # (incarnation, partition, bucket, message ttl) this process has indexed
        self._indexed: collections.OrderedDict[tuple[str, int, int, int], None] = (
            collections.OrderedDict()
        )
        self._indexed_lock = threading.Lock()

    def check_ttls(self, messages: Sequence[NewMessage], max_ttl: int) -> None:
        """``ValueError`` for a TTL Cassandra could not keep (see ``max_ttl``).

        The service checks ``queuey.max_ttl`` against the backend's maximum at
        start-up, so a request never gets here with a ttl too long.
        """
        for m in messages:
            if not 1 <= m.ttl <= max_ttl:
                raise ValueError(f"ttl {m.ttl} outside 1..{max_ttl} ({PREFIX}max_ttl)")

    def put(
        self,
        c: Connection,
        queue: QueueMeta,
        messages: Sequence[NewMessage],
        write_timeout: float,
    ) -> list[Message]:
        """Mint ids and store ``messages`` all or nothing; they must land within
        ``write_timeout`` seconds or the write fails."""
        st, session = c.st, c.session
        profile = consistency_profile(queue)
        inc = queue.incarnation
        out: list[Message] = []
        stmts: list[BoundStatement] = []
        keys: set[tuple[int, int]] = set()
        index: dict[tuple[str, int, int, int], int] = {}  # index row -> its TTL
        bucket_us = c.bucket_micros
        # Readers hide the newest write_timeout_seconds (plus skew): every
        # message must be stored within that time of its id being minted.
        deadline = time.monotonic() + write_timeout
        for m in messages:
            ts = self._ids.next_micros(self.clock.now_micros())
            mid = self._ids.make(ts)
            msg = Message(
                id=mid,
                timestamp=ts,
                partition=m.partition,
                body=m.body,
                expires=ts + m.ttl * MICROS,
            )
            out.append(msg)
            bucket = ts // bucket_us
            keys.add((m.partition, bucket))
            # One second of slack: Cassandra counts the TTL from its own clock.
            stmts.append(
                st.insert_message.bind(
                    (inc, m.partition, bucket, mid, m.body, msg.expires, m.ttl + 1)
                )
            )
            key = (inc, m.partition, bucket, m.ttl)
            if key not in index:
                # The index row outlives every message of its bucket with this TTL.
                left = -(-((bucket + 1) * bucket_us - ts) // MICROS)
                index[key] = min(m.ttl + left + bucket_us // MICROS + 1, CASSANDRA_MAX_TTL)
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
        return out

    def _write_index(
        self,
        c: Connection,
        profile: str,
        index: Mapping[tuple[str, int, int, int], int],
        deadline: float,
    ) -> None:
        """Record the buckets about to receive messages, before the messages land.

        Written first so a message is never stored in a bucket readers cannot
        find; a (bucket, TTL) this process indexed already costs nothing.
        """
        with self._indexed_lock:
            needed = [(key, ttl) for key, ttl in index.items() if key not in self._indexed]
        if not needed:
            return
        stmts = [c.st.insert_bucket.bind((*key, ttl)) for key, ttl in needed]
        execute_all(c.session, stmts, profile, self.config.request_timeout, deadline)
        with self._indexed_lock:
            for key, _ in needed:
                self._indexed[key] = None
            while len(self._indexed) > INDEX_CACHE_SIZE:
                self._indexed.popitem(last=False)
