"""The two SQS wire protocols: which one a request speaks, its action and
parameters, and the answer's bytes.

* AWS JSON 1.0: ``POST`` with ``X-Amz-Target: AmazonSQS.<Action>`` and a JSON
  object body; answers ``application/x-amz-json-1.0``, errors as
  ``{"__type", "message"}`` plus ``x-amzn-query-error`` (:mod:`.errors`).
* Query: ``Action=<Action>`` in a form body or the query string; answers XML
  (:mod:`.query`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import parse_qsl

from queuey import jsonio
from queuey.sqs import query
from queuey.sqs.errors import SQSError

JSON_TYPE = "application/x-amz-json-1.0"
XML_TYPE = "text/xml"
TARGET_PREFIX = "AmazonSQS."
#: Most parameters a query-protocol request may carry.
MAX_PAIRS = 1000


@dataclass(frozen=True)
class Call:
    """What a request asks: ``params`` still raw (JSON object or query pairs)."""

    json: bool
    action: str | None
    pairs: list[tuple[str, str]]
    body: bytes

    def params(self, queue_url: str | None = None) -> dict:
        """The parameters, checked against the action's input shape;
        ``queue_url`` is the ``QueueUrl`` of a request sent to a queue's URL."""
        assert self.action is not None
        if self.json:
            body = _json_object(self.body)
            if queue_url is not None:
                body.setdefault("QueueUrl", queue_url)
            return query.validate_json(self.action, body)
        pairs = self.pairs
        if queue_url is not None and not any(k == "QueueUrl" for k, _ in pairs):
            pairs = [*pairs, ("QueueUrl", queue_url)]
        return query.parse_query(self.action, pairs)


def read_call(method: str, target: str | None, content_type: str, qs: str, body: bytes) -> Call:
    """Which protocol and action; raises :class:`SQSError` for a request of neither."""
    if target is not None:
        if method != "POST":
            raise SQSError("UnknownOperationException", "The JSON protocol needs POST.")
        action = target[len(TARGET_PREFIX) :] if target.startswith(TARGET_PREFIX) else ""
        if not action:
            raise SQSError("UnknownOperationException", f"Unknown target {target[:100]!r}.")
        return Call(True, action, [], body)
    pairs = _pairs(qs)
    if body and content_type.split(";")[0].strip().lower() == "application/x-www-form-urlencoded":
        pairs += _pairs(body)
    if len(pairs) > MAX_PAIRS:
        raise SQSError("MalformedQueryString", f"A request holds at most {MAX_PAIRS} parameters.")
    actions = [v for k, v in pairs if k == "Action"]
    return Call(False, actions[0] if actions else None, pairs, body)


def _pairs(raw: str | bytes) -> list[tuple[str, str]]:
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise SQSError("MalformedQueryString", "The parameters are not UTF-8.") from None
    if raw.count("&") >= MAX_PAIRS:
        raise SQSError("MalformedQueryString", f"A request holds at most {MAX_PAIRS} parameters.")
    try:
        return parse_qsl(raw, keep_blank_values=True, errors="strict", max_num_fields=MAX_PAIRS)
    except (ValueError, UnicodeDecodeError):
        raise SQSError("MalformedQueryString", "The query string is malformed.") from None


def _json_object(body: bytes) -> dict:
    if not body:
        return {}
    try:
        value = jsonio.loads(body)
    except (jsonio.NotJSON, jsonio.InvalidJSON) as exc:
        raise SQSError("SerializationException", str(exc)) from None
    if not isinstance(value, dict):
        raise SQSError("SerializationException", "The body must be a JSON object.")
    return value


def ok(call: Call, result: dict, request_id: str) -> tuple[int, dict[str, str], bytes]:
    if call.json:
        body = json.dumps(result, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        return 200, {"Content-Type": JSON_TYPE, "x-amzn-RequestId": request_id}, body
    assert call.action is not None
    body = query.render_result(call.action, result, request_id)
    return 200, {"Content-Type": XML_TYPE, "x-amzn-RequestId": request_id}, body


def error(json_protocol: bool, exc: SQSError, request_id: str) -> tuple[int, dict[str, str], bytes]:
    kind = exc.kind
    headers = {"x-amzn-RequestId": request_id}
    if exc.retry_after is not None:
        headers["Retry-After"] = str(exc.retry_after)
    if json_protocol:
        headers["Content-Type"] = JSON_TYPE
        fault = "Sender" if kind.sender else "Receiver"
        headers["x-amzn-query-error"] = f"{kind.query_code};{fault}"
        body = json.dumps(
            {"__type": f"com.amazonaws.sqs#{kind.json_type}", "message": exc.message},
            ensure_ascii=False,
        ).encode("utf-8")
        return kind.status, headers, body
    headers["Content-Type"] = XML_TYPE
    return kind.status, headers, query.render_error(exc, request_id)
