"""Streaming reads: micro-batches with one offset per queue partition.

An offset is ``{"<partition>": <position>}`` (:mod:`queuey.spark.positions`):
the last message id consumed there (32 hex digits) or a timestamp in
microseconds up to which everything is consumed, so a query resumes exactly
where its checkpoint says.

Spark 4.0's Python streaming API has no admission-control hook (``latestOffset``
is not told where the batch starts), so the reader learns its position from the
calls Spark does make: ``partitions(start, end)`` (Spark replays the last
planned offsets through it when a query restarts) and ``commit``. Before it
knows, it counts from the initial offset. ``latestOffset`` itself never changes
that state, because Spark also calls it just to report progress.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from queuey.errors import ConfigurationError
from queuey.spark.batch import SlicePartition, read_batches
from queuey.spark.options import NAME, ReadOptions
from queuey.spark.positions import Position, check_position, position_key
from queuey.spark.slices import DEFAULT_PAGE_SIZE, Slice
from queuey.spark.sources import Source, open_source, read_forward
from queuey.storage import QueueMeta, ReadQuery

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


def _final_after(partition: int, position: Position, now: int, cutoff: int) -> ReadQuery | None:
    """The read of the final messages after ``position`` (None when there can be none)."""
    after_id = after_micros = None
    if isinstance(position, int):
        if position >= cutoff:
            return None
        after_micros = position
    else:
        after_id = uuid.UUID(position)
    return ReadQuery(
        partitions=(partition,),
        now_micros=now,
        order="ascending",
        after_id=after_id,
        after_micros=after_micros,
        until_micros=cutoff,
    )


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

    def _source(self) -> Source:
        return open_source(self.options.connection)

    def _meta(self) -> QueueMeta:
        return self._source().queue(self.options.application, self.queue_name)

    def _partitions(self, meta: QueueMeta) -> list[int]:
        wanted = self.options.partitions
        if wanted is None:
            return meta.partition_numbers
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
        end = dict(self._position if self._position is not None else self._positions_initial())
        parts = self._partitions(meta)
        for p in parts:
            end.setdefault(p, 0)
        cutoff = self._cutoff()
        now = source.now_micros()
        limit = self.options.max_messages_per_trigger
        if limit is None:
            for p in parts:
                query = _final_after(p, end[p], now, cutoff)
                if query is None:
                    continue
                newest = source.read(meta, replace(query, limit=1, order="descending"))
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
        source: Source,
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
                query = _final_after(p, end[p], now, cutoff)
                page = (
                    list(read_forward(source, meta, query, DEFAULT_PAGE_SIZE, take))
                    if query is not None
                    else []
                )
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
        return read_batches(partition.piece, self.schema)  # type: ignore[attr-defined]

    def commit(self, end: Mapping[str, Any]) -> None:
        if self._position is None:
            self._position = _positions(end)
