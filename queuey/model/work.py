"""Work queues: deliveries, dead letters, receipts and statistics."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Literal

from queuey.model.messages import Message

ReceiptStatus = Literal["acked", "expired", "unknown"]


@dataclass(frozen=True)
class Delivery:
    """A message handed to one consumer of a subscription.

    ``attempts`` counts deliveries in this subscription including this one.
    ``receipt`` names this lease; see :func:`make_receipt`.
    """

    message: Message
    attempts: int
    receipt: str
    #: When the message was first delivered in this subscription (microseconds;
    #: this delivery's time on a first delivery). A redrive starts it afresh.
    first_delivered: int = 0


@dataclass(frozen=True)
class DeadLetter:
    """A message whose last allowed delivery ended without an ack.

    The backend has claimed it for dead-lettering (no consumer will get it
    again); the caller posts it to the dead-letter queue and then calls
    :meth:`Storage.ack` with ``claim``. If the caller dies in between, the
    claim lapses after the queue's visibility timeout and a later
    :meth:`Storage.reserve` returns the same message as a dead letter again,
    with a new claim (the caller posts with a deterministic ``dedup_id`` so the
    dead-letter queue still holds it once).

    ``generation`` names the message's current round of deliveries in the
    subscription: empty until :meth:`Storage.reopen` first reopens it, and a
    new value drawn by every reopen; a lapsed claim taken again keeps it. The
    caller puts it in the ``dedup_id``, so a dead-lettering retried is stored
    once while one after a redrive is a new dead letter.
    """

    message: Message
    attempts: int
    last_error: str
    claim: str
    generation: str = ""


@dataclass(frozen=True)
class Reserved:
    deliveries: list[Delivery]
    dead_letters: list[DeadLetter]


@dataclass(frozen=True)
class SubscriptionStats:
    subscription: str
    available: int
    in_flight: int
    delayed: int
    dead_lettered: int
    oldest_available_timestamp: int | None  # microseconds


@dataclass(frozen=True)
class PartitionStats:
    partition: int
    messages: int
    oldest_timestamp: int | None  # microseconds


@dataclass(frozen=True)
class QueueStats:
    messages: int
    oldest_timestamp: int | None
    partitions: list[PartitionStats]
    subscriptions: list[SubscriptionStats]


def make_receipt(partition: int, message_id: uuid.UUID, token: str) -> str:
    """A receipt: ``<partition>-<message id hex>-<token>``; the token is the
    backend's (``[0-9a-z]{1,40}``) and differs for every lease of a message."""
    return "%d-%s-%s" % (partition, message_id.hex, token)


RECEIPT_PATTERN = r"^[0-9]{1,5}-[0-9a-f]{32}-[0-9a-z]{1,40}$"


_RECEIPT = re.compile(RECEIPT_PATTERN)


def parse_receipt(receipt: str) -> tuple[int, uuid.UUID, str] | None:
    """``(partition, message id, token)``, or ``None`` when malformed."""
    if not isinstance(receipt, str) or not _RECEIPT.match(receipt):
        return None
    partition, hexid, token = receipt.split("-")
    try:
        message_id = uuid.UUID(hex=hexid)
    except ValueError:
        return None
    if message_id.version != 1:
        return None
    return int(partition), message_id, token
