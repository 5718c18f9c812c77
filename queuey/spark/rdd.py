"""Queues as RDDs: ``queue_rdd(sc, connection, application, queues, ...)``.

The RDD has one Spark partition per queue partition and time slice. Planning
needs the store (the queue's metadata and where each partition's messages
lie), so it runs as a small Spark job of one task per queue: the driver process
itself never opens a storage connection, and the executor that planned keeps
its connection for the reads that follow.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, NamedTuple, TypedDict, Unpack

from queuey import ids
from queuey.clock import SYSTEM_CLOCK
from queuey.spark.columns import page_hex, page_micros
from queuey.spark.connections import Connection
from queuey.spark.slices import DEFAULT_PAGE_SIZE, Plan, Slice, plan_slices, read_pages

if TYPE_CHECKING:
    from pyspark import RDD, SparkContext

#: A time bound: seconds since the epoch (number or decimal text) or an aware datetime.
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


def read_messages(piece: Slice) -> Iterator[QueueMessage]:
    """The messages of one slice as :class:`QueueMessage` records (runs on executors)."""
    name = piece.queue.name
    for page in read_pages(piece):
        seconds = (page_micros(page.ids) / ids.MICROS).tolist()
        hexes = page_hex(page.ids).to_pylist()
        for message_id, timestamp, body in zip(hexes, seconds, page.bodies, strict=True):
            yield QueueMessage(message_id, timestamp, page.partition, body.decode(), name)


class QueueRead(TypedDict, total=False):
    """The keyword arguments of :func:`queue_rdd` and :func:`plan` (see :func:`queue_rdd`)."""

    partitions: Sequence[int] | Mapping[str, Sequence[int]] | None
    since: TimeLike | None
    until: TimeLike | None
    now: TimeLike | None
    slices_per_partition: int | None
    min_partitions: int | None
    page_size: int


def plan(
    sc: SparkContext,
    connection: Connection,
    application: str,
    queues: str | Sequence[str],
    **read: Unpack[QueueRead],
) -> list[Slice]:
    """The slices :func:`queue_rdd` would read (planned by a one-task-per-queue job)."""
    unknown = sorted(read.keys() - QueueRead.__annotations__.keys())
    if unknown:
        raise TypeError(f"unexpected keyword argument {unknown[0]!r}")
    names = [queues] if isinstance(queues, str) else list(queues)
    if not names:
        raise ValueError("give at least one queue")
    now, since, until = read.get("now"), read.get("since"), read.get("until")
    now_micros = ids.to_micros(now) if now is not None else SYSTEM_CLOCK.now_micros()
    min_partitions = read.get("min_partitions")
    if min_partitions is None:
        min_partitions = 2 * sc.defaultParallelism
    partitions = read.get("partitions")
    plans = []
    for name in names:
        wanted = partitions.get(name) if isinstance(partitions, Mapping) else partitions
        plans.append(
            Plan(
                connection=connection,
                application=application,
                queue=name,
                partitions=tuple(sorted(set(wanted))) if wanted else None,
                since_micros=ids.to_micros(since) if since is not None else None,
                until_micros=ids.to_micros(until) if until is not None else None,
                now_micros=now_micros,
                slices_per_partition=read.get("slices_per_partition"),
                min_slices=min_partitions,
                page_size=read.get("page_size", DEFAULT_PAGE_SIZE),
            )
        )
    return sc.parallelize(plans, len(plans)).flatMap(plan_slices).collect()


def queue_rdd(
    sc: SparkContext,
    connection: Connection,
    application: str,
    queues: str | Sequence[str],
    **read: Unpack[QueueRead],
) -> RDD[QueueMessage]:
    """An RDD of the live messages of one or several queues.

    ``connection``: a :class:`~queuey.spark.connections.StorageConnection`
    (executors build their own backend from its settings) or an
    :class:`~queuey.spark.connections.HttpConnection` (executors page through
    the API). Keyword arguments, all optional (:class:`QueueRead`):

    ``partitions``: the queue partitions to read (a list for every queue, or a
    dict by queue name); default all. ``since`` / ``until``: only messages with
    ``since < timestamp <= until`` (seconds since the epoch, decimal text or an
    aware datetime), so consecutive ranges tile time exactly. ``now``: the
    instant expiry is judged at (default: now, on the driver). Messages newer
    than ``now`` minus the store's read delay are left out: they may not be
    final yet. ``slices_per_partition``: time slices each queue partition is
    split into; by default each queue gets at least ``min_partitions`` slices
    (default twice ``sc.defaultParallelism``) spread over its partitions that
    hold messages. ``page_size``: rows per storage read (or HTTP request, at
    most 1000; default 1000).

    Within a Spark partition records are in id order; the RDD as a whole is not
    sorted.
    """
    pieces = plan(sc, connection, application, queues, **read)
    if not pieces:
        return sc.emptyRDD()
    return sc.parallelize(pieces, len(pieces)).flatMap(read_messages)
