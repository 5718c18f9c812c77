"""Why a message is, or is not, handed out to a subscription now: what
``GET /queue/{name}/messages/{id}/explain``, the admin message page and
``queuey explain`` answer.

From the stored state, changing nothing: the live message (in the partition
given, else in each of the queue's), its state in the subscription
(:meth:`~queuey.storage.workstore.WorkQueueStore.message_state`: its lease,
release, dead-letter claim or end, else whether the subscription has come to
it), the subscription's filter, the queue's ``max_attempts``, and what flow
control would let a reserve lease now (:meth:`queuey.core.grants.Grants.holds`).
Every reason is a :class:`Reason` with its values; ``blocking`` reasons hold
the message back now, the others say where it stands in line. A message with
no blocking reason is *deliverable*: a reserve of the subscription may hand it
out now, after the messages ahead of it (higher priorities first, each
oldest first, those available again before new ones).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from queuey.core.fairness import BUSY_LANE
from queuey.core.grants import Grants
from queuey.errors import MessageNotFound
from queuey.ids import MICROS, micros_of
from queuey.model import Message, MessageRef, MessageState, QueueMeta
from queuey.model.flow import message_group, queue_flow
from queuey.model.subscriptions import filter_attributes, subscription_filter
from queuey.storage import Storage

#: The blocking reasons by the message's state (``leased``, ``released`` and
#: ``claimed`` only until their ``visible_at``), and the names they get.
_ENDED = {"acked": "acknowledged", "dead_lettered": "dead_lettered"}
_WAITING = {"leased": "leased", "released": "released", "claimed": "dead_lettering"}


@dataclass(frozen=True)
class Reason:
    """One reason: its name, whether it holds the message back now, the
    time it lasts until (microseconds) when it ends by itself, and its values."""

    reason: str
    blocking: bool = True
    until: int | None = None
    values: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Explanation:
    """A message's standing in a subscription: ``message`` is None when it
    expired; ``state`` is its :class:`~queuey.model.MessageState`'s, or
    ``expired``."""

    message_id: uuid.UUID
    subscription: str
    message: Message | None
    state: str
    attempts: int
    reasons: list[Reason]

    @property
    def deliverable(self) -> bool:
        return not any(reason.blocking for reason in self.reasons)


def explain(
    storage: Storage,
    grants: Grants,
    queue: QueueMeta,
    subscription: str,
    message_id: uuid.UUID,
    partition: int | None,
    now: int,
) -> Explanation:
    """Explain ``message_id`` in ``subscription`` as of ``now`` (microseconds).

    A message the queue no longer holds is ``expired`` when the queue's
    ttl has passed since its id's time; otherwise nothing tells a deleted
    message from one never posted, and :class:`MessageNotFound` says so."""
    partitions = [partition] if partition else queue.partition_numbers
    refs = [MessageRef(p, message_id) for p in partitions]
    # A delayed message is hidden from reads until its id's time: look then.
    found = storage.get_messages(queue, refs, max(now, micros_of(message_id)))
    if not found:
        expired_at = micros_of(message_id) + queue.ttl * MICROS
        if expired_at <= now:
            reason = Reason("expired", until=expired_at, values={"ttl": queue.ttl})
            return Explanation(message_id, subscription, None, "expired", 0, [reason])
        raise MessageNotFound(
            f"the queue holds no live message {message_id.hex}"
            " (deleted, expired by its own ttl, or never posted)"
        )
    message = found[0]
    state = storage.message_state(queue, subscription, message, now)
    reasons = _reasons(grants, queue, subscription, message, state, now)
    return Explanation(message_id, subscription, message, state.state, state.attempts, reasons)


def _reasons(
    grants: Grants,
    queue: QueueMeta,
    subscription: str,
    message: Message,
    state: MessageState,
    now: int,
) -> list[Reason]:
    attempts = {"attempts": state.attempts}
    if state.state in _ENDED:
        values = dict(attempts)
        if state.state == "dead_lettered":
            values.update(last_error=state.last_error, dead_letter_queue=queue.dead_letter_name)
        return [Reason(_ENDED[state.state], values=values)]
    if state.state in _WAITING and (state.visible_at > now or state.state == "claimed"):
        values = dict(attempts)
        if state.last_error:
            values["last_error"] = state.last_error
        until = state.visible_at if state.visible_at > now else None
        return [Reason(_WAITING[state.state], until=until, values=values)]
    refused = _filtered(queue, subscription, message)
    if state.state == "passed":
        # Behind the subscription with no record: its filter refused it, or it
        # was finished long ago and its record reused.
        return [refused or Reason("passed")]
    reasons: list[Reason] = []
    if message.timestamp > now:
        reasons.append(Reason("delayed", until=message.timestamp))
    if refused is not None:
        reasons.append(refused)
    if queue.max_attempts and state.attempts >= queue.max_attempts:
        values = {**attempts, "max_attempts": queue.max_attempts, "last_error": state.last_error}
        reasons.append(Reason("out_of_attempts", values=values))
    for name, values in grants.holds(queue, subscription):
        if name == "paused":
            reasons.append(Reason("subscription_paused"))
        elif name == "rate":
            until = now + round(values["retry_after"] * MICROS)
            reasons.append(Reason("rate", until=until, values=values))
        else:
            reasons.append(Reason(name, values=values))
    group = message_group(message.attributes)
    if queue_flow(queue).fair and group and message.priority == BUSY_LANE:
        reasons.append(Reason("fair_lane", blocking=False, values={"group": group, "lane": 0}))
    return reasons


def _filtered(queue: QueueMeta, subscription: str, message: Message) -> Reason | None:
    found = subscription_filter(queue, subscription)
    if found is None:
        return None
    attributes = filter_attributes(message.attributes)
    name = found.refusing(attributes)
    if name is None:
        return None
    values: dict[str, Any] = {"filter": found.to_json()}
    if name:
        values.update(attribute=name, conditions=found.to_json()[name], value=attributes.get(name))
    return Reason("filtered", values=values)
