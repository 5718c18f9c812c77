"""Messages as posted, read and leased, and the answers of the lease calls."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from queuey.wire.record import MessageId, Record

Failed = dict[str, Literal["expired", "unknown"]]


class MessageRef(Record):
    message_id: MessageId
    timestamp: float
    partition: int


class Posted(Record):
    status: Literal["ok"]
    messages: list[MessageRef]


class Message(MessageRef):
    body: dict[str, Any]
    priority: int = Field(None, description="0-9; in a read only when not 0")
    attributes: dict[str, str] = Field(None, description="only when the message has some")
    group: str = Field(None, description="only when the message has one")


class Messages(Record):
    status: Literal["ok"]
    messages: list[Message]


class ReservedMessage(Message):
    priority: int
    attempts: int = Field(description="deliveries in this subscription, this one included")
    receipt: str


class ReservedAnswer(Record):
    status: Literal["ok"]
    messages: list[ReservedMessage]


class AckAnswer(Record):
    status: Literal["ok"]
    acked: int
    failed: Failed


class ReleaseAnswer(Record):
    status: Literal["ok"]
    released: int
    dead_lettered: int = Field(description="released messages that went to the dead-letter queue")
    failed: Failed


class ExtendAnswer(Record):
    status: Literal["ok"]
    extended: int
    failed: Failed


class RedriveAnswer(Record):
    status: Literal["ok"]
    moved: int = Field(description="reopened in the subscription they came from")
    reposted: int = Field(description="posted anew to the source queue (the original was gone)")
    skipped: int
    skipped_messages: dict[str, str] = Field(description="dead-letter message id -> why")


class CheckpointsAnswer(Record):
    status: Literal["ok"]
    checkpoints: dict[str, MessageId]
