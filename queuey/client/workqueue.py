"""The client's work-queue calls: reserve, ack, release, extend, stats, explain, redrive.

Mixed into both clients (:class:`~queuey.client.http.QueueyClient` and
:class:`~queuey.client.aio.AsyncQueueyClient`); each describes its call
(:func:`~queuey.client.answers.call`), which the client sends, so they fail
over between API nodes and retry like every call.

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
  A long poll its caller gave up (a cancelled task of the asyncio client) is
  undone: what it brings is released at once (``Call.undo``).
* ``redrive`` repeated moves nothing twice: the service skips a dead letter
  whose source message is already back in its subscription.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from queuey.client.answers import Call, Calls, call
from queuey.client.models import (
    QueueStats,
    ReceiptResult,
    RedriveResult,
    ReservedMessage,
    given,
)
from queuey.client.models import path_segment as _q
from queuey.tracing import received
from queuey.wire import AckAnswer, ExplainAnswer, ExtendAnswer, Record, ReleaseAnswer

#: ``subscription`` when none is given (docs/api.rst, "Work queues").
DEFAULT_SUBSCRIPTION = "default"


class WorkQueueCalls(Calls):
    """``reserve`` / ``ack`` / ``release`` / ``extend`` / ``stats`` / ``redrive``."""

    @call
    def reserve(
        self,
        queue: str,
        subscription: str = DEFAULT_SUBSCRIPTION,
        limit: int = 1,
        visibility_timeout: int | None = None,
        wait: int = 0,
        partitions: Sequence[int] | None = None,
    ) -> Call[list[ReservedMessage]]:
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
        return Call(
            "POST",
            f"/queue/{_q(queue)}/reserve",
            functools.partial(_reserved, queue),
            json=body,
            repeatable=True,
            timeout=self.timeout + max(0, wait),
            undo=lambda leased: _receipts(
                "release", queue, [m.receipt for m in leased], {"subscription": subscription}
            ),
        )

    @call
    def ack(
        self, queue: str, receipts: Sequence[str], subscription: str = DEFAULT_SUBSCRIPTION
    ) -> Call[ReceiptResult]:
        """Finish the messages: they are never delivered again in the subscription."""
        return _receipts("ack", queue, receipts, {"subscription": subscription})

    @call
    def release(
        self,
        queue: str,
        receipts: Sequence[str],
        subscription: str = DEFAULT_SUBSCRIPTION,
        delay: int | None = None,
        error: str | None = None,
    ) -> Call[ReceiptResult]:
        """End the leases now; the messages come back after ``delay`` seconds.

        ``error`` is kept as the messages' last error (a dead letter carries it
        as its ``last_error`` attribute). A message that used its queue's
        ``max_attempts`` goes to the dead-letter queue instead.
        """
        extra = given(subscription=subscription, delay=delay, error=error)
        return _receipts("release", queue, receipts, extra)

    @call
    def extend(
        self,
        queue: str,
        receipts: Sequence[str],
        visibility_timeout: int,
        subscription: str = DEFAULT_SUBSCRIPTION,
    ) -> Call[ReceiptResult]:
        """Make the leases end ``visibility_timeout`` seconds from now."""
        extra = {"subscription": subscription, "visibility_timeout": visibility_timeout}
        return _receipts("extend", queue, receipts, extra)

    @call
    def stats(self, queue: str) -> Call[QueueStats]:
        """Message counts of the queue, per partition and per subscription."""
        return Call("GET", f"/queue/{_q(queue)}/stats", QueueStats.from_json)

    @call
    def explain(
        self,
        queue: str,
        message_id: str,
        subscription: str = DEFAULT_SUBSCRIPTION,
        partition: int | None = None,
    ) -> Call[ExplainAnswer]:
        """Whether the message is handed out to ``subscription`` now and, if
        not, every reason with its values (docs/api.rst, "Explain a
        message"); without ``partition`` the service looks in every one."""
        ref = f"{partition}:{message_id}" if partition else message_id
        path = f"/queue/{_q(queue)}/messages/{_q(ref)}/explain"
        return Call("GET", path, ExplainAnswer.from_json, params={"subscription": subscription})

    @call
    def redrive(self, dead_letter_queue: str, limit: int | None = None) -> Call[RedriveResult]:
        """Move up to ``limit`` dead letters (default 1000) back to their queues."""
        path = f"/queue/{_q(dead_letter_queue)}/redrive"
        return Call("POST", path, RedriveResult.from_json, json=given(limit=limit), repeatable=True)


def _reserved(queue: str, data: Mapping[str, Any]) -> list[ReservedMessage]:
    """The reserved messages; with a span marking them received, linked to
    each one's producer (:func:`queuey.tracing.received`; a no-op without an SDK)."""
    messages = [ReservedMessage.from_json(m) for m in data["messages"]]
    if messages:
        name = f"queuey receive {queue}"
        received(name, [m.attributes for m in messages], **{"messaging.destination.name": queue})
    return messages


def _receipts(
    action: str, queue: str, receipts: Sequence[str], extra: Mapping[str, Any]
) -> Call[ReceiptResult]:
    """The ``ack`` / ``release`` / ``extend`` call of ``receipts`` (none: no call)."""
    if not receipts:
        return Call.answered(ReceiptResult(0, {}))
    body = {**extra, "receipts": list(receipts)}
    parse = functools.partial(_receipt_result, action)
    return Call("POST", f"/queue/{_q(queue)}/{action}", parse, json=body, repeatable=True)


def _receipt_result(action: str, data: Mapping[str, Any]) -> ReceiptResult:
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
