"""What the views answer, as pydantic models: the documentation of responses.

Views write their JSON directly (:mod:`queuey.web.responses`, message bodies
embedded as stored); these models only describe it, and ``/openapi.json``
(:mod:`queuey.web.openapi`) takes the response schemas from them. Request
models are in :mod:`queuey.web.schemas`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, create_model

from queuey.model.flow import fields_of
from queuey.model.flowfield import FlowField, Resource
from queuey.web.schemas import Consistency, MessageId, Model, QueueType

Failed = dict[str, Literal["expired", "unknown"]]


class Ok(Model):
    status: Literal["ok"]


class Error(Model):
    status: Literal["error"]
    error_msg: dict[str, str] = Field(description="one entry per bad field or reason")


_FLOW_TYPES = {"flag": bool, "rate": float, "count": int}


def _flow_answer_field(field: FlowField) -> tuple[Any, Any]:
    kind = Literal[field.values] if field.kind == "choice" else _FLOW_TYPES[field.kind]
    if field.bucket_of:
        return kind, Field(description=f"the bucket's size (0 without {field.bucket_of})")
    return kind, Field(description=field.help)


def flow_answer(resource: Resource, name: str, doc: str) -> type[Model]:
    """The flow settings of a queue or a subscription as answers give them
    (:data:`queuey.model.flow.FIELDS`)."""
    fields = {f.name: _flow_answer_field(f) for f in fields_of(resource)}
    return create_model(name, __base__=Model, __doc__=doc, **fields)


QueueFlowInfo = flow_answer("queue", "QueueFlowInfo", "A queue's flow settings (0: no limit).")
SubscriptionFlowInfo = flow_answer(
    "subscription", "SubscriptionFlowInfo", "A subscription's flow settings (0: no limit)."
)


class FlowInfo(Model):
    queue: QueueFlowInfo
    subscriptions: dict[str, SubscriptionFlowInfo] = Field(description="those with a setting")


class QueueInfo(Model):
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
    flow: FlowInfo


class Queue(QueueInfo):
    status: Literal["ok"]


class QueueList(Model):
    status: Literal["ok"]
    queues: list[str] | list[QueueInfo]


class MessageRef(Model):
    message_id: MessageId
    timestamp: float
    partition: int


class Posted(Model):
    status: Literal["ok"]
    messages: list[MessageRef]


class Message(MessageRef):
    body: dict[str, Any]
    attributes: dict[str, str] = Field(None, description="only when the message has some")
    group: str = Field(None, description="only when the message has one")
    priority: int = Field(None, description="0-9; in a read only when not 0")


class Messages(Model):
    status: Literal["ok"]
    messages: list[Message]


class ReservedMessage(Message):
    priority: int
    attempts: int = Field(description="deliveries in this subscription, this one included")
    receipt: str


class ReservedAnswer(Model):
    status: Literal["ok"]
    messages: list[ReservedMessage]


class AckAnswer(Model):
    status: Literal["ok"]
    acked: int
    failed: Failed


class ReleaseAnswer(Model):
    status: Literal["ok"]
    released: int
    dead_lettered: int = Field(description="released messages that went to the dead-letter queue")
    failed: Failed


class ExtendAnswer(Model):
    status: Literal["ok"]
    extended: int
    failed: Failed


class PartitionStatsAnswer(Model):
    partition: int
    messages: int
    oldest_timestamp: float | None


class SubscriptionStatsAnswer(Model):
    subscription: str
    available: int
    in_flight: int
    delayed: int
    dead_lettered: int
    oldest_available_timestamp: float | None
    filter: dict[str, Any] | None = Field(None, description="its filter; counts are of matches")


class StatsAnswer(Model):
    status: Literal["ok"]
    queue_name: str
    messages: int
    oldest_timestamp: float | None
    partitions: list[PartitionStatsAnswer]
    subscriptions: list[SubscriptionStatsAnswer]


class SubscriptionSetting(Model):
    subscription: str
    filter: dict[str, Any] | None = Field(description="null: it takes every message")
    flow: SubscriptionFlowInfo


class SubscriptionAnswer(SubscriptionSetting):
    status: Literal["ok"]


class SubscriptionsAnswer(Model):
    status: Literal["ok"]
    subscriptions: list[SubscriptionSetting] = Field(
        description="those with a filter or a flow setting"
    )


class RedriveAnswer(Model):
    status: Literal["ok"]
    moved: int = Field(description="reopened in the subscription they came from")
    reposted: int = Field(description="posted anew to the source queue (the original was gone)")
    skipped: int
    skipped_messages: dict[str, str] = Field(description="dead-letter message id -> why")


class ScheduleInfo(Model):
    name: str
    queue: str
    cron: str | None
    interval: int | None
    timezone: str
    start: int | None
    end: int | None
    message: dict[str, Any] = Field(description="the template posted at each tick")
    missed: Literal["latest", "all"]
    paused: bool
    state: Literal["active", "paused", "stopped", "ended"]
    error: str | None = Field(description="why the service stopped it (state stopped)")
    next_tick: int | None = Field(description="epoch seconds; null once ended")
    last_tick: int | None
    posted: int = Field(description="ticks posted")
    created: int


class Schedule(ScheduleInfo):
    status: Literal["ok"]


class ScheduleList(Model):
    status: Literal["ok"]
    schedules: list[ScheduleInfo] = Field(description="ordered by name")


class CheckpointsAnswer(Model):
    status: Literal["ok"]
    checkpoints: dict[str, MessageId]


class Heartbeat(Model):
    status: Literal["ok", "error"]
    checks: dict[str, Literal["ok", "unavailable"]]


class Version(Model):
    status: Literal["ok"]
    name: str
    version: str
    storage: str


RESPONSE_MODELS: tuple[type[BaseModel], ...] = (
    Ok,
    Error,
    Queue,
    QueueList,
    Posted,
    Messages,
    CheckpointsAnswer,
    ReservedAnswer,
    AckAnswer,
    ReleaseAnswer,
    ExtendAnswer,
    StatsAnswer,
    SubscriptionAnswer,
    SubscriptionsAnswer,
    RedriveAnswer,
    Schedule,
    ScheduleList,
    Heartbeat,
    Version,
)
