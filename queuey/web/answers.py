"""What the views answer, as pydantic models: the documentation of responses.

Views write their JSON directly (:mod:`queuey.web.responses`, message bodies
embedded as stored); these models only describe it, and ``/openapi.json``
(:mod:`queuey.web.openapi`) takes the response schemas from them. Most
answers are the wire records the client parses them into (:mod:`queuey.wire`);
this module adds the flow settings to the queue and subscription records.
Request models are in :mod:`queuey.web.schemas`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, create_model

from queuey.model.flow import fields_of
from queuey.model.flowfield import FlowField, Resource
from queuey.web.schemas import Model
from queuey.wire import QueueSettings, SubscriptionFilter


def _flow_answer_field(field: FlowField) -> tuple[Any, Any]:
    kind = Literal[field.values] if field.kind == "choice" else type(field.default)
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
