"""Writes: ``df.write.format("queuey")`` posts each row as a message.

A row's ``body`` column (or its other columns) is the message; ``partition``,
``partition_key`` and ``ttl`` columns place it (:data:`CONTROL_COLUMNS`).
:class:`Sink` turns rows into messages and posts them: the one implementation
behind :class:`QueueyWriter` and the streaming sink
(:class:`~queuey.spark.stream_writer.QueueyStreamWriter`).
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from pyspark.sql.datasource import DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import Row, StructType

from queuey.core.messages import InvalidMessage, MessageRules
from queuey.errors import ConfigurationError
from queuey.model import NewMessage, QueueMeta
from queuey.placement import partition_for_key
from queuey.spark.connections import StorageConnection
from queuey.spark.options import (
    NAME,
    WRITE,
    WriteOptions,
    application_option,
    connection_from_options,
)
from queuey.spark.sources import Source, open_source, rules_of
from queuey.tracing import TRACEPARENT, TRACESTATE, context_attributes, traced

log = logging.getLogger(__name__)

#: Row columns that place a written message instead of being part of it.
CONTROL_COLUMNS = ("partition", "partition_key", "ttl")


@dataclass
class QueueyCommitMessage(WriterCommitMessage):
    """What one write task did.

    ``messages`` were stored; ``duplicates`` were posted again with a
    ``dedup_id`` the store had seen, and stored nothing; the task wrote from
    ``started`` (seconds since the epoch) for ``seconds``.
    """

    messages: int
    duplicates: int = 0
    started: float = 0.0
    seconds: float = 0.0

    @property
    def per_second(self) -> float:
        """Rows this task posted (stored or dropped as repeats) per second."""
        return (self.messages + self.duplicates) / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class WriteTotals:
    """One write job's (or micro-batch's) commit messages added up.

    ``seconds`` is the job's writing time, from the first task's start to the
    last task's end, so ``per_second`` is the sink's throughput however many
    tasks ran at once.
    """

    tasks: int
    messages: int
    duplicates: int
    seconds: float

    @classmethod
    def of(cls, messages: Sequence[WriterCommitMessage | None]) -> WriteTotals:
        done = [m for m in messages if isinstance(m, QueueyCommitMessage)]
        spans = [(m.started, m.started + m.seconds) for m in done if m.started]
        seconds = max(e for _, e in spans) - min(s for s, _ in spans) if spans else 0.0
        return cls(
            tasks=len(done),
            messages=sum(m.messages for m in done),
            duplicates=sum(m.duplicates for m in done),
            seconds=seconds,
        )

    @property
    def per_second(self) -> float:
        posted = self.messages + self.duplicates
        return posted / self.seconds if self.seconds > 0 else 0.0

    def __str__(self) -> str:
        return (
            f"{self.messages} messages stored, {self.duplicates} duplicates dropped, "
            f"{self.tasks} tasks, {self.seconds:.3f} s, {self.per_second:.0f} messages/s"
        )


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


_round_robin = random.randrange(1 << 16)


def _next_partition(partitions: int) -> int:
    """Spread rows without a partition evenly (the API picks at random)."""
    global _round_robin
    _round_robin += 1
    return _round_robin % partitions + 1


@dataclass(frozen=True)
class RowMessage:
    """A row as a message: its JSON text and the placement the row gave (if any)."""

    body: str
    partition: int | None
    partition_key: str | None
    ttl: int | None

    def identity(self) -> bytes:
        """What makes two rows the same message (the chosen partition does not)."""
        return json.dumps([self.body, self.partition, self.partition_key, self.ttl]).encode()


#: Gives a message its ``dedup_id`` (or None).
DedupIds = Callable[[RowMessage], str | None]


def put_counting_duplicates(
    source: Source, meta: QueueMeta, batch: Sequence[NewMessage]
) -> tuple[int, int]:
    """Post ``batch``: (messages stored, repeated ``dedup_id`` s that stored nothing).

    The store answers a repeat with the first message, minted before this put
    began, which is how repeats are told from new messages. Through the HTTP
    API the service's clock mints the ids, so the split is as good as the two
    clocks agree (the service drops the repeats either way).
    """
    began = source.now_micros()
    answers = source.put(meta, batch)
    if not any(m.dedup_id for m in batch):
        return len(answers), 0
    repeats = sum(1 for stamp in answers if stamp < began)
    return len(answers) - repeats, repeats


class Sink:
    """Rows to messages, posted ``batchSize`` at a time: what both writers share.

    Built from the data source options on the driver and shipped to the write
    tasks, where :meth:`post` opens the executor's own source.
    """

    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise ConfigurationError(
                "mode", f"the {NAME} sink only appends messages; use mode('append')"
            )
        self.connection = connection_from_options(options)
        self.application = application_option(options, self.connection)
        given: WriteOptions = WRITE.parse(options)
        self.queue = given.queue
        self.batch_size = given.batch_size
        self.ttl = given.ttl
        self.columns = [f.name for f in schema.fields]
        self.has_body = "body" in self.columns
        #: The service's message rules, checked here for a store written
        #: directly; through the HTTP API the service checks them.
        self.rules: MessageRules | None = (
            rules_of(self.connection) if isinstance(self.connection, StorageConnection) else None
        )
        #: The trace context of the write on the driver, given to every message
        #: (the executors run outside it).
        self.trace = context_attributes()

    def encode(self, row: Row) -> RowMessage:
        """The row's message text and given placement; ``ValueError`` when it has none."""
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
        partition, key, ttl = (values.get(c) for c in CONTROL_COLUMNS)
        return RowMessage(
            body=text,
            partition=None if partition is None else int(partition),
            partition_key=None if key is None else str(key),
            ttl=int(ttl) if ttl else None,
        )

    def place(self, encoded: RowMessage, meta: QueueMeta) -> NewMessage:
        """The message to store: its partition (the row's, its key's, or round
        robin), its ttl (the row's, the ``ttl`` option, or the queue's) and
        the rest by the service's message rules (:mod:`queuey.core.messages`):
        a ttl at most ``queuey.max_ttl``, the queue's delay, the largest
        message. ``ValueError`` names what is wrong."""
        partition = encoded.partition
        if partition is None:
            partition = (
                partition_for_key(encoded.partition_key, meta.partitions)
                if encoded.partition_key is not None
                else _next_partition(meta.partitions)
            )
        if not 1 <= partition <= meta.partitions:
            raise ValueError(f"partition {partition} not in 1..{meta.partitions}")
        given = encoded.ttl or self.ttl
        if self.rules is None:
            ttl = given or meta.ttl
            if ttl < 1:
                raise ValueError(f"ttl {ttl} is not positive")
            return NewMessage(body=encoded.body, partition=partition, ttl=int(ttl))
        try:
            return self.rules.build(meta, encoded.body, partition, ttl=given)
        except InvalidMessage as exc:
            raise ValueError(f"{exc.field}: {exc}") from None

    def _traced(self, batch: list[NewMessage]) -> list[NewMessage]:
        trace = self.trace
        return traced(batch, trace.get(TRACEPARENT), trace.get(TRACESTATE)) if trace else batch

    def post(self, rows: Iterable[Row], dedup_ids: DedupIds | None = None) -> QueueyCommitMessage:
        """Post every row, ``batchSize`` messages a put, each with ``dedup_ids``' id if given."""
        started = time.time()
        clock = time.perf_counter()
        source = open_source(self.connection)
        meta = source.queue(self.application, self.queue)
        stored = repeats = 0
        batch: list[NewMessage] = []
        for row in rows:
            encoded = self.encode(row)
            message = self.place(encoded, meta)
            if dedup_ids is not None:
                message = replace(message, dedup_id=dedup_ids(encoded))
            batch.append(message)
            if len(batch) >= self.batch_size:
                new, old = put_counting_duplicates(source, meta, self._traced(batch))
                stored, repeats, batch = stored + new, repeats + old, []
        if batch:
            new, old = put_counting_duplicates(source, meta, self._traced(batch))
            stored, repeats = stored + new, repeats + old
        return QueueyCommitMessage(stored, repeats, started, time.perf_counter() - clock)


class QueueyWriter(DataSourceWriter):
    """Posts rows as messages, ``batchSize`` at a time, from each write task.

    Each batch is stored all or nothing, but a Spark job is not one
    transaction: a failed job leaves the batches it posted, and a retried
    task posts its rows again (at-least-once).
    """

    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        self.sink = Sink(options, schema, overwrite)

    def write(self, iterator: Iterable[Row]) -> QueueyCommitMessage:
        return self.sink.post(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info("write to %s: %s", self.sink.queue, WriteTotals.of(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        totals = WriteTotals.of(messages)
        log.warning("write to %s failed after: %s (not undone)", self.sink.queue, totals)
