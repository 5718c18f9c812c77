"""Rows: stored messages as Arrow record batches of a DataFrame's schema.

Known columns (``MESSAGE_COLUMNS``) come from the message; every other column
is the body field of that name. Columns are built whole, so Spark receives
Arrow data without a per-row conversion.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from queuey import ids
from queuey.errors import ConfigurationError
from queuey.storage import Message

DEFAULT_SCHEMA = StructType(
    [
        StructField("message_id", StringType()),
        StructField("timestamp", TimestampType()),
        StructField("partition", IntegerType()),
        StructField("body", StringType()),
        StructField("queue", StringType()),
    ]
)
#: Columns a read fills from the message itself; any other column is a body field.
MESSAGE_COLUMNS = ("message_id", "timestamp", "timestamp_micros", "partition", "body", "queue")


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
            return ids.micros_to_datetime(ids.to_micros(value))
        return None
    return value


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark expects for ``schema`` (timestamps in UTC).

    PySpark 4.1 made the zone of timestamp columns an argument; 4.0 fixed it.
    """
    if "timezone" in inspect.signature(to_arrow_schema).parameters:
        return to_arrow_schema(schema, timezone="UTC")
    return to_arrow_schema(schema)


def batch_builder(schema: StructType, queue: str) -> Callable[[Sequence[Message]], Any]:
    """A function turning a page of stored messages into an Arrow record batch.

    Known columns (``MESSAGE_COLUMNS``) come from the message; every other
    column is the body field of that name (``None`` when absent or of another
    type). ``timestamp`` may be declared TIMESTAMP (exact to the microsecond),
    DOUBLE (seconds) or BIGINT (microseconds). Columns are built whole, so
    Spark receives Arrow data without a per-row conversion.
    """
    target = arrow_schema(schema)
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
            for column, field in zip(columns, target, strict=True)
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=target)

    return build
