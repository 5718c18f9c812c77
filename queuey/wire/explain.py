"""``GET /queue/{name}/messages/{id}/explain``: whether a message is handed out
to a subscription now and, if not, every reason (docs/api.rst, "Explain a
message"; :mod:`queuey.core.explain`). Times are seconds since the epoch."""

from __future__ import annotations

from datetime import UTC, datetime
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


#: Each reason in words, formed from its values (``describe``).
_WORDS = {
    "acknowledged": "acknowledged: finished in this subscription",
    "dead_lettered": "dead-lettered to {dead_letter_queue} after {attempts} attempt(s); "
    "last error: {last_error!r}",
    "dead_lettering": "being moved to the dead-letter queue",
    "leased": "leased to a consumer (attempt {attempts})",
    "released": "released by a consumer (attempt {attempts}), available again later",
    "passed": "passed: finished in this subscription, its record since reused",
    "delayed": "delayed",
    "filtered": "refused by the subscription's filter: {attribute} is {value!r}, "
    "which meets none of {conditions}",
    "out_of_attempts": "out of attempts ({attempts} of {max_attempts}): the next reserve "
    "dead-letters it; last error: {last_error!r}",
    "subscription_paused": "the subscription is paused",
    "max_in_flight": "the subscription has {in_flight} messages in flight, its max_in_flight",
    "rate": "the subscription's rate of {rate} a second has no message to spare",
    "fair_lane": "in the lane of busy groups (group {group}): quiet groups' messages go first",
    "expired": "expired: the queue's ttl ({ttl} s) has passed",
}


def describe(reason: ExplainReason) -> str:
    """A reason in one line of words, with the time it lasts until (UTC)."""
    values = dict(reason.values)
    if reason.reason == "filtered" and "attribute" not in values:
        text = "refused by the subscription's filter: the message has no attributes"
    else:
        try:
            text = _WORDS.get(reason.reason, reason.reason).format(**values)
        except (KeyError, IndexError, ValueError):
            text = reason.reason
    if reason.until_timestamp is not None:
        moment = datetime.fromtimestamp(reason.until_timestamp, UTC)
        text += f" until {moment.isoformat(timespec='seconds')}"
    return text
