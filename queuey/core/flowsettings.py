"""Changing flow-control settings: the one way every door does it.

The REST API, the admin page and the command line call :class:`FlowSettings`;
it checks the fields (:mod:`queuey.model.flow`, errors naming each field) and
writes only the attributes they change, merged inside the store's atomic
write (two operators changing different settings at once lose neither). The
process that made the change drops its cached metadata at once
(:class:`queuey.core.queues.QueueCache`); every other API process applies it
once its cache has the new value (``queuey.metadata_cache_seconds``), and
processes of one host sharing a SQLite file at once.

A resume wakes this process's long polls on the queue, so a waiting consumer
does not wait for its next poll interval.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from queuey.core.messages import InvalidFields
from queuey.core.queues import Queues
from queuey.core.subscriptionlimit import SubscriptionLimit
from queuey.model import QueueMeta
from queuey.model.flow import (
    FlowSettingError,
    SubscriptionFlow,
    queue_changes,
    queue_flow,
    subscription_changes,
    subscription_flow,
    subscription_flows,
)


class FlowSettings:
    """Reads and changes a queue's and its subscriptions' flow settings."""

    def __init__(
        self,
        queues: Queues,
        on_resumed: Callable[[str, str], None] = lambda app, name: None,
        subscription_limit: SubscriptionLimit | None = None,
        on_limited: Callable[[QueueMeta], None] = lambda meta: None,
    ) -> None:
        self.queues = queues
        self.on_resumed = on_resumed
        #: Bounds the subscriptions a setting may name into being.
        self.subscription_limit = subscription_limit
        #: Called with a queue given a ``max_length`` it did not have, so its
        #: messages are counted at once (the overview measures it).
        self.on_limited = on_limited

    @staticmethod
    def describe(meta: QueueMeta) -> dict[str, Any]:
        """The queue's settings and every subscription's that has one."""
        return {
            "queue": queue_flow(meta).to_json(),
            "subscriptions": {
                name: flow.to_json() for name, flow in subscription_flows(meta).items()
            },
        }

    def _apply(
        self,
        meta: QueueMeta,
        changes: tuple[dict[str, str], list[str]],
        subscription: str | None = None,
    ) -> QueueMeta:
        set_, removed = changes
        if not set_ and not removed:
            return meta
        if subscription is not None and set_ and self.subscription_limit is not None:
            self.subscription_limit.check(meta, subscription)
        updated = self.queues.update(
            meta.application, meta.name, attributes_set=set_, attributes_removed=removed
        )
        if removed:  # something was turned off: a pause or a limit lifted
            self.on_resumed(meta.application, meta.name)
        return updated

    def change_queue(self, meta: QueueMeta, given: Mapping[str, Any]) -> QueueMeta:
        """Apply the queue fields in ``given`` (absent ones stay);
        :class:`~queuey.core.messages.InvalidFields` names each bad one."""
        updated = self._apply(meta, _checked(queue_changes, meta, given))
        if queue_flow(updated).max_length and not queue_flow(meta).max_length:
            self.on_limited(updated)
        return updated

    def change_subscription(
        self, meta: QueueMeta, subscription: str, given: Mapping[str, Any]
    ) -> SubscriptionFlow:
        """Apply the subscription fields in ``given`` (absent ones stay)."""
        changes = _checked(subscription_changes, subscription, given)
        return subscription_flow(self._apply(meta, changes, subscription), subscription)

    def pause(self, meta: QueueMeta, subscription: str | None = None) -> QueueMeta:
        """Pause the queue's posts, or ``subscription``'s deliveries."""
        return self._paused(meta, subscription, True)

    def resume(self, meta: QueueMeta, subscription: str | None = None) -> QueueMeta:
        """Lift a pause of the queue's posts, or of ``subscription``'s deliveries."""
        return self._paused(meta, subscription, False)

    def _paused(self, meta: QueueMeta, subscription: str | None, paused: bool) -> QueueMeta:
        given = {"paused": paused}
        if subscription is None:
            return self.change_queue(meta, given)
        return self._apply(meta, _checked(subscription_changes, subscription, given), subscription)


def _checked(changes: Callable[..., tuple[dict[str, str], list[str]]], *args: Any):
    """``changes(*args)``; :class:`~queuey.core.messages.InvalidFields` naming
    each bad field when they do not parse."""
    try:
        return changes(*args)
    except FlowSettingError as exc:
        raise InvalidFields(exc.errors) from None
