"""Flow-control settings of a queue and its subscriptions, kept with the queue.

:data:`FIELDS` declares every setting once (:class:`FlowField`: its name,
kind, bounds, decimal places, default, help text and the resource it
belongs to); the REST schema and answers, the client, the command line's
options and the admin page's forms are derived from it, and the checks and
stored strings below read it too. Adding a setting is one entry here plus
the core rule that enforces it.

Like a subscription's filter (:mod:`queuey.model.subscriptions`), every
flow-control setting is a string in the queue's ``attributes`` map, so it
travels with the queue's metadata to every API node and survives restarts:
a queue setting ``<name>`` under ``flow.<name>`` and a subscription's under
``sub.<subscription>.<name>``; a flag is ``"1"`` when on.

An absent key is the default: nothing paused, no limit. Parsing the stored
strings never fails (a value that no longer parses reads as the default), so
a queue whose attributes were written by a newer release still serves.
Changes are checked here (:func:`queue_changes`, :func:`subscription_changes`)
and name the field at fault.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, Literal

from queuey.model.flowfield import FlowField, FlowRecord, Resource
from queuey.model.queues import QueueMeta

Overflow = Literal["reject", "drop_head"]

#: The message attribute holding a message's group (the SQS endpoint's
#: ``MessageGroupId`` is kept there too, so both doors see one group).
GROUP_KEY = "sqs.group"
#: A group: 1 to 128 characters, letters, digits and punctuation (as SQS's
#: ``MessageGroupId``).
GROUP_PATTERN = r"^[\x21-\x7e]{1,128}$"
_GROUP = re.compile(GROUP_PATTERN)

_QUEUE = "flow."
_SUB = "sub."


#: Every flow setting, the queue's then a subscription's, in the order doors show them.
FIELDS: tuple[FlowField, ...] = (
    FlowField("paused", "queue", "flag", "Paused", "true: posts are refused (503)", switch=True),
    FlowField("post_rate", "queue", "rate", "Post rate", "messages per second the queue accepts"),
    FlowField(
        "post_burst",
        "queue",
        "count",
        "Post burst",
        "messages a burst of posts may take at once",
        off="one second of post_rate",
        bucket_of="post_rate",
    ),
    FlowField("max_length", "queue", "count", "Max length", "most messages the queue keeps"),
    FlowField(
        "overflow",
        "queue",
        "choice",
        "At max length",
        "at max_length: refuse posts (507) or drop the oldest",
        choices=(("reject", "refuse posts (507)"), ("drop_head", "drop the oldest")),
    ),
    FlowField(
        "fair", "queue", "flag", "Fair", "quiet groups are served before busy ones", fifo=False
    ),
    FlowField(
        "paused", "subscription", "flag", "Paused", "true: it hands out nothing", switch=True
    ),
    FlowField("rate", "subscription", "rate", "Rate", "messages per second handed out"),
    FlowField(
        "burst",
        "subscription",
        "count",
        "Burst",
        "messages handed out at once",
        off="one second of rate",
        attribute="rate_burst",
        bucket_of="rate",
    ),
    FlowField(
        "max_in_flight",
        "subscription",
        "count",
        "Max in flight",
        "most messages leased and not yet finished",
    ),
)


def fields_of(resource: Resource) -> tuple[FlowField, ...]:
    """The settings of a queue or of a subscription (from :data:`FIELDS` as
    it is now; kept while it is the same table, as reads are on hot paths)."""
    return _of(resource)[1]


def names_of(resource: Resource) -> tuple[str, ...]:
    return _of(resource)[2]


def _of(resource: Resource) -> tuple[tuple[FlowField, ...], tuple[FlowField, ...], tuple[str, ...]]:
    table = FIELDS
    found = _BY_RESOURCE.get(resource)
    if found is None or found[0] is not table:
        fields = tuple(f for f in table if f.resource == resource)
        found = _BY_RESOURCE[resource] = (table, fields, tuple(f.name for f in fields))
    return found


_BY_RESOURCE: dict[str, Any] = {}


def limits_of(resource: Resource) -> tuple[FlowField, ...]:
    """The settings a limits form or ``queuey flow set`` changes (a pause has
    its own action)."""
    return tuple(f for f in fields_of(resource) if not f.switch)


class QueueFlow(FlowRecord):
    """A queue's own flow settings (0: no limit)."""

    resource = "queue"
    fields_of = staticmethod(fields_of)

    @property
    def burst(self) -> int:
        """The post bucket's size: ``post_burst``, else one second of ``post_rate``."""
        return self.post_burst or max(1, math.ceil(self.post_rate))


