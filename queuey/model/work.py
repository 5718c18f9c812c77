"""Work queues: deliveries, dead letters, receipts and statistics."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Literal

from queuey import ids
from queuey.ids import InvalidId
from queuey.model.messages import Message, MessageRef

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


#: A message's states in a subscription (:class:`MessageState`).
DeliveryStateName = Literal[
    "new", "passed", "leased", "released", "claimed", "acked", "dead_lettered"
]


@dataclass(frozen=True)
class MessageState:
    """One live message's state in one subscription, as stored (what
    :meth:`queuey.storage.workstore.WorkQueueStore.message_state` reads for
    ``GET /queue/{name}/messages/{id}/explain``).

    ``state``: ``new`` (never handed out: the subscription has not come to
    it), ``passed`` (the subscription went past it without handing it out,
    or finished it and kept no record: its filter refused it, or it was
    acked long ago), ``leased`` (until ``visible_at``; available again
    after), ``released`` (available again at ``visible_at``), ``claimed``
    (being dead-lettered; the claim lapses at ``visible_at``), ``acked``,
    ``dead_lettered``. ``attempts``: deliveries so far; ``last_error``: what
    the last release said.
    """

    state: DeliveryStateName
    attempts: int = 0
    visible_at: int = 0  # microseconds
    last_error: str = ""


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
    #: The live messages' bodies in bytes (UTF-8), when the backend counts
    #: them in the same scan (SQLite); None when it does not (Cassandra).
    bytes: int | None = None


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


#: The attributes dead-lettering adds to a dead letter.
SOURCE_ATTRIBUTES = (
    "source_queue",
    "source_message_id",
    "source_partition",
    "source_subscription",
    "attempts",
    "last_error",
)


@dataclass(frozen=True)
class DeadLetterSource:
    """Where a dead letter came from."""

    queue: str
    ref: MessageRef
    subscription: str


def own_attributes(letter: Message) -> dict[str, str] | None:
    """A dead letter's attributes without the ``source_*`` ones dead-lettering added."""
    kept = {k: v for k, v in (letter.attributes or {}).items() if k not in SOURCE_ATTRIBUTES}
    return kept or None


def dead_letter_source(letter: Message) -> DeadLetterSource | None:
    """Where a dead letter came from, from its attributes (``None`` if they are not valid)."""
    attributes = letter.attributes or {}
    queue = attributes.get("source_queue", "")
    partition = attributes.get("source_partition", "")
    subscription = attributes.get("source_subscription", "")
    if not (0 < len(queue) <= 80 and 0 < len(subscription) <= 50):
        return None
    if not (partition.isascii() and partition.isdigit() and len(partition) <= 5):
        return None
    try:
        message_id = ids.parse_message_id(attributes.get("source_message_id", ""))
    except InvalidId:
        return None
    if int(partition) < 1:
        return None
    return DeadLetterSource(queue, MessageRef(int(partition), message_id), subscription)
