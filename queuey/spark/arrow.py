"""Rows: stored messages as Arrow record batches of a DataFrame's schema.

Known columns (``MESSAGE_COLUMNS``) come from the message; every other column
is the body field of that name. Columns are built whole, so Spark receives
Arrow data without a per-row conversion.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any

import numpy as np
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
from queuey.model import MessagePage
from queuey.spark.columns import page_bodies, page_hex, page_micros

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


Column = Callable[[MessagePage, "list[Any] | None"], pa.Array]


def _column(name: str, dtype: DataType, target: pa.DataType, queue: str) -> Column:
    """How one column of ``schema`` is built from a page (and its parsed bodies)."""
    if name == "message_id":
        return lambda page, bodies: page_hex(page.ids)
    if name in ("timestamp", "timestamp_micros"):
        if isinstance(dtype, TimestampType | LongType):
            return lambda page, bodies: pa.array(page_micros(page.ids), type=target)
        if isinstance(dtype, DoubleType):
            return lambda page, bodies: pa.array(page_micros(page.ids) / ids.MICROS, type=target)
        raise ConfigurationError(
            "schema", f"{name} must be TIMESTAMP, DOUBLE or BIGINT, not {dtype}"
        )
    if name == "partition":
        return lambda page, bodies: pa.array(np.full(len(page), page.partition, np.int32))
    if name == "body":
        return lambda page, bodies: page_bodies(page.bodies)
    if name == "queue":
        return lambda page, bodies: pa.array([queue] * len(page), type=pa.string())
    return lambda page, bodies: pa.array(
        [_coerce(b.get(name), dtype) if isinstance(b, dict) else None for b in bodies or ()],
        type=target,
    )


def batch_builder(schema: StructType, queue: str) -> Callable[[MessagePage], pa.RecordBatch]:
    """A function turning a page of stored messages into an Arrow record batch.

    Known columns (``MESSAGE_COLUMNS``) come from the message; every other
    column is the body field of that name (``None`` when absent or of another
    type). ``timestamp`` may be declared TIMESTAMP (exact to the microsecond),
    DOUBLE (seconds) or BIGINT (microseconds). The message columns are built
    whole from the page's bytes (no Python object per row); only body fields
    parse each body.
    """
    target = arrow_schema(schema)
    columns = [
        _column(f.name, f.dataType, t.type, queue)
        for f, t in zip(schema.fields, target, strict=True)
    ]
    needs_body = any(f.name not in MESSAGE_COLUMNS for f in schema.fields)

    def build(page: MessagePage) -> pa.RecordBatch:
        bodies = [json.loads(b) for b in page.bodies] if needs_body else None
        arrays = [column(page, bodies) for column in columns]
        return pa.RecordBatch.from_arrays(arrays, schema=target)

    return build