class SubscriptionFlow(FlowRecord):
    """A subscription's flow settings (0: no limit)."""

    resource = "subscription"
    fields_of = staticmethod(fields_of)

    @property
    def burst(self) -> int:
        """The delivery bucket's size: ``burst``, else one second of ``rate``."""
        return self.rate_burst or max(1, math.ceil(self.rate))

    @property
    def limited(self) -> bool:
        return self.paused or bool(self.rate) or bool(self.max_in_flight)


NO_QUEUE_FLOW = QueueFlow()
NO_SUBSCRIPTION_FLOW = SubscriptionFlow()

#: The settings' names, for each level.
QUEUE_FIELDS = names_of("queue")
SUBSCRIPTION_FIELDS = names_of("subscription")


class FlowSettingError(ValueError):
    """Flow settings that break a rule: ``errors`` maps each field to why."""

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))
        self.errors = errors


def queue_key(name: str) -> str:
    return _QUEUE + name


def subscription_key(subscription: str, name: str) -> str:
    return f"{_SUB}{subscription}.{name}"


# -- reading ------------------------------------------------------------------
def queue_flow(queue: QueueMeta) -> QueueFlow:
    """The queue's flow settings (the defaults when it has none)."""
    attributes = queue.attributes
    if not attributes or not any(k.startswith(_QUEUE) for k in attributes):
        return NO_QUEUE_FLOW
    return _queue_flow(tuple(sorted((k, v) for k, v in attributes.items() if k.startswith(_QUEUE))))


@lru_cache(maxsize=4096)
def _queue_flow(items: tuple[tuple[str, str], ...]) -> QueueFlow:
    given = {key[len(_QUEUE) :]: value for key, value in items}
    return QueueFlow(**{f.key: f.read(given.get(f.name)) for f in fields_of("queue")})


def subscription_flow(queue: QueueMeta, subscription: str) -> SubscriptionFlow:
    """``subscription``'s flow settings on ``queue`` (the defaults when none)."""
    attributes = queue.attributes
    if not attributes:
        return NO_SUBSCRIPTION_FLOW
    prefix = f"{_SUB}{subscription}."
    values = tuple(attributes.get(prefix + name) for name in _of("subscription")[2])
    if not any(values):
        return NO_SUBSCRIPTION_FLOW
    return _subscription_flow(values)


@lru_cache(maxsize=4096)
def _subscription_flow(values: tuple[str | None, ...]) -> SubscriptionFlow:
    fields = fields_of("subscription")
    return SubscriptionFlow(**{f.key: f.read(v) for f, v in zip(fields, values, strict=True)})


def subscription_flows(queue: QueueMeta) -> dict[str, SubscriptionFlow]:
    """Every subscription of ``queue`` with a flow setting, by name."""
    names = set()
    known = names_of("subscription")
    for key in queue.attributes or {}:
        if key.startswith(_SUB):
            subscription, _, field = key[len(_SUB) :].rpartition(".")
            if field in known and subscription:
                names.add(subscription)
    found = {name: subscription_flow(queue, name) for name in sorted(names)}
    return {name: flow for name, flow in found.items() if flow != NO_SUBSCRIPTION_FLOW}


def message_group(attributes: Mapping[str, str] | None) -> str:
    """A stored message's group ("" when it has none)."""
    return (attributes or {}).get(GROUP_KEY, "")


def valid_group(group: Any) -> bool:
    return isinstance(group, str) and _GROUP.match(group) is not None


# -- changing -----------------------------------------------------------------
Changes = tuple[dict[str, str], list[str]]


def _changes(resource: Resource, given: Mapping[str, Any], key) -> Changes:
    errors: dict[str, str] = {}
    set_: dict[str, str] = {}
    removed: list[str] = []
    for field in fields_of(resource):
        if field.name not in given:
            continue
        try:
            stored = field.stored(given[field.name])
        except ValueError as exc:
            errors[field.name] = str(exc)
            continue
        if stored is None:
            removed.append(key(field.name))
        else:
            set_[key(field.name)] = stored
    if errors:
        raise FlowSettingError(errors)
    return set_, removed


def queue_changes(queue: QueueMeta, given: Mapping[str, Any]) -> Changes:
    """The attribute changes that apply the queue fields in ``given`` (fields
    absent are left as they are; ``0``, ``null`` or ``false`` turn one off).
    :class:`FlowSettingError` names each bad field."""
    changes = _changes("queue", given, queue_key)
    if queue.fifo:
        for field in fields_of("queue"):
            if not field.fifo and given.get(field.name) not in (None, field.default):
                raise FlowSettingError(
                    {
                        field.name: "a FIFO queue keeps each group's strict order; "
                        f"{field.name} does not apply"
                    }
                )
    return changes


def subscription_changes(subscription: str, given: Mapping[str, Any]) -> Changes:
    """The attribute changes that apply the subscription fields in ``given``."""
    return _changes("subscription", given, lambda field: subscription_key(subscription, field))
