"""How many subscriptions one queue may have (``max_subscriptions``).

A reserve names its subscription into being, and every subscription costs
the store a lease state per partition, its statistics a scan, and the
dead-letter path a copy of each message it gives up on. So the names are
bounded per queue, by the application's ``max_subscriptions``
(:mod:`queuey.core.quotas`): a reserve naming a new subscription, or a
setting (filter, pause, rate, cap) for one, past the limit is refused with
:class:`~queuey.core.flow.TooManySubscriptions` (403, naming
``max_subscriptions``).

The subscriptions counted are those the store lists
(:meth:`queuey.storage.Storage.subscriptions`) and those with a setting.
Known names are cached per queue incarnation, so a reserve of a known
subscription costs a set lookup; a new name costs one store read. Two
processes adding new names at the same moment may each pass at the limit
less one: the bound may be passed by one name per process adding at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from queuey.core.refusals import TooManySubscriptions
from queuey.model import QueueMeta
from queuey.model.flow import subscription_flows
from queuey.model.subscriptions import filters
from queuey.storage import Storage

#: Queues whose known subscriptions one process remembers.
MAX_QUEUES = 10_000


def configured(queue: QueueMeta) -> set[str]:
    """The subscriptions with a setting (a filter or a flow setting)."""
    return set(filters(queue)) | set(subscription_flows(queue))


class SubscriptionLimit:
    """The ``max_subscriptions`` check, for reserves and settings alike.

    ``limit_of(application)``: the application's ``max_subscriptions`` (0: none).
    """

    def __init__(self, storage: Storage, limit_of: Callable[[str], int]) -> None:
        self.storage = storage
        self.limit_of = limit_of
        self._known: dict[str, set[str]] = {}
        self._lock = threading.Lock()

    def check(self, queue: QueueMeta, subscription: str) -> None:
        """Let ``subscription`` be used on ``queue``, or :class:`TooManySubscriptions`."""
        limit = self.limit_of(queue.application)
        if not limit:
            return
        known = self._known.get(queue.incarnation)
        if known is not None and subscription in known:
            return
        names = set(self.storage.subscriptions(queue)) | configured(queue)
        if subscription not in names and len(names) >= limit:
            raise TooManySubscriptions(
                "max_subscriptions",
                f"queue {queue.name} has {len(names)} subscriptions, the most a queue of "
                f"application {queue.application} may have (max_subscriptions = {limit}); "
                "use one of them (a purge starts the queue again with none)",
            )
        names.add(subscription)
        with self._lock:
            if len(self._known) >= MAX_QUEUES:
                self._known.clear()
            self._known[queue.incarnation] = names
