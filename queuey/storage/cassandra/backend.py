"""The Cassandra backend: :class:`CassandraStorage` and ``load_from_config``.

It owns the connection (opened on first use, refused for a moment after a
failure), the queue rows (lightweight transactions), messages by id, and the
consumers' checkpoints; it hands writes to :mod:`.writes` and reads to
:mod:`.reads`. Every public method wraps driver errors into
:class:`~queuey.errors.StorageUnavailable` (:func:`.session.boundary`).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from cassandra.cluster import Session
from cassandra.query import BatchStatement, BatchType

from queuey import ids
from queuey.clock import Clock
from queuey.errors import StorageUnavailable
from queuey.model import (
    DeadLetter,
    Message,
    MessagePage,
    MessageRef,
    MessageState,
    NewMessage,
    QueueMeta,
    QueueStats,
    ReadQuery,
    ReceiptStatus,
    Reserved,
)
from queuey.settings import dedup_window
from queuey.storage import Storage
from queuey.storage.asks import ExtendAsk, QueueChange, ReleaseAsk, ReserveAsk
from queuey.storage.cassandra import queues
from queuey.storage.cassandra.counters import counter_of
from queuey.storage.cassandra.inflight import CassandraFlow
from queuey.storage.cassandra.owned import OwnedWorkQueue
from queuey.storage.cassandra.reads import hidden, message_of, read_messages, scan_partition
from queuey.storage.cassandra.schedules import CassandraSchedules
from queuey.storage.cassandra.schema import LATEST_VERSION, apply_migrations, current_version
from queuey.storage.cassandra.session import (
    P_META,
    boundary,
    build_cluster,
    consistency_profile,
    execute_all,
    unavailable,
)
from queuey.storage.cassandra.settings import (
    MAX_EXPIRATION,
    PREFIX,
    TTL_SLACK,
    CassandraSettings,
    parse_settings,
)
from queuey.storage.cassandra.statements import Connection, Statements
from queuey.storage.cassandra.writes import MessageWriter

log = logging.getLogger(__name__)

MICROS = ids.MICROS
#: Seconds to answer "unavailable" at once after a failed connection attempt.
RECONNECT_DELAY = 2.0


def _stored_refs(refs: Sequence[MessageRef]) -> list[MessageRef]:
    """``refs`` without repeats, and without ids no write of ours could have minted."""
    return [r for r in dict.fromkeys(refs) if r.id.version == 1]


class CassandraStorage(CassandraSchedules, CassandraFlow, Storage):
    """Queuey's storage on Apache Cassandra (schedules: :mod:`.schedules`; flow
    control: :mod:`.flow`).

    The connection is opened on first use (or by :meth:`connect`), so an API
    node starts while Cassandra is down and answers 503 until it is back.
    One instance is shared by the server's threads.
    """

    def __init__(self, config: CassandraSettings, clock: Clock, dedup_window: int = 300) -> None:
        self.config = config
        self.clock = clock
        self.dedup_window = dedup_window
        self.write_timeout_seconds = config.request_timeout
        self._max_ttl_micros = config.max_ttl * MICROS
        self._writer = MessageWriter(config, clock, dedup_window)
        self._work = OwnedWorkQueue(config, self._max_ttl_micros)
        self._lock = threading.Lock()
        self._conn: Connection | None = None
        self._closed = False
        self._retry_at = 0.0
        self._last_failure = ""

    @property
    def max_ttl(self) -> int:  # type: ignore[override]
        """``queuey.cassandra.max_ttl``, or less once its expiry would pass the
        latest date Cassandra stores (:data:`.settings.MAX_EXPIRATION`)."""
        now = self.clock.now_micros() // MICROS
        return max(0, min(self.config.max_ttl, MAX_EXPIRATION - TTL_SLACK - now))

    # -- connection ---------------------------------------------------------
    def connect(self) -> None:
        """Open the connection and prepare statements now (idempotent)."""
        self._connection()

    def _connection(self) -> Connection:
        conn = self._conn
        if conn is not None:
            return conn
        with self._lock:
            if self._closed:
                raise StorageUnavailable("cassandra: storage is closed")
            if self._conn is None:
                # After a failed attempt, fail fast for a while rather than have
                # every request thread wait on its own connection attempt.
                if time.monotonic() < self._retry_at:
                    raise StorageUnavailable(f"{self._last_failure} (retrying soon)")
                try:
                    self._conn = self._open()
                except StorageUnavailable as exc:
                    self._retry_at = time.monotonic() + RECONNECT_DELAY
                    self._last_failure = str(exc)
                    raise
            return self._conn

    def _open(self) -> Connection:
        cluster = build_cluster(self.config)
        try:
            with unavailable("connect"):
                session = cluster.connect()
                counter_of(self).attach(session)
                if self.config.create_schema:
                    applied = apply_migrations(session, self.config)
                    if applied:
                        log.info("cassandra: applied %d schema statements", len(applied))
                self._check_schema(session)
                st = Statements(session, self.config.keyspace)
                row = session.execute(st.storage_setting, ("bucket_seconds",)).one()
        except BaseException:
            cluster.shutdown()
            raise
        width = int(row[0]) if row else self.config.bucket_seconds
        if width != self.config.bucket_seconds:
            log.warning(
                "cassandra: keyspace %s was created with %ss buckets; %s%s=%s is ignored",
                self.config.keyspace,
                width,
                PREFIX,
                "bucket_seconds",
                self.config.bucket_seconds,
            )
        return Connection(cluster, session, st, width * MICROS)

    def _check_schema(self, session: Session) -> None:
        version = current_version(session, self.config.keyspace)
        if version != LATEST_VERSION:
            raise StorageUnavailable(
                f"cassandra: keyspace {self.config.keyspace!r} has schema version {version}, "
                f"this release needs {LATEST_VERSION}: run `queuey schema upgrade`"
            )

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
        if isinstance(self._work, OwnedWorkQueue):
            self._work.close()
        if conn is not None:
            conn.cluster.shutdown()

    @property
    def session(self) -> Session:
        """The driver session (connecting if needed); for tools and tests."""
        with unavailable("connect"):
            return self._connection().session

    @property
    def bucket_micros(self) -> int:
        with unavailable("connect"):
            return self._connection().bucket_micros

    # -- queues (rows in .queues) -------------------------------------------------
    @boundary("create queue")
    def create_queue(self, meta: QueueMeta) -> QueueMeta:
        if not meta.created:
            meta = replace(meta, created=self.clock.now_micros())
        return queues.create(self._connection(), meta)

    @boundary("get queue")
    def get_queue(self, application: str, name: str) -> QueueMeta:
        return queues.from_row(queues.read_row(self._connection(), application, name))

    @boundary("list queues")
    def list_queues(
        self, application: str, limit: int = 100, after: str | None = None
    ) -> list[QueueMeta]:
        if limit <= 0:
            return []
        return queues.list_rows(self._connection(), application, limit, after)

    @boundary("update queue")
    def update_queue_ask(self, application: str, name: str, change: QueueChange) -> QueueMeta:
        return queues.update(self._connection(), application, name, change)

    @boundary("delete queue")
    def delete_queue(self, application: str, name: str) -> None:
        queues.delete(self._connection(), application, name)

    @boundary("purge queue")
    def purge_queue(self, application: str, name: str) -> QueueMeta:
        return queues.purge(self._connection(), application, name)

    # -- messages ---------------------------------------------------------------
    @boundary("put messages")
    def put_messages(self, queue: QueueMeta, messages: Sequence[NewMessage]) -> list[Message]:
        if not messages:
            return []
        self._writer.check_ttls(messages, self.max_ttl)
        try:
            return self._writer.put(self._connection(), queue, messages, self.write_timeout_seconds)
        finally:
            if isinstance(self._work, OwnedWorkQueue):
                self._work.posted(queue)

    @boundary("read messages")
    def read_messages(self, queue: QueueMeta, query: ReadQuery) -> list[Message]:
        if query.limit <= 0 or not query.partitions:
            return []
        return read_messages(self._connection(), queue, query, self._max_ttl_micros)

    def scan_messages(
        self, queue: QueueMeta, query: ReadQuery, page_size: int
    ) -> Iterator[MessagePage]:
        with unavailable("scan messages"):
            yield from scan_partition(
                self._connection(), queue, query, self._max_ttl_micros, page_size
            )

    def _by_ref(
        self, c: Connection, queue: QueueMeta, refs: Sequence[MessageRef], stmt: Any
    ) -> list:
        """Run ``stmt`` for every ref concurrently (results in ``refs`` order)."""
        bound = [
            stmt.bind((queue.incarnation, r.partition, c.bucket_of(ids.micros_of(r.id)), r.id))
            for r in refs
        ]
        return execute_all(
            c.session, bound, consistency_profile(queue), self.config.request_timeout
        )

    @boundary("get messages")
    def get_messages(
        self, queue: QueueMeta, refs: Sequence[MessageRef], now_micros: int
    ) -> list[Message]:
        refs = _stored_refs(refs)
        if not refs:
            return []
        c = self._connection()
        found: list[Message] = []
        for ref, rs in zip(refs, self._by_ref(c, queue, refs, c.st.get_message), strict=True):
            row = rs.one()
            # A delayed message is invisible until due, as in reads.
            if row is not None and row[2] > now_micros and not hidden(row[0], now_micros):
                found.append(message_of(row, ref.partition))
        return found

    @boundary("delete messages")
    def delete_messages(self, queue: QueueMeta, refs: Sequence[MessageRef]) -> None:
        refs = _stored_refs(refs)
        if not refs:
            return
        c = self._connection()
        # A message of priority > 0 has a copy in the priority index as well.
        rows = [rs.one() for rs in self._by_ref(c, queue, refs, c.st.get_message)]
        copies = [
            c.st.delete_priority_message.bind(
                (queue.incarnation, r.partition, row[3], c.bucket_of(ids.micros_of(r.id)), r.id)
            )
            for r, row in zip(refs, rows, strict=True)
            if row is not None and (row[3] or 0) > 0
        ]
        execute_all(c.session, copies, consistency_profile(queue), self.config.request_timeout)
        self._by_ref(c, queue, refs, c.st.delete_message)

    # -- work queues (see .workqueue) -------------------------------------------
    @boundary("reserve")
    def reserve_ask(self, queue: QueueMeta, subscription: str, ask: ReserveAsk) -> Reserved:
        """``max_in_flight`` travels with the ask but is not enforced (:mod:`.flow`)."""
        if ask.limit <= 0:
            return Reserved([], [])
        return self._work.reserve(self._connection(), queue, subscription, ask)

    @boundary("ack")
    def ack(
        self, queue: QueueMeta, subscription: str, receipts: Sequence[str], now_micros: int
    ) -> dict[str, ReceiptStatus]:
        return self._work.ack(self._connection(), queue, subscription, receipts, now_micros)

    @boundary("release")
    def release_ask(
        self, queue: QueueMeta, subscription: str, ask: ReleaseAsk
    ) -> tuple[dict[str, ReceiptStatus], list[DeadLetter]]:
        return self._work.release(self._connection(), queue, subscription, ask)

    @boundary("extend")
    def extend_ask(
        self, queue: QueueMeta, subscription: str, ask: ExtendAsk
    ) -> dict[str, ReceiptStatus]:
        return self._work.extend(self._connection(), queue, subscription, ask)

    @boundary("reopen")
    def reopen(
        self, queue: QueueMeta, subscription: str, refs: Sequence[MessageRef], now_micros: int
    ) -> int:
        return self._work.reopen(self._connection(), queue, subscription, refs, now_micros)

    @boundary("message state")
    def message_state(
        self, queue: QueueMeta, subscription: str, message: Message, now_micros: int
    ) -> MessageState:
        return self._work.message_state(self._connection(), queue, subscription, message)

    @boundary("stats")
    def stats(self, queue: QueueMeta, now_micros: int) -> QueueStats:
        return self._work.stats(self._connection(), queue, now_micros)

    # -- checkpoints ------------------------------------------------------------
    @boundary("get checkpoints")
    def get_checkpoints(self, application: str, queue: str, consumer: str) -> dict[int, uuid.UUID]:
        c = self._connection()
        rows = c.session.execute(
            c.st.get_checkpoints, (application, queue, consumer), execution_profile=P_META
        )
        return {partition: cid for partition, cid in rows}

    @boundary("set checkpoints")
    def set_checkpoints(
        self, application: str, queue: str, consumer: str, checkpoints: Mapping[int, uuid.UUID]
    ) -> None:
        if not checkpoints:
            return
        c = self._connection()
        # All rows share one Cassandra partition: an unlogged batch is atomic.
        batch = BatchStatement(batch_type=BatchType.UNLOGGED)
        for partition, cid in checkpoints.items():
            batch.add(c.st.set_checkpoint, (application, queue, consumer, int(partition), cid))
        c.session.execute(batch, execution_profile=P_META)

    # -- operations ---------------------------------------------------------------
    @boundary("ping")
    def ping(self) -> None:
        c = self._connection()
        c.session.execute(c.st.ping, execution_profile=P_META)

    # -- wake-ups across API processes (see .announce) ------------------------------
    def announce_available(self, application: str, queue: str) -> None:
        if not isinstance(self._work, OwnedWorkQueue):
            return
        try:
            self._work.announce(self._connection(), application, queue)
        except Exception:  # noqa: BLE001 - a hint; the long polls poll anyway
            log.debug("announcing %s/%s failed", application, queue, exc_info=True)

    def watch_available(self, callback: Callable[[str, str], None]) -> None:
        if isinstance(self._work, OwnedWorkQueue):
            self._work.watchers.append(callback)

    # -- request counts (see .counters) ---------------------------------------------
    def request_counts(self) -> dict[str, int]:
        """CQL requests this backend has sent, by kind (read, write, lwt, ddl)."""
        return counter_of(self).counts()


def load_from_config(settings: Mapping[str, Any], clock: Clock) -> CassandraStorage:
    """Build the backend from ``queuey.cassandra.*`` settings.

    A node that is down at start is not fatal: the backend connects on first
    use and answers ``StorageUnavailable`` (503) until then. With
    ``queuey.cassandra.create_schema = true`` (tests, development) the schema
    is created or upgraded on connecting, so that too waits for Cassandra;
    otherwise it must already be there (``queuey schema upgrade``).
    """
    storage = CassandraStorage(parse_settings(settings), clock, dedup_window(settings))
    try:
        storage.connect()
    except StorageUnavailable as exc:
        log.warning("cassandra: not connected at start (%s); will retry on first use", exc)
    return storage
