"""Work-queue routes: reserve (with long polling), ack, release, extend, stats,
redrive, and explain (why a message is or is not handed out).

The views validate and answer; :mod:`queuey.core.workqueues` does the work (leases
through storage, dead letters, redrive) and :mod:`queuey.core.longpoll` bounds
the waiting.
"""

from __future__ import annotations

from queuey import tracing
from queuey.core.workqueues import Reservation
from queuey.model import ReceiptStatus
from queuey.web.params import form_or_json, json_body, query, validate
from queuey.web.responses import deliveries_response, explained, explanation_json, ok, shown
from queuey.wire import (
    PartitionStatsAnswer,
    RedriveAnswer,
    StatsAnswer,
    SubscriptionStatsAnswer,
)


def _outcome(statuses: dict[str, ReceiptStatus]) -> tuple[int, dict[str, str]]:
    """How many receipts worked, and why each other one did not."""
    failed = {receipt: status for receipt, status in statuses.items() if status != "acked"}
    return len(statuses) - len(failed), failed


def reserve(request):
    meta = request.context.meta
    params = validate(request.models.reserve, form_or_json(request), meta.partitions)
    service = request.services.workqueues
    dead_lettered = 0

    def attempt() -> Reservation:
        nonlocal dead_lettered
        reservation = service.reserve(
            meta,
            params.subscription,
            limit=params.limit,
            partitions=params.partitions,
            visibility_timeout=params.visibility_timeout,
        )
        dead_lettered += reservation.dead_lettered
        return reservation

    reservation = request.services.long_polls.wait_for(
        meta.application,
        meta.name,
        attempt,
        lambda found: bool(found.deliveries),
        params.wait,
    )
    request.metrics.messages_reserved(len(reservation.deliveries))
    request.metrics.messages_dead_lettered(dead_lettered)
    if reservation.deliveries and tracing.enabled():
        tracing.link_current(d.message.attributes for d in reservation.deliveries)
    return deliveries_response(reservation.deliveries)


def ack(request):
    meta = request.context.meta
    params = validate(request.models.ack, json_body(request))
    statuses = request.services.workqueues.ack(meta, params.subscription, params.receipts)
    acked, failed = _outcome(statuses)
    return ok(acked=acked, failed=failed)


def release(request):
    meta = request.context.meta
    params = validate(request.models.release, json_body(request))
    done = request.services.workqueues.release(
        meta, params.subscription, params.receipts, delay=params.delay, error=params.error
    )
    released, failed = _outcome(done.statuses)
    request.metrics.messages_released(released)
    request.metrics.messages_dead_lettered(done.dead_lettered)
    return ok(released=released, dead_lettered=done.dead_lettered, failed=failed)


def extend(request):
    meta = request.context.meta
    params = validate(request.models.extend, json_body(request))
    statuses = request.services.workqueues.extend(
        meta, params.subscription, params.receipts, params.visibility_timeout
    )
    extended, failed = _outcome(statuses)
    request.metrics.leases_extended(extended)
    return ok(extended=extended, failed=failed)


def stats(request):
    meta = request.context.meta
    found = request.services.workqueues.stats(meta)
    settings = request.services.subscriptions.settings(meta)
    filters = {s.subscription: s.filter.to_json() for s in settings if s.filter}
    parts = [shown(PartitionStatsAnswer, p) for p in found.partitions]
    subs = [
        shown(SubscriptionStatsAnswer, s, filter=filters.get(s.subscription))
        for s in found.subscriptions
    ]
    return ok(
        **shown(StatsAnswer, found, queue_name=meta.name, partitions=parts, subscriptions=subs)
    )


def redrive(request):
    meta = request.context.meta
    params = validate(request.models.redrive, form_or_json(request))
    result = request.services.workqueues.redrive(meta, params.limit)
    return ok(
        **shown(RedriveAnswer, result, skipped=len(result.skipped), skipped_messages=result.skipped)
    )


def explain(request):
    meta = request.context.meta
    params = validate(request.models.explain, query(request))
    return ok(**explanation_json(explained(request, meta, params.subscription)))
