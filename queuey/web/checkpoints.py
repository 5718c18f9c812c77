"""How far a consumer has processed each partition of a queue."""

from __future__ import annotations

from pyramid.view import view_config

from queuey import ids
from queuey.web.params import CONSUMER_NAME, InvalidParameters, json_body
from queuey.web.responses import ok
from queuey.web.security import Permission


def _consumer(request) -> str:
    consumer = request.matchdict["consumer"]
    if not CONSUMER_NAME.match(consumer):
        raise InvalidParameters({"consumer": "must match [A-Za-z0-9_.-]{1,100}"})
    return consumer


@view_config(route_name="queue_checkpoints", request_method="GET", permission=Permission.MANAGE)
def get_checkpoints(request):
    meta = request.context.meta
    found = request.storage.get_checkpoints(meta.application, meta.name, _consumer(request))
    return ok(checkpoints={str(p): found[p].hex for p in sorted(found)})


@view_config(route_name="queue_checkpoints", request_method="PUT", permission=Permission.MANAGE)
def set_checkpoints(request):
    meta = request.context.meta
    consumer = _consumer(request)
    payload = json_body(request, request.registry.queuey_settings.max_message_size)
    given = payload.get("checkpoints") if isinstance(payload, dict) else None
    if not isinstance(given, dict) or not given:
        raise InvalidParameters({"checkpoints": 'expected {"checkpoints": {"1": "<id>"}}'})
    errors = {}
    parsed = {}
    for key, value in given.items():
        field = f"checkpoints.{key}"
        try:
            partition = int(key)
        except ValueError:
            errors[field] = "partition numbers are keys"
            continue
        if not 1 <= partition <= meta.partitions:
            errors[field] = f"partition must be between 1 and {meta.partitions}"
            continue
        try:
            parsed[partition] = ids.parse_id(str(value))
        except ids.InvalidId:
            errors[field] = "must be a message id"
    if errors:
        raise InvalidParameters(errors)
    request.storage.set_checkpoints(meta.application, meta.name, consumer, parsed)
    return ok(checkpoints={str(p): parsed[p].hex for p in sorted(parsed)})
