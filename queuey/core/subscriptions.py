"""Subscription settings: a work-queue subscription's filter and flow settings.

Every door that changes or shows a subscription's settings calls this module:
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

A subscription's flow settings (pause, rate, in-flight cap:
:mod:`queuey.model.flow`) are shown beside its filter and changed through
:class:`queuey.core.flowsettings.FlowSettings`; :meth:`Subscriptions.configure`
takes both in one call and says which a change touches.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from queuey.core.flowsettings import FlowSettings
from queuey.core.messages import InvalidFields
from queuey.core.queues import Queues
from queuey.core.subscriptionlimit import SubscriptionLimit
from queuey.model import QueueMeta
from queuey.model.filters import Filter, FilterError, parse_filter
from queuey.model.flow import (
    NO_SUBSCRIPTION_FLOW,
    SUBSCRIPTION_FIELDS,
    FlowSettingError,
    SubscriptionFlow,
    subscription_changes,
    subscription_flow,
    subscription_flows,
)
from queuey.model.subscriptions import filter_key, filters, subscription_filter

#: Most filtered subscriptions one queue may have (each one's statistics read
#: the messages it has not reached yet whole).
MAX_FILTERED = 20


@dataclass(frozen=True)
class SubscriptionSettings:
    """What is set for one subscription."""

    subscription: str
    filter: Filter | None
    flow: SubscriptionFlow = NO_SUBSCRIPTION_FLOW

    def to_json(self) -> dict[str, Any]:
        return {
            "subscription": self.subscription,
            "filter": None if self.filter is None else self.filter.to_json(),
            "flow": self.flow.to_json(),
        }


class Subscriptions:
    """Reads and changes subscriptions' settings through the queue lifecycle."""

    def __init__(self, queues: Queues, limit: SubscriptionLimit | None = None) -> None:
        self.queues = queues
        #: Bounds the subscriptions a filter may name into being.
        self.limit = limit

    def settings(self, queue: QueueMeta) -> list[SubscriptionSettings]:
        """Every subscription with a setting (a filter or a flow setting), by name."""
        found = filters(queue)
        flows = subscription_flows(queue)
        return [
            SubscriptionSettings(name, found.get(name), flows.get(name, NO_SUBSCRIPTION_FLOW))
            for name in sorted(set(found) | set(flows))
        ]

    @staticmethod
    def setting(queue: QueueMeta, subscription: str) -> SubscriptionSettings:
        """``subscription``'s settings on ``queue`` (the defaults when it has none)."""
        return SubscriptionSettings(
            subscription,
            subscription_filter(queue, subscription),
            subscription_flow(queue, subscription),
        )

    def configure(
        self,
        queue: QueueMeta,
        subscription: str,
        given: Mapping[str, Any],
        flow: FlowSettings | None = None,
    ) -> SubscriptionSettings:
        """Change ``subscription``'s settings named in ``given``; its settings after.

        The flow fields (:data:`~queuey.model.flow.SUBSCRIPTION_FIELDS`) go
        through ``flow``; those absent stay as they are. ``filter``: a filter
        replaces the subscription's, ``None`` removes it (the subscription
        takes every message). ``filter`` absent removes it too when ``given``
        names no flow field (a body of only a filter, or of nothing, sets the
        filter as it always did), and leaves it as it is otherwise (pausing a
        subscription keeps its filter). Every field is checked before
        anything is written: :class:`~queuey.core.messages.InvalidFields`
        names each bad one.
        """
        flow_given = {k: v for k, v in given.items() if k in SUBSCRIPTION_FIELDS}
        changes_filter = "filter" in given or not flow_given
        value = given.get("filter") if changes_filter else None
        errors: dict[str, str] = {}
        parsed = None
        if value is not None:
            try:
                parsed = parse_filter(value)
            except FilterError as exc:
                errors[exc.part] = str(exc)
        try:
            subscription_changes(subscription, flow_given)
        except FlowSettingError as exc:
            errors.update(exc.errors)
        if errors:
            raise InvalidFields(errors)
        if parsed is not None:
            if self.limit is not None:
                self.limit.check(queue, subscription)
            current = filters(self.queues.fresh(queue.application, queue.name))
            if subscription not in current and len(current) >= MAX_FILTERED:
                raise InvalidFields(
                    {"filter": f"a queue may have at most {MAX_FILTERED} filtered subscriptions"}
                )
        if flow_given:
            (flow or FlowSettings(self.queues)).change_subscription(queue, subscription, flow_given)
        if changes_filter:
            key = filter_key(subscription)
            if parsed is None:
                queue = self.queues.update(queue.application, queue.name, attributes_removed=[key])
            else:
                queue = self.queues.update(
                    queue.application, queue.name, attributes_set={key: parsed.text}
                )
        else:
            queue = self.queues.get(queue.application, queue.name)
        return self.setting(queue, subscription)
