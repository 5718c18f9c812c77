"""Apache Cassandra storage backend.

Data layout (created by :mod:`queuey.storage.cassandra_schema`):

* ``queues``: one row per queue, ``PRIMARY KEY ((application), name)``; written
  with lightweight transactions so two API nodes cannot both create a name.
* ``messages``: ``PRIMARY KEY ((incarnation, partition, bucket), id)``. A queue
  partition is split into time buckets (``bucket = timestamp // width``) so no
  Cassandra partition grows without bound, whatever the queue's rate. Rows are
  written ``USING TTL`` and the table uses TimeWindowCompactionStrategy, so
  expired data leaves by whole SSTables.
* ``message_buckets``: the bucket index, ``PRIMARY KEY ((incarnation,
  partition), bucket, message_ttl)``, newest first. Reads walk it instead of
  probing every possible bucket, so sparse queues stay cheap. One row per
  (bucket, TTL) in use: a write with a short TTL can never shorten the life of
  the row that keeps longer-lived messages reachable, and a reader knows the
  longest TTL in a bucket, so it starts its slice after the messages that have
  surely expired instead of reading them (no tombstone scans).
* ``checkpoints``: ``PRIMARY KEY ((application, queue), consumer, partition)``.

Purging writes a new ``incarnation`` into the queue row and deleting removes
the row: both are O(1), old message rows become unreachable and expire by TTL.

Expiry seen by readers is decided in Python from the caller's clock
(``expires > now``); Cassandra's TTL only reclaims the space later.
"""

from __future__ import annotations

import ast
import collections
import functools
import heapq
import itertools
import logging
import math
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from cassandra import ConsistencyLevel, DriverException
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import (
    EXEC_PROFILE_DEFAULT,
    Cluster,
    ExecutionProfile,
    NoHostAvailable,
    QueryExhausted,
    ResponseFuture,
    Session,
)
from cassandra.connection import ConnectionException
from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy
from cassandra.pool import NoConnectionsAvailable
from cassandra.protocol import ErrorMessage
from cassandra.query import (
    BatchStatement,
    BatchType,
    BoundStatement,
    tuple_factory,
)

from queuey import ids
from queuey.clock import Clock
from queuey.errors import (
    ConfigurationError,
    InvalidUpdate,
    QueueExists,
    QueueNotFound,
    StorageUnavailable,
)
from queuey.storage import (
    Message,
    MessageRef,
    NewMessage,
    QueueMeta,
    ReadQuery,
    Storage,
)

log = logging.getLogger(__name__)

MICROS = ids.MICROS
PREFIX = "queuey.cassandra."
#: Cassandra refuses TTLs above 20 years.
CASSANDRA_MAX_TTL = 630_720_000
#: The largest timestamp a version-1 id can carry (60-bit time field).
_MAX_MICROS = ((1 << 60) - 1 - 0x01B21DD213814000) // 10 - 2

# Driver errors: the driver raises several unrelated hierarchies.
DRIVER_ERRORS: tuple[type[BaseException], ...] = (
    DriverException,
    NoHostAvailable,
    ConnectionException,
    NoConnectionsAvailable,
    ErrorMessage,
    QueryExhausted,
    OSError,
)

# Execution profile names.
P_WEAK, P_STRONG, P_VERY_STRONG = "weak", "strong", "very_strong"
P_META = "meta"
#: Queue consistency -> Cassandra consistency level.
CONSISTENCY_LEVELS: dict[str, int] = {
    P_WEAK: ConsistencyLevel.ONE,
    P_STRONG: ConsistencyLevel.LOCAL_QUORUM,
    P_VERY_STRONG: ConsistencyLevel.EACH_QUORUM,
}

_KEYSPACE_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,47}$")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}

