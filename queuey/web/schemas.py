"""The one definition of what each route accepts (pydantic v2); what it
answers is described in :mod:`queuey.web.answers`.

Views validate with these models and ``/openapi.json`` is assembled from their
JSON schemas (:mod:`queuey.web.openapi`), so the two cannot drift apart. Limits
an operator configures (``max_partitions``, ``max_ttl``, ``default_ttl``) are
part of the schema, so the models are built once per app from its settings by
:func:`build_models`.

What a static schema cannot say (a partition beyond the queue's own count, a
queue shrinking) is checked by validators that read the queue's partition
count from the validation context, so it is named in the same 400 as every
other bad field. Rules across fields (a ``delay`` longer than the ``ttl``, a
queue as its own dead-letter queue) are the views'; their messages are in
:data:`QUEUE_STATE_MESSAGES`. Every value is checked for size and format
before it is converted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
)
from pydantic_core import PydanticCustomError

from queuey import ids
from queuey.core.messages import MAX_DEDUP_ID, MAX_PRIORITY
from queuey.limits import (
    DEFAULT_READ,
    MAX_ATTRIBUTE_NAME,
    MAX_ATTRIBUTE_VALUE,
    MAX_ATTRIBUTES,
    MAX_PARTITION_KEY,
    MAX_READ,
    MAX_RECEIPTS,
    MAX_RESERVE,
    MAX_VISIBILITY_TIMEOUT,
    MAX_WAIT,
)
from queuey.model import RECEIPT_PATTERN, flow, schedules
from queuey.web.fieldtypes import Boolean, Integer, Model, flow_model
from queuey.web.filter_schema import filter_schema
from queuey.wire.record import Consistency, MessageId, QueueType

QUEUE_NAME_PATTERN = r"^[A-Za-z0-9_-]{1,50}$"
#: A name that addresses an existing queue: besides the names this API
#: creates, the longer and ``.fifo`` names the SQS endpoint allows.
QUEUE_REF_PATTERN = r"^(?:[A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo)$"
#: A queue name, or empty for "the default" (``<name>-dead``).
DEAD_LETTER_PATTERN = r"^[A-Za-z0-9_-]{0,50}$"
SUBSCRIPTION_PATTERN = r"^[A-Za-z0-9_-]{1,50}$"
CONSUMER_PATTERN = r"^[A-Za-z0-9_.-]{1,100}$"
PARTITION_PATTERN = r"[1-9][0-9]{0,2}"
PARTITIONS_PATTERN = rf"^{PARTITION_PATTERN}(,{PARTITION_PATTERN})*$"
_ID = ids.MESSAGE_ID_PATTERN.strip("^$")
MESSAGE_REFS_PATTERN = rf"^({PARTITION_PATTERN}:)?{_ID}(,({PARTITION_PATTERN}:)?{_ID})*$"
MESSAGE_REF_PATTERN = rf"^({PARTITION_PATTERN}:)?{_ID}$"
#: Messages of the errors a static schema cannot foresee: rules about the
#: queue's current state, and rules across two parameters. A fuzzer that only
#: knows the schema may see these 400s for schema-valid input.
QUEUE_STATE_MESSAGES = (
    r"must be between 1 and \d+, the queue's partitions",
    r"partition \d+ is not between 1 and \d+",
    r"may only grow \(the queue has \d+\)",
    r"give either partition or partition_key, not both",
    r"must be at most the ttl \(\d+ s\)",
    r"must be at least the queue's delay \(\d+ s\)",
    r"must be at most the message's ttl \(\d+ s\)",
    r"the queue's delay \(\d+ s\) is longer than this message's ttl \(\d+ s\)",
    r"must not be the queue itself",
    r"the default dead-letter queue name [A-Za-z0-9_-]+ would be longer than 50 characters; "
    r"give dead_letter_queue",
    r"queue [A-Za-z0-9_.-]+ is fair: its messages' order is set by their groups, "
    r"a post may not name a priority",
)

#: Work-queue limits (docs/api.rst, "Limits") only this layer needs (those the client
#: shares are in :mod:`queuey.limits`).
MAX_ATTEMPTS = 1000
MAX_RELEASE_DELAY = 43200
#: Longest text taken as a receipt; anything up to it that is not one is
#: answered ``unknown`` (a receipt is at most 79 characters).
MAX_RECEIPT_TEXT = 200

Order = Literal["descending", "ascending"]


def _queue_partitions(info: ValidationInfo) -> int | None:
    """The queue's partition count, when the view passed it as validation context."""
    return (info.context or {}).get("partitions")


def _partition_in_queue(value: Any, info: ValidationInfo) -> Any:
    count = _queue_partitions(info)
    if value is not None and count is not None and int(value) > count:
        raise PydanticCustomError(
            "partition", "must be between 1 and {count}, the queue's partitions", {"count": count}
        )
    return value


