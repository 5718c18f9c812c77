"""``spark.read.format("queuey")``: a PySpark (Spark 4) Python data source.

Batch reads split each queue partition into time slices
(:mod:`queuey.spark.slices`), one Spark input partition each. Streaming reads
keep one offset per queue partition, ``{"<partition>": <position>}``, where a
position is the last message id consumed (32 hex digits) or a timestamp in
microseconds up to which everything is consumed, so a query resumes exactly
where its checkpoint says. Writes post rows as messages in batches.

Spark 4.0's Python streaming API has no admission-control hook (``latestOffset``
is not told where the batch starts), so the reader learns its position from the
calls Spark does make: ``partitions(start, end)`` (Spark replays the last
planned offsets through it when a query restarts) and ``commit``. Before it
knows, it counts from the initial offset. ``latestOffset`` itself never changes
that state, because Spark also calls it just to report progress.
"""

from __future__ import annotations

import json
import logging
import random
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    Row,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from queuey import ids
from queuey.errors import ConfigurationError
from queuey.spark.slices import (
    DEFAULT_PAGE_SIZE,
    Connection,
    HttpConnection,
    Plan,
    Position,
    Slice,
    StorageConnection,
    check_position,
    open_source,
    plan_slices,
    position_key,
    to_micros,
)
from queuey.storage import Message, NewMessage, QueueMeta

log = logging.getLogger(__name__)

NAME = "queuey"
DEFAULT_SCHEMA = StructType(
    [
        StructField("message_id", StringType()),
        StructField("timestamp", TimestampType()),
        StructField("partition", IntegerType()),
        StructField("body", StringType()),
        StructField("queue", StringType()),
    ]
)
#: ``minPartitions`` when the data source was not registered through :func:`register`.
DEFAULT_MIN_PARTITIONS = 4
DEFAULT_BATCH_SIZE = 100
MAX_BATCH_SIZE = 1000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: Row columns that place a written message instead of being part of it.
CONTROL_COLUMNS = ("partition", "partition_key", "ttl")
#: Columns a read fills from the message itself; any other column is a body field.
MESSAGE_COLUMNS = ("message_id", "timestamp", "timestamp_micros", "partition", "body", "queue")


# -- options ---------------------------------------------------------------------


def _option(options: Mapping[str, str], name: str, default: str | None = None) -> str | None:
    value = options.get(name.lower(), options.get(name, default))
    if value is None:
        return None
    value = str(value).strip()
    return value if value != "" else default


def _required(options: Mapping[str, str], name: str) -> str:
    value = _option(options, name)
    if value is None:
        raise ConfigurationError(name, f"the {NAME} data source needs option {name!r}")
    return value


