"""Queue management: create, list, inspect, update, delete, purge."""

from __future__ import annotations

import uuid

from pyramid.view import view_config

from queuey.limits import DEFAULT_READ, MAX_READ
from queuey.storage import QueueMeta
from queuey.web.params import QUEUE_NAME, Params, form_or_json
from queuey.web.responses import ok, queue_json
from queuey.web.security import Permission

TYPES = ("public", "private")
CONSISTENCIES = ("weak", "strong", "very_strong")


def _body_limit(request) -> int:
    return request.registry.queuey_settings.max_message_size


@view_config(route_name="queues", request_method="POST", permission=Permission.MANAGE)
def create_queue(request):
    settings = request.registry.queuey_settings
    params = Params(form_or_json(request, _body_limit(request)))
    name = params.pattern("queue_name", None, QUEUE_NAME, "must match [A-Za-z0-9_-]{1,50}")
    partitions = params.integer("partitions", 1, 1, settings.max_partitions)
    ttl = params.integer("ttl", settings.default_ttl, 1, settings.max_ttl)
    queue_type = params.choice("type", "public", TYPES)
    consistency = params.choice("consistency", "strong", CONSISTENCIES)
    params.check()
    meta = request.storage.create_queue(
        QueueMeta(
            application=request.identity.application.name,
            name=name or uuid.uuid4().hex,
            partitions=partitions,
            ttl=ttl,
            type=queue_type,
            consistency=consistency,
            created=request.clock.now_micros(),
        )
    )
    return ok(201, **queue_json(meta))


@view_config(route_name="queues", request_method="GET", permission=Permission.MANAGE)
def list_queues(request):
    params = Params(request.GET)
    limit = params.integer("limit", DEFAULT_READ, 1, MAX_READ)
    after = params.pattern("offset", None, QUEUE_NAME, "must be a queue name")
    details = params.boolean("details", False)
    params.check()
    queues = request.storage.list_queues(request.identity.application.name, limit, after)
    if details:
        return ok(queues=[queue_json(q) for q in queues])
    return ok(queues=[q.name for q in queues])


@view_config(route_name="queue_info", request_method="GET", permission=Permission.READ)
def queue_info(request):
    return ok(**queue_json(request.context.meta))


@view_config(route_name="queue", request_method="PUT", permission=Permission.MANAGE)
def update_queue(request):
    settings = request.registry.queuey_settings
    meta = request.context.meta
    params = Params(form_or_json(request, _body_limit(request)))
    partitions = params.integer("partitions", None, 1, settings.max_partitions)
    if partitions is not None and partitions < meta.partitions:
        params.fail("partitions", f"may only grow (the queue has {meta.partitions})")
    ttl = params.integer("ttl", None, 1, settings.max_ttl)
    queue_type = params.choice("type", None, TYPES)
    consistency = params.choice("consistency", None, CONSISTENCIES)
    params.check()
    request.registry.queue_cache.forget(meta.application, meta.name)
    updated = request.storage.update_queue(
        meta.application,
        meta.name,
        partitions=partitions,
        ttl=ttl,
        type=queue_type,
        consistency=consistency,
    )
    return ok(**queue_json(updated))


@view_config(route_name="queue", request_method="DELETE", permission=Permission.MANAGE)
def delete_queue(request):
    meta = request.context.meta
    params = Params(request.GET)
    delete = params.boolean("delete", True)
    params.check()
    request.registry.queue_cache.forget(meta.application, meta.name)
    if delete:
        request.storage.delete_queue(meta.application, meta.name)
    else:
        request.storage.purge_queue(meta.application, meta.name)
    return ok()
