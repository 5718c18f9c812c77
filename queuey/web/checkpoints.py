"""How far a consumer has processed each partition of a queue."""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping

from queuey import ids
from queuey.web.params import InvalidParameters, json_body, validate
from queuey.web.responses import ok
from queuey.web.schemas import CONSUMER_PATTERN

_CONSUMER = re.compile(CONSUMER_PATTERN)


def _consumer(request) -> str:
    consumer = request.matchdict["consumer"]
    if not _CONSUMER.fullmatch(consumer):
        raise InvalidParameters({"consumer": "must match [A-Za-z0-9_.-]{1,100}"})
    return consumer


def _answer(checkpoints: Mapping[int, uuid.UUID]):
    return ok(checkpoints={str(p): checkpoints[p].hex for p in sorted(checkpoints)})


def get_checkpoints(request):
    meta = request.context.meta
    found = request.storage.get_checkpoints(meta.application, meta.name, _consumer(request))
    return _answer(found)


def set_checkpoints(request):
    meta = request.context.meta
    consumer = _consumer(request)
    payload = json_body(request)
    given = validate(request.models.checkpoints, payload, meta.partitions).checkpoints
    parsed = {int(p): ids.parse_message_id(message_id) for p, message_id in given.items()}
    request.storage.set_checkpoints(meta.application, meta.name, consumer, parsed)
    return _answer(parsed)
