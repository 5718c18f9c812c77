"""Queue management: create, list, inspect, update, delete, purge."""

from __future__ import annotations

import uuid

from pyramid.view import view_config

from queuey.storage import QueueMeta
from queuey.web.params import form_or_json, query, validate
from queuey.web.responses import ok, queue_json
from queuey.web.security import Permission


def _body_limit(request) -> int:
    return request.registry.queuey_settings.max_message_size


@view_config(route_name="queues", request_method="POST", permission=Permission.MANAGE)
def create_queue(request):
    params = validate(request.models.create_queue, form_or_json(request, _body_limit(request)))
    meta = request.storage.create_queue(
        QueueMeta(
            application=request.identity.application.name,
            name=params.queue_name or uuid.uuid4().hex,
            partitions=params.partitions,
            ttl=params.ttl,
            type=params.type,
            consistency=params.consistency,
            created=request.clock.now_micros(),
        )
    )
    return ok(201, **queue_json(meta))


@view_config(route_name="queues", request_method="GET", permission=Permission.MANAGE)
def list_queues(request):
    params = validate(request.models.list_queues, query(request))
    queues = request.storage.list_queues(
        request.identity.application.name, params.limit, params.offset
    )
    if params.details:
        return ok(queues=[queue_json(q) for q in queues])
    return ok(queues=[q.name for q in queues])


@view_config(route_name="queue_info", request_method="GET", permission=Permission.READ)
def queue_info(request):
    return ok(**queue_json(request.context.meta))


@view_config(route_name="queue", request_method="PUT", permission=Permission.MANAGE)
def update_queue(request):
    meta = request.context.meta
    params = validate(
        request.models.update_queue, form_or_json(request, _body_limit(request)), meta.partitions
    )
    with request.registry.queue_cache.changing(meta.application, meta.name):
        updated = request.storage.update_queue(
            meta.application,
            meta.name,
            partitions=params.partitions,
            ttl=params.ttl,
            type=params.type,
            consistency=params.consistency,
        )
    return ok(**queue_json(updated))


@view_config(route_name="queue", request_method="DELETE", permission=Permission.MANAGE)
def delete_queue(request):
    meta = request.context.meta
    params = validate(request.models.delete_queue, query(request))
    with request.registry.queue_cache.changing(meta.application, meta.name):
        if params.delete:
            request.storage.delete_queue(meta.application, meta.name)
        else:
            request.storage.purge_queue(meta.application, meta.name)
    return ok()
