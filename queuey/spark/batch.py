"""Batch reads: one Spark input partition per queue partition and time slice.

:class:`QueueyReader` plans the slices (:mod:`queuey.spark.slices`) in Spark's
planner process; each input partition is read on an executor as Arrow record
batches (:func:`read_batches`), which the streaming reader uses too.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from queuey.spark.arrow import batch_builder
from queuey.spark.columns import keep_ids
from queuey.spark.options import ReadOptions
from queuey.spark.pushdown import Selection, push_filters
from queuey.spark.slices import Plan, Slice, plan_slices, read_pages


class SlicePartition(InputPartition):
    """One Spark input partition: one or more :class:`~queuey.spark.slices.Slice`, read in turn."""

    def __init__(self, piece: Slice, *more: Slice) -> None:
        super().__init__((piece, *more))
        self.pieces = (piece, *more)

    @property
    def piece(self) -> Slice:
        """The first (for a streaming batch, the only) slice."""
        return self.pieces[0]


class EmptyPartition(InputPartition):
    """The input partition of a read that found nothing (Spark wants at least one)."""

    def __init__(self) -> None:
        super().__init__(None)


def read_batches(
    piece: Slice, schema: StructType, message_ids: frozenset[str] | None = None
) -> Iterator[Any]:
    """The slice's messages as Arrow record batches, one per page the store sends.

    ``message_ids``: only these (a pushed-down filter on ``message_id``).
    """
    build = batch_builder(schema, piece.queue.name)
    wanted = pa.array(sorted(message_ids), type=pa.string()) if message_ids is not None else None
    for page in read_pages(piece):
        if wanted is not None:
            page = keep_ids(page, wanted)
            if page is None:
                continue
        yield build(page)


def group_slices(pieces: Sequence[Slice], tasks: int) -> list[SlicePartition]:
    """``pieces`` dealt round robin into at most ``tasks`` input partitions.

    Fewer, larger tasks cost Spark less per message than one task per slice
    (each task is scheduled, ships the reader and starts a Python read); a
    queue cut finer than the session's parallelism gains nothing from more.
    """
    tasks = max(1, min(tasks, len(pieces)))
    return [SlicePartition(*pieces[i::tasks]) for i in range(tasks) if pieces[i::tasks]]


class QueueyReader(DataSourceReader):
    """Batch reads: queue partition x time slice input partitions."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.selection = Selection()

    def pushFilters(self, filters: list[Any]) -> Iterable[Any]:  # noqa: N802 (Spark's name)
        """Keep the filters the store's layout answers (PySpark 4.1+; see :mod:`.pushdown`)."""
        self.selection, remaining = push_filters(filters, self.schema)
        return remaining

    def partitions(self) -> Sequence[InputPartition]:
        o, chosen = self.options, self.selection
        if chosen.empty:
            return [EmptyPartition()]
        pieces: list[Slice] = []
        for queue in o.queues:
            if not chosen.allows_queue(queue):
                continue
            pieces += plan_slices(
                Plan(
                    connection=o.connection,
                    application=o.application,
                    queue=queue,
                    partitions=o.partitions,
                    since_micros=chosen.since(o.since_micros),
                    until_micros=chosen.until(o.until_micros),
                    now_micros=o.now_micros,
                    slices_per_partition=o.slices_per_partition,
                    min_slices=o.min_partitions,
                    page_size=o.page_size,
                    partition_filter=chosen.allows_partition,
                )
            )
        if not pieces:
            return [EmptyPartition()]
        if o.slices_per_partition is not None:
            return [SlicePartition(p) for p in pieces]
        return group_slices(pieces, o.min_partitions * len(o.queues))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if isinstance(partition, EmptyPartition):
            return iter(())
        return (
            batch
            for piece in partition.pieces  # type: ignore[attr-defined]
            for batch in read_batches(piece, self.schema, self.selection.message_ids)
        )
