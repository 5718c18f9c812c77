"""The client's flow-control calls: read, change, pause and resume (docs/flow.rst).

Mixed into both clients (:class:`~queuey.client.http.QueueyClient` and
:class:`~queuey.client.aio.AsyncQueueyClient`); each describes its call
(:func:`~queuey.client.answers.call`), which the client sends, so they fail
over between API nodes and retry like every call.
Each is safe to repeat: a ``PUT`` sets the values given, and pausing (or
resuming) twice has the effect of once.

A post the service refuses by flow control raises a
:class:`~queuey.client.errors.FlowRefused` (``QueuePaused``, ``RateLimited``,
``QueueFull``) naming the setting and carrying the seconds to wait.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from queuey.client.answers import Call, Calls, call
from queuey.client.models import known
from queuey.client.models import path_segment as _q
from queuey.model.flow import fields_of
from queuey.model.flowfield import FlowField, FlowRecord


def _value(field: FlowField, value: Any) -> Any:
    """An answer's value of ``field`` (its default when absent)."""
    if value is None:
        return field.default
    if field.kind == "flag":
        return bool(value)
    if field.kind == "rate":
        return float(value)
    return int(value) if field.kind == "count" else str(value)


class _WireFlow(FlowRecord):
    key = "name"
    fields_of = staticmethod(fields_of)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]):
        return cls(**{f.name: _value(f, data.get(f.name)) for f in cls.fields()})


class QueueFlow(_WireFlow):
    """A queue's flow settings (0: no limit), one attribute per setting of
    :data:`queuey.model.flow.FIELDS`. ``post_burst`` is the bucket's size in
    force (one second of ``post_rate`` unless set; 0 without a rate)."""

    resource = "queue"


class SubscriptionFlow(_WireFlow):
    """A subscription's flow settings (0: no limit)."""

    resource = "subscription"


@dataclass(frozen=True)
class FlowInfo:
    """A queue's flow settings and those of every subscription that has one."""

    queue: QueueFlow = field(default_factory=QueueFlow)
    subscriptions: dict[str, SubscriptionFlow] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> FlowInfo:
        data = data or {}
        return cls(
            QueueFlow.from_json(data.get("queue") or {}),
            {
                str(name): SubscriptionFlow.from_json(flow)
                for name, flow in (data.get("subscriptions") or {}).items()
            },
        )

    def subscription(self, name: str) -> SubscriptionFlow:
        """``name``'s settings (the defaults when it has none)."""
        return self.subscriptions.get(name, SubscriptionFlow())


class FlowCalls(Calls):
    """Flow settings of queues (``/queue/{name}``) and subscriptions
    (``/queue/{name}/subscriptions/{subscription}``)."""

    @call
    def flow(self, queue: str) -> Call[FlowInfo]:
        """The queue's flow settings and its subscriptions'."""
        return Call("GET", f"/queue/{_q(queue)}/info", _flow_info)

    @call
    def set_queue_flow(self, queue: str, **fields: Any) -> Call[FlowInfo]:
        """Change the queue's flow settings named (:class:`QueueFlow`'s
        attributes: ``post_rate``, ``max_length``...); the others stay.
        ``0``, ``None`` or ``False`` turns a limit off. A refused value raises
        :class:`~queuey.client.errors.BadRequest` naming it."""
        body = known(fields, (f.name for f in QueueFlow.fields()), "flow setting")
        return Call("PUT", f"/queue/{_q(queue)}", _flow_info, json=body)

    @call
    def set_subscription_flow(
        self, queue: str, subscription: str, **fields: Any
    ) -> Call[SubscriptionFlow]:
        """Change ``subscription``'s flow settings named (:class:`SubscriptionFlow`'s
        attributes: ``rate``, ``max_in_flight``...); the others and its filter stay."""
        body = known(fields, (f.name for f in SubscriptionFlow.fields()), "flow setting")
        if not body:
            raise TypeError("give at least one flow setting")  # an empty body sets the filter
        path = f"/queue/{_q(queue)}/subscriptions/{_q(subscription)}"
        return Call("PUT", path, _subscription_flow, json=body)

    @call
    def pause(
        self, queue: str, subscription: str | None = None
    ) -> Call[QueueFlow | SubscriptionFlow]:
        """Pause the queue's posts (they are refused, 503), or with
        ``subscription`` that subscription's deliveries (reserves get nothing;
        leases already out stay valid). The settings of what was paused."""
        return _paused(queue, subscription, "pause")

    @call
    def resume(
        self, queue: str, subscription: str | None = None
    ) -> Call[QueueFlow | SubscriptionFlow]:
        """Lift :meth:`pause`; long polls waiting on the queue are woken."""
        return _paused(queue, subscription, "resume")


def _flow_info(answer: Mapping[str, Any]) -> FlowInfo:
    return FlowInfo.from_json(answer.get("flow"))


def _subscription_flow(answer: Mapping[str, Any]) -> SubscriptionFlow:
    return SubscriptionFlow.from_json(answer.get("flow") or {})


def _queue_flow(answer: Mapping[str, Any]) -> QueueFlow:
    return _flow_info(answer).queue


def _paused(
    queue: str, subscription: str | None, action: str
) -> Call[QueueFlow | SubscriptionFlow]:
    path = f"/queue/{_q(queue)}"
    parse: Any = _queue_flow
    if subscription is not None:
        path += f"/subscriptions/{_q(subscription)}"
        parse = _subscription_flow
    return Call("POST", f"{path}/{action}", parse, repeatable=True)