def _partitions_in_queue(value: str, info: ValidationInfo) -> list[int]:
    count = _queue_partitions(info)
    numbers = list(dict.fromkeys(map(int, value.split(","))))
    for number in numbers:
        if count is not None and number > count:
            raise PydanticCustomError(
                "partition",
                "partition {number} is not between 1 and {count}",
                {"number": number, "count": count},
            )
    return numbers


#: A comma list of partition numbers of the queue the request names, read as
#: the list of those numbers (each once, in the order given).
PartitionList = Annotated[
    Annotated[str, StringConstraints(pattern=PARTITIONS_PATTERN, max_length=1000)],
    AfterValidator(_partitions_in_queue),
]


def _only_grows(value: int | None, info: ValidationInfo) -> int | None:
    count = _queue_partitions(info)
    if value is not None and count is not None and value < count:
        raise PydanticCustomError(
            "partitions", "may only grow (the queue has {count})", {"count": count}
        )
    return value


VisibilityTimeout = Integer(1, MAX_VISIBILITY_TIMEOUT, description="seconds a reservation lasts")
MaxAttempts = Integer(0, MAX_ATTEMPTS, description="deliveries before dead-lettering; 0 never")
Priority = Integer(0, MAX_PRIORITY)
DeadLetterQueue = Annotated[str, StringConstraints(pattern=DEAD_LETTER_PATTERN)]
Subscription = Annotated[
    str,
    StringConstraints(pattern=SUBSCRIPTION_PATTERN),
    Field(description="a named work-queue consumer of the queue"),
]
DedupId = Annotated[str, StringConstraints(min_length=1, max_length=MAX_DEDUP_ID)]


def Attributes(most: int) -> Any:  # noqa: N802 - a type factory
    """Message attributes: at most ``most`` names, each with its value."""
    return Annotated[
        dict[
            Annotated[str, StringConstraints(min_length=1, max_length=MAX_ATTRIBUTE_NAME)],
            Annotated[str, StringConstraints(max_length=MAX_ATTRIBUTE_VALUE)],
        ],
        Field(max_length=most),
    ]


ReceiptText = Annotated[
    str,
    StringConstraints(max_length=MAX_RECEIPT_TEXT),
    Field(description=f"a receipt from reserve ({RECEIPT_PATTERN}); others are unknown"),
]


QueueName = Annotated[str, StringConstraints(pattern=QUEUE_NAME_PATTERN)]
Seconds = Annotated[
    str,
    StringConstraints(pattern=ids.SECONDS_PATTERN),
    Field(description="seconds since the epoch, a plain decimal (microsecond precision)"),
]
PartitionKey = Annotated[str, StringConstraints(max_length=MAX_PARTITION_KEY)]
Group = Annotated[
    str,
    StringConstraints(pattern=flow.GROUP_PATTERN),
    Field(description="the message's group (fair queues; 1-128 printable ASCII, no spaces)"),
]


QueueFlowFields = flow_model("queue", "QueueFlowFields")


def build_models(max_partitions: int, max_ttl: int, default_ttl: int) -> Models:
    """Models whose bounds are this app's settings."""
    Partitions = Integer(1, max_partitions)  # noqa: N806
    Ttl = Integer(1, max_ttl, description="seconds")  # noqa: N806

    Delay = Integer(0, max_ttl, description="seconds before delivery, at most the ttl")  # noqa: N806

    class CreateQueue(QueueFlowFields):
        queue_name: QueueName = Field(None, description="default a random 32-hex name")
        partitions: Partitions = 1
        ttl: Ttl = default_ttl
        type: QueueType = "public"
        consistency: Consistency = "strong"
        visibility_timeout: VisibilityTimeout = 30
        max_attempts: MaxAttempts = 0
        dead_letter_queue: DeadLetterQueue = Field(
            None, description="a queue of the application; default (or empty) <name>-dead"
        )
        delay: Delay = 0

    class UpdateQueue(QueueFlowFields):
        partitions: Annotated[Partitions, AfterValidator(_only_grows)] = Field(
            None, description="may only grow"
        )
        ttl: Ttl = None
        type: QueueType = None
        consistency: Consistency = None
        visibility_timeout: VisibilityTimeout = None
        max_attempts: MaxAttempts = None
        dead_letter_queue: DeadLetterQueue = Field(
            None, description="a queue of the application; empty resets to <name>-dead"
        )
        delay: Delay = None

    class Placement(Model):
        partition: Annotated[Partitions, AfterValidator(_partition_in_queue)] = Field(
            None, description="1..the queue's partitions"
        )
        partition_key: PartitionKey = Field(None, description="hashed to a partition")
        ttl: Ttl = Field(None, description="default the queue's ttl")
        delay: Delay = Field(None, description="seconds before delivery; default the queue's")
        priority: Priority = Field(None, description="0-9, higher is reserved first; default 0")
        dedup_id: DedupId = Field(None, description="a repeat within the dedup window is ignored")
        group: Group = Field(None, description="default partition: the group's (docs/flow.rst)")

    class BatchEntry(Placement):
        model_config = ConfigDict(
            json_schema_extra={"not": {"required": ["partition", "partition_key"]}}
        )
        body: dict[str, Any]
        attributes: Attributes(MAX_ATTRIBUTES) = Field(None, description="returned on reads")

    class Batch(Model):
        messages: list[BatchEntry] = Field(min_length=1)

    return Models(CreateQueue, UpdateQueue, Placement, Batch)


