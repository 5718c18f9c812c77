"""Queues as RDDs: ``queue_rdd(sc, connection, application, queues, ...)``.

The RDD has one Spark partition per queue partition and time slice. Planning
needs the store (the queue's metadata and where each partition's messages
lie), so it runs as a small Spark job of one task per queue: the driver process
itself never opens a storage connection, and the executor that planned keeps
its connection for the reads that follow.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from queuey.clock import SYSTEM_CLOCK
from queuey.spark.slices import (
    DEFAULT_PAGE_SIZE,
    Connection,
    Plan,
    QueueMessage,
    Slice,
    TimeLike,
    plan_slices,
    read_slice,
    to_micros,
    to_queue_message,
)

if TYPE_CHECKING:
    from pyspark import RDD, SparkContext


def read_messages(piece: Slice) -> Iterator[QueueMessage]:
    """The messages of one slice as :class:`QueueMessage` records (runs on executors)."""
    name = piece.queue.name
    for message in read_slice(piece):
        yield to_queue_message(message, name)


def plan(
    sc: SparkContext,
    connection: Connection,
    application: str,
    queues: str | Sequence[str],
    *,
    partitions: Sequence[int] | Mapping[str, Sequence[int]] | None = None,
    since: TimeLike | None = None,
    until: TimeLike | None = None,
    now: TimeLike | None = None,
    slices_per_partition: int | None = None,
    min_partitions: int | None = None,
    page_size: int = DEFAULT_PAGE_SIZE,
) -> list[Slice]:
    """The slices :func:`queue_rdd` would read (planned by a one-task-per-queue job)."""
    names = [queues] if isinstance(queues, str) else list(queues)
    if not names:
        raise ValueError("give at least one queue")
    now_micros = to_micros(now) if now is not None else SYSTEM_CLOCK.now_micros()
    if min_partitions is None:
        min_partitions = 2 * sc.defaultParallelism
    plans = []
    for name in names:
        wanted = partitions.get(name) if isinstance(partitions, Mapping) else partitions
        plans.append(
            Plan(
                connection=connection,
                application=application,
                queue=name,
                partitions=tuple(sorted(set(wanted))) if wanted else None,
                since_micros=to_micros(since) if since is not None else None,
                until_micros=to_micros(until) if until is not None else None,
                now_micros=now_micros,
                slices_per_partition=slices_per_partition,
                min_slices=min_partitions,
                page_size=page_size,
            )
        )
    return sc.parallelize(plans, len(plans)).flatMap(plan_slices).collect()


def queue_rdd(
    sc: SparkContext,
    connection: Connection,
    application: str,
    queues: str | Sequence[str],
    *,
    partitions: Sequence[int] | Mapping[str, Sequence[int]] | None = None,
    since: TimeLike | None = None,
    until: TimeLike | None = None,
    now: TimeLike | None = None,
    slices_per_partition: int | None = None,
    min_partitions: int | None = None,
    page_size: int = DEFAULT_PAGE_SIZE,
) -> RDD[QueueMessage]:
    """An RDD of the live messages of one or several queues.

    ``connection``: a :class:`~queuey.spark.slices.StorageConnection` (executors
    build their own backend from its settings) or an
    :class:`~queuey.spark.slices.HttpConnection` (executors page through the
    API). ``partitions``: the queue partitions to read (a list for every queue,
    or a dict by queue name); default all. ``since`` / ``until``: only messages
    with ``since < timestamp <= until`` (seconds since the epoch, decimal text
    or an aware datetime), so consecutive ranges tile time exactly.
    ``now``: the instant expiry is judged at (default: now, on the driver).
    Messages newer than ``now`` minus the store's read delay are left out: they
    may not be final yet. ``slices_per_partition``: time slices each queue
    partition is split into; by default each queue gets at least
    ``min_partitions`` slices (default twice ``sc.defaultParallelism``) spread
    over its partitions that hold messages. ``page_size``: rows per storage
    read (or HTTP request, at most 1000).

    Within a Spark partition records are in id order; the RDD as a whole is not
    sorted.
    """
    pieces = plan(
        sc,
        connection,
        application,
        queues,
        partitions=partitions,
        since=since,
        until=until,
        now=now,
        slices_per_partition=slices_per_partition,
        min_partitions=min_partitions,
        page_size=page_size,
    )
    if not pieces:
        return sc.emptyRDD()
    return sc.parallelize(pieces, len(pieces)).flatMap(read_messages)
