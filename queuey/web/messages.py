"""Posting, reading, fetching and deleting messages."""

from __future__ import annotations

from typing import Any

from queuey import ids
from queuey.core.messages import InvalidFields, InvalidMessage
from queuey.limits import MAX_READ
from queuey.model import MessageRef, NewMessage, QueueMeta
from queuey.placement import random_partition
from queuey.tracing import traced
from queuey.web.params import (
    InvalidParameters,
    PayloadTooLarge,
    json_body,
    path_param,
    query,
    validate,
)
from queuey.web.responses import message_ref, messages_response, ok


def new_message(
    request, meta: QueueMeta, body: Any, placement, default_partition: int, prefix: str
) -> NewMessage:
    """One message, placed, by the core's rules (:meth:`MessageRules.from_json
    <queuey.core.messages.MessageRules.from_json>`), worded as the API words
    them: each field named with ``prefix`` (``messages[3].`` in a batch), a
    body too large a 413."""
    try:
        return request.services.rules.from_json(meta, body, placement, default_partition)
    except InvalidFields as exc:
        raise InvalidParameters({prefix + k: v for k, v in exc.errors.items()}) from None
    except InvalidMessage as exc:  # only a body too large comes alone
        raise PayloadTooLarge(prefix + "body", str(exc)) from None


def _stored(request, meta: QueueMeta, messages: list[NewMessage]):
    """Store ``messages``, each with the request's trace context when it has
    none of its own (:func:`queuey.tracing.traced`), and answer with their ids."""
    environ = request.environ
    if "HTTP_TRACEPARENT" in environ:
        messages = traced(messages, environ["HTTP_TRACEPARENT"], environ.get("HTTP_TRACESTATE"))
    stored = request.services.workqueues.post(meta, messages)
    return ok(201, messages=[message_ref(m) for m in stored])


def post_message(request):
    meta = request.context.meta
    body = json_body(request)
    placement = validate(request.models.placement, query(request), meta.partitions)
    message = new_message(request, meta, body, placement, random_partition(meta.partitions), "")
    return _stored(request, meta, [message])


def post_batch(request):
    meta = request.context.meta
    limit = request.services.settings.max_batch_messages
    payload = json_body(request)
    entries = payload.get("messages") if isinstance(payload, dict) else None
    if isinstance(entries, list) and len(entries) > limit:
        raise PayloadTooLarge("messages", f"a batch holds at most {limit} messages")
    batch = validate(request.models.batch, payload, meta.partitions)
    errors: dict[str, str] = {}
    messages = []
    # Messages without a placement share one random partition per batch: still
    # spread over the queue batch by batch, and a batch stays one storage write.
    shared_partition = random_partition(meta.partitions)
    for index, entry in enumerate(batch.messages):
        try:
            messages.append(
                new_message(
                    request, meta, entry.body, entry, shared_partition, f"messages[{index}]."
                )
            )
        except InvalidParameters as exc:
            errors.update(exc.errors)
    if errors:
        raise InvalidParameters(errors)
    return _stored(request, meta, messages)


def read_messages(request):
    meta = request.context.meta
    params = validate(request.models.read, query(request), meta.partitions)
    messages = request.services.workqueues.read(
        meta,
        partitions=params.partitions or meta.partition_numbers,
        limit=params.limit,
        order=params.order,
        after_id=ids.parse_message_id(params.since) if params.since else None,
        after_micros=ids.parse_seconds(params.since_timestamp) if params.since_timestamp else None,
    )
    request.metrics.messages_read(len(messages))
    return messages_response(messages)


def _refs(request, meta: QueueMeta) -> list[MessageRef]:
    items = path_param(request, "ids").split(",")
    if len(items) > MAX_READ:
        raise InvalidParameters({"ids": f"give 1 to {MAX_READ} message ids"})
    refs = []
    for item in items:
        partition_text, _, id_text = item.rpartition(":")
        partition = int(partition_text) if partition_text else 1
        if partition > meta.partitions:
            raise InvalidParameters(
                {"ids": f"partition {partition} is not between 1 and {meta.partitions}"}
            )
        refs.append(MessageRef(partition, ids.parse_message_id(id_text)))
    return refs


def get_messages(request):
    meta = request.context.meta
    found = request.storage.get_messages(meta, _refs(request, meta), request.clock.now_micros())
    return messages_response(found)


def delete_messages(request):
    meta = request.context.meta
    request.storage.delete_messages(meta, _refs(request, meta))
    return ok()
