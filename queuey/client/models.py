"""The client's value objects: queues and messages as the HTTP API describes them.

Each is a frozen dataclass built from (or turned into) the API's JSON, so the
rest of the library never handles raw answer dicts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any


def given(**values: Any) -> dict[str, Any]:
    """The keyword arguments that are not ``None``, in order: optional API fields."""
    return {name: value for name, value in values.items() if value is not None}


@dataclass(frozen=True)
class QueueInfo:
    """A queue's metadata. ``created`` is seconds since the epoch."""

    name: str
    partitions: int
    created: float
    type: str
    ttl: int

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> QueueInfo:
        return cls(
            name=data["queue_name"],
            partitions=int(data["partitions"]),
            created=data.get("created", 0),
            type=data.get("type", "public"),
            ttl=data.get("ttl"),
        )


@dataclass(frozen=True)
class PostedMessage:
    """Where a posted message was stored."""

    message_id: str
    timestamp: float
    partition: int

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PostedMessage:
        return cls(data["message_id"], data["timestamp"], int(data["partition"]))


@dataclass(frozen=True)
class OutgoingMessage:
    """A message for :meth:`QueueyClient.post_batch`."""

    body: dict
    partition: int | None = None
    partition_key: str | None = None
    ttl: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "body": self.body,
            **given(partition=self.partition, partition_key=self.partition_key, ttl=self.ttl),
        }


@dataclass(frozen=True)
class ReceivedMessage:
    """A message as read from a queue."""

    message_id: str
    timestamp: float
    partition: int
    body: dict

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ReceivedMessage:
        return cls(data["message_id"], data["timestamp"], int(data["partition"]), data["body"])

    @property
    def ref(self) -> str:
        """``partition:message_id``, as :meth:`QueueyClient.get_messages` takes it."""
        return f"{self.partition}:{self.message_id}"


def timestamp_param(value: float | int | str | Decimal) -> str:
    """A timestamp as the exact decimal text ``since_timestamp`` expects.

    A float's ``repr`` is the shortest text that reads back as the same
    double, which for a timestamp from the service is its 6-decimal value.
    """
    if isinstance(value, float):
        return repr(value)
    return str(value)
