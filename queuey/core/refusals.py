"""What flow control refuses, each with its HTTP status and the setting it names.

Every door maps these once: the REST API answers ``status`` with
``{field: text}`` (and ``Retry-After`` when ``retry_after`` is set), the SQS
endpoint in its own codes (:func:`queuey.sqs.views.flow_error`), the admin
pages with a page naming the refusal.
"""

from __future__ import annotations


class FlowRefused(Exception):
    """A post refused by flow control: ``field`` names the setting or quota,
    ``status`` is the HTTP status, ``retry_after`` the seconds to wait."""

    status = 429

    def __init__(self, field: str, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.retry_after = retry_after


class QueuePaused(FlowRefused):
    status = 503


class RateLimited(FlowRefused):
    status = 429


class QueueFull(FlowRefused):
    status = 507


class QuotaExceeded(FlowRefused):
    status = 507


class PriorityOnFairQueue(FlowRefused):
    status = 400


class BatchOverBurst(FlowRefused):
    """A batch larger than a rate's burst: it can never pass whole (send smaller ones)."""

    status = 413


class TooManySubscriptions(FlowRefused):
    """A new subscription past the queue's ``max_subscriptions``."""

    status = 403


class TableFull(FlowRefused):
    """An application holds as many counted keys (rate buckets, counted
    queues) as its table allows: retry later, or an operator raises
    ``queuey.flow.keys_per_application``."""

    status = 503
