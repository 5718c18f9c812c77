"""What a work-queue call asks of a backend, as one value.

:meth:`queuey.storage.Storage.reserve` (and ``release``, ``extend``) keeps
the interface's keyword arguments; it bundles them here and hands the bundle
to the backend's ``reserve_ask`` (``release_ask``, ``extend_ask``) and down
its layers, so the long argument lists are written in the interface only and
a new argument reaches every layer by one field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from queuey.errors import InvalidUpdate
from queuey.model import UPDATABLE_QUEUE_FIELDS, QueueMeta, merge_attributes


@dataclass(frozen=True)
class ReserveAsk:
    """The arguments of :meth:`queuey.storage.Storage.reserve` after the queue
    and subscription (their meaning is documented there)."""

    partitions: Sequence[int]
    limit: int
    visibility_timeout: int
    now_micros: int
    settled_micros: int
    max_in_flight: int = 0


@dataclass(frozen=True)
class ReleaseAsk:
    """The arguments of :meth:`queuey.storage.Storage.release` after the queue
    and subscription."""

    receipts: Sequence[str]
    now_micros: int
    delay: int = 0
    error: str | None = None


@dataclass(frozen=True)
class ExtendAsk:
    """The arguments of :meth:`queuey.storage.Storage.extend` after the queue
    and subscription."""

    receipts: Sequence[str]
    now_micros: int
    visibility_timeout: int


@dataclass(frozen=True)
class QueueChange:
    """The arguments of :meth:`queuey.storage.Storage.update_queue` after the
    application and name; :meth:`apply` is the rule every backend runs on the
    row it read, inside its atomic write."""

    changes: Mapping[str, Any]
    attributes_set: Mapping[str, str] | None = None
    attributes_removed: Sequence[str] = ()
    attributes_if: Mapping[str, str | None] | None = None

    def __post_init__(self) -> None:
        unknown = set(self.changes) - set(UPDATABLE_QUEUE_FIELDS)
        if unknown:
            raise InvalidUpdate(f"cannot change {', '.join(sorted(unknown))}")

    def apply(self, current: QueueMeta) -> QueueMeta:
        """``current`` changed: fields given as ``None`` kept, attribute keys
        merged (:func:`~queuey.model.merge_attributes`, which checks
        ``attributes_if``), partitions only grown."""
        given = {key: value for key, value in self.changes.items() if value is not None}
        if given.get("partitions", current.partitions) < current.partitions:
            raise InvalidUpdate(
                f"partitions may only grow ({current.partitions} -> {given['partitions']})"
            )
        attributes = merge_attributes(
            current.attributes,
            self.changes.get("attributes"),
            self.attributes_set,
            self.attributes_removed,
            self.attributes_if,
        )
        return replace(current, **{**given, "attributes": attributes})
