"""What flow control refuses, each one entry of :data:`queuey.errors.CATALOGUE`
(its HTTP status there); the exception names the setting or quota.

Every door maps these once, by entry: the REST API answers the status with
``{field: text}`` (and ``Retry-After`` when ``retry_after`` is set), the SQS
endpoint in its own codes (:data:`queuey.sqs.errors.REFUSALS`), the admin
pages with a page naming the refusal.
"""

from __future__ import annotations

from queuey.errors import Catalogued


class FlowRefused(Catalogued):
    """A post refused by flow control: ``field`` names the setting or quota,
    ``status`` is the HTTP status, ``retry_after`` the seconds to wait."""

    def __init__(self, field: str, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.retry_after = retry_after


class QueuePaused(FlowRefused, entry="queue_paused"):
    """The queue is paused: it takes no posts."""


class RateLimited(FlowRefused, entry="rate_limited"):
    """Over a post rate of the queue or the application."""


class QueueFull(FlowRefused, entry="queue_full"):
    """The queue holds its ``max_length`` (overflow reject)."""


class QuotaExceeded(FlowRefused, entry="quota_exceeded"):
    """The application stores as many messages or bytes as it may."""


class PriorityOnFairQueue(FlowRefused, entry="priority_on_fair_queue"):
    """A post naming a priority on a fair queue."""


class BatchOverBurst(FlowRefused, entry="batch_over_burst"):
    """A batch larger than a rate's burst: it can never pass whole (send smaller ones)."""


class TooManySubscriptions(FlowRefused, entry="too_many_subscriptions"):
    """A new subscription past the queue's ``max_subscriptions``."""


class TableFull(FlowRefused, entry="table_full"):
    """An application holds as many counted keys (rate buckets, counted
    queues) as its table allows: retry later, or an operator raises
    ``queuey.flow.keys_per_application``."""
