"""Positions: where a read starts or ends within one queue partition.

A position is what a streaming offset holds for a partition and what bounds a
:class:`~queuey.spark.slices.Slice`: a message id (32 hex digits, meaning
"strictly after this message") or an integer number of microseconds ``T``
(meaning "every message with a timestamp up to and including ``T``").
"""

from __future__ import annotations

import uuid
from typing import Any

from queuey import ids

Position = str | int


def position_key(position: Position) -> tuple[int, bytes]:
    """Sort key of a position in id order (an int ``T`` sorts after every id at ``T``)."""
    if isinstance(position, int):
        return (ids.max_uuid(position).time, b"")
    return ids.order_key(uuid.UUID(position))


def check_position(value: Any) -> Position:
    """A position from an offset or an option; raises ``ValueError`` otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"not a position: {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"not a position: {value!r}")
        return value
    if isinstance(value, str):
        return ids.parse_id(value).hex
    raise ValueError(f"not a position: {value!r}")
