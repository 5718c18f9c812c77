"""Queue management: create, list, inspect, update, delete, purge."""

from __future__ import annotations

import uuid

from pyramid.view import view_config

from queuey.model import QueueMeta
from queuey.web.params import InvalidParameters, form_or_json, query, validate
from queuey.web.responses import ok, queue_json
from queuey.web.security import Permission


def _body_limit(request) -> int:
    return request.registry.queuey_settings.max_message_size


#: Longest queue name whose default dead-letter queue (``<name>-dead``) is a valid name.
_DEFAULT_DEAD_LETTER_ROOM = 50 - len("-dead")


def _check_work_settings(
    name: str,
    ttl: int,
    delay: int,
    max_attempts: int,
    dead_letter_queue: str | None,
    changed: set[str],
) -> None:
    """Rules across a queue's settings that a static schema cannot state.

    Each error names a field the caller ``changed`` (the one to fix).
    """
    errors = {}
    if delay > ttl:
        if "delay" in changed:
            errors["delay"] = f"must be at most the ttl ({ttl} s)"
        else:
            errors["ttl"] = f"must be at least the queue's delay ({delay} s)"
    if dead_letter_queue == name:
        errors["dead_letter_queue"] = "must not be the queue itself"
    elif not dead_letter_queue and max_attempts and len(name) > _DEFAULT_DEAD_LETTER_ROOM:
        field = "max_attempts" if "max_attempts" in changed else "dead_letter_queue"
        errors[field] = (
            f"the default dead-letter queue name {name}-dead would be longer than 50 "
            "characters; give dead_letter_queue"
        )
    if errors:
        raise InvalidParameters(errors)


def new_queue(request, params, application: str) -> QueueMeta:
    """Create a queue from validated ``create_queue`` parameters: the API's and
    the admin page's one way (``QueueExists`` when the name is taken)."""
    name = params.queue_name or uuid.uuid4().hex
    _check_work_settings(
        name,
        params.ttl,
        params.delay,
        params.max_attempts,
        params.dead_letter_queue,
        changed={"delay", "max_attempts"},
    )
    return request.registry.workqueues.create_queue(
        QueueMeta(
            application=application,
            name=name,
            partitions=params.partitions,
            ttl=params.ttl,
            type=params.type,
            consistency=params.consistency,
            created=request.clock.now_micros(),
            visibility_timeout=params.visibility_timeout,
            max_attempts=params.max_attempts,
            dead_letter_queue=params.dead_letter_queue or None,
            delay=params.delay,
        )
    )


@view_config(route_name="queues", request_method="POST", permission=Permission.MANAGE)
def create_queue(request):
    params = validate(request.models.create_queue, form_or_json(request, _body_limit(request)))
    meta = new_queue(request, params, request.identity.application.name)
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
    changes = {name: value for name, value in params if value is not None}
    _check_work_settings(
        meta.name,
        changes.get("ttl", meta.ttl),
        changes.get("delay", meta.delay),
        changes.get("max_attempts", meta.max_attempts),
        changes.get("dead_letter_queue", meta.dead_letter_queue),
        changed=set(changes),
    )
    with request.registry.queue_cache.changing(meta.application, meta.name):
        updated = request.storage.update_queue(meta.application, meta.name, **changes)
    return ok(**queue_json(updated))


@view_config(route_name="queue", request_method="DELETE", permission=Permission.MANAGE)
def delete_queue(request):
    meta = request.context.meta
    params = validate(request.models.delete_queue, query(request))
    if params.delete:
        request.registry.workqueues.delete_queue(meta)
    else:
        request.registry.workqueues.purge_queue(meta)
    return ok()