#: Bucket-index rows fetched per page.
_INDEX_PAGE = 64
#: Most (incarnation, partition, bucket) keys remembered as indexed.
_INDEX_CACHE_SIZE = 65_536
#: Seconds to answer "unavailable" at once after a failed connection attempt.
_RECONNECT_DELAY = 2.0
#: Most requests in flight for one call.
_CONCURRENCY = 128


# -- settings ------------------------------------------------------------------


@dataclass(frozen=True)
class CassandraSettings:
    """The backend's settings, parsed and validated (see :func:`parse_settings`)."""

    contact_points: tuple[str, ...] = ("127.0.0.1",)
    port: int = 9042
    keyspace: str = "queuey"
    local_dc: str = "datacenter1"
    replication: Mapping[str, Any] = field(
        default_factory=lambda: {"class": "SimpleStrategy", "replication_factor": 1}
    )
    request_timeout: float = 2.0
    connect_timeout: float = 5.0
    bucket_seconds: int = 60
    max_ttl: int = 30 * 86400
    create_schema: bool = False
    username: str | None = None
    password: str | None = None
    protocol_version: int = 5


def _get(settings: Mapping[str, Any], name: str) -> Any:
    value = settings.get(PREFIX + name)
    if isinstance(value, str):
        value = value.strip()
    return value


def _as_int(settings: Mapping[str, Any], name: str, default: int, lo: int, hi: int) -> int:
    value = _get(settings, name)
    if value is None or value == "":
        return default
    try:
        if isinstance(value, bool):
            raise ValueError
        number = int(value)
    except (TypeError, ValueError):
        raise ConfigurationError(PREFIX + name, f"not an integer: {value!r}") from None
    if not lo <= number <= hi:
        raise ConfigurationError(PREFIX + name, f"must be between {lo} and {hi}, got {number}")
    return number


def _as_float(settings: Mapping[str, Any], name: str, default: float, lo: float) -> float:
    value = _get(settings, name)
    if value is None or value == "":
        return default
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigurationError(PREFIX + name, f"not a number: {value!r}") from None
    if not (math.isfinite(number) and number > lo):
        raise ConfigurationError(PREFIX + name, f"must be a number above {lo}, got {value!r}")
    return number


def _as_bool(settings: Mapping[str, Any], name: str, default: bool) -> bool:
    value = _get(settings, name)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    text = str(value).lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigurationError(PREFIX + name, f"not a boolean: {value!r}")


def _as_replication(settings: Mapping[str, Any]) -> dict[str, Any]:
    key = PREFIX + "replication"
    value = _get(settings, "replication")
    if value is None or value == "":
        return {"class": "SimpleStrategy", "replication_factor": 1}
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            raise ConfigurationError(key, f"not a map literal: {value!r}") from None
    if not isinstance(value, Mapping) or not isinstance(value.get("class"), str):
        raise ConfigurationError(
            key,
            "must be a map with a 'class', e.g. "
            "{'class': 'SimpleStrategy', 'replication_factor': 1}",
        )
    for k, v in value.items():
        if not isinstance(k, str) or not re.fullmatch(r"[A-Za-z0-9_.]+", k):
            raise ConfigurationError(key, f"bad option name {k!r}")
        if not re.fullmatch(r"[A-Za-z0-9_.]+", str(v)):
            raise ConfigurationError(key, f"bad value for {k!r}: {v!r}")
    return dict(value)


