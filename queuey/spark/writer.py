"""Writes: ``df.write.format("queuey")`` posts each row as a message.

A row's ``body`` column (or its other columns) is the message; ``partition``,
``partition_key`` and ``ttl`` columns place it (:data:`CONTROL_COLUMNS`).
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from pyspark.sql.datasource import DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import Row, StructType

from queuey.errors import ConfigurationError
from queuey.placement import partition_for_key
from queuey.settings import DEFAULTS
from queuey.spark.connections import StorageConnection
from queuey.spark.options import (
    NAME,
    application_option,
    connection_from_options,
    int_option,
    required_option,
)
from queuey.spark.sources import open_source
from queuey.storage import NewMessage, QueueMeta

log = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 100
#: A batch never holds more than the service accepts by default.
MAX_BATCH_SIZE = int(DEFAULTS["queuey.max_batch_messages"])
#: Row columns that place a written message instead of being part of it.
CONTROL_COLUMNS = ("partition", "partition_key", "ttl")


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


_round_robin = random.randrange(1 << 16)


def _next_partition(partitions: int) -> int:
    """Spread rows without a partition evenly (the API picks at random)."""
    global _round_robin
    _round_robin += 1
    return _round_robin % partitions + 1


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
        self.application = application_option(options, self.connection)
        self.queue = required_option(options, "queue")
        self.batch_size = int_option(options, "batchSize", DEFAULT_BATCH_SIZE, 1, MAX_BATCH_SIZE)
        self.ttl = int_option(options, "ttl", None, 1)
        self.columns = [f.name for f in schema.fields]
        self.has_body = "body" in self.columns
        if isinstance(self.connection, StorageConnection):
            settings = {**DEFAULTS, **self.connection.settings_dict()}
            self.max_ttl = int(settings["queuey.max_ttl"])
            self.max_size = int(settings["queuey.max_message_size"])
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
                partition_for_key(str(key), meta.partitions)
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
