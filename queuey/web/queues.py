"""Queue management: create, list, inspect, update, pause, resume, delete, purge.

Flow settings (``paused``, ``post_rate``...) come with a queue's other
settings and are changed through :class:`queuey.core.flowsettings.FlowSettings`.
"""

from __future__ import annotations

from queuey.core.queues import check_queue_settings, queue_from
from queuey.model import QueueMeta
from queuey.model.flow import QUEUE_FIELDS
from queuey.web.params import form_or_json, query, validate
from queuey.web.responses import ok, queue_json


def _split(params) -> tuple[dict, dict]:
    """The fields given, as (queue settings, flow settings)."""
    given = {name: value for name, value in params if value is not None}
    flow = {name: given.pop(name) for name in QUEUE_FIELDS if name in given}
    return given, flow


def new_queue(request, params, application: str) -> QueueMeta:
    """Create a queue from validated ``create_queue`` parameters, by the core's
    rules (:func:`queuey.core.queues.queue_from`; ``QueueExists`` when the name
    is taken), then give it the flow settings among them."""
    meta = queue_from(params, application, request.clock.now_micros())
    created = request.services.queues.create(meta)
    _, flow = _split(params)
    return request.services.flow_settings.change_queue(created, flow) if flow else created


def create_queue(request):
    params = validate(request.models.create_queue, form_or_json(request))
    meta = new_queue(request, params, request.identity.application.name)
    return ok(201, **queue_json(meta))


def list_queues(request):
    params = validate(request.models.list_queues, query(request))
    queues = request.storage.list_queues(
        request.identity.application.name, params.limit, params.offset
    )
    if params.details:
        return ok(queues=[queue_json(q) for q in queues])
    return ok(queues=[q.name for q in queues])


def queue_info(request):
    return ok(**queue_json(request.context.meta))


def update_queue(request):
    meta = request.context.meta
    params = validate(request.models.update_queue, form_or_json(request), meta.partitions)
    changes, flow = _split(params)
    crossed = ("ttl", "delay", "max_attempts", "dead_letter_queue")
    after = {name: changes.get(name, getattr(meta, name)) for name in crossed}
    check_queue_settings(meta.name, **after, changed=set(changes))
    # Flow first: its last rule (no fair FIFO queue) refuses before anything is written.
    updated = request.services.flow_settings.change_queue(meta, flow)
    if changes or not flow:
        updated = request.services.queues.update(meta.application, meta.name, **changes)
    return ok(**queue_json(updated))


def pause_or_resume(request):
    """``.../pause`` refuses posts (503) until ``.../resume``; reserves go on."""
    flow = request.services.flow_settings
    change = flow.pause if request.matched_route.name.endswith("_pause") else flow.resume
    return ok(**queue_json(change(request.context.meta)))


def delete_queue(request):
    meta = request.context.meta
    params = validate(request.models.delete_queue, query(request))
    if params.delete:
        request.services.queues.delete(meta)
    else:
        request.services.queues.purge(meta)
    return ok()