def parse_settings(settings: Mapping[str, Any]) -> CassandraSettings:
    """Read and validate the ``queuey.cassandra.*`` keys.

    Raises :class:`~queuey.errors.ConfigurationError` naming the first bad key.
    """
    points_raw = _get(settings, "contact_points")
    if points_raw is None or points_raw == "":
        points: tuple[str, ...] = ("127.0.0.1",)
    else:
        items = points_raw if not isinstance(points_raw, str) else points_raw.split(",")
        points = tuple(p.strip() for p in items if str(p).strip())
        if not points:
            raise ConfigurationError(PREFIX + "contact_points", "no host given")

    keyspace = _get(settings, "keyspace") or "queuey"
    if not _KEYSPACE_RE.match(str(keyspace)):
        raise ConfigurationError(
            PREFIX + "keyspace", f"not a keyspace name ([A-Za-z][A-Za-z0-9_]{{0,47}}): {keyspace!r}"
        )
    local_dc = _get(settings, "local_dc") or "datacenter1"

    username = _get(settings, "username") or None
    password = _get(settings, "password") or None
    if (username is None) != (password is None):
        missing = "password" if password is None else "username"
        raise ConfigurationError(PREFIX + missing, "username and password go together")

    request_timeout = _as_float(settings, "request_timeout", 2.0, 0.0)
    protocol_version = _as_int(settings, "protocol_version", 5, 4, 5)
    return CassandraSettings(
        contact_points=points,
        port=_as_int(settings, "port", 9042, 1, 65535),
        keyspace=str(keyspace),
        local_dc=str(local_dc),
        replication=_as_replication(settings),
        request_timeout=request_timeout,
        connect_timeout=_as_float(settings, "connect_timeout", max(5.0, request_timeout), 0.0),
        bucket_seconds=_as_int(settings, "bucket_seconds", 60, 1, 86400),
        max_ttl=_as_int(settings, "max_ttl", 30 * 86400, 1, CASSANDRA_MAX_TTL - 2 * 86400 - 2),
        create_schema=_as_bool(settings, "create_schema", False),
        username=username,
        password=password,
        protocol_version=protocol_version,
    )


# -- driver plumbing -------------------------------------------------------------


def build_cluster(config: CassandraSettings) -> Cluster:
    """A driver ``Cluster`` configured the way Queuey uses Cassandra (not connected)."""
    from cassandra.io.libevreactor import LibevConnection

    def profile(level: int, serial: int | None = None) -> ExecutionProfile:
        return ExecutionProfile(
            load_balancing_policy=TokenAwarePolicy(
                DCAwareRoundRobinPolicy(local_dc=config.local_dc)
            ),
            consistency_level=level,
            serial_consistency_level=serial,
            request_timeout=config.request_timeout,
            row_factory=tuple_factory,
        )

    profiles = {
        EXEC_PROFILE_DEFAULT: profile(ConsistencyLevel.LOCAL_QUORUM),
        P_META: profile(ConsistencyLevel.LOCAL_QUORUM, ConsistencyLevel.SERIAL),
    }
    for name, level in CONSISTENCY_LEVELS.items():
        profiles[name] = profile(level)
    auth = None
    if config.username is not None:
        auth = PlainTextAuthProvider(username=config.username, password=config.password)
    return Cluster(
        contact_points=list(config.contact_points),
        port=config.port,
        protocol_version=config.protocol_version,
        execution_profiles=profiles,
        connection_class=LibevConnection,
        auth_provider=auth,
        connect_timeout=config.connect_timeout,
        control_connection_timeout=config.connect_timeout,
        compression=False,
        # The reactor writes large requests in 4 KiB chunks: without NODELAY,
        # Nagle plus delayed ACKs stall every batch for ~40 ms.
        sockopts=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
    )


@contextmanager
def unavailable(what: str) -> Iterator[None]:
    """Turn any driver exception raised inside into :class:`StorageUnavailable`."""
    try:
        yield
    except DRIVER_ERRORS as exc:
        log.warning("cassandra: %s failed: %s: %s", what, type(exc).__name__, exc)
        if "Batch too large" in str(exc):
            raise StorageUnavailable(
                f"cassandra: {what}: a batch over several partitions exceeds "
                "batch_size_fail_threshold in cassandra.yaml"
            ) from exc
        raise StorageUnavailable(f"cassandra: {what} failed ({type(exc).__name__})") from exc


F = TypeVar("F", bound=Callable[..., Any])


