"""Subscription settings: a work-queue subscription's filter.

Every door that changes or shows a subscription's filter calls this module:
the filter is validated here once (:func:`queuey.model.filters.parse_filter`,
which names the bad part) and kept with the queue's metadata
(:mod:`queuey.model.subscriptions`), where every backend's reserve and
statistics read it. A change is one write of one attribute of the queue
(merged inside the store's atomic write, so changing two subscriptions at
once loses neither); every API node applies it once its metadata cache
(``queuey.metadata_cache_seconds``) has the new value.

A filter applies to the messages its subscription has not reached yet: a
message the subscription walked past under an older filter, or has already
leased, stays as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from queuey.core.messages import InvalidFields
from queuey.core.queues import Queues
from queuey.model import QueueMeta
from queuey.model.filters import Filter, FilterError, parse_filter
from queuey.model.subscriptions import filter_key, filters

#: Most filtered subscriptions one queue may have (each one's statistics read
#: the messages it has not reached yet whole).
MAX_FILTERED = 20


@dataclass(frozen=True)
class SubscriptionSettings:
    """What is set for one subscription."""

    subscription: str
    filter: Filter | None

    def to_json(self) -> dict[str, Any]:
        return {
            "subscription": self.subscription,
            "filter": None if self.filter is None else self.filter.to_json(),
        }


class Subscriptions:
    """Reads and changes subscriptions' settings through the queue lifecycle."""

    def __init__(self, queues: Queues) -> None:
        self.queues = queues

    def settings(self, queue: QueueMeta) -> list[SubscriptionSettings]:
        """Every subscription with a setting (a filter), by name."""
        return [SubscriptionSettings(name, f) for name, f in sorted(filters(queue).items())]

    def configure(
        self, queue: QueueMeta, subscription: str, given: Mapping[str, Any]
    ) -> SubscriptionSettings:
        """Replace ``subscription``'s settings with ``given`` (``filter``
        absent: the subscription takes every message). Raises
        :class:`~queuey.core.messages.InvalidFields` naming the bad part."""
        value = given.get("filter")
        key = filter_key(subscription)
        if value is None:
            self.queues.update(queue.application, queue.name, attributes_removed=[key])
            return SubscriptionSettings(subscription, None)
        try:
            parsed = parse_filter(value)
        except FilterError as exc:
            raise InvalidFields({exc.part: str(exc)}) from None
        current = filters(self.queues.fresh(queue.application, queue.name))
        if subscription not in current and len(current) >= MAX_FILTERED:
            raise InvalidFields(
                {"filter": f"a queue may have at most {MAX_FILTERED} filtered subscriptions"}
            )
        self.queues.update(queue.application, queue.name, attributes_set={key: parsed.text})
        return SubscriptionSettings(subscription, parsed)
