"""Posting, reading, fetching and deleting messages."""

from __future__ import annotations

from typing import Any

from pyramid.view import view_config

from queuey import ids
from queuey.limits import DEFAULT_READ, MAX_READ
from queuey.placement import partition_for_key, random_partition
from queuey.storage import MessageRef, NewMessage, QueueMeta, ReadQuery
from queuey.web.params import (
    ORDERS,
    InvalidParameters,
    Params,
    PayloadTooLarge,
    dump_json,
    json_body,
)
from queuey.web.responses import message_ref, messages_response, ok
from queuey.web.security import Permission


def _new_message(
    request, meta: QueueMeta, body: Any, params: Params, default_partition: int
) -> NewMessage | None:
    """Validate one message and its placement; errors go into ``params``."""
    settings = request.registry.queuey_settings
    partition = params.integer("partition", None, 1, meta.partitions)
    key = params.string("partition_key")
    ttl = params.integer("ttl", meta.ttl, 1, settings.max_ttl)
    if params.has("partition") and params.has("partition_key"):
        params.fail("partition_key", "give either partition or partition_key, not both")
    if not isinstance(body, dict):
        params.fail("body", "a message must be a JSON object")
        return None
    text = dump_json(body)
    if len(text.encode("utf-8")) > settings.max_message_size:
        raise PayloadTooLarge(
            params.prefix + "body",
            f"the message is larger than {settings.max_message_size} bytes",
        )
    if partition is None:
        if key is not None:
            partition = partition_for_key(key, meta.partitions)
        else:
            partition = default_partition
    return NewMessage(body=text, partition=partition, ttl=ttl)


@view_config(route_name="queue", request_method="POST", permission=Permission.MANAGE)
def post_message(request):
    meta = request.context.meta
    settings = request.registry.queuey_settings
    body = json_body(request, settings.max_message_size)
    params = Params(request.GET)
    message = _new_message(request, meta, body, params, random_partition(meta.partitions))
    params.check()
    stored = request.storage.put_messages(meta, [message])
    request.metrics.messages_posted(len(stored))
    return ok(201, messages=[message_ref(m) for m in stored])


@view_config(route_name="queue_batch", request_method="POST", permission=Permission.MANAGE)
def post_batch(request):
    meta = request.context.meta
    settings = request.registry.queuey_settings
    limit = settings.max_batch_messages
    payload = json_body(request, settings.max_batch_size)
    entries = payload.get("messages") if isinstance(payload, dict) else None
    if not isinstance(entries, list) or not entries:
        raise InvalidParameters({"messages": 'expected {"messages": [{"body": {...}}, ...]}'})
    if len(entries) > limit:
        raise PayloadTooLarge("messages", f"a batch holds at most {limit} messages")
    errors: dict[str, str] = {}
    messages = []
    # Messages without a placement share one random partition per batch: still
    # spread over the queue batch by batch, and a batch stays one storage write.
    shared_partition = random_partition(meta.partitions)
    for index, entry in enumerate(entries):
        params = Params(entry if isinstance(entry, dict) else {}, prefix=f"messages[{index}].")
        if not isinstance(entry, dict):
            params.fail("body", "each entry must be an object with a body")
        else:
            message = _new_message(request, meta, entry.get("body"), params, shared_partition)
            if message is not None:
                messages.append(message)
        errors.update(params.errors)
    if errors:
        raise InvalidParameters(errors)
    stored = request.storage.put_messages(meta, messages)
    request.metrics.messages_posted(len(stored))
    return ok(201, messages=[message_ref(m) for m in stored])


@view_config(route_name="queue", request_method="GET", permission=Permission.READ)
def read_messages(request):
    meta = request.context.meta
    params = Params(request.GET)
    after_id = params.message_id("since")
    after_micros = params.timestamp("since_timestamp")
    limit = params.integer("limit", DEFAULT_READ, 1, MAX_READ)
    order = params.choice("order", "descending", ORDERS)
    partitions = params.partitions("partitions", meta.partitions)
    params.check()
    now = request.clock.now_micros()
    delay = request.registry.queuey_settings.read_delay_micros
    messages = request.storage.read_messages(
        meta,
        ReadQuery(
            partitions=partitions or list(range(1, meta.partitions + 1)),
            now_micros=now,
            limit=limit,
            order=order,
            after_id=after_id,
            after_micros=after_micros,
            until_micros=now - delay if delay else None,
        ),
    )
    request.metrics.messages_read(len(messages))
    return messages_response(messages)


def _refs(request, meta: QueueMeta) -> list[MessageRef]:
    refs = []
    items = [item for item in request.matchdict["ids"].split(",") if item]
    if not items or len(items) > MAX_READ:
        raise InvalidParameters({"ids": f"give 1 to {MAX_READ} message ids"})
    for item in items:
        partition_text, sep, id_text = item.rpartition(":")
        try:
            partition = int(partition_text) if sep else 1
            message_id = ids.parse_id(id_text)
        except (ValueError, ids.InvalidId):
            raise InvalidParameters({"ids": f"{item!r} is not [partition:]message_id"}) from None
        if not 1 <= partition <= meta.partitions:
            raise InvalidParameters(
                {"ids": f"partition {partition} is not between 1 and {meta.partitions}"}
            )
        refs.append(MessageRef(partition, message_id))
    return refs


@view_config(route_name="queue_messages", request_method="GET", permission=Permission.READ)
def get_messages(request):
    meta = request.context.meta
    found = request.storage.get_messages(meta, _refs(request, meta), request.clock.now_micros())
    return messages_response(found)


@view_config(route_name="queue_messages", request_method="DELETE", permission=Permission.MANAGE)
def delete_messages(request):
    meta = request.context.meta
    request.storage.delete_messages(meta, _refs(request, meta))
    return ok()
