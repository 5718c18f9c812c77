"""Work descriptors for reading queues in parallel, and the code that reads them.

A queue partition is read as one or more :class:`Slice` objects: small frozen
dataclasses of plain values (the connection settings, the queue's
:class:`~queuey.storage.QueueMeta`, a partition, a time or id range and the
instant expiry is judged at). They are planned on the driver, pickled to the
executors, and read there with :func:`read_slice`.

An executor never receives a live connection. It builds its own from the
descriptor's :class:`StorageConnection` (a dotted backend module plus a plain
settings dict, the same as the ini) or :class:`HttpConnection` (API URLs and
the application's credentials), and keeps it for the life of its Python worker
process (:func:`open_source`), so a Cassandra session is made once per executor
process, never per task, and never travels from the driver.

Ranges are expressed with positions, the same values the streaming offsets
hold: a message id (32 hex digits, meaning "strictly after this message") or
an integer number of microseconds ``T`` (meaning "every message with a
timestamp up to and including ``T``").
"""

from __future__ import annotations

import json
import math
import os
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, NamedTuple, Protocol

from queuey import ids
from queuey.clock import SYSTEM_CLOCK
from queuey.storage import Message, NewMessage, QueueMeta, ReadQuery, Storage

#: Rows fetched per storage read or HTTP request while reading a slice.
DEFAULT_PAGE_SIZE = 1000
#: The HTTP API's largest ``limit``.
HTTP_MAX_LIMIT = 1000

Position = str | int
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
TimeLike = float | int | str | Decimal | datetime


class QueueMessage(NamedTuple):
    """One message as the RDD source yields it.

    ``timestamp`` is seconds since the epoch with microsecond precision (its
    ``repr`` is exact, as in the HTTP API); ``body`` is the JSON text of the
    message object.
    """

    message_id: str
    timestamp: float
    partition: int
    body: str
    queue: str

    @property
    def timestamp_micros(self) -> int:
        return ids.micros_of(uuid.UUID(self.message_id))

    def json(self) -> Any:
        """The body, parsed."""
        return json.loads(self.body)


# -- connections -----------------------------------------------------------------


@dataclass(frozen=True)
class StorageConnection:
    """Read and write through a storage backend built on the executor.

    ``settings`` holds the ini keys the backend reads (for example
    ``queuey.cassandra.contact_points``), plus ``queuey.read_delay`` and
    ``queuey.max_clock_skew``. It is stored as sorted pairs so the connection is
    hashable (the per-process cache key) and pickles as plain strings.
    """

    backend: str
    settings: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> StorageConnection:
        """From ini-style settings: ``queuey.storage.backend`` names the backend."""
        from queuey.settings import merged

        raw = merged(settings)
        backend = str(raw.pop("queuey.storage.backend"))
        pairs = tuple(sorted((str(k), str(v)) for k, v in raw.items() if k.startswith("queuey.")))
        return cls(backend=backend, settings=pairs)

    @classmethod
    def from_ini(cls, path: str, section: str = "app:main") -> StorageConnection:
        """From the app section of an ini file such as ``development.ini``."""
        import plaster

        return cls.from_settings(plaster.get_settings(os.path.abspath(path), section))

    def settings_dict(self) -> dict[str, str]:
        return dict(self.settings)

    def describe(self) -> str:
        return self.backend


@dataclass(frozen=True)
class HttpConnection:
    """Read and write through the HTTP API (``queuey.client.QueueyClient``)."""

    urls: tuple[str, ...]
    application: str
    key: str | None = field(default=None, repr=False)
    timeout: float = 30.0

    def describe(self) -> str:
        return ",".join(self.urls)


Connection = StorageConnection | HttpConnection


class Source(Protocol):
    """What the Spark code needs from a store, whichever way it is reached."""

    def queue(self, application: str, name: str) -> QueueMeta: ...

    def read(
        self,
        meta: QueueMeta,
        partition: int,
        *,
        now_micros: int,
        limit: int,
        order: str = "ascending",
        after_id: uuid.UUID | None = None,
        after_micros: int | None = None,
        until_micros: int | None = None,
    ) -> list[Message]: ...

    def put(self, meta: QueueMeta, messages: Sequence[NewMessage]) -> int: ...

    def now_micros(self) -> int: ...

    @property
    def read_delay_micros(self) -> int: ...


