"""Flow-control settings of a queue and its subscriptions, kept with the queue.

Like a subscription's filter (:mod:`queuey.model.subscriptions`), every
flow-control setting is a string in the queue's ``attributes`` map, so it
travels with the queue's metadata to every API node and survives restarts:

=============================  ==============================================
``flow.paused``                ``"1"``: posts are refused (the queue is paused)
``flow.post_rate``             posts (messages) per second the queue accepts
``flow.post_burst``            messages a burst of posts may take at once
``flow.max_length``            most messages the queue keeps
``flow.overflow``              ``reject`` (refuse posts) or ``drop_head``
``flow.fair``                  ``"1"``: quiet groups are served before busy ones
``sub.<name>.paused``          ``"1"``: the subscription hands out nothing
``sub.<name>.rate``            messages per second the subscription hands out
``sub.<name>.burst``           messages it may hand out at once
``sub.<name>.max_in_flight``   most messages leased and not yet finished
=============================  ==============================================

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
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from queuey.model.queues import QueueMeta

Overflow = Literal["reject", "drop_head"]
OVERFLOWS: tuple[Overflow, ...] = ("reject", "drop_head")

#: Highest rate (messages per second) a setting may name, and the lowest one
#: enforced: a smaller positive rate counts as one message an hour.
MAX_RATE = 1_000_000.0
MIN_RATE = 1 / 3600
#: Largest burst, in-flight cap and queue length a setting may name.
MAX_COUNT = 1_000_000_000
#: The message attribute holding a message's group (the SQS endpoint's
#: ``MessageGroupId`` is kept there too, so both doors see one group).
GROUP_KEY = "sqs.group"
#: A group: 1 to 128 characters, letters, digits and punctuation (as SQS's
#: ``MessageGroupId``).
GROUP_PATTERN = r"^[\x21-\x7e]{1,128}$"
_GROUP = re.compile(GROUP_PATTERN)

_QUEUE = "flow."
_SUB = "sub."


@dataclass(frozen=True)
class QueueFlow:
    """A queue's own flow settings (0: no limit)."""

    paused: bool = False
    post_rate: float = 0.0
    post_burst: int = 0
    max_length: int = 0
    overflow: Overflow = "reject"
    fair: bool = False

    @property
    def burst(self) -> int:
        """The post bucket's size: ``post_burst``, else one second of ``post_rate``."""
        return self.post_burst or max(1, math.ceil(self.post_rate))

    def to_json(self) -> dict[str, Any]:
        return {
            "paused": self.paused,
            "post_rate": self.post_rate,
            "post_burst": self.burst if self.post_rate else 0,
            "max_length": self.max_length,
            "overflow": self.overflow,
            "fair": self.fair,
        }


@dataclass(frozen=True)
class SubscriptionFlow:
    """A subscription's flow settings (0: no limit)."""

    paused: bool = False
    rate: float = 0.0
    rate_burst: int = 0
    max_in_flight: int = 0

    @property
    def burst(self) -> int:
        """The delivery bucket's size: ``burst``, else one second of ``rate``."""
        return self.rate_burst or max(1, math.ceil(self.rate))

    @property
    def limited(self) -> bool:
        return self.paused or bool(self.rate) or bool(self.max_in_flight)

    def to_json(self) -> dict[str, Any]:
        return {
            "paused": self.paused,
            "rate": self.rate,
            "burst": self.burst if self.rate else 0,
            "max_in_flight": self.max_in_flight,
        }


NO_QUEUE_FLOW = QueueFlow()
NO_SUBSCRIPTION_FLOW = SubscriptionFlow()

#: Field name -> attribute key suffix, for each level.
QUEUE_FIELDS = ("paused", "post_rate", "post_burst", "max_length", "overflow", "fair")
SUBSCRIPTION_FIELDS = ("paused", "rate", "burst", "max_in_flight")


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
def _number(text: str | None) -> float:
    try:
        value = float(text) if text else 0.0
    except ValueError:
        return 0.0
    return max(value, MIN_RATE) if math.isfinite(value) and value > 0 else 0.0


def _count(text: str | None) -> int:
    return int(_number(text))


def queue_flow(queue: QueueMeta) -> QueueFlow:
    """The queue's flow settings (the defaults when it has none)."""
    attributes = queue.attributes
    if not attributes or not any(k.startswith(_QUEUE) for k in attributes):
        return NO_QUEUE_FLOW
    return _queue_flow(tuple(sorted((k, v) for k, v in attributes.items() if k.startswith(_QUEUE))))


