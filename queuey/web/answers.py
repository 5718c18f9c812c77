"""What the views answer, as pydantic models: the documentation of responses.

Views write their JSON directly (:mod:`queuey.web.responses`, message bodies
embedded as stored); these models only describe it, and ``/openapi.json``
(:mod:`queuey.web.openapi`) takes the response schemas from them. Most
answers are the wire records the client parses them into (:mod:`queuey.wire`);
this module adds the flow settings to the queue and subscription records.
Request models are in :mod:`queuey.web.schemas`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from queuey.model.flow import Overflow
from queuey.web.schemas import Model
from queuey.wire import QueueSettings, SubscriptionFilter


class QueueFlowInfo(Model):
    """A queue's flow settings (0: no limit)."""

    paused: bool
    post_rate: float
    post_burst: int = Field(description="the bucket's size (0 without post_rate)")
    max_length: int
    overflow: Overflow
    fair: bool


class SubscriptionFlowInfo(Model):
    """A subscription's flow settings (0: no limit)."""

    paused: bool
    rate: float
    burst: int = Field(description="the bucket's size (0 without rate)")
    max_in_flight: int


class FlowInfo(Model):
    queue: QueueFlowInfo
    subscriptions: dict[str, SubscriptionFlowInfo] = Field(description="those with a setting")


class QueueInfo(QueueSettings):
    flow: FlowInfo


class Queue(QueueInfo):
    status: Literal["ok"]


class QueueList(Model):
    status: Literal["ok"]
    queues: list[str] | list[QueueInfo]


class SubscriptionSetting(SubscriptionFilter):
    flow: SubscriptionFlowInfo


class SubscriptionAnswer(SubscriptionSetting):
    status: Literal["ok"]


class SubscriptionsAnswer(Model):
    status: Literal["ok"]
    subscriptions: list[SubscriptionSetting] = Field(
        description="those with a filter or a flow setting"
    )