class StorageSource:
    """A :class:`Source` over a :class:`~queuey.storage.Storage` backend."""

    def __init__(self, connection: StorageConnection) -> None:
        from queuey.storage import load_backend

        settings = connection.settings_dict()
        self.connection = connection
        self.storage: Storage = load_backend(connection.backend, settings, SYSTEM_CLOCK)
        # Only messages older than now - delay are final (invariant 2); the
        # delay is never shorter than the backend needs, whatever was configured.
        configured = float(settings.get("queuey.read_delay", 0) or 0)
        skew = float(settings.get("queuey.max_clock_skew", 0) or 0)
        needed = self.storage.write_timeout_seconds + skew
        self._read_delay_micros = int(max(configured, needed) * ids.MICROS)

    @property
    def read_delay_micros(self) -> int:
        return self._read_delay_micros

    def now_micros(self) -> int:
        return SYSTEM_CLOCK.now_micros()

    def queue(self, application: str, name: str) -> QueueMeta:
        return self.storage.get_queue(application, name)

    def read(
        self,
        meta: QueueMeta,
        partition: int,
        *,
        now_micros: int,
        limit: int,
        order: str = "ascending",
        after_id: uuid.UUID | None = None,
        after_micros: int | None = None,
        until_micros: int | None = None,
    ) -> list[Message]:
        return self.storage.read_messages(
            meta,
            ReadQuery(
                partitions=[partition],
                now_micros=now_micros,
                limit=limit,
                order=order,  # type: ignore[arg-type]
                after_id=after_id,
                after_micros=after_micros,
                until_micros=until_micros,
            ),
        )

    def put(self, meta: QueueMeta, messages: Sequence[NewMessage]) -> int:
        return len(self.storage.put_messages(meta, messages))

    def close(self) -> None:
        self.storage.close()


class HttpSource:
    """A :class:`Source` over the HTTP API.

    The service applies its own read delay and expiry clock, so ``now_micros``
    and ``until_micros`` bounds are enforced here only by filtering what it
    returns.
    """

    read_delay_micros = 0

    def __init__(self, connection: HttpConnection) -> None:
        from queuey.client.http import QueueyClient

        self.connection = connection
        self.client = QueueyClient(
            list(connection.urls),
            connection.application,
            connection.key,
            timeout=connection.timeout,
        )

    def now_micros(self) -> int:
        return SYSTEM_CLOCK.now_micros()

    def queue(self, application: str, name: str) -> QueueMeta:
        info = self.client.queue_info(name)
        created = ids.seconds_to_micros(info.created) if info.created else 0
        return QueueMeta(
            application=application,
            name=info.name,
            partitions=info.partitions,
            ttl=int(info.ttl or QueueMeta.ttl),
            type=info.type,  # type: ignore[arg-type]
            created=created,
            incarnation="",
        )

    def read(
        self,
        meta: QueueMeta,
        partition: int,
        *,
        now_micros: int,
        limit: int,
        order: str = "ascending",
        after_id: uuid.UUID | None = None,
        after_micros: int | None = None,
        until_micros: int | None = None,
    ) -> list[Message]:
        out: list[Message] = []
        since = after_id.hex if after_id is not None else None
        since_ts = (
            ids.micros_to_seconds(after_micros)
            if after_micros is not None and since is None
            else None
        )
        while len(out) < limit:
            want = min(HTTP_MAX_LIMIT, limit - len(out))
            page = self.client.read(
                meta.name,
                since=since,
                since_timestamp=since_ts,
                limit=want,
                order=order,
                partitions=[partition],
            )
            for received in page:
                message_id = ids.parse_id(received.message_id)
                micros = ids.micros_of(message_id)
                if after_micros is not None and micros <= after_micros:
                    continue
                if until_micros is not None and micros >= until_micros:
                    if order == "ascending":
                        return out
                    continue
                body = json.dumps(received.body, separators=(",", ":"), ensure_ascii=False)
                out.append(Message(message_id, micros, received.partition, body, 0))
            if len(page) < want or order != "ascending":
                # Descending pages cannot be continued with ``since``; callers
                # only ask for short descending reads.
                return out
            since, since_ts = page[-1].message_id, None
        return out

    def put(self, meta: QueueMeta, messages: Sequence[NewMessage]) -> int:
        from queuey.client.http import OutgoingMessage

        batch = [
            OutgoingMessage(body=json.loads(m.body), partition=m.partition, ttl=m.ttl)
            for m in messages
        ]
        return len(self.client.post_batch(meta.name, batch))

    def close(self) -> None:
        self.client.close()