@lru_cache(maxsize=4096)
def _queue_flow(items: tuple[tuple[str, str], ...]) -> QueueFlow:
    given = {key[len(_QUEUE) :]: value for key, value in items}
    overflow = given.get("overflow")
    return QueueFlow(
        paused=given.get("paused") == "1",
        post_rate=_number(given.get("post_rate")),
        post_burst=_count(given.get("post_burst")),
        max_length=_count(given.get("max_length")),
        overflow=overflow if overflow in OVERFLOWS else "reject",  # type: ignore[arg-type]
        fair=given.get("fair") == "1",
    )


def subscription_flow(queue: QueueMeta, subscription: str) -> SubscriptionFlow:
    """``subscription``'s flow settings on ``queue`` (the defaults when none)."""
    attributes = queue.attributes
    if not attributes:
        return NO_SUBSCRIPTION_FLOW
    prefix = f"{_SUB}{subscription}."
    values = tuple(attributes.get(prefix + name) for name in SUBSCRIPTION_FIELDS)
    if not any(values):
        return NO_SUBSCRIPTION_FLOW
    return _subscription_flow(values)


@lru_cache(maxsize=4096)
def _subscription_flow(values: tuple[str | None, ...]) -> SubscriptionFlow:
    paused, rate, burst, in_flight = values
    return SubscriptionFlow(
        paused=paused == "1",
        rate=_number(rate),
        rate_burst=_count(burst),
        max_in_flight=_count(in_flight),
    )


def subscription_flows(queue: QueueMeta) -> dict[str, SubscriptionFlow]:
    """Every subscription of ``queue`` with a flow setting, by name."""
    names = set()
    for key in queue.attributes or {}:
        if key.startswith(_SUB):
            subscription, _, field = key[len(_SUB) :].rpartition(".")
            if field in SUBSCRIPTION_FIELDS and subscription:
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


def _flag(value: Any, field: str, errors: dict[str, str]) -> str | None:
    if not isinstance(value, bool):
        errors[field] = "must be true or false"
        return None
    return "1" if value else None


def _rate(value: Any, field: str, errors: dict[str, str]) -> str | None:
    if value is None or (
        isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0
    ):
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not 0 < value <= MAX_RATE
    ):
        errors[field] = f"must be a number above 0 and at most {MAX_RATE:g} (0 or null: no limit)"
        return None
    return repr(float(value))


def _positive(value: Any, field: str, errors: dict[str, str]) -> str | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value == 0):
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_COUNT:
        errors[field] = f"must be a whole number from 1 to {MAX_COUNT} (0 or null: no limit)"
        return None
    return str(value)


def _overflow(value: Any, field: str, errors: dict[str, str]) -> str | None:
    if value is None or value == "reject":
        return None
    if value not in OVERFLOWS:
        errors[field] = "must be one of: " + ", ".join(OVERFLOWS)
        return None
    return str(value)


_QUEUE_CHECKS = {
    "paused": _flag,
    "post_rate": _rate,
    "post_burst": _positive,
    "max_length": _positive,
    "overflow": _overflow,
    "fair": _flag,
}
_SUBSCRIPTION_CHECKS = {
    "paused": _flag,
    "rate": _rate,
    "burst": _positive,
    "max_in_flight": _positive,
}


def _changes(given: Mapping[str, Any], checks, key) -> Changes:
    errors: dict[str, str] = {}
    set_: dict[str, str] = {}
    removed: list[str] = []
    for field, value in given.items():
        check = checks.get(field)
        if check is None:
            continue
        stored = check(value, field, errors)
        if stored is None:
            removed.append(key(field))
        else:
            set_[key(field)] = stored
    if errors:
        raise FlowSettingError(errors)
    return set_, removed


def queue_changes(queue: QueueMeta, given: Mapping[str, Any]) -> Changes:
    """The attribute changes that apply the queue fields in ``given`` (fields
    absent are left as they are; ``0``, ``null`` or ``false`` turn one off).
    :class:`FlowSettingError` names each bad field."""
    changes = _changes(given, _QUEUE_CHECKS, queue_key)
    if given.get("fair") is True and queue.fifo:
        raise FlowSettingError(
            {"fair": "a FIFO queue keeps each group's strict order; fair does not apply"}
        )
    return changes


def subscription_changes(subscription: str, given: Mapping[str, Any]) -> Changes:
    """The attribute changes that apply the subscription fields in ``given``."""
    return _changes(
        given, _SUBSCRIPTION_CHECKS, lambda field: subscription_key(subscription, field)
    )
