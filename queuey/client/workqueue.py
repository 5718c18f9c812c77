"""The client's work-queue calls: reserve, ack, release, extend, stats, redrive.

Mixed into :class:`~queuey.client.http.QueueyClient`; they go through its
``_request``, so they fail over between API nodes and retry like every call.

Retrying is safe for each of them, so each is repeated on a ``503`` or a lost
answer (at most ``retries`` times, as a read is):

* ``ack`` and ``extend`` of the same receipt twice have the effect of once
  (an ack the service already took answers ``acked`` again);
* ``release`` repeated after a lost answer finds the lease already ended and
  reports the receipt ``expired``: the message was released all the same;
* ``reserve`` repeated after a lost answer never hands a message to two
  consumers: the messages of the lost answer stay leased to nobody until their
  visibility timeout ends, then come back (with one more attempt counted).
  A lost answer delays those messages; it loses none. The client retries it.
* ``redrive`` repeated moves nothing twice: the service skips a dead letter
  whose source message is already back in its subscription.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from queuey.client.models import (
    HostCalls,
    QueueStats,
    ReceiptResult,
    RedriveResult,
    ReservedMessage,
    given,
)
from queuey.client.models import path_segment as _q
from queuey.wire import AckAnswer, ExtendAnswer, Record, ReleaseAnswer

#: ``subscription`` when none is given (docs/api.rst, "Work queues").
DEFAULT_SUBSCRIPTION = "default"


class WorkQueueCalls(HostCalls):
    """``reserve`` / ``ack`` / ``release`` / ``extend`` / ``stats`` / ``redrive``."""

    def reserve(
        self,
        queue: str,
        subscription: str = DEFAULT_SUBSCRIPTION,
        limit: int = 1,
        visibility_timeout: int | None = None,
        wait: int = 0,
        partitions: Sequence[int] | None = None,
    ) -> list[ReservedMessage]:
        """Lease up to ``limit`` messages (1-100) to this consumer.

        Each is handed to nobody else for ``visibility_timeout`` seconds (the
        queue's when ``None``), unless released: ack it before then, extend
        its lease, or release it. ``wait``: seconds (0-20) the service may hold
        the call while nothing is available (a long poll); the call's timeout
        grows by as much. ``[]`` when nothing came within ``wait``.
        """
        body = given(
            subscription=subscription,
            limit=limit,
            visibility_timeout=visibility_timeout,
            wait=wait or None,
            partitions=",".join(str(p) for p in partitions) if partitions else None,
        )
        data = self._request(
            "POST",
            f"/queue/{_q(queue)}/reserve",
            json=body,
            repeatable=True,
            timeout=self.timeout + max(0, wait),
        )
        return [ReservedMessage.from_json(m) for m in data["messages"]]

    def ack(
        self, queue: str, receipts: Sequence[str], subscription: str = DEFAULT_SUBSCRIPTION
    ) -> ReceiptResult:
        """Finish the messages: they are never delivered again in the subscription."""
        return self._receipts("ack", queue, receipts, {"subscription": subscription})

    def release(
        self,
        queue: str,
        receipts: Sequence[str],
        subscription: str = DEFAULT_SUBSCRIPTION,
        delay: int | None = None,
        error: str | None = None,
    ) -> ReceiptResult:
        """End the leases now; the messages come back after ``delay`` seconds.

        ``error`` is kept as the messages' last error (a dead letter carries it
        as its ``last_error`` attribute). A message that used its queue's
        ``max_attempts`` goes to the dead-letter queue instead.
        """
        extra = given(subscription=subscription, delay=delay, error=error)
        return self._receipts("release", queue, receipts, extra)

    def extend(
        self,
        queue: str,
        receipts: Sequence[str],
        visibility_timeout: int,
        subscription: str = DEFAULT_SUBSCRIPTION,
    ) -> ReceiptResult:
        """Make the leases end ``visibility_timeout`` seconds from now."""
        extra = {"subscription": subscription, "visibility_timeout": visibility_timeout}
        return self._receipts("extend", queue, receipts, extra)

    def stats(self, queue: str) -> QueueStats:
        """Message counts of the queue, per partition and per subscription."""
        return QueueStats.from_json(self._request("GET", f"/queue/{_q(queue)}/stats"))

    def redrive(self, dead_letter_queue: str, limit: int | None = None) -> RedriveResult:
        """Move up to ``limit`` dead letters (default 1000) back to their queues."""
        data = self._request(
            "POST",
            f"/queue/{_q(dead_letter_queue)}/redrive",
            json=given(limit=limit),
            repeatable=True,
        )
        return RedriveResult.from_json(data)

    def _receipts(
        self, action: str, queue: str, receipts: Sequence[str], extra: Mapping[str, Any]
    ) -> ReceiptResult:
        if not receipts:
            return ReceiptResult(0, {})
        body = {**extra, "receipts": list(receipts)}
        data = self._request("POST", f"/queue/{_q(queue)}/{action}", json=body, repeatable=True)
        model, done = _ANSWERS[action]
        answer = model.from_json(data)
        dead_lettered = getattr(answer, "dead_lettered", 0)
        return ReceiptResult(getattr(answer, done), dict(answer.failed), dead_lettered)


#: Each receipt call's answer and the field that counts the receipts it took.
_ANSWERS: dict[str, tuple[type[Record], str]] = {
    "ack": (AckAnswer, "acked"),
    "release": (ReleaseAnswer, "released"),
    "extend": (ExtendAnswer, "extended"),
}
