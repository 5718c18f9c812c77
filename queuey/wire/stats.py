"""``GET /queue/{name}/stats``: message counts per partition and per subscription
(approximate, docs/api.rst). Timestamps are seconds since the epoch."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from queuey.wire.record import Record


class PartitionStatsAnswer(Record):
    partition: int
    messages: int
    oldest_timestamp: float | None


class SubscriptionStatsAnswer(Record):
    subscription: str
    available: int
    in_flight: int
    delayed: int
    dead_lettered: int
    oldest_available_timestamp: float | None
    filter: dict[str, Any] | None = Field(None, description="its filter; counts are of matches")


class StatsAnswer(Record):
    status: Literal["ok"]
    queue_name: str
    messages: int
    oldest_timestamp: float | None
    partitions: list[PartitionStatsAnswer]
    subscriptions: list[SubscriptionStatsAnswer]
