"""How far a consumer has processed each partition of a queue."""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from queuey import ids
from queuey.web.params import json_body, path_param, validate
from queuey.web.responses import ok


def _answer(checkpoints: Mapping[int, uuid.UUID]):
    return ok(checkpoints={str(p): checkpoints[p].hex for p in sorted(checkpoints)})


def get_checkpoints(request):
    meta = request.context.meta
    consumer = path_param(request, "consumer")
    return _answer(request.storage.get_checkpoints(meta.application, meta.name, consumer))


def set_checkpoints(request):
    meta = request.context.meta
    consumer = path_param(request, "consumer")
    payload = json_body(request)
    given = validate(request.models.checkpoints, payload, meta.partitions).checkpoints
    parsed = {int(p): ids.parse_message_id(message_id) for p, message_id in given.items()}
    request.storage.set_checkpoints(meta.application, meta.name, consumer, parsed)
    return _answer(parsed)
