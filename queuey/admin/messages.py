"""Browsing a queue's messages newest first, and posting a test message.

Browsing pages backwards in time: each page holds the newest messages strictly
older than the page before's last one (``before``, seconds as the API spells
timestamps). Messages of several partitions minted in the very same
microsecond could straddle a page boundary; ids are minted a microsecond
apart per node, so that takes two nodes and a coincidence.

A test message goes through the API's placement model and the core's message
rules (:meth:`queuey.core.messages.MessageRules.from_json`) and is stored by
:meth:`WorkQueues.post`, so metrics, long polls and the overview see it like
any other.
"""

from __future__ import annotations

from queuey import ids, jsonio
from queuey.admin.helpers import admin_view, done, filled
from queuey.admin.queues import queue_page
from queuey.core.flow import FlowRefused
from queuey.core.messages import InvalidFields, InvalidMessage
from queuey.placement import random_partition
from queuey.web.params import InvalidParameters, PayloadTooLarge, query, validate
from queuey.web.responses import explained, explanation_json, timestamp_json
from queuey.wire import ExplainAnswer
from queuey.wire.explain import describe

#: Messages per page.
PAGE = 20
#: The post form's placement fields, in the API's names.
PLACEMENT_FIELDS = ("partition", "partition_key", "ttl", "delay", "priority", "dedup_id")


def read_page(request, meta, before: str | None, limit: int = PAGE):
    """The newest ``limit`` readable messages older than ``before`` (seconds)."""
    try:
        until = ids.parse_seconds(before) if before else None
    except ValueError:
        raise InvalidParameters({"before": "must be seconds since the epoch"}) from None
    return request.services.workqueues.read(
        meta, until, partitions=meta.partition_numbers, limit=limit
    )


def browsed(request, meta) -> tuple[list, str | None, str | None]:
    """The page of ``meta``'s messages the query's ``before`` asks for (none
    when there is no such queue), that ``before``, and the next page's."""
    before = query(request).get("before") or None
    found = read_page(request, meta, before) if meta is not None else []
    return found, before, timestamp_json(found[-1].timestamp) if len(found) == PAGE else None


@admin_view("admin.messages", template="messages")
def browse(request):
    messages, before, older = browsed(request, request.context.meta)
    return {"meta": request.context.meta, "messages": messages, "before": before, "older": older}


@admin_view("admin.post", "POST", "queue")
def post_message(request):
    meta = request.context.meta
    settings = request.services.settings
    form = {name: request.admin_form.get(name, "") for name in ("body", *PLACEMENT_FIELDS)}
    given = filled(request, PLACEMENT_FIELDS)
    try:
        raw = form["body"].encode("utf-8")
        if len(raw) > settings.max_message_size:
            raise PayloadTooLarge(
                "body", f"the message is larger than {settings.max_message_size} bytes"
            )
        body = jsonio.loads(raw)
        placement = validate(request.models.placement, given, meta.partitions)
        message = request.services.rules.from_json(
            meta, body, placement, random_partition(meta.partitions)
        )
        (stored,) = request.services.workqueues.post(meta, [message])
    except (InvalidParameters, InvalidFields) as exc:
        errors = exc.errors
    except (PayloadTooLarge, InvalidMessage, jsonio.InvalidJSON, jsonio.NotJSON) as exc:
        errors = {getattr(exc, "field", "body"): str(exc)}
    except FlowRefused as exc:  # paused, full, over a rate or a quota: the form stays
        request.response.status = exc.status
        if exc.retry_after:
            request.response.headers["Retry-After"] = str(exc.retry_after)
        return queue_page(request, post=form, post_errors={exc.field: str(exc)})
    else:
        request.services.overview.refresh(meta)
        said = f"Posted message {stored.id.hex} to partition {stored.partition}."
        return done(request, said, "admin.queue", name=meta.name)
    request.response.status = 400
    return queue_page(request, post=form, post_errors=errors)


@admin_view("admin.message", template="message")
def message_page(request):
    """One message and why it is or is not handed out to a subscription
    (``?subscription=``, default ``default``): the API's explain answer."""
    meta = request.context.meta
    params = validate(request.models.explain, query(request))
    found = explained(request, meta, params.subscription)
    record = ExplainAnswer.from_json({"status": "ok", **explanation_json(found)})
    return {
        "meta": meta,
        "message": found.message,
        "answer": record,
        "reasons": [(reason, describe(reason)) for reason in record.reasons],
    }