# One source per connection per process: Spark reuses Python workers across
# tasks, so an executor connects once. The pid check drops connections
# inherited through fork, which must never be used by the child.
_sources: dict[Connection, Source] = {}
_sources_pid = os.getpid()
_sources_lock = threading.Lock()
#: (pid, connection description) for every source this process opened.
opened_sources: list[tuple[int, str]] = []


def open_source(connection: Connection) -> Source:
    """The process-wide source for ``connection``, created on first use."""
    global _sources_pid
    with _sources_lock:
        if _sources_pid != os.getpid():
            _sources.clear()
            opened_sources.clear()
            _sources_pid = os.getpid()
        source = _sources.get(connection)
        if source is None:
            if isinstance(connection, StorageConnection):
                source = StorageSource(connection)
            else:
                source = HttpSource(connection)
            _sources[connection] = source
            opened_sources.append((os.getpid(), connection.describe()))
        return source


def close_sources() -> None:
    """Close every source of this process (tests, tools)."""
    with _sources_lock:
        for source in _sources.values():
            source.close()  # type: ignore[attr-defined]
        _sources.clear()


# -- positions -------------------------------------------------------------------


def to_micros(value: TimeLike) -> int:
    """Seconds since the epoch (number, decimal text or aware datetime) as micros."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(f"a datetime bound must carry a time zone: {value!r}")
        delta = value - _EPOCH
        return (delta.days * 86400 + delta.seconds) * ids.MICROS + delta.microseconds
    if isinstance(value, float):
        return ids.seconds_to_micros(repr(value))
    return ids.seconds_to_micros(value)


def position_key(position: Position) -> tuple[int, bytes]:
    """Sort key of a position in id order (an int ``T`` sorts after every id at ``T``)."""
    if isinstance(position, int):
        return (ids.max_uuid(position).time, b"")
    return ids.order_key(uuid.UUID(position))


def position_micros(position: Position) -> int:
    if isinstance(position, int):
        return position
    return ids.micros_of(uuid.UUID(position))


def check_position(value: Any) -> Position:
    """A position from an offset or an option; raises ``ValueError`` otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"not a position: {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"not a position: {value!r}")
        return value
    if isinstance(value, str):
        return ids.parse_id(value).hex
    raise ValueError(f"not a position: {value!r}")


# -- slices ----------------------------------------------------------------------


