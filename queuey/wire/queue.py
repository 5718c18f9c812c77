"""A queue's and a subscription's settings as the API shows them.

Their flow settings are described beside the flow rules
(:mod:`queuey.web.answers` adds the ``flow`` field to these records).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from queuey.wire.record import Consistency, QueueType, Record


class QueueSettings(Record):
    queue_name: str
    partitions: int
    created: int = Field(description="seconds since the epoch")
    type: QueueType
    ttl: int
    consistency: Consistency
    visibility_timeout: int
    max_attempts: int
    dead_letter_queue: str
    delay: int


class SubscriptionFilter(Record):
    subscription: str
    filter: dict[str, Any] | None = Field(description="null: it takes every message")
