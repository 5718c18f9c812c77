"""Batch reads: one Spark input partition per queue partition and time slice.

:class:`QueueyReader` plans the slices (:mod:`queuey.spark.slices`) in Spark's
planner process; each input partition is read on an executor as Arrow record
batches (:func:`read_batches`), which the streaming reader uses too.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from queuey.spark.arrow import batch_builder
from queuey.spark.options import ReadOptions
from queuey.spark.slices import Plan, Slice, plan_slices, read_slice
from queuey.storage import Message


class SlicePartition(InputPartition):
    """One Spark input partition: a :class:`~queuey.spark.slices.Slice`."""

    def __init__(self, piece: Slice) -> None:
        super().__init__(piece)
        self.piece = piece


class EmptyPartition(InputPartition):
    """The input partition of a read that found nothing (Spark wants at least one)."""

    def __init__(self) -> None:
        super().__init__(None)


def read_batches(piece: Slice, schema: StructType) -> Iterator[Any]:
    """The slice's messages as Arrow record batches of up to ``page_size`` rows."""
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
        return [SlicePartition(p) for p in pieces] or [EmptyPartition()]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if isinstance(partition, EmptyPartition):
            return iter(())
        return read_batches(partition.piece, self.schema)  # type: ignore[attr-defined]
