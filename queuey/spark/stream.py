"""Streaming reads: micro-batches with one offset per queue partition.

An offset is ``{"<partition>": <position>}`` (:mod:`queuey.spark.positions`):
the last message id consumed there (32 hex digits) or a timestamp in
microseconds up to which everything is consumed, so a query resumes exactly
where its checkpoint says.

How a batch's end is chosen depends on the PySpark release:

* PySpark 4.2+ calls ``latestOffset(start, limit)`` (admission control): the
  batch starts at ``start`` and admits what ``limit`` allows, so restarts and
  ``Trigger.AvailableNow`` (:meth:`QueueyStreamReader.prepareForTriggerAvailableNow`)
  need nothing else.
* PySpark 4.0 and 4.1 call ``latestOffset()`` without telling where the batch
  starts, so the reader learns its position from the calls Spark does make:
  ``partitions(start, end)`` (Spark replays the last planned offsets through
  it when a query restarts) and ``commit``. Before it knows, it counts from the
  initial offset. ``latestOffset`` itself never changes that state, because
  Spark also calls it just to report progress.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from queuey.errors import ConfigurationError
from queuey.limits import MAX_READ
from queuey.model import Message, QueueMeta, ReadQuery
from queuey.spark.batch import SlicePartition, read_batches
from queuey.spark.options import NAME, ReadOptions
from queuey.spark.positions import Position, check_position, position_key
from queuey.spark.slices import Slice
from queuey.spark.sources import Source, open_source, read_forward

try:  # PySpark 4.2+: admission control and Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxBytes,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # PySpark 4.0/4.1: Spark never asks for these
    ReadAllAvailable = ReadLimit = ReadMaxBytes = ReadMaxRows = None  # type: ignore[assignment,misc]

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stands in for PySpark 4.2's mixin, which older releases lack."""


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


def message_bytes(message: Message) -> int:
    """What a message weighs for ``maxBytesPerTrigger``: its body's UTF-8 length."""
    return len(message.body.encode("utf-8"))


@dataclass(frozen=True)
class Budget:
    """What one micro-batch may admit; ``None`` bounds nothing."""

    rows: int | None = None
    bytes: int | None = None

    @classmethod
    def from_options(cls, options: ReadOptions) -> Budget:
        """``maxMessagesPerTrigger`` and ``maxBytesPerTrigger``."""
        return cls(rows=options.max_messages_per_trigger, bytes=options.max_bytes_per_trigger)

    @property
    def bounded(self) -> bool:
        return self.rows is not None or self.bytes is not None


@dataclass(frozen=True)
class Target:
    """Where a ``Trigger.AvailableNow`` run stops: what was final when it began.

    ``cutoff`` bounds every later read; ``newest`` holds each partition's newest
    final message then, so a store whose clock lags ours (the HTTP API) cannot
    slip a later message in under the cutoff.
    """

    cutoff: int
    newest: dict[int, str]


class QueueyStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reads with one offset per queue partition.

    ``latestOffset`` only counts messages older than ``now - read_delay``,
    which are final: no message with a smaller id can appear later
    (invariant 2), so a batch's end offset is a true high-water mark.

    Read limits: :meth:`getDefaultReadLimit` hands Spark ``ReadMaxRows`` when
    ``maxMessagesPerTrigger`` is set, else ``ReadMaxBytes`` when
    ``maxBytesPerTrigger`` is, else ``ReadAllAvailable``. A Spark
    ``ReadLimit`` carries one bound, so the other option applies as well
    unless Spark passes ``ReadAllAvailable``, which lifts both.
    """

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        if len(options.queues) != 1:
            raise ConfigurationError(
                "queue", "a streaming read takes exactly one queue; union several streams"
            )
        self.options = options
        self.schema = schema
        self.queue_name = options.queues[0]
        self.budget = Budget.from_options(options)
        self._initial: dict[int, Position] | None = None
        #: PySpark 4.0/4.1 only: the end of the last batch Spark planned or
        #: committed (None until known).
        self._position: dict[int, Position] | None = None
        #: Set by ``prepareForTriggerAvailableNow``.
        self._target: Target | None = None

    # state kept out of pickles sent to executors
    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_initial"] = state["_position"] = state["_target"] = None
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
        cutoff = source.now_micros() - source.read_delay_micros
        if self._target is not None:
            cutoff = min(cutoff, self._target.cutoff)
        return cutoff

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

    def getDefaultReadLimit(self) -> ReadLimit:
        """The options' bound for Spark (PySpark 4.2+; see the class doc)."""
        if self.budget.rows is not None:
            return ReadMaxRows(self.budget.rows)
        if self.budget.bytes is not None:
            return ReadMaxBytes(self.budget.bytes)
        return ReadAllAvailable()

    def _budget(self, limit: ReadLimit | None) -> Budget:
        """The budget of a batch Spark asks for with ``limit``."""
        if limit is None or ReadLimit is None:
            return self.budget
        if isinstance(limit, ReadAllAvailable):
            return Budget()
        if isinstance(limit, ReadMaxRows):
            return replace(self.budget, rows=limit.max_rows)
        if isinstance(limit, ReadMaxBytes):
            return replace(self.budget, bytes=limit.max_bytes)
        return self.budget  # a limit this source never asks for: the options decide

    def latestOffset(
        self, start: Mapping[str, Any] | None = None, limit: ReadLimit | None = None
    ) -> Offset:
        """The end of the next batch: after ``start``, within ``limit``.

        PySpark 4.2+ passes both; PySpark 4.0/4.1 pass neither, and the batch
        then starts where the reader learned the query stands, within the
        options' budget.
        """
        source = self._source()
        meta = self._meta()
        if start is None:
            begin = dict(
                self._position if self._position is not None else self._initial_positions()
            )
        else:
            begin = _positions(start)
        parts = self._partitions(meta)
        for p in parts:
            begin.setdefault(p, 0)
        end = dict(begin)
        cutoff = self._cutoff()
        now = source.now_micros()
        budget = self._budget(limit)
        if budget.bounded:
            self._admit(source, meta, parts, end, now, cutoff, budget)
        else:
            for p in parts:
                newest = _newest_final(source, meta, p, end[p], now, cutoff)
                if newest is not None:
                    end[p] = newest
        if self._target is not None:
            for p, last in self._target.newest.items():
                if p in end and position_key(end[p]) > position_key(last):
                    end[p] = max(begin[p], last, key=position_key)
        return _offset(end)

    def prepareForTriggerAvailableNow(self) -> None:
        """Record what is final now: this run reads nothing beyond it.

        Later :meth:`latestOffset` calls admit batches within their limit until
        they reach it, then answer their ``start``, and Spark ends the query.
        """
        self._target = None
        source = self._source()
        meta = self._meta()
        cutoff = self._cutoff()
        now = source.now_micros()
        newest = {p: _newest_final(source, meta, p, 0, now, cutoff) for p in self._partitions(meta)}
        self._target = Target(cutoff, {p: m for p, m in newest.items() if m is not None})

    def reportLatestOffset(self) -> Offset:
        """The newest final message of each partition, for Spark's progress reports.

        One one-row read per partition each trigger. A partition holding no
        final message reports the cutoff in microseconds; under
        ``Trigger.AvailableNow`` the run's target is reported.
        """
        source = self._source()
        meta = self._meta()
        cutoff = self._cutoff()
        now = source.now_micros()
        latest: dict[int, Position] = {}
        for p in self._partitions(meta):
            newest = _newest_final(source, meta, p, 0, now, cutoff)
            if self._target is not None and p in self._target.newest:
                newest = self._target.newest[p]
            latest[p] = newest if newest is not None else cutoff - 1
        return _offset(latest)

    def _initial_positions(self) -> dict[int, Position]:
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
        budget: Budget,
    ) -> None:
        """Advance ``end`` within ``budget``, shared fairly by partition.

        Each round gives every partition with a backlog an equal share of the
        messages and bytes left; what a partition cannot use goes to the others
        in the next round. A partition may go over its byte share with the
        first message it takes in a round (within what the batch has left), and
        a batch admits at least one message, so one large message never stalls
        the stream. The reads touch at most the admitted messages plus one page
        per partition and round (``pageSize``, at most 1000 under a byte budget).
        """
        rows_left = budget.rows
        bytes_left = budget.bytes
        # A byte budget stops a read mid-page: smaller pages waste less.
        page_size = (
            self.options.page_size if bytes_left is None else min(self.options.page_size, MAX_READ)
        )
        admitted = 0
        active = list(parts)
        while active and rows_left != 0 and (bytes_left is None or bytes_left > 0):
            row_share = None if rows_left is None else max(1, rows_left // len(active))
            byte_share = None if bytes_left is None else max(1, bytes_left // len(active))
            still = []
            for p in active:
                if rows_left == 0 or (bytes_left is not None and bytes_left <= 0):
                    break
                take = None if row_share is None else min(row_share, rows_left)
                cap = None if byte_share is None else min(byte_share, bytes_left)
                query = _final_after(p, end[p], now, cutoff)
                if query is None:
                    continue
                rows = size = 0
                more = False  # stopped by the budget with messages left
                for message in read_forward(source, meta, query, page_size, take):
                    weight = message_bytes(message)
                    over = cap is not None and size + weight > cap
                    if over and rows:
                        more = True
                        break
                    if over and admitted and weight > bytes_left:
                        break  # blocked: this batch has no room for its next message
                    end[p] = message.id.hex
                    rows += 1
                    size += weight
                    admitted += 1
                    if over:
                        more = True  # over its share with its first message
                        break
                if rows_left is not None:
                    rows_left -= rows
                if bytes_left is not None:
                    bytes_left -= size
                if more or (take is not None and rows >= take):
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
                    "offset",
                    f"partition {p}: the batch would end ({stop}) before it starts ({first}). "
                    "On PySpark 4.0/4.1 Spark may ask for the latest offset before telling "
                    "the reader where the query stands (with spark.sql.streaming."
                    "triggerAvailableNowWrapper.enabled=true); run without "
                    "maxMessagesPerTrigger/maxBytesPerTrigger or without that setting, "
                    "or on PySpark 4.2+.",
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


def _newest_final(
    source: Source, meta: QueueMeta, partition: int, after: Position, now: int, cutoff: int
) -> str | None:
    """The id of the newest final message after ``after`` (None when there is none)."""
    query = _final_after(partition, after, now, cutoff)
    if query is None:
        return None
    newest = source.read(meta, replace(query, limit=1, order="descending"))
    return newest[0].id.hex if newest else None
