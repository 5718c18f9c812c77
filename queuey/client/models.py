"""The client's value objects: queues and messages as the HTTP API describes them.

The records of answers are the service's own wire models (:mod:`queuey.wire`),
parsed with their ``from_json``; a client name is the wire record itself or a
thin subclass adding what the client needs. The rest of the library never
handles raw answer dicts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from decimal import Decimal
from typing import Any, ClassVar
from urllib.parse import quote

from pydantic import BaseModel, model_validator

from queuey.wire import (
    Message,
    MessageRef,
    PartitionStatsAnswer,
    QueueSettings,
    RedriveAnswer,
    StatsAnswer,
    SubscriptionStatsAnswer,
)
from queuey.wire import ReservedMessage as WireReservedMessage


def given(**values: Any) -> dict[str, Any]:
    """The keyword arguments that are not ``None``, in order: optional API fields."""
    return {name: value for name, value in values.items() if value is not None}


def known(values: Mapping[str, Any], names: Iterable[str], what: str) -> dict[str, Any]:
    """``values`` as a dict; ``TypeError`` naming each key not among ``names``."""
    unknown = set(values) - set(names)
    if unknown:
        raise TypeError(f"unknown {what}(s): {', '.join(sorted(unknown))}")
    return dict(values)


class HostCalls:
    """Calls mixed into :class:`~queuey.client.http.QueueyClient`: they go
    through its ``_request(method, path, *, params, json, repeatable,
    timeout)`` and read its ``timeout``."""

    timeout: float

    def _request(self, method: str, path: str, **kwargs: Any) -> dict:  # pragma: no cover
        raise NotImplementedError


class ByPosition(BaseModel):
    """Lets a record take its fields by position, in declared order (those in
    ``keyword_only`` left out), as the client's dataclasses did. Only for
    top-level answers: pydantic calls a custom ``__init__`` for nested ones."""

    keyword_only: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, *values: Any, **fields: Any) -> None:
        if values:
            names = [name for name in type(self).model_fields if name not in self.keyword_only]
            if len(values) > len(names):
                raise TypeError(f"{type(self).__name__} takes {len(names)} positional values")
            for name, value in zip(names, values, strict=False):
                if name in fields:
                    raise TypeError(f"{type(self).__name__} got {name!r} twice")
                fields[name] = value
        super().__init__(**fields)


class QueueInfo(ByPosition, QueueSettings):
    """A queue's metadata. ``created`` is seconds since the epoch; ``name`` is
    its ``queue_name``. By position its fields come in their old order, so
    ``consistency`` is given by name."""

    keyword_only = frozenset({"consistency"})

    @property
    def name(self) -> str:
        return self.queue_name


class PostedMessage(ByPosition, MessageRef):
    """Where a posted message was stored."""


@dataclass(frozen=True)
class OutgoingMessage:
    """A message for :meth:`QueueyClient.post_batch`.

    ``delay``: seconds before any reader sees it; ``priority``: 0-9, higher
    reserved first; ``dedup_id``: a second post of the same id to the queue
    within the service's dedup window stores nothing (the client sets one
    itself when it may retry, see :class:`QueueyClient`); ``attributes``:
    string keys to string values, returned on reads; ``group``: the message's
    group (fair queues serve quiet groups first).
    """

    body: dict
    partition: int | None = None
    partition_key: str | None = None
    ttl: int | None = None
    delay: int | None = None
    priority: int | None = None
    dedup_id: str | None = None
    attributes: Mapping[str, str] | None = None
    group: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The batch entry: ``body`` and every other field that is set."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        entry = {"body": self.body, **given(**values)}
        if self.attributes is not None:
            entry["attributes"] = dict(self.attributes)
        return entry


class ReceivedMessage(ByPosition, Message):
    """A message as read from a queue: ``priority`` is 0 when the answer has
    none, ``attributes`` and ``group`` are None when it has none. By position
    the fields come in their declared order, ``group`` only by name."""

    keyword_only = frozenset({"group"})
    priority: int = 0

    @model_validator(mode="before")
    @classmethod
    def _absent(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and not all(data.get(key, True) for key in _EMPTY):
            data = {key: value for key, value in data.items() if value or key not in _EMPTY}
        return data

    @property
    def ref(self) -> str:
        """``partition:message_id``, as :meth:`QueueyClient.get_messages` takes it."""
        return f"{self.partition}:{self.message_id}"


#: Fields an answer may send empty, read as absent.
_EMPTY = ("attributes", "group")


def path_segment(value: str) -> str:
    """``value`` quoted to be one segment of a URL path (a queue or consumer name)."""
    return quote(str(value), safe="")


def timestamp_param(value: float | int | str | Decimal) -> str:
    """A timestamp as the exact decimal text ``since_timestamp`` expects.

    A float's ``repr`` is the shortest text that reads back as the same
    double, which for a timestamp from the service is its 6-decimal value.
    """
    if isinstance(value, float):
        return repr(value)
    return str(value)


class ReservedMessage(WireReservedMessage, ReceivedMessage):
    """A message leased to this consumer by :meth:`QueueyClient.reserve`.

    ``attempts`` counts its deliveries in the subscription, this one included;
    ``receipt`` names this lease for ``ack`` / ``release`` / ``extend``. A job
    written for :class:`ReceivedMessage` takes one as well.
    """


@dataclass(frozen=True)
class ReceiptResult:
    """The answer of ``ack`` / ``release`` / ``extend``.

    ``done``: how many receipts took effect; ``failed``: the others, each
    ``"expired"`` (the message was reserved again, released or dead-lettered
    since) or ``"unknown"`` (a receipt the subscription never gave out).
    """

    done: int
    failed: dict[str, str]
    dead_lettered: int = 0  # of a release: messages that went to the dead-letter queue

    @property
    def ok(self) -> bool:
        return not self.failed


@dataclass(frozen=True)
class RedriveResult:
    """What ``redrive`` did: ``moved`` back into their subscription, ``reposted``
    to the source queue (the original was gone) or ``skipped`` (dead-letter
    message id -> why; those stay in the dead-letter queue)."""

    moved: int
    reposted: int
    skipped: dict[str, str]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RedriveResult:
        answer = RedriveAnswer.from_json(data)
        return cls(answer.moved, answer.reposted, dict(answer.skipped_messages))


class SubscriptionStats(ByPosition, SubscriptionStatsAnswer):
    """One subscription's counts (approximate, see the service docs)."""


class PartitionStats(ByPosition, PartitionStatsAnswer):
    """One partition's message count and oldest message."""


class QueueStats(ByPosition, StatsAnswer):
    """``GET /queue/{name}/stats``: message counts per partition and per
    subscription (the lists typed with the client's names)."""

    keyword_only = frozenset({"status"})
    partitions: list[PartitionStats]
    subscriptions: list[SubscriptionStats]

    @property
    def name(self) -> str:
        return self.queue_name

    def subscription(self, name: str = "default") -> SubscriptionStats | None:
        """The counts of subscription ``name``; None if it was never used."""
        return next((s for s in self.subscriptions if s.subscription == name), None)
