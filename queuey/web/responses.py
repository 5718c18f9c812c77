"""JSON answers, written directly so message bodies are embedded as stored."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel
from pyramid.response import Response

from queuey import ids, jsonio
from queuey.core.explain import Explanation, explain
from queuey.core.flowsettings import FlowSettings
from queuey.model import Delivery, Message, QueueMeta
from queuey.model.flow import GROUP_KEY
from queuey.web.answers import QueueInfo
from queuey.web.params import message_param
from queuey.wire import ExplainAnswer, ExplainReason

CONTENT_TYPE = "application/json"


def json_response(data: dict[str, Any] | bytes, status: int = 200) -> Response:
    """``data`` as JSON, or JSON text already written (``bytes``)."""
    body = data if isinstance(data, bytes) else jsonio.dumps_bytes(data)
    return Response(body=body, status=status, content_type=CONTENT_TYPE, charset="utf-8")


def ok(status: int = 200, **data: Any) -> Response:
    return json_response({"status": "ok", **data}, status=status)


def error(status: int, errors: dict[str, str], headers: dict[str, str] | None = None) -> Response:
    response = json_response({"status": "error", "error_msg": errors}, status=status)
    if headers:
        response.headers.update(headers)
    return response


def timestamp_json(micros: int) -> str:
    """A timestamp as JSON number text, exact to the microsecond."""
    return repr(ids.micros_to_seconds(micros))


def message_ref(message: Message) -> dict[str, Any]:
    return {
        "message_id": message.id.hex,
        "timestamp": ids.micros_to_seconds(message.timestamp),
        "partition": message.partition,
    }


def _message_text(m: Message, extra: str = "") -> str:
    """One message as JSON text; ``attributes`` only when it has some, so answers
    about messages without them read as before work queues existed, and
    ``group`` only when it has one (kept among the attributes, shown apart)."""
    attributes, group = m.attributes, ""
    if attributes and GROUP_KEY in attributes:
        attributes = dict(attributes)
        group = ',"group":%s' % jsonio.dumps(attributes.pop(GROUP_KEY))
    shown = ',"attributes":%s' % jsonio.dumps(dict(attributes)) if attributes else ""
    return '{"message_id":"%s","timestamp":%s,"partition":%d,"body":%s%s%s%s}' % (
        m.id.hex,
        timestamp_json(m.timestamp),
        m.partition,
        m.body,
        shown,
        group,
        extra,
    )


def _messages_answer(parts: Iterable[str]) -> Response:
    return json_response(('{"status":"ok","messages":[' + ",".join(parts) + "]}").encode("utf-8"))


def messages_response(messages: Iterable[Message]) -> Response:
    """A read's answer, built as text: bodies are stored JSON and go out as they
    are; ``priority`` only when not 0, like ``attributes``."""
    return _messages_answer(
        _message_text(m, ',"priority":%d' % m.priority if m.priority else "") for m in messages
    )


def deliveries_response(deliveries: Iterable[Delivery]) -> Response:
    """A reserve's answer: each message with its priority, attempt count and receipt."""
    return _messages_answer(
        _message_text(
            d.message,
            ',"priority":%d,"attempts":%d,"receipt":%s'
            % (d.message.priority, d.attempts, jsonio.dumps(d.receipt)),
        )
        for d in deliveries
    )


def shown(record: type[BaseModel], found: Any, **given: Any) -> dict[str, Any]:
    """``found`` as the answer ``record`` (:mod:`queuey.wire`,
    :mod:`queuey.web.answers`) shows it: the record's fields in its order
    (``status`` aside), each from ``given`` or else ``found``'s attribute of
    that name; a ``*_timestamp`` (microseconds or ``None``) in seconds."""
    fields = {}
    for name in record.model_fields:
        if name in given:
            fields[name] = given[name]
        elif name != "status":
            value = getattr(found, name)
            if name.endswith("_timestamp") and value is not None:
                value = ids.micros_to_seconds(value)
            fields[name] = value
    return fields


def queue_json(meta: QueueMeta) -> dict[str, Any]:
    return shown(
        QueueInfo,
        meta,
        queue_name=meta.name,
        created=meta.created // ids.MICROS,
        dead_letter_queue=meta.dead_letter_name,
        flow=FlowSettings.describe(meta),
    )


def explained(request, meta: QueueMeta, subscription: str) -> Explanation:
    """The explanation of the path's ``message`` in ``subscription`` now
    (:func:`queuey.core.explain.explain`): for the route and the admin page."""
    id_text, partition = message_param(request, meta)
    return explain(
        request.storage,
        request.services.flow.grants,
        meta,
        subscription,
        ids.parse_message_id(id_text),
        partition,
        request.clock.now_micros(),
    )


def explanation_json(found: Explanation) -> dict[str, Any]:
    """An explanation (:func:`queuey.core.explain.explain`) as the API answers
    it (:class:`queuey.wire.ExplainAnswer`, ``status`` aside); the admin
    message page shows the same."""
    reasons = [
        shown(ExplainReason, reason, until_timestamp=_seconds(reason.until))
        for reason in found.reasons
    ]
    message = found.message
    return shown(
        ExplainAnswer,
        found,
        message_id=found.message_id.hex,
        partition=message.partition if message else None,
        deliverable=found.deliverable,
        expires_timestamp=_seconds(message.expires if message else None),
        reasons=reasons,
    )


def _seconds(micros: int | None) -> float | None:
    return None if micros is None else ids.micros_to_seconds(micros)
