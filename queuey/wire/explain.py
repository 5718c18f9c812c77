"""``GET /queue/{name}/messages/{id}/explain``: whether a message is handed out
to a subscription now and, if not, every reason (docs/api.rst, "Explain a
message"; :mod:`queuey.core.explain`). Times are seconds since the epoch."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from queuey.wire.record import MessageId, Record


class ExplainReason(Record):
    reason: str = Field(
        description="acknowledged, dead_lettered, dead_lettering, leased, released, passed, "
        "delayed, filtered, out_of_attempts, subscription_paused, max_in_flight, rate, "
        "fair_lane or expired"
    )
    blocking: bool = Field(description="it holds the message back now")
    until_timestamp: float | None = Field(None, description="when it ends by itself")
    values: dict[str, Any] = Field(description="the reason's figures (attempts, last_error, ...)")


class ExplainAnswer(Record):
    status: Literal["ok"]
    message_id: MessageId
    subscription: str
    partition: int | None = Field(description="null: the message expired")
    state: str = Field(
        description="new, passed, leased, released, claimed, acked, dead_lettered or expired"
    )
    attempts: int
    deliverable: bool = Field(description="no reason holds it back: a reserve may hand it out")
    expires_timestamp: float | None
    reasons: list[ExplainReason]