def _boundary(what: str) -> Callable[[F], F]:
    """Decorator form of :func:`unavailable` for the public methods."""

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with unavailable(what):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def _remaining(deadline: float) -> float:
    """Seconds left before ``deadline`` (monotonic); refuses to start a request after it."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise StorageUnavailable("cassandra: write deadline passed before the write was sent")
    return left


def consistency_profile(queue: QueueMeta) -> str:
    """The execution profile carrying the queue's consistency level."""
    return queue.consistency if queue.consistency in CONSISTENCY_LEVELS else P_STRONG


class _Statements:
    """Every statement the backend runs, prepared once per connection.

    Table names are qualified with the keyspace (no ``USE``), as Cassandra
    asks for prepared statements.
    """

    _QUEUE_COLS = (
        "application, name, partitions, default_ttl, queue_type, consistency, created, incarnation"
    )

    def __init__(self, session: Session, ks: str) -> None:
        p = session.prepare
        cols = self._QUEUE_COLS
        self.ping = p("SELECT release_version FROM system.local")
        self.storage_setting = p(f"SELECT value FROM {ks}.storage_settings WHERE name = ?")
        # queues
        self.insert_queue = p(
            f"INSERT INTO {ks}.queues ({cols}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) IF NOT EXISTS"
        )
        self.select_queue = p(f"SELECT {cols} FROM {ks}.queues WHERE application = ? AND name = ?")
        self.list_queues = p(
            f"SELECT {cols} FROM {ks}.queues WHERE application = ? AND name > ? LIMIT ?"
        )
        self.update_queue = p(
            f"UPDATE {ks}.queues "
            "SET partitions = ?, default_ttl = ?, queue_type = ?, consistency = ? "
            "WHERE application = ? AND name = ? "
            "IF partitions = ? AND default_ttl = ? AND queue_type = ? AND consistency = ?"
        )
        self.purge_queue = p(
            f"UPDATE {ks}.queues SET incarnation = ? WHERE application = ? AND name = ? "
            "IF incarnation = ?"
        )
        self.delete_queue = p(
            f"DELETE FROM {ks}.queues WHERE application = ? AND name = ? IF EXISTS"
        )
        # messages
        self.insert_message = p(
            f"INSERT INTO {ks}.messages (incarnation, partition, bucket, id, body, expires) "
            "VALUES (?, ?, ?, ?, ?, ?) USING TTL ?"
        )
        self.insert_bucket = p(
            f"INSERT INTO {ks}.message_buckets (incarnation, partition, bucket, message_ttl) "
            "VALUES (?, ?, ?, ?) USING TTL ?"
        )
        index_where = (
            f"FROM {ks}.message_buckets WHERE incarnation = ? AND partition = ? "
            "AND bucket >= ? AND bucket <= ?"
        )
        self.buckets_desc = p(
            f"SELECT bucket, message_ttl {index_where} ORDER BY bucket DESC, message_ttl DESC"
        )
        self.buckets_asc = p(
            f"SELECT bucket, message_ttl {index_where} ORDER BY bucket ASC, message_ttl ASC"
        )
        msg_where = (
            f"FROM {ks}.messages WHERE incarnation = ? AND partition = ? AND bucket = ? "
            "AND id >= ? AND id < ?"
        )
        self.messages_asc = p(f"SELECT id, body, expires {msg_where} ORDER BY id ASC")
        self.messages_desc = p(f"SELECT id, body, expires {msg_where} ORDER BY id DESC")
        key = "incarnation = ? AND partition = ? AND bucket = ? AND id = ?"
        self.get_message = p(f"SELECT id, body, expires FROM {ks}.messages WHERE {key}")
        self.delete_message = p(f"DELETE FROM {ks}.messages WHERE {key}")
        # checkpoints
        self.get_checkpoints = p(
            f"SELECT partition, id FROM {ks}.checkpoints "
            "WHERE application = ? AND queue = ? AND consumer = ?"
        )
        self.set_checkpoint = p(
            f"INSERT INTO {ks}.checkpoints (application, queue, consumer, partition, id) "
            "VALUES (?, ?, ?, ?, ?)"
        )
        self.delete_checkpoints = p(
            f"DELETE FROM {ks}.checkpoints WHERE application = ? AND queue = ?"
        )


