"""Filter push-down: the ``where`` clauses a read can answer from the store's layout.

PySpark 4.1+ hands a reader the conjunction of a query's simple filters
(``pyspark.sql.datasource.Filter`` objects). :func:`push_filters` turns those
on the message columns into a :class:`Selection`: which queues and
partitions to read, a time range, and message ids. A read then asks the store
only for that (time slices, partitions and queues are how it is laid out), so
a ``where`` on ``timestamp`` or ``partition`` no longer reads the whole queue.

A filter is *handled* (not given back to Spark) only when the read applies it
exactly; a filter that only narrows what is read (a ``DOUBLE`` timestamp,
which a float cannot carry to the microsecond; ``IN`` on timestamps) is given
back, and Spark applies it to what was read. Everything else is given back
untouched. The filter classes are matched by name, so this module imports on
PySpark 4.0, which has none of them.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from pyspark.sql.types import DataType, DoubleType, LongType, StringType, StructType, TimestampType

from queuey import ids

#: Comparisons a bound can be taken from, by filter class name.
_COMPARISONS = ("EqualTo", "GreaterThan", "GreaterThanOrEqual", "LessThan", "LessThanOrEqual")
#: Most message ids an ``IN`` filter is answered for (a longer list is left to Spark).
MAX_IDS = 10_000


@dataclass(frozen=True)
class Selection:
    """What a read's pushed filters select; ``None`` fields select everything.

    ``after_micros`` is exclusive and ``until_micros`` inclusive, like the
    ``since``/``until`` options. ``partition_low``/``partition_high`` bound
    the partition numbers (inclusive), ``partitions`` and ``queues`` list
    the only ones allowed, ``message_ids`` the only ids (32 hex digits).
    """

    queues: frozenset[str] | None = None
    partitions: frozenset[int] | None = None
    partition_low: int | None = None
    partition_high: int | None = None
    after_micros: int | None = None
    until_micros: int | None = None
    message_ids: frozenset[str] | None = None

    def allows_partition(self, partition: int) -> bool:
        if self.partitions is not None and partition not in self.partitions:
            return False
        if self.partition_low is not None and partition < self.partition_low:
            return False
        return self.partition_high is None or partition <= self.partition_high

    def allows_queue(self, queue: str) -> bool:
        return self.queues is None or queue in self.queues

    def since(self, since_micros: int | None) -> int | None:
        """The exclusive lower time bound: the option's and this selection's."""
        return _tighter(since_micros, self.after_micros, max)

    def until(self, until_micros: int | None) -> int | None:
        """The inclusive upper time bound: the option's and this selection's."""
        return _tighter(until_micros, self.until_micros, min)

    @property
    def empty(self) -> bool:
        """Nothing can match (contradictory filters)."""
        return bool(
            (self.partitions is not None and not self.partitions)
            or (self.queues is not None and not self.queues)
            or (self.message_ids is not None and not self.message_ids)
            or (
                self.after_micros is not None
                and self.until_micros is not None
                and self.until_micros <= self.after_micros
            )
            or (
                self.partition_low is not None
                and self.partition_high is not None
                and self.partition_high < self.partition_low
            )
        )


def _tighter(a: int | None, b: int | None, pick) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return pick(a, b)


def _intersect(current: frozenset | None, values: Iterable[Any]) -> frozenset:
    given = frozenset(values)
    return given if current is None else current & given


def _micros(value: Any, data_type: DataType) -> tuple[int, bool] | None:
    """A timestamp literal as (micros, exact); None when it cannot be read."""
    if isinstance(value, bool):
        return None
    if isinstance(data_type, TimestampType) and isinstance(value, datetime):
        if value.tzinfo is None:  # PySpark sends aware values; refuse to guess a zone
            return None
        return ids.to_micros(value), True
    if isinstance(data_type, LongType) and isinstance(value, int):
        return value, True
    if isinstance(data_type, DoubleType) and isinstance(value, int | float):
        if not math.isfinite(value):
            return None
        return math.floor(value * ids.MICROS), False
    return None


def _time_bound(selection: Selection, kind: str, micros: int, exact: bool) -> Selection:
    """``selection`` narrowed by ``timestamp <kind> micros``.

    An inexact bound (from a float) is widened by two microseconds so the
    range still holds every row Spark will keep.
    """
    slack = 0 if exact else 2
    after, until = selection.after_micros, selection.until_micros
    if kind in ("GreaterThan", "EqualTo"):
        after = _tighter(after, micros - (1 if kind == "EqualTo" else 0) - slack, max)
    if kind == "GreaterThanOrEqual":
        after = _tighter(after, micros - 1 - slack, max)
    if kind in ("LessThanOrEqual", "EqualTo"):
        until = _tighter(until, micros + slack, min)
    if kind == "LessThan":
        until = _tighter(until, micros - 1 + slack, min)
    return replace(selection, after_micros=after, until_micros=until)


def _message_ids(values: Sequence[Any]) -> tuple[frozenset[str], list[int]] | None:
    """The ids (as given) and the timestamps of those that can match our column."""
    if len(values) > MAX_IDS or not all(isinstance(v, str) for v in values):
        return None
    stamps = []
    for value in values:
        # The column holds 32 lower-case hex digits: other spellings match nothing.
        if len(value) == 32 and value == value.lower():
            try:
                parsed = uuid.UUID(hex=value)
            except ValueError:
                continue
            if parsed.version == 1:
                stamps.append(ids.micros_of(parsed))
    return frozenset(values), stamps


def push_filters(filters: Sequence[Any], schema: StructType) -> tuple[Selection, list[Any]]:
    """The selection ``filters`` (ANDed) make, and the filters Spark must still apply."""
    types = {f.name: f.dataType for f in schema.fields}
    selection = Selection()
    remaining: list[Any] = []
    for item in filters:
        kind = type(item).__name__
        attribute = getattr(item, "attribute", ())
        column = attribute[0] if len(attribute) == 1 else None
        value = getattr(item, "value", None)
        data_type = types.get(column) if column is not None else None
        handled = False
        if kind == "IsNotNull" and column in ("message_id", "timestamp", "partition", "queue"):
            handled = column in types  # never null
        elif column in ("timestamp", "timestamp_micros") and data_type is not None:
            if kind in _COMPARISONS:
                bound = _micros(value, data_type)
                if bound is not None:
                    selection = _time_bound(selection, kind, *bound)
                    handled = bound[1]
            elif kind == "In" and isinstance(value, list | tuple) and value:
                bounds = [_micros(v, data_type) for v in value]
                if all(b is not None for b in bounds):
                    stamps = [b[0] for b in bounds]  # type: ignore[index]
                    selection = _time_bound(selection, "GreaterThanOrEqual", min(stamps), False)
                    selection = _time_bound(selection, "LessThanOrEqual", max(stamps), False)
        elif column == "partition" and data_type is not None:
            handled = True
            if kind == "EqualTo" and _is_int(value):
                selection = replace(selection, partitions=_intersect(selection.partitions, [value]))
            elif kind == "In" and isinstance(value, list | tuple) and all(map(_is_int, value)):
                selection = replace(selection, partitions=_intersect(selection.partitions, value))
            elif kind in ("GreaterThan", "GreaterThanOrEqual") and _is_int(value):
                low = value + 1 if kind == "GreaterThan" else value
                selection = replace(
                    selection, partition_low=_tighter(selection.partition_low, low, max)
                )
            elif kind in ("LessThan", "LessThanOrEqual") and _is_int(value):
                high = value - 1 if kind == "LessThan" else value
                selection = replace(
                    selection, partition_high=_tighter(selection.partition_high, high, min)
                )
            else:
                handled = False
        elif column in ("message_id", "queue") and isinstance(data_type, StringType):
            values = [value] if kind == "EqualTo" else value if kind == "In" else None
            if isinstance(values, list | tuple) and values:
                if column == "queue" and all(isinstance(v, str) for v in values):
                    selection = replace(selection, queues=_intersect(selection.queues, values))
                    handled = True
                elif column == "message_id":
                    found = _message_ids(values)
                    if found is not None:
                        given, stamps = found
                        selection = replace(
                            selection, message_ids=_intersect(selection.message_ids, given)
                        )
                        if stamps:
                            selection = _time_bound(
                                selection, "GreaterThanOrEqual", min(stamps), True
                            )
                            selection = _time_bound(selection, "LessThanOrEqual", max(stamps), True)
                        else:
                            selection = replace(selection, message_ids=frozenset())
                        handled = True
        if not handled:
            remaining.append(item)
    return selection, remaining


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