@dataclass(frozen=True)
class Slice:
    """One task's share of a queue partition.

    Lower bound: ``after_id`` (strictly after that message) or ``after_micros``
    (timestamp strictly greater). Upper bound: ``until_id`` (up to and
    including that message) or ``until_micros`` (timestamp strictly smaller).
    ``now_micros`` is the instant expiry is judged at, fixed when planning so
    every task of a job sees the same snapshot.
    """

    connection: Connection
    queue: QueueMeta
    partition: int
    now_micros: int
    after_id: str | None = None
    after_micros: int | None = None
    until_id: str | None = None
    until_micros: int | None = None
    page_size: int = DEFAULT_PAGE_SIZE

    @classmethod
    def between(
        cls,
        connection: Connection,
        queue: QueueMeta,
        partition: int,
        now_micros: int,
        start: Position,
        end: Position,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> Slice:
        """Messages after position ``start`` up to and including position ``end``."""
        return cls(
            connection,
            queue,
            partition,
            now_micros,
            after_id=start if isinstance(start, str) else None,
            after_micros=start if isinstance(start, int) else None,
            until_id=end if isinstance(end, str) else None,
            until_micros=end + 1 if isinstance(end, int) else None,
            page_size=page_size,
        )


def read_slice(piece: Slice) -> Iterator[Message]:
    """Every live message of ``piece`` in id order, paging through the store."""
    source = open_source(piece.connection)
    after_id = uuid.UUID(piece.after_id) if piece.after_id else None
    after_micros = piece.after_micros
    until_key = ids.order_key(uuid.UUID(piece.until_id)) if piece.until_id else None
    until_micros = piece.until_micros
    if piece.until_id is not None:
        bound = ids.micros_of(uuid.UUID(piece.until_id)) + 1
        until_micros = bound if until_micros is None else min(until_micros, bound)
    while True:
        page = source.read(
            piece.queue,
            piece.partition,
            now_micros=piece.now_micros,
            limit=piece.page_size,
            order="ascending",
            after_id=after_id,
            after_micros=after_micros,
            until_micros=until_micros,
        )
        for message in page:
            if until_key is not None and ids.order_key(message.id) > until_key:
                return
            yield message
        if len(page) < piece.page_size:
            return
        after_id = page[-1].id


def to_queue_message(message: Message, queue: str) -> QueueMessage:
    return QueueMessage(
        message.id.hex,
        ids.micros_to_seconds(message.timestamp),
        message.partition,
        message.body,
        queue,
    )


# -- planning --------------------------------------------------------------------


@dataclass(frozen=True)
class Bounds:
    """Timestamps of the oldest and newest live message of a partition in range."""

    partition: int
    first: int | None
    last: int | None


def probe_bounds(
    source: Source,
    meta: QueueMeta,
    partitions: Sequence[int],
    now_micros: int,
    after_micros: int | None,
    until_micros: int | None,
) -> list[Bounds]:
    """Two one-row reads per partition, so time slices follow where the data is."""
    found = []
    for partition in partitions:
        common = dict(
            now_micros=now_micros, limit=1, after_micros=after_micros, until_micros=until_micros
        )
        oldest = source.read(meta, partition, order="ascending", **common)
        newest = source.read(meta, partition, order="descending", **common) if oldest else []
        found.append(
            Bounds(
                partition,
                oldest[0].timestamp if oldest else None,
                newest[0].timestamp if newest else oldest[0].timestamp if oldest else None,
            )
        )
    return found


def plan_partition(
    connection: Connection,
    meta: QueueMeta,
    bounds: Bounds,
    now_micros: int,
    after_micros: int | None,
    until_micros: int | None,
    slices: int,
    page_size: int = DEFAULT_PAGE_SIZE,
) -> list[Slice]:
    """Split one partition's range into up to ``slices`` pieces of equal time.

    The pieces cover the whole range ``(after_micros, until_micros)`` whatever
    the probe saw (the first starts at the range's start, the last ends at its
    end), so the split points only balance the work, they never decide what is
    read.
    """
    if bounds.first is None or bounds.last is None:
        return []
    first, last = bounds.first, bounds.last + 1
    count = max(1, min(slices, last - first))
    step = (last - first) / count
    cuts = [first + math.floor(step * i) for i in range(1, count)]
    lowers: list[int | None] = [after_micros, *[c - 1 for c in cuts]]
    uppers: list[int | None] = [*cuts, until_micros]
    return [
        Slice(
            connection,
            meta,
            bounds.partition,
            now_micros,
            after_micros=lo,
            until_micros=hi,
            page_size=page_size,
        )
        for lo, hi in zip(lowers, uppers, strict=True)
    ]


@dataclass(frozen=True)
class Plan:
    """What to read of one queue: the request as given, before probing.

    ``slices_per_partition`` fixes how many time slices each queue partition
    is cut into; when it is None, enough slices are made for the queue to give
    at least ``min_slices`` tasks, spread over the partitions that hold messages.
    """

    connection: Connection
    application: str
    queue: str
    partitions: tuple[int, ...] | None
    since_micros: int | None
    until_micros: int | None
    now_micros: int | None
    slices_per_partition: int | None = None
    min_slices: int = 1
    page_size: int = DEFAULT_PAGE_SIZE


def plan_slices(plan: Plan) -> list[Slice]:
    """Resolve the queue, probe its partitions and split them into slices.

    Runs where a connection may be opened: inside an executor task for the RDD
    source, in Spark's planner process for the data source.
    """
    source = open_source(plan.connection)
    meta = source.queue(plan.application, plan.queue)
    partitions = plan.partitions or tuple(range(1, meta.partitions + 1))
    bad = [p for p in partitions if not 1 <= p <= meta.partitions]
    if bad:
        raise ValueError(
            f"queue {plan.queue!r} has partitions 1..{meta.partitions}; asked for {bad}"
        )
    now = plan.now_micros if plan.now_micros is not None else source.now_micros()
    # ``until`` is inclusive for callers; storage bounds are exclusive.
    cutoff = now - source.read_delay_micros
    until = cutoff if plan.until_micros is None else min(plan.until_micros + 1, cutoff)
    found = probe_bounds(source, meta, partitions, now, plan.since_micros, until)
    per_partition = plan.slices_per_partition
    if per_partition is None:
        holding = sum(1 for b in found if b.first is not None)
        per_partition = max(1, math.ceil(plan.min_slices / max(1, holding)))
    out: list[Slice] = []
    for bounds in found:
        out += plan_partition(
            plan.connection,
            meta,
            bounds,
            now,
            plan.since_micros,
            until,
            per_partition,
            plan.page_size,
        )
    return out
