"""A queue: its registration and the settings that may change."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from queuey.errors import InvalidUpdate

Order = Literal["ascending", "descending"]


QueueType = Literal["public", "private"]


Consistency = Literal["weak", "strong", "very_strong"]


@dataclass(frozen=True)
class QueueMeta:
    """A queue's registration.

    ``incarnation`` changes when the queue is purged or re-created, so that old
    messages become unreachable in O(1) and are left to expire.
    """

    application: str
    name: str
    partitions: int = 1
    ttl: int = 259200
    type: QueueType = "public"
    consistency: Consistency = "strong"
    created: int = 0  # microseconds since the epoch
    incarnation: str = field(default_factory=lambda: uuid.uuid4().hex)
    #: Work-queue settings: seconds a reservation lasts unless extended.
    visibility_timeout: int = 30
    #: Deliveries after which an unacknowledged message is dead-lettered (0: never).
    max_attempts: int = 0
    #: The queue dead letters go to; ``None`` means ``<name>-dead``.
    dead_letter_queue: str | None = None
    #: Default delivery delay, seconds, for messages posted without one.
    delay: int = 0
    #: First in, first out: a subscription gets a partition's messages strictly
    #: in order, one batch in flight at a time (see :meth:`Storage.reserve`).
    #: Set at creation, never changed.
    fifo: bool = False
    #: Free-form string settings kept with the queue and returned as given
    #: (the SQS endpoint keeps its queue attributes and tags here, under
    #: ``sqs.`` keys). ``update_queue(attributes=...)`` replaces the whole map;
    #: ``attributes_set`` / ``attributes_removed`` change only the named keys.
    attributes: Mapping[str, str] = field(default_factory=dict)

    @property
    def dead_letter_name(self) -> str:
        return self.dead_letter_queue or self.name + "-dead"

    @property
    def partition_numbers(self) -> list[int]:
        """Every partition of the queue, 1 to ``partitions``."""
        return list(range(1, self.partitions + 1))


UPDATABLE_QUEUE_FIELDS = (
    "partitions",
    "ttl",
    "type",
    "consistency",
    "visibility_timeout",
    "max_attempts",
    "dead_letter_queue",
    "delay",
    "attributes",
)


class AttributesChanged(InvalidUpdate):
    """An ``update_queue(attributes_if=...)`` whose condition no longer held:
    nothing was changed."""


def merge_attributes(
    current: Mapping[str, str],
    replaced: Mapping[str, str] | None,
    attributes_set: Mapping[str, str] | None,
    attributes_removed: Iterable[str],
    attributes_if: Mapping[str, str | None] | None,
) -> dict[str, str]:
    """The attribute map ``update_queue`` stores: ``replaced`` (or ``current``)
    with ``attributes_set`` put and ``attributes_removed`` dropped.

    ``attributes_if`` is checked against ``current`` (what is stored now): each
    key must hold exactly that value (``None``: be absent), or
    :class:`AttributesChanged` is raised. Backends call this inside their atomic
    write, so concurrent changes of different keys all survive.
    """
    for key, expected in (attributes_if or {}).items():
        if current.get(key) != expected:
            raise AttributesChanged(f"queue attribute {key} changed")
    merged = dict(current if replaced is None else replaced)
    merged.update(attributes_set or {})
    for key in attributes_removed:
        merged.pop(key, None)
    return merged