def _int_option(
    options: Mapping[str, str], name: str, default: int | None, low: int, high: int | None = None
) -> int | None:
    raw = _option(options, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigurationError(name, f"not an integer: {raw!r}") from None
    if value < low or (high is not None and value > high):
        upper = f"..{high}" if high is not None else " or more"
        raise ConfigurationError(name, f"must be {low}{upper}, got {value}")
    return value


def _time_option(options: Mapping[str, str], name: str) -> int | None:
    """Seconds since the epoch (decimal) or an ISO 8601 time with a zone, as micros."""
    raw = _option(options, name)
    if raw is None:
        return None
    try:
        return to_micros(raw)
    except ValueError:
        pass
    try:
        return to_micros(datetime.fromisoformat(raw))
    except ValueError as exc:
        raise ConfigurationError(
            name, f"expected seconds since the epoch or an ISO 8601 time with a zone: {exc}"
        ) from None


def connection_from_options(options: Mapping[str, str]) -> Connection:
    """The connection the options describe.

    ``url`` (and ``key``) select the HTTP API. Otherwise storage settings come
    from ``config`` (an ini file; its ``configSection``, default ``app:main``)
    and are overridden by ``backend`` and by any option named ``queuey.*``.
    """
    url = _option(options, "url")
    if url is not None:
        urls = tuple(u.strip() for u in url.split(",") if u.strip())
        return HttpConnection(urls, _required(options, "application"), _option(options, "key"))
    settings: dict[str, Any] = {}
    config = _option(options, "config")
    if config is not None:
        import plaster

        section = _option(options, "configSection", "app:main")
        settings.update(plaster.get_settings(config, section))
    settings.update({k: v for k, v in options.items() if k.lower().startswith("queuey.")})
    backend = _option(options, "backend")
    if backend is not None:
        settings["queuey.storage.backend"] = backend
    if config is None and backend is None and "queuey.storage.backend" not in settings:
        raise ConfigurationError(
            "backend", "give url= (HTTP API), backend= (a storage module) or config= (an ini)"
        )
    return StorageConnection.from_settings(settings)


def _partitions_option(options: Mapping[str, str]) -> tuple[int, ...] | None:
    raw = _option(options, "partitions")
    if raw is None:
        return None
    try:
        parts = tuple(sorted({int(p) for p in raw.split(",") if p.strip()}))
    except ValueError:
        raise ConfigurationError(
            "partitions", f"expected a comma list of numbers: {raw!r}"
        ) from None
    if not parts or parts[0] < 1:
        raise ConfigurationError("partitions", f"partitions are numbered from 1: {raw!r}")
    return parts


@dataclass(frozen=True)
class ReadOptions:
    connection: Connection
    application: str
    queues: tuple[str, ...]
    partitions: tuple[int, ...] | None
    since_micros: int | None
    until_micros: int | None
    now_micros: int | None
    slices_per_partition: int | None
    min_partitions: int
    page_size: int
    max_messages_per_trigger: int | None
    starting_offsets: str | None

    @classmethod
    def parse(
        cls, options: Mapping[str, str], min_partitions: int = DEFAULT_MIN_PARTITIONS
    ) -> ReadOptions:
        connection = connection_from_options(options)
        application = (
            connection.application
            if isinstance(connection, HttpConnection)
            else _required(options, "application")
        )
        queues = tuple(q.strip() for q in _required(options, "queue").split(",") if q.strip())
        return cls(
            connection=connection,
            application=application,
            queues=queues,
            partitions=_partitions_option(options),
            since_micros=_time_option(options, "since"),
            until_micros=_time_option(options, "until"),
            now_micros=_time_option(options, "now"),
            slices_per_partition=_int_option(options, "slicesPerPartition", None, 1, 10_000),
            min_partitions=_int_option(options, "minPartitions", min_partitions, 1, 100_000),
            page_size=_int_option(options, "pageSize", DEFAULT_PAGE_SIZE, 1, 100_000),
            max_messages_per_trigger=_int_option(options, "maxMessagesPerTrigger", None, 1),
            starting_offsets=_option(options, "startingOffsets"),
        )


# -- rows ------------------------------------------------------------------------


def _micros_to_datetime(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)


def _coerce(value: Any, data_type: DataType) -> Any:
    """A body field as the declared column type; None when it does not fit."""
    if value is None:
        return None
    if isinstance(data_type, StringType):
        return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    if isinstance(data_type, BooleanType):
        return value if isinstance(value, bool) else None
    if isinstance(data_type, IntegerType | LongType):
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if isinstance(data_type, DoubleType | FloatType):
        return (
            float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
        )
    if isinstance(data_type, TimestampType):
        if isinstance(value, int | float) and not isinstance(value, bool):
            return _micros_to_datetime(to_micros(value))
        return None
    return value


def batch_builder(schema: StructType, queue: str) -> Callable[[Sequence[Message]], Any]:
    """A function turning a page of stored messages into an Arrow record batch.

    Known columns (``MESSAGE_COLUMNS``) come from the message; every other
    column is the body field of that name (``None`` when absent or of another
    type). ``timestamp`` may be declared TIMESTAMP (exact to the microsecond),
    DOUBLE (seconds) or BIGINT (microseconds). Columns are built whole, so
    Spark receives Arrow data without a per-row conversion.
    """
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema = to_arrow_schema(schema)
    columns: list[Callable[[Sequence[Message], list[Any] | None], list[Any]]] = []
    needs_body = False
    for f in schema.fields:
        name, dtype = f.name, f.dataType
        if name == "message_id":
            columns.append(lambda ms, bs: [m.id.hex for m in ms])
        elif name in ("timestamp", "timestamp_micros"):
            if isinstance(dtype, TimestampType | LongType):
                columns.append(lambda ms, bs: [m.timestamp for m in ms])
            elif isinstance(dtype, DoubleType):
                columns.append(lambda ms, bs: [ids.micros_to_seconds(m.timestamp) for m in ms])
            else:
                raise ConfigurationError(
                    "schema", f"{name} must be TIMESTAMP, DOUBLE or BIGINT, not {dtype}"
                )
        elif name == "partition":
            columns.append(lambda ms, bs: [m.partition for m in ms])
        elif name == "body":
            columns.append(lambda ms, bs: [m.body for m in ms])
        elif name == "queue":
            columns.append(lambda ms, bs: [queue] * len(ms))
        else:
            needs_body = True
            columns.append(
                lambda ms, bs, name=name, dtype=dtype: [
                    _coerce(b.get(name), dtype) if isinstance(b, dict) else None for b in bs
                ]
            )

    def build(messages: Sequence[Message]) -> pa.RecordBatch:
        bodies = [json.loads(m.body) for m in messages] if needs_body else None
        arrays = [
            pa.array(column(messages, bodies), type=field.type)
            for column, field in zip(columns, arrow_schema, strict=True)
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)

    return build


# -- batch reads -----------------------------------------------------------------


class SlicePartition(InputPartition):
    """One Spark input partition: a :class:`~queuey.spark.slices.Slice`."""

    def __init__(self, piece: Slice) -> None:
        super().__init__(piece)
        self.piece = piece


def _read_pieces(piece: Slice, schema: StructType) -> Iterator[Any]:
    """The slice's messages as Arrow record batches of up to ``page_size`` rows."""
    from queuey.spark.slices import read_slice

    build = batch_builder(schema, piece.queue.name)
    page: list[Message] = []
    for message in read_slice(piece):
        page.append(message)
        if len(page) >= piece.page_size:
            yield build(page)
            page = []
    if page:
        yield build(page)


class QueueyReader(DataSourceReader):
    """Batch reads: queue partition x time slice input partitions."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        o = self.options
        pieces: list[Slice] = []
        for queue in o.queues:
            pieces += plan_slices(
                Plan(
                    connection=o.connection,
                    application=o.application,
                    queue=queue,
                    partitions=o.partitions,
                    since_micros=o.since_micros,
                    until_micros=o.until_micros,
                    now_micros=o.now_micros,
                    slices_per_partition=o.slices_per_partition,
                    min_slices=o.min_partitions,
                    page_size=o.page_size,
                )
            )
        # Spark wants at least one partition; an empty slice reads nothing.
        return [SlicePartition(p) for p in pieces] or [_EmptyPartition()]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if isinstance(partition, _EmptyPartition):
            return iter(())
        return _read_pieces(partition.piece, self.schema)  # type: ignore[attr-defined]


class _EmptyPartition(InputPartition):
    def __init__(self) -> None:
        super().__init__(None)


# -- streaming reads -------------------------------------------------------------

Offset = dict[str, Position]


def _offset(positions: Mapping[int, Position]) -> Offset:
    """The canonical JSON-able offset: partitions in numeric order as string keys.

    Spark compares offsets by their JSON text, so the same positions must
    always give the same dict.
    """
    return {str(p): positions[p] for p in sorted(positions)}


def _positions(offset: Mapping[str, Any]) -> dict[int, Position]:
    try:
        return {int(p): check_position(v) for p, v in offset.items()}
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(
            "offset", f"not a {NAME} offset ({{partition: message id or micros}}): {offset!r}"
        ) from exc


class QueueyStreamReader(DataSourceStreamReader):
    """Micro-batch reads with one offset per queue partition.

    ``latestOffset`` only counts messages older than ``now - read_delay``,
    which are final: no message with a smaller id can appear later
    (invariant 2), so a batch's end offset is a true high-water mark.
    """

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        if len(options.queues) != 1:
            raise ConfigurationError(
                "queue", "a streaming read takes exactly one queue; union several streams"
            )
        self.options = options
        self.schema = schema
        self.queue_name = options.queues[0]
        self._initial: dict[int, Position] | None = None
        #: The end of the last batch Spark planned or committed (None until known).
        self._position: dict[int, Position] | None = None

    # state kept out of pickles sent to executors
    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_initial"] = state["_position"] = None
        return state

    def _source(self):
        return open_source(self.options.connection)

    def _meta(self) -> QueueMeta:
        return self._source().queue(self.options.application, self.queue_name)

    def _partitions(self, meta: QueueMeta) -> list[int]:
        wanted = self.options.partitions
        if wanted is None:
            return list(range(1, meta.partitions + 1))
        bad = [p for p in wanted if p > meta.partitions]
        if bad:
            raise ConfigurationError(
                "partitions", f"queue {meta.name!r} has partitions 1..{meta.partitions}: {bad}"
            )
        return list(wanted)

    def _cutoff(self) -> int:
        source = self._source()
        return source.now_micros() - source.read_delay_micros

    def initialOffset(self) -> Offset:
        if self._initial is None:
            meta = self._meta()
            parts = self._partitions(meta)
            start = self.options.starting_offsets
            if start is None or start == "earliest":
                base: Position = self.options.since_micros or 0
                self._initial = {p: base for p in parts}
            elif start == "latest":
                # Everything older than the cutoff is final and counts as consumed.
                cutoff = self._cutoff() - 1
                self._initial = {p: cutoff for p in parts}
            else:
                try:
                    given = _positions(json.loads(start))
                except ValueError as exc:
                    raise ConfigurationError(
                        "startingOffsets", f"earliest, latest or JSON offsets: {exc}"
                    ) from None
                self._initial = {p: given.get(p, 0) for p in parts}
        return _offset(self._initial)

    def latestOffset(self) -> Offset:
        source = self._source()
        meta = self._meta()
        base = dict(self._position if self._position is not None else self._positions_initial())
        parts = self._partitions(meta)
        for p in parts:
            base.setdefault(p, 0)
        cutoff = self._cutoff()
        now = source.now_micros()
        limit = self.options.max_messages_per_trigger
        end = dict(base)
        if limit is None:
            for p in parts:
                newest = _read_after(source, meta, p, base[p], now, cutoff, 1, "descending")
                if newest:
                    end[p] = newest[0].id.hex
        else:
            self._admit(source, meta, parts, end, now, cutoff, limit)
        return _offset(end)

    def _positions_initial(self) -> dict[int, Position]:
        self.initialOffset()
        assert self._initial is not None
        return self._initial

    def _admit(
        self,
        source,
        meta: QueueMeta,
        parts: list[int],
        end: dict[int, Position],
        now: int,
        cutoff: int,
        budget: int,
    ) -> None:
        """Advance ``end`` by at most ``budget`` messages, shared fairly by partition.

        Each round gives every partition with a backlog an equal share; what a
        partition cannot use goes to the others in the next round. The reads
        touch at most ``budget`` messages plus one short page per partition.
        """
        active = list(parts)
        while budget > 0 and active:
            share = max(1, budget // len(active))
            still = []
            for p in active:
                if budget <= 0:
                    break
                take = min(share, budget)
                page = _read_after(source, meta, p, end[p], now, cutoff, take, "ascending")
                if page:
                    end[p] = page[-1].id.hex
                    budget -= len(page)
                if len(page) >= take:
                    still.append(p)
            active = still

    def partitions(
        self, start: Mapping[str, Any], end: Mapping[str, Any]
    ) -> Sequence[InputPartition]:
        begin, finish = _positions(start), _positions(end)
        self._position = finish
        if begin == finish:
            return []
        meta = self._meta()
        now = self._source().now_micros()
        out: list[InputPartition] = []
        for p, stop in sorted(finish.items()):
            first = begin.get(p, 0)
            if first == stop:
                continue
            if position_key(stop) < position_key(first):
                raise ConfigurationError(
                    "maxMessagesPerTrigger",
                    f"partition {p}: the batch would end ({stop}) before it starts ({first}). "
                    "Spark asked for the latest offset before telling the reader where the "
                    "query stands (this happens with spark.sql.streaming."
                    "triggerAvailableNowWrapper.enabled=true); run without "
                    "maxMessagesPerTrigger or without that setting.",
                )
            out.append(
                SlicePartition(
                    Slice.between(
                        self.options.connection, meta, p, now, first, stop, self.options.page_size
                    )
                )
            )
        return out

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read_pieces(partition.piece, self.schema)  # type: ignore[attr-defined]

    def commit(self, end: Mapping[str, Any]) -> None:
        if self._position is None:
            self._position = _positions(end)


def _read_after(
    source,
    meta: QueueMeta,
    partition: int,
    position: Position,
    now: int,
    cutoff: int,
    limit: int,
    order: str,
) -> list[Message]:
    """Up to ``limit`` final messages after ``position`` (one read per page)."""
    after_id = None
    after_micros = None
    if isinstance(position, int):
        after_micros = position
        if position >= cutoff:
            return []
    else:
        after_id = uuid.UUID(position)
    out: list[Message] = []
    while len(out) < limit:
        want = min(DEFAULT_PAGE_SIZE, limit - len(out))
        page = source.read(
            meta,
            partition,
            now_micros=now,
            limit=want,
            order=order,
            after_id=after_id,
            after_micros=after_micros,
            until_micros=cutoff,
        )
        out += page
        if len(page) < want or order != "ascending":
            break
        after_id = page[-1].id
    return out


# -- writes ----------------------------------------------------------------------


@dataclass
class QueueyCommitMessage(WriterCommitMessage):
    """What one write task posted."""

    messages: int


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value) if value.is_finite() else str(value)
    if isinstance(value, Row):
        return value.asDict(recursive=True)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _plain(value: Any) -> Any:
    if isinstance(value, Row):
        return {k: _plain(v) for k, v in value.asDict(recursive=False).items()}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _partition_for_key(key: str, partitions: int) -> int:
    from queuey.web.messages import partition_for_key

    return partition_for_key(key, partitions)


class QueueyWriter(DataSourceWriter):
    """Posts rows as messages, ``batchSize`` at a time, from each write task.

    Each batch is stored all or nothing, but a Spark job is not one
    transaction: a failed job leaves the batches it posted, and a retried
    task posts its rows again (at-least-once).
    """

    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise ConfigurationError(
                "mode", f"the {NAME} sink only appends messages; use mode('append')"
            )
        self.connection = connection_from_options(options)
        self.application = (
            self.connection.application
            if isinstance(self.connection, HttpConnection)
            else _required(options, "application")
        )
        self.queue = _required(options, "queue")
        self.batch_size = _int_option(options, "batchSize", DEFAULT_BATCH_SIZE, 1, MAX_BATCH_SIZE)
        self.ttl = _int_option(options, "ttl", None, 1)
        self.columns = [f.name for f in schema.fields]
        self.has_body = "body" in self.columns
        if isinstance(self.connection, StorageConnection):
            settings = self.connection.settings_dict()
            self.max_ttl = int(settings.get("queuey.max_ttl", 2592000))
            self.max_size = int(settings.get("queuey.max_message_size", 262144))
        else:
            self.max_ttl = self.max_size = 0  # the service checks

    def _message(self, row: Row, meta: QueueMeta) -> NewMessage:
        values = row.asDict(recursive=False)
        if self.has_body:
            body = values["body"]
            if isinstance(body, str):
                try:
                    parsed = json.loads(body)
                except ValueError as exc:
                    raise ValueError(f"body is not JSON: {exc}") from None
            else:
                parsed = _plain(body)
        else:
            parsed = {k: _plain(v) for k, v in values.items() if k not in CONTROL_COLUMNS}
        if not isinstance(parsed, dict):
            raise ValueError(f"a message must be a JSON object, got {type(parsed).__name__}")
        text = json.dumps(parsed, separators=(",", ":"), ensure_ascii=False, default=_json_default)
        if self.max_size and len(text.encode("utf-8")) > self.max_size:
            raise ValueError(f"a message is larger than {self.max_size} bytes")
        partition = values.get("partition")
        key = values.get("partition_key")
        if partition is None:
            partition = (
                _partition_for_key(str(key), meta.partitions)
                if key is not None
                else _next_partition(meta.partitions)
            )
        if not 1 <= int(partition) <= meta.partitions:
            raise ValueError(f"partition {partition} not in 1..{meta.partitions}")
        ttl = values.get("ttl") or self.ttl or meta.ttl
        if ttl < 1 or (self.max_ttl and ttl > self.max_ttl):
            raise ValueError(f"ttl {ttl} not in 1..{self.max_ttl}")
        return NewMessage(body=text, partition=int(partition), ttl=int(ttl))

    def write(self, iterator: Iterator[Row]) -> QueueyCommitMessage:
        source = open_source(self.connection)
        meta = source.queue(self.application, self.queue)
        posted = 0
        batch: list[NewMessage] = []
        for row in iterator:
            batch.append(self._message(row, meta))
            if len(batch) >= self.batch_size:
                posted += source.put(meta, batch)
                batch = []
        if batch:
            posted += source.put(meta, batch)
        return QueueyCommitMessage(posted)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        total = sum(m.messages for m in messages if isinstance(m, QueueyCommitMessage))
        log.info("posted %d messages to %s", total, self.queue)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        total = sum(m.messages for m in messages if isinstance(m, QueueyCommitMessage))
        log.warning("write to %s failed after posting %d messages (not undone)", self.queue, total)


_round_robin = random.randrange(1 << 16)


def _next_partition(partitions: int) -> int:
    """Spread rows without a partition evenly (the API picks at random)."""
    global _round_robin
    _round_robin += 1
    return _round_robin % partitions + 1


# -- the data source -------------------------------------------------------------


class QueueyDataSource(DataSource):
    """``format("queuey")``: batch and streaming reads, batch writes.

    ``min_partitions`` is the default of the ``minPartitions`` option;
    :func:`register` sets it to twice the session's default parallelism.
    """

    min_partitions = DEFAULT_MIN_PARTITIONS

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return DEFAULT_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return QueueyReader(ReadOptions.parse(self.options, self.min_partitions), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return QueueyStreamReader(ReadOptions.parse(self.options, self.min_partitions), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return QueueyWriter(self.options, schema, overwrite)


def register(spark) -> None:
    """Make ``format("queuey")`` available in ``spark`` (a SparkSession).

    The registered class is a subclass made here, carrying the session's
    parallelism as the ``minPartitions`` default: Spark runs data source code in
    worker processes that cannot ask the session themselves, and the subclass
    travels to them by value.
    """
    parallelism = spark.sparkContext.defaultParallelism
    source = type(
        "QueueyDataSource",
        (QueueyDataSource,),
        {"min_partitions": max(1, 2 * parallelism), "__module__": __name__},
    )
    spark.dataSource.register(source)


# Re-exported for type checkers and docs.
__all__ = [
    "QueueyDataSource",
    "QueueyReader",
    "QueueyStreamReader",
    "QueueyWriter",
    "ReadOptions",
    "connection_from_options",
    "register",
    "batch_builder",
]