class ListQueues(Model):
    limit: Integer(1, MAX_READ, description="page size") = DEFAULT_READ
    offset: QueueName = Field(None, description="the queue name to start after")
    details: Boolean = Field(False, description="metadata instead of names")


class ReadMessages(Model):
    since: MessageId = Field(None, description="only messages strictly after this id")
    since_timestamp: Seconds = Field(None, description="only messages strictly newer")
    limit: Integer(1, MAX_READ, description="most messages returned") = DEFAULT_READ
    order: Order = Field("descending", description="newest first, or oldest first")
    partitions: PartitionList = Field(
        None, description="comma list of partitions; default all, merged by time"
    )


class Reserve(Model):
    subscription: Subscription = "default"
    limit: Integer(1, MAX_RESERVE, description="most messages leased") = 1
    visibility_timeout: VisibilityTimeout = Field(None, description="default the queue's")
    wait: Integer(0, MAX_WAIT, description="seconds to long-poll for a message") = 0
    partitions: PartitionList = Field(None, description="comma list of partitions; default all")


class Receipts(Model):
    subscription: Subscription = "default"
    receipts: list[ReceiptText] = Field(min_length=1, max_length=MAX_RECEIPTS)


class Release(Receipts):
    delay: Integer(0, MAX_RELEASE_DELAY, description="seconds before redelivery") = 0
    error: Annotated[str, StringConstraints(max_length=MAX_ATTRIBUTE_VALUE)] = Field(
        None, description="kept as the message's last error"
    )


class Extend(Receipts):
    visibility_timeout: VisibilityTimeout = Field(description="the leases end this long from now")


class Explain(Model):
    subscription: Subscription = "default"


class Redrive(Model):
    limit: Integer(1, MAX_READ, description="most dead letters moved") = MAX_READ


def _filter_or_null(schema: dict[str, Any]) -> None:
    description = schema.get("description")
    schema.clear()
    schema.update(anyOf=[filter_schema(), {"type": "null"}], description=description)


class SubscriptionSettings(flow_model("subscription", "SubscriptionFlowFields")):
    """What ``PUT .../subscriptions/{subscription}`` changes (see
    :meth:`queuey.core.subscriptions.Subscriptions.configure`)."""

    filter: dict[str, Any] | None = Field(
        None, description="null removes it", json_schema_extra=_filter_or_null
    )


class DeleteQueue(Model):
    delete: Boolean = Field(True, description="false removes the messages, keeps the queue")


PartitionNumber = Annotated[
    str,
    StringConstraints(pattern=rf"^{PARTITION_PATTERN}$"),
    AfterValidator(_partition_in_queue),
]


class Checkpoints(Model):
    checkpoints: dict[PartitionNumber, MessageId] = Field(
        min_length=1, json_schema_extra={"additionalProperties": False}
    )


@dataclass(frozen=True)
class Models:
    """The request models of one app: those :func:`build_models` makes with
    the app's limits in them, and the others, the same for every app."""

    create_queue: type[Model]
    update_queue: type[Model]
    placement: type[Model]
    batch: type[Model]
    list_queues: type[Model] = ListQueues
    read: type[Model] = ReadMessages
    delete_queue: type[Model] = DeleteQueue
    checkpoints: type[Model] = Checkpoints
    reserve: type[Model] = Reserve
    ack: type[Model] = Receipts
    release: type[Model] = Release
    extend: type[Model] = Extend
    redrive: type[Model] = Redrive
    explain: type[Model] = Explain


# -- path parameters ----------------------------------------------------------------
PATH_PARAMS: dict[str, dict[str, Any]] = {
    "name": {"type": "string", "pattern": QUEUE_REF_PATTERN},
    "ids": {
        "type": "string",
        "pattern": MESSAGE_REFS_PATTERN,
        "description": "comma list of [partition:]message_id (partition defaults to 1)",
    },
    "message": {
        "type": "string",
        "pattern": MESSAGE_REF_PATTERN,
        "description": "[partition:]message_id (without a partition: every partition)",
    },
    "consumer": {"type": "string", "pattern": CONSUMER_PATTERN},
    "subscription": {"type": "string", "pattern": SUBSCRIPTION_PATTERN},
    "schedule": {"type": "string", "pattern": schedules.NAME_PATTERN},
}