@dataclass
class _Connection:
    cluster: Cluster
    session: Session
    st: _Statements
    bucket_micros: int


def _queue_from_row(row: Sequence[Any]) -> QueueMeta:
    app, name, partitions, ttl, qtype, consistency, created, incarnation = row
    return QueueMeta(
        application=app,
        name=name,
        partitions=partitions,
        ttl=ttl,
        type=qtype,
        consistency=consistency,
        created=created or 0,
        incarnation=incarnation,
    )


def _applied(rows: Sequence[Sequence[Any]]) -> tuple[bool, bool]:
    """(applied, row existed) of a lightweight transaction's answer."""
    row = rows[0]
    return bool(row[0]), len(row) > 1


# -- the backend -----------------------------------------------------------------


class CassandraStorage(Storage):
    """Queuey's storage on Apache Cassandra.

    The connection is opened on first use (or by :meth:`connect`), so an API
    node starts while Cassandra is down and answers 503 until it is back.
    One instance is shared by the server's threads.
    """

    def __init__(self, config: CassandraSettings, clock: Clock) -> None:
        self.config = config
        self.clock = clock
        self.write_timeout_seconds = config.request_timeout
        self._max_ttl_micros = config.max_ttl * MICROS
        self._ids = ids.IdGenerator()
        self._lock = threading.Lock()
        self._conn: _Connection | None = None
        self._closed = False
        self._retry_at = 0.0
        self._last_failure = ""
        # (incarnation, partition, bucket, message ttl) this process has indexed
        self._indexed: collections.OrderedDict[tuple[str, int, int, int], None] = (
            collections.OrderedDict()
        )
        self._indexed_lock = threading.Lock()

    # -- connection ---------------------------------------------------------
    def connect(self) -> None:
        """Open the connection and prepare statements now (idempotent)."""
        self._connection()

    def _connection(self) -> _Connection:
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
                    self._retry_at = time.monotonic() + _RECONNECT_DELAY
                    self._last_failure = str(exc)
                    raise
            return self._conn

    def _open(self) -> _Connection:
        cluster = build_cluster(self.config)
        try:
            with unavailable("connect"):
                session = cluster.connect()
                self._check_schema(session)
                st = _Statements(session, self.config.keyspace)
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
        return _Connection(cluster, session, st, width * MICROS)

    def _check_schema(self, session: Session) -> None:
        from queuey.storage.cassandra_schema import LATEST_VERSION, current_version

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

    # -- queues ---------------------------------------------------------------
    @_boundary("create queue")
    def create_queue(self, meta: QueueMeta) -> QueueMeta:
        if not meta.created:
            meta = replace(meta, created=self.clock.now_micros())
        c = self._connection()
        rows = c.session.execute(
            c.st.insert_queue,
            (
                meta.application,
                meta.name,
                meta.partitions,
                meta.ttl,
                meta.type,
                meta.consistency,
                meta.created,
                meta.incarnation,
            ),
            execution_profile=P_META,
        ).all()
        applied, _ = _applied(rows)
        if not applied:
            raise QueueExists(meta.name)
        return meta

    def _read_queue(self, c: _Connection, application: str, name: str) -> QueueMeta:
        row = c.session.execute(
            c.st.select_queue, (application, name), execution_profile=P_META
        ).one()
        if row is None:
            raise QueueNotFound(name)
        return _queue_from_row(row)

    @_boundary("get queue")
    def get_queue(self, application: str, name: str) -> QueueMeta:
        return self._read_queue(self._connection(), application, name)

    @_boundary("list queues")
    def list_queues(
        self, application: str, limit: int = 100, after: str | None = None
    ) -> list[QueueMeta]:
        if limit <= 0:
            return []
        c = self._connection()
        stmt = c.st.list_queues.bind((application, after or "", limit))
        stmt.fetch_size = limit
        rs = c.session.execute(stmt, execution_profile=P_META)
        return [_queue_from_row(row) for row in rs.current_rows]

    def _compare_and_set(
        self,
        application: str,
        name: str,
        what: str,
        change: Callable[[QueueMeta], QueueMeta],
        execute: Callable[[_Connection, QueueMeta, QueueMeta], list],
    ) -> QueueMeta:
        """Read the queue row, apply ``change``, write it back only if unchanged (LWT).

        Retries on a concurrent change; ``QueueNotFound`` if the row is gone.
        """
        c = self._connection()
        for _ in range(10):
            cur = self._read_queue(c, application, name)
            new = change(cur)
            applied, existed = _applied(execute(c, cur, new))
            if applied:
                return new
            if not existed:
                raise QueueNotFound(name)
        raise StorageUnavailable(f"cassandra: {what}: too much contention")

    @_boundary("update queue")
    def update_queue(self, application: str, name: str, **changes: Any) -> QueueMeta:
        unknown = set(changes) - {"partitions", "ttl", "type", "consistency"}
        if unknown:
            raise InvalidUpdate(f"cannot change {', '.join(sorted(unknown))}")
        changes = {key: value for key, value in changes.items() if value is not None}

        def change(cur: QueueMeta) -> QueueMeta:
            new = replace(cur, **changes)
            if new.partitions < cur.partitions:
                raise InvalidUpdate(
                    f"partitions can only grow ({cur.partitions} -> {new.partitions})"
                )
            return new

        def execute(c: _Connection, cur: QueueMeta, new: QueueMeta) -> list:
            return c.session.execute(
                c.st.update_queue,
                (
                    new.partitions,
                    new.ttl,
                    new.type,
                    new.consistency,
                    application,
                    name,
                    cur.partitions,
                    cur.ttl,
                    cur.type,
                    cur.consistency,
                ),
                execution_profile=P_META,
            ).all()

        return self._compare_and_set(application, name, "update queue", change, execute)

    @_boundary("delete queue")
    def delete_queue(self, application: str, name: str) -> None:
        c = self._connection()
        rows = c.session.execute(
            c.st.delete_queue, (application, name), execution_profile=P_META
        ).all()
        applied, _ = _applied(rows)
        if not applied:
            raise QueueNotFound(name)
        c.session.execute(c.st.delete_checkpoints, (application, name), execution_profile=P_META)

    @_boundary("purge queue")
    def purge_queue(self, application: str, name: str) -> QueueMeta:
        def execute(c: _Connection, cur: QueueMeta, new: QueueMeta) -> list:
            return c.session.execute(
                c.st.purge_queue,
                (new.incarnation, application, name, cur.incarnation),
                execution_profile=P_META,
            ).all()

        return self._compare_and_set(
            application,
            name,
            "purge queue",
            lambda cur: replace(cur, incarnation=uuid.uuid4().hex),
            execute,
        )

    # -- messages ---------------------------------------------------------------
    def _bucket_of(self, c: _Connection, micros: int) -> int:
        return micros // c.bucket_micros

    @_boundary("put messages")
    def put_messages(self, queue: QueueMeta, messages: Sequence[NewMessage]) -> list[Message]:
        if not messages:
            return []
        for m in messages:
            if not 1 <= m.ttl <= self.config.max_ttl:
                raise ValueError(f"ttl {m.ttl} outside 1..{self.config.max_ttl} ({PREFIX}max_ttl)")
        c = self._connection()
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
        deadline = time.monotonic() + self.write_timeout_seconds
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
                remaining = -(-((bucket + 1) * bucket_us - ts) // MICROS)
                index[key] = min(m.ttl + remaining + bucket_us // MICROS + 1, CASSANDRA_MAX_TTL)
        self._write_index(c, profile, index, deadline)
        if len(stmts) == 1:
            session.execute(stmts[0], execution_profile=profile, timeout=_remaining(deadline))
        else:
            # One Cassandra partition: an unlogged batch is atomic and isolated.
            # Several: a logged batch is the atomic way (batchlog).
            kind = BatchType.UNLOGGED if len(keys) == 1 else BatchType.LOGGED
            batch = BatchStatement(batch_type=kind)
            for s in stmts:
                batch.add(s)
            session.execute(batch, execution_profile=profile, timeout=_remaining(deadline))
        return out

    def _write_index(
        self,
        c: _Connection,
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
        self._execute_all(c, stmts, profile, deadline)
        with self._indexed_lock:
            for key, _ in needed:
                self._indexed[key] = None
            while len(self._indexed) > _INDEX_CACHE_SIZE:
                self._indexed.popitem(last=False)

    def _execute_all(
        self, c: _Connection, stmts: Sequence[Any], profile: str, deadline: float | None = None
    ) -> list[Any]:
        """Run statements concurrently (bounded); results in order; first error raises."""
        results: list[Any] = []
        for start in range(0, len(stmts), _CONCURRENCY):
            timeout = self.config.request_timeout if deadline is None else _remaining(deadline)
            futures = [
                c.session.execute_async(s, execution_profile=profile, timeout=timeout)
                for s in stmts[start : start + _CONCURRENCY]
            ]
            results.extend(f.result() for f in futures)
        return results

    @_boundary("read messages")
    def read_messages(self, queue: QueueMeta, query: ReadQuery) -> list[Message]:
        if query.limit <= 0 or not query.partitions:
            return []
        c = self._connection()
        plan = _ReadPlan.make(self, c, queue, query)
        if plan is None:
            return []
        readers = [_PartitionReader(plan, p) for p in dict.fromkeys(query.partitions)]
        for r in readers:  # every partition's bucket index, concurrently
            r.start()
        for r in readers:  # then every partition's first bucket, concurrently
            r.prime()
        streams = [r.messages() for r in readers]
        if len(streams) == 1:
            merged: Iterator[Message] = streams[0]
        else:
            merged = heapq.merge(
                *streams, key=lambda m: ids.order_key(m.id), reverse=plan.descending
            )
        return list(itertools.islice(merged, query.limit))

    @_boundary("get messages")
    def get_messages(
        self, queue: QueueMeta, refs: Sequence[MessageRef], now_micros: int
    ) -> list[Message]:
        refs = [r for r in dict.fromkeys(refs) if r.id.version == 1]
        if not refs:
            return []
        c = self._connection()
        stmts = [
            c.st.get_message.bind(
                (queue.incarnation, r.partition, self._bucket_of(c, ids.micros_of(r.id)), r.id)
            )
            for r in refs
        ]
        found: list[Message] = []
        for ref, rs in zip(
            refs, self._execute_all(c, stmts, consistency_profile(queue)), strict=True
        ):
            row = rs.one()
            if row is not None and row[2] > now_micros:
                found.append(
                    Message(
                        id=row[0],
                        timestamp=ids.micros_of(row[0]),
                        partition=ref.partition,
                        body=row[1],
                        expires=row[2],
                    )
                )
        return found

    @_boundary("delete messages")
    def delete_messages(self, queue: QueueMeta, refs: Sequence[MessageRef]) -> None:
        refs = [r for r in dict.fromkeys(refs) if r.id.version == 1]
        if not refs:
            return
        c = self._connection()
        stmts = [
            c.st.delete_message.bind(
                (queue.incarnation, r.partition, self._bucket_of(c, ids.micros_of(r.id)), r.id)
            )
            for r in refs
        ]
        self._execute_all(c, stmts, consistency_profile(queue))

    # -- checkpoints ------------------------------------------------------------
    @_boundary("get checkpoints")
    def get_checkpoints(self, application: str, queue: str, consumer: str) -> dict[int, uuid.UUID]:
        c = self._connection()
        rows = c.session.execute(
            c.st.get_checkpoints, (application, queue, consumer), execution_profile=P_META
        )
        return {partition: cid for partition, cid in rows}

    @_boundary("set checkpoints")
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
    @_boundary("ping")
    def ping(self) -> None:
        c = self._connection()
        c.session.execute(c.st.ping, execution_profile=P_META)


# -- reads -------------------------------------------------------------------------


@dataclass(frozen=True)
class _ReadPlan:
    """A read's bounds, worked out once for all its partitions."""

    conn: _Connection
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

    @classmethod
    def make(
        cls, storage: CassandraStorage, c: _Connection, queue: QueueMeta, q: ReadQuery
    ) -> _ReadPlan | None:
        # Older messages are expired whatever their TTL (TTLs are <= max_ttl):
        # this also keeps reads away from expired bucket-index rows.
        lo_ts = q.now_micros - storage._max_ttl_micros + 1
        if q.after_micros is not None:
            lo_ts = max(lo_ts, q.after_micros + 1)
        lo_id = ids.min_uuid(lo_ts)
        if q.after_id is not None:
            lo_ts = max(lo_ts, ids.micros_of(q.after_id))
            if ids.order_key(q.after_id) > ids.order_key(lo_id):
                lo_id = q.after_id  # exclusive: the row itself is skipped
        hi_ts = _MAX_MICROS if q.until_micros is None else min(q.until_micros, _MAX_MICROS)
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
        )


class _PartitionReader:
    """Walks one queue partition's buckets in read order, a page at a time.

    Holds at most one page of the bucket index and one page of messages, so
    a read never keeps more than about the page it answers.
    """

    def __init__(self, plan: _ReadPlan, partition: int) -> None:
        self.plan = plan
        self.partition = partition
        st = plan.conn.st
        self._index_stmt = st.buckets_desc if plan.descending else st.buckets_asc
        self._msg_stmt = st.messages_desc if plan.descending else st.messages_asc
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
        self._index_bound = self._index_stmt.bind(
            (p.incarnation, self.partition, p.lo_bucket, p.hi_bucket)
        )
        self._index_bound.fetch_size = _INDEX_PAGE
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
        live_from = p.now - longest_ttl * MICROS + 1
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
        bound = self._msg_stmt.bind((p.incarnation, self.partition, bucket, lo, p.hi_id))
        bound.fetch_size = p.page
        return self._send(bound, paging_state)

    def prime(self) -> None:
        """Send the first bucket's query (after :meth:`start`)."""
        if self._msg_future is None and self._more_buckets():
            self._bucket = self._buckets.popleft()
            self._msg_future = self._query_bucket()

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
            for mid, body, expires in rs.current_rows:
                if expires > p.now and mid != p.after_id:
                    yield Message(
                        id=mid,
                        timestamp=ids.micros_of(mid),
                        partition=self.partition,
                        body=body,
                        expires=expires,
                    )
            if state is not None:
                self._msg_future = self._query_bucket(state)


# -- entry point -----------------------------------------------------------------------


def load_from_config(settings: Mapping[str, Any], clock: Clock) -> CassandraStorage:
    """Build the backend from ``queuey.cassandra.*`` settings.

    With ``queuey.cassandra.create_schema = true`` (tests, development) the
    schema is created or upgraded first; otherwise it must already be there
    (``queuey schema upgrade``). A node that is down at start is not fatal:
    the backend connects on first use and answers ``StorageUnavailable`` until then.
    """
    config = parse_settings(settings)
    if config.create_schema:
        from queuey.storage.cassandra_schema import upgrade_with_config

        applied = upgrade_with_config(config)
        if applied:
            log.info("cassandra: applied %d schema statements", len(applied))
    storage = CassandraStorage(config, clock)
    try:
        storage.connect()
    except StorageUnavailable as exc:
        log.warning("cassandra: not connected at start (%s); will retry on first use", exc)
    return storage
